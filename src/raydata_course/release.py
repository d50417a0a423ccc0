"""``make release``: regenerate ``exercises/`` from ``solutions/`` with nbgrader.

Runs ``nbgrader generate_assignment --force`` for every assignment (or those named on the
command line: ``python -m raydata_course.release data03``) (through nbgrader's own
``NbGraderAPI``) and then strips the execution counts and outputs nbgrader leaves, so that
running it twice leaves git clean.
"""

from __future__ import annotations

import sys

import nbformat

from raydata_course import grading
from raydata_course.notebooks import strip_outputs


def main(argv: list[str] | None = None) -> int:
    """Regenerate the release notebooks of the assignments named in ``argv`` (all if none).

    Raises:
        SystemExit: with a message, if an id in ``argv`` is not one of ``grading.ASSIGNMENTS``.
    """
    wanted = tuple(sys.argv[1:] if argv is None else argv) or grading.ASSIGNMENTS
    unknown = sorted(set(wanted) - set(grading.ASSIGNMENTS))
    if unknown:
        raise SystemExit(f"[release] unknown assignment(s) {unknown}; the course has {list(grading.ASSIGNMENTS)} "
                         "(each needs solutions/<id>/<id>.ipynb).")
    for path in grading.release(wanted):
        nb = nbformat.read(path, as_version=4)
        nbformat.write(strip_outputs(nb), path)
        print(f"[release] wrote {path.relative_to(grading.course_root())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
