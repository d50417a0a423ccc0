"""Facts of the instructor's checkout: where it is, its assignments, its grader-only folders.

The checkout is the course root (:func:`raydata_course.layout.course_root`) that also holds
nbgrader's source (``solutions/``) and ``autograder/``. A student bundle has neither.
"""

from __future__ import annotations

import os
from pathlib import Path

from raydata_course.layout import assignment_ids, course_root, exercise_notebook

__all__ = [
    "InstructorCheckoutNotFound",
    "instructor_root",
    "ASSIGNMENTS",
    "source_notebook",
    "release_notebook",
    "oracles_dir",
    "mutants_dir",
    "nbgrader_config_file",
]

#: What an instructor's checkout holds beyond the course a student gets.
_GRADER_MARKERS = ("solutions", "autograder/nbgrader_config.py", "autograder/oracles")


class InstructorCheckoutNotFound(FileNotFoundError):
    """The course folder found is not an instructor's checkout (a student bundle, say)."""


def instructor_root() -> Path:
    """The instructor's checkout: the course root that holds ``solutions/`` and ``autograder/``.

    Searched from this package's own checkout first (see
    :func:`raydata_course.layout.course_root`; ``$RAYDATA_COURSE_ROOT`` wins).

    Raises:
        InstructorCheckoutNotFound: naming what is missing.
    """
    root = course_root(start=Path(__file__).resolve().parents[2])
    missing = [m for m in _GRADER_MARKERS if not (root / m).exists()]
    if missing:
        raise InstructorCheckoutNotFound(
            f"{root} is a course folder but not an instructor's checkout: it lacks {', '.join(missing)}. "
            "Grading needs the course repository, not the student bundle."
        )
    return root


def _discover() -> tuple[str, ...]:
    try:
        return assignment_ids(instructor_root() / "solutions")
    except FileNotFoundError:
        return ()


#: The course's assignments, in order: every ``solutions/<id>/<id>.ipynb`` (``id`` like
#: ``data01``), found when this module is imported (empty outside a checkout).
ASSIGNMENTS: tuple[str, ...] = _discover()


def source_notebook(assignment: str, root: str | os.PathLike | None = None) -> Path:
    """Path of an assignment's nbgrader source notebook (``solutions/<id>/<id>.ipynb``)."""
    return Path(root or instructor_root()) / "solutions" / assignment / f"{assignment}.ipynb"


def release_notebook(assignment: str, root: str | os.PathLike | None = None) -> Path:
    """Path of an assignment's released notebook (``exercises/<id>/<id>.ipynb``)."""
    return exercise_notebook(assignment, root or instructor_root())


def oracles_dir(root: str | os.PathLike | None = None) -> Path:
    """The hidden-test oracles, ``autograder/oracles/``."""
    return Path(root or instructor_root()) / "autograder" / "oracles"


def mutants_dir(assignment: str, root: str | os.PathLike | None = None) -> Path:
    """The mutant answers of one assignment, ``autograder/mutants/<id>/``."""
    return Path(root or instructor_root()) / "autograder" / "mutants" / assignment


def nbgrader_config_file(root: str | os.PathLike | None = None) -> Path:
    """The course's nbgrader configuration, ``autograder/nbgrader_config.py``."""
    return Path(root or instructor_root()) / "autograder" / "nbgrader_config.py"
