"""``make release``: regenerate ``exercises/`` from ``solutions/`` with nbgrader.

Runs nbgrader's ``generate_assignment`` (through :class:`nbgrader.apps.NbGraderAPI`, see
:func:`raydata_grader.course_dir.release`) for every assignment, or those named, and then
strips the execution counts and outputs nbgrader leaves, so that running it twice leaves git
clean.
"""

from __future__ import annotations

import nbformat

from raydata_course.notebooks import strip_outputs
from raydata_grader.course_dir import release
from raydata_grader.paths import ASSIGNMENTS, instructor_root

__all__ = ["release_exercises"]


def release_exercises(assignments: tuple[str, ...] = ()) -> list:
    """Regenerate the release notebooks of ``assignments`` (all when empty); return their paths.

    Raises:
        ValueError: if an id is not one of :data:`raydata_grader.paths.ASSIGNMENTS`.
    """
    wanted = tuple(assignments) or ASSIGNMENTS
    unknown = sorted(set(wanted) - set(ASSIGNMENTS))
    if unknown:
        raise ValueError(f"unknown assignment(s) {unknown}; the course has {list(ASSIGNMENTS)} "
                         "(each needs solutions/<id>/<id>.ipynb).")
    written = release(wanted)
    root = instructor_root()
    for path in written:
        nb = nbformat.read(path, as_version=4)
        nbformat.write(strip_outputs(nb), path)
        print(f"[release] wrote {path.relative_to(root)}")
    return written
