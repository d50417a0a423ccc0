"""``make release``: regenerate ``exercises/`` from ``solutions/`` with nbgrader.

Runs ``nbgrader generate_assignment --force`` for every assignment (through nbgrader's own
``NbGraderAPI``) and then strips the execution counts and outputs nbgrader leaves, so that
running it twice leaves git clean.
"""

from __future__ import annotations

import sys

import nbformat

from raydata_course import grading
from raydata_course.notebooks import strip_outputs


def main(argv: list[str] | None = None) -> int:
    """Regenerate every release notebook; print the paths written."""
    for path in grading.release():
        nb = nbformat.read(path, as_version=4)
        nbformat.write(strip_outputs(nb), path)
        print(f"[release] wrote {path.relative_to(grading.course_root())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
