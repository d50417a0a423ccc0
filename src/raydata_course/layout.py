"""Course facts, defined once: where the course is, what its kernel is called, which
assignments it has, and the names of the environment variables its tools pass around.

Everything else in the course (the student package and the instructor's grader alike) reads
these names from here. Nothing in this module starts, writes or imports anything heavy.

Examples:
    >>> KERNEL_NAME, KERNELSPEC["display_name"]
    ('raydata-course', 'Python (raydata-course)')
    >>> is_assignment_id("data03"), is_assignment_id("data3"), is_assignment_id("../x")
    (True, False, False)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = [
    "KERNEL_NAME",
    "KERNEL_DISPLAY_NAME",
    "KERNELSPEC",
    "ASSIGNMENT_GLOB",
    "GRADER_CELL_TIMEOUT_S",
    "IOPUB_TIMEOUT_S",
    "COURSE_ROOT_ENV",
    "TEMP_ROOT_ENV",
    "HEADLESS_ENV",
    "RAY_VERSION_ENV",
    "PROGRESS_ENV",
    "SELF_CHECK_ENV",
    "GRADING_DIR_ENV",
    "REQUIRE_SANDBOX_ENV",
    "MACHINE_CPUS_ENV",
    "GRADING_CPUS",
    "CourseRootNotFound",
    "COURSE_FOLDERS",
    "is_course_root",
    "course_root",
    "is_assignment_id",
    "assignment_ids",
    "exercise_notebook",
]

#: The Jupyter kernel the course registers in its virtual environment (``make setup``), names
#: in every committed notebook, and forces on every graded submission.
KERNEL_NAME = "raydata-course"
#: What JupyterLab shows for :data:`KERNEL_NAME`.
KERNEL_DISPLAY_NAME = f"Python ({KERNEL_NAME})"
#: The ``kernelspec`` metadata of a course notebook.
KERNELSPEC = {"name": KERNEL_NAME, "display_name": KERNEL_DISPLAY_NAME, "language": "python"}

#: Assignment ids are ``dataNN``; an assignment's notebook is ``<folder>/<id>/<id>.ipynb``.
ASSIGNMENT_GLOB = "data[0-9][0-9]"
_ASSIGNMENT_ID = re.compile(r"^data[0-9]{2}$")

#: The grader's per-cell limit, in seconds: a graded cell that runs longer is interrupted.
#: The student self-check runs visible tests with the same limit.
GRADER_CELL_TIMEOUT_S = 180
#: Seconds a notebook executor waits for a finished cell's last output (nbclient's default, 4 s,
#: is too short on a busy 2-core machine: "Timeout waiting for IOPub output").
IOPUB_TIMEOUT_S = 60

# ----------------------------------------------------------------- environment variables

#: The course folder, when the tools cannot find it from where they run.
COURSE_ROOT_ENV = "RAYDATA_COURSE_ROOT"
#: Where Ray keeps its session files (default ``/tmp/rdc-<uid>``, see ``cluster.setup``).
TEMP_ROOT_ENV = "RAYDATA_COURSE_TMPDIR"
#: ``1`` under the course's headless runners (``make course``, the tests, the grader): no
#: progress bars.
HEADLESS_ENV = "RAYDATA_COURSE_HEADLESS"
#: Accept another Ray release; only the lab's across-versions run sets it (``make lab RAY=...``).
RAY_VERSION_ENV = "RAYDATA_COURSE_RAY_VERSION"
#: The file where the grader's executor records which cell a graded kernel is running.
PROGRESS_ENV = "RAYDATA_COURSE_PROGRESS"
#: Set in the kernel that runs a self-check's copy of a notebook, so that a ``self_check()``
#: cell in it does nothing.
SELF_CHECK_ENV = "RAYDATA_COURSE_SELF_CHECK"
#: A folder that ``make grade`` filled; formgrader shows it instead of the course root
#: (``make jupyter GRADING=build/grading``).
GRADING_DIR_ENV = "RAYDATA_COURSE_GRADING_DIR"
#: ``1`` where the grader's sandbox must be available (CI): its tests fail instead of skipping.
REQUIRE_SANDBOX_ENV = "RAYDATA_COURSE_REQUIRE_SANDBOX"
#: The logical CPUs ``setup()``'s default cluster counts as this machine's, instead of
#: ``os.cpu_count()``. The grader sets it to :data:`GRADING_CPUS` in every graded kernel.
MACHINE_CPUS_ENV = "RAYDATA_COURSE_MACHINE_CPUS"
#: What a graded notebook's default cluster counts as the machine's CPUs, on any machine that
#: grades it, so that it gets the same cluster (4 logical CPUs, as on a laptop) on a 2-core
#: CI machine and on a 64-core node, and starts no more Ray workers there than here.
GRADING_CPUS = 4


#: The folders that make a folder the course: the repository root in an instructor's
#: checkout, the top folder of the student bundle.
COURSE_FOLDERS = ("chapters", "exercises")


class CourseRootNotFound(FileNotFoundError):
    """No folder with the course's folders (``chapters/`` and ``exercises/``) was found."""


