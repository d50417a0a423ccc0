"""nbgrader's configuration where JupyterLab and the nbgrader command line look for it.

nbgrader's JupyterLab extension (the Validate button, formgrader) and its command line read
``nbgrader_config.py`` from the folder they start in. Start them here, at the course root
(``make jupyter`` does). This file is a set-up file of both sides of the course:

- everywhere, Validate's kernels get the course kernel, the grader's per-cell limit, and the
  arguments explained at ``raydata_course.jupyter.VALIDATE_KERNEL_ARGUMENTS`` (a test cell
  fails only when it raises, not when Ray logs to stderr);
- in an instructor's checkout, it loads the course's configuration,
  ``autograder/nbgrader_config.py`` (``solutions/`` is the source, ``exercises/`` the release,
  the gradebook is ``gradebook.db``), and lets ``$RAYDATA_COURSE_GRADING_DIR``
  (``make jupyter GRADING=build/grading``) move nbgrader to a grading folder that ``make grade``
  filled, so formgrader shows those submissions and scores. The student bundle has no
  ``autograder/``, and needs none of this.
"""
import os
from pathlib import Path

from raydata_course.jupyter import VALIDATE_KERNEL_ARGUMENTS
from raydata_course.layout import GRADER_CELL_TIMEOUT_S, GRADING_DIR_ENV, KERNEL_NAME

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

grader = Path(__file__).resolve().parent / "autograder"
if (grader / "nbgrader_config.py").is_file():
    load_subconfig("nbgrader_config.py", path=str(grader))  # noqa: F821

# Only the kernels that Validate starts (nbgrader's Validator creates its Execute
# preprocessor with itself as parent, so this section reaches no other kernel).
c.Validator.Execute.extra_arguments = VALIDATE_KERNEL_ARGUMENTS
c.Validator.Execute.timeout = GRADER_CELL_TIMEOUT_S
c.Validator.Execute.kernel_name = KERNEL_NAME

grading_dir = os.environ.get(GRADING_DIR_ENV)
if grading_dir:
    c.CourseDirectory.root = str(Path(grading_dir).resolve())
    c.CourseDirectory.db_url = f"sqlite:///{Path(grading_dir).resolve() / 'gradebook.db'}"
