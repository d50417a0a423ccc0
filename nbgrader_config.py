"""nbgrader's configuration where JupyterLab and the nbgrader command line look for it.

nbgrader's JupyterLab extension (formgrader, the Validate button) and its command line read
``nbgrader_config.py`` from the folder they start in. Start them here, at the course root
(``make jupyter`` does). This file loads the course's configuration,
``autograder/nbgrader_config.py`` (``solutions/`` is the source, ``exercises/`` the release,
the gradebook is ``gradebook.db``), adds one setting for Validate, explained at
``raydata_course.jupyter.VALIDATE_KERNEL_ARGUMENTS``, and lets ``$RAYDATA_COURSE_GRADING_DIR``
(``make jupyter GRADING=build/grading``) move nbgrader to a grading folder that ``make grade``
filled, so formgrader shows those submissions and scores.
"""
import os
from pathlib import Path

from raydata_course.jupyter import VALIDATE_KERNEL_ARGUMENTS
from raydata_course.layout import GRADING_DIR_ENV

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

load_subconfig("nbgrader_config.py", path=str(Path(__file__).resolve().parent / "autograder"))  # noqa: F821

# Only the kernels that Validate starts (nbgrader's Validator creates its Execute
# preprocessor with itself as parent, so this section reaches no other kernel).
c.Validator.Execute.extra_arguments = VALIDATE_KERNEL_ARGUMENTS

grading_dir = os.environ.get(GRADING_DIR_ENV)
if grading_dir:
    c.CourseDirectory.root = str(Path(grading_dir).resolve())
    c.CourseDirectory.db_url = f"sqlite:///{Path(grading_dir).resolve() / 'gradebook.db'}"