def is_course_root(folder: str | os.PathLike, needs: tuple[str, ...] = COURSE_FOLDERS) -> bool:
    """True when ``folder`` holds every folder in ``needs`` (default: the course's)."""
    return all((Path(folder) / name).is_dir() for name in needs)


def course_root(start: str | os.PathLike | None = None, *, needs: tuple[str, ...] = COURSE_FOLDERS) -> Path:
    """Return the course folder: the one holding ``chapters/`` and ``exercises/``.

    That is the repository root in an instructor's checkout and the top folder of the
    student bundle. The candidates, in order: ``$RAYDATA_COURSE_ROOT``; ``start`` and its
    parents; the checkout this package is installed from (an editable install); the current
    folder and its parents.

    Args:
        start: a path inside the course (a notebook, say) to search upwards from first.
        needs: the folders the course folder must hold; the self-check, which only compares
            an exercise with its release, asks for ``("exercises",)``.

    Returns:
        The course folder, resolved.

    Raises:
        CourseRootNotFound: if no candidate holds every folder in ``needs``.
    """
    candidates: list[Path] = []
    if os.environ.get(COURSE_ROOT_ENV):
        candidates.append(Path(os.environ[COURSE_ROOT_ENV]))
    if start is not None:
        here = Path(start).resolve()
        candidates.extend([here, *here.parents])
    candidates.append(Path(__file__).resolve().parents[2])
    cwd = Path.cwd().resolve()
    candidates.extend([cwd, *cwd.parents])
    for folder in candidates:
        if is_course_root(folder, needs):
            return folder.resolve()
    wanted = " and ".join(f"{name}/" for name in needs)
    raise CourseRootNotFound(
        f"Could not find the course folder (one with {wanted}). Run from inside the course, or set "
        f"{COURSE_ROOT_ENV}=/path/to/the/course."
    )


def is_assignment_id(name: str) -> bool:
    """True for an assignment id of this course (``data01`` ... ``data99``)."""
    return bool(_ASSIGNMENT_ID.match(name))


def assignment_ids(folder: str | os.PathLike) -> tuple[str, ...]:
    """The assignments laid out in ``folder``, in order.

    Args:
        folder: ``solutions/`` (nbgrader's source) or ``exercises/`` (its release); an
            assignment is a ``<id>/<id>.ipynb`` inside it.

    Returns:
        The ids, sorted; empty when the folder does not exist.
    """
    root = Path(folder)
    return tuple(sorted(p.parent.name for p in root.glob(f"{ASSIGNMENT_GLOB}/{ASSIGNMENT_GLOB}.ipynb")
                        if p.stem == p.parent.name))


def exercise_notebook(assignment: str, root: str | os.PathLike | None = None) -> Path:
    """Path of an assignment's released notebook, ``<root>/exercises/<id>/<id>.ipynb``.

    Raises:
        ValueError: if ``assignment`` is not an assignment id.
    """
    if not is_assignment_id(assignment):
        raise ValueError(f"{assignment!r} is not an assignment id; they look like data01.")
    return Path(root or course_root()) / "exercises" / assignment / f"{assignment}.ipynb"
