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
    "INSTRUCTOR_MARKERS",
    "check_instructor_root",
    "instructor_root",
    "ASSIGNMENTS",
    "source_notebook",
    "release_notebook",
    "oracles_dir",
    "mutants_dir",
    "nbgrader_config_file",
]

#: What an instructor's checkout holds beyond the course a student gets: nbgrader's source,
#: the grader's folder, and the course root's ``nbgrader_config.py`` (formgrader and Validate
#: read it there).
INSTRUCTOR_MARKERS = ("solutions", "exercises", "nbgrader_config.py", "autograder/nbgrader_config.py",
                      "autograder/oracles")


class InstructorCheckoutNotFound(FileNotFoundError):
    """The course folder found is not an instructor's checkout (a student bundle, say)."""


def check_instructor_root(folder: str | os.PathLike) -> Path:
    """Return ``folder`` resolved, after checking that it is an instructor's checkout.

    Raises:
        InstructorCheckoutNotFound: naming what is missing (see :data:`INSTRUCTOR_MARKERS`).
    """
    root = Path(folder).resolve()
    missing = [m for m in INSTRUCTOR_MARKERS if not (root / m).exists()]
    if missing:
        raise InstructorCheckoutNotFound(
            f"{root} is not an instructor's checkout of the course: it lacks {', '.join(missing)}. "
            "Run from the course repository's root (the student bundle has no grader)."
        )
    return root


def instructor_root() -> Path:
    """The instructor's checkout: the course root that holds ``solutions/`` and ``autograder/``.

    Searched from this package's own checkout first (see
    :func:`raydata_course.layout.course_root`; ``$RAYDATA_COURSE_ROOT`` wins).

    Raises:
        InstructorCheckoutNotFound: naming what is missing.
    """
    return check_instructor_root(course_root(start=Path(__file__).resolve().parents[2]))


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
