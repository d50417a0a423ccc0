"""``make jupyter`` for instructors: JupyterLab on the course, nbgrader's formgrader included.

nbgrader's server extensions (formgrader, Validate) are not told where the course is: each
reads ``nbgrader_config.py`` from the folder the server was started in. So the course root
holds a small ``nbgrader_config.py`` that loads ``autograder/nbgrader_config.py``, and
JupyterLab starts *in* the course root (:func:`raydata_course.jupyter.exec_lab`):

- the server's root folder and working folder are the course root, so formgrader's
  ``CourseDirectory.root`` is inside the server root (otherwise formgrader refuses with "The
  course directory root is not a subdirectory of the notebook server root") and finds
  ``solutions/`` as source, ``exercises/`` as release and ``gradebook.db``;
- with ``--grading DIR`` (``make jupyter GRADING=build/grading``), formgrader shows a folder
  that ``make grade`` filled instead (``$RAYDATA_COURSE_GRADING_DIR``, read by the course
  root's ``nbgrader_config.py``).

Grade from the command line, not with formgrader's autograde buttons: the hidden tests need
the oracles, which the grading commands provide and a JupyterLab session does not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from raydata_course.jupyter import exec_lab, lab_environment
from raydata_course.layout import GRADING_DIR_ENV
from raydata_grader.paths import instructor_root

__all__ = ["check_grading_dir", "launch"]

def check_grading_dir(folder: str | os.PathLike, root: str | os.PathLike) -> Path:
    """Return ``folder`` resolved, after checking formgrader can show it.

    Args:
        folder: an nbgrader course folder with a gradebook, e.g. ``build/grading`` after
            ``make grade`` (relative paths are taken from ``root``).
        root: the course root, which JupyterLab serves.

    Raises:
        FileNotFoundError: if ``folder`` has no ``gradebook.db``.
        ValueError: if ``folder`` is not inside ``root`` (formgrader only works on a course
            inside the server's root folder).
    """
    root = Path(root).resolve()
    path = (root / folder).resolve()
    if not path.is_relative_to(root):
        raise ValueError(
            f"the grading folder {path} must be inside the course root {root}, which JupyterLab serves."
        )
    if not (path / "gradebook.db").is_file():
        raise FileNotFoundError(
            f"{path} has no gradebook.db: grade first (make grade SUBMISSIONS=... OUT={folder})."
        )
    return path


def launch(*, port: int | None = None, open_browser: bool = True, grading: str | os.PathLike | None = None,
           extra_args: Sequence[str] = ()) -> None:
    """Replace this process with JupyterLab on the instructor's checkout (never returns).

    Raises:
        SystemExit: if the course root, the course kernel or the grading folder is missing.
    """
    try:
        folder = instructor_root()
        env = lab_environment()
        if grading:
            env[GRADING_DIR_ENV] = str(check_grading_dir(grading, folder))
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(str(exc)) from None
    exec_lab(folder, port=port, open_browser=open_browser, extra_args=extra_args, env=env)
