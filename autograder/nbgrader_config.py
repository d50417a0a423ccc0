"""nbgrader configuration for the Streaming Ray Data course.

`solutions/` is nbgrader's *source* and `exercises/` its *release*; the course root is the
folder above this file. Tools load this file through `raydata_grader.course_dir.nbgrader_config`,
which can re-root it at a scratch course folder for tests and grading runs. The course's own
preprocessors are in `raydata_grader.nbgrader_steps`.
"""
from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
)

from raydata_course.layout import GRADER_CELL_TIMEOUT_S, IOPUB_TIMEOUT_S, KERNEL_NAME
from raydata_grader.nbgrader_steps import (
    HideHiddenTests,
    JudgedGrades,
    LimitOutputSize,
    StderrToStdout,
    TrackedExecute,
)

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

ROOT = Path(__file__).resolve().parent.parent

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "streaming-ray-data"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.db_url = f"sqlite:///{ROOT / 'gradebook.db'}"

# Ray notebooks are slow to start: ray.init takes 5-10 s on two cores, a first Dataset
# execution several more, and a blocked streaming_split never finishes. 30 s (nbgrader's
# default) interrupts correct work; 180 s per cell still ends an infinite loop. In 0.9.6 the
# trait lives on nbgrader's `Execute` preprocessor (a subclass of nbconvert's
# ExecutePreprocessor); tests/test_environment.py checks that this value takes effect.
c.Execute.timeout = GRADER_CELL_TIMEOUT_S
# nbclient waits only 4 s (its default) for a cell's last output after the cell finished, and
# then fails the whole notebook ("Timeout waiting for IOPub output"); a busy 2-core machine
# can take longer than that to flush a cell's output.
c.Execute.iopub_timeout = IOPUB_TIMEOUT_S
# Submissions arrive with whatever kernel name the student's Jupyter wrote. Always grade in
# the course's own kernel, the virtual environment with ray==2.60.0.
c.Execute.kernel_name = KERNEL_NAME
c.ExecutePreprocessor.kernel_name = KERNEL_NAME

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# A student who deletes a grade cell gets it back from the source instead of a silent zero.
c.OverwriteCells.add_missing_cells = True

# nbgrader's default list, with the course's steps (raydata_grader.nbgrader_steps):
# - TrackedExecute (for Execute) runs each grade cell, then has the kernel serve that cell's
#   check to the judge, a process outside the kernel that holds the oracles; it caps output
#   while collecting it and, under `make grade`, starts the kernel in its sandbox;
# - StderrToStdout: nbgrader zeroes a grade cell that writes anything to stderr, and Ray logs
#   every Dataset execution there;
# - LimitOutputSize caps output per cell and per notebook in characters (LimitOutput counts lines);
# - JudgedGrades (for SaveAutoGrades) scores every grade cell from the judge's verdict, never
#   from what the kernel printed or raised;
# - InertNotebook, last, makes the autograded notebook inert before nbgrader stores it: what the
#   kernel sent and the student wrote shows as data in every viewer (raydata_grader.inert).
from raydata_grader.inert import InertNotebook  # noqa: E402

c.Autograde.autograde_preprocessors = [
    TrackedExecute,
    StderrToStdout,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    LimitOutputSize,
    JudgedGrades,
    AssignLatePenalties,
    CheckCellMetadata,
    InertNotebook,
]

# nbgrader renders the autograded notebook, hidden tests included, as the student's feedback
# (nbgrader #917, #1363). HideHiddenTests keeps each hidden test's verdict (the judge's message,
# written for the student) and drops its code and printed output, so `nbgrader generate_feedback`
# by hand is as safe as `make grade`.
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import GetGrades  # noqa: E402

from raydata_grader.feedback import InertHTMLExporter, InertMarkdown  # noqa: E402

c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, HideHiddenTests, InertMarkdown]
# A submission's outputs and markdown cells are hostile: feedback pages carry none of their
# active content (scripts, event handlers, javascript: links). nbconvert cleans outputs with
# sanitize_html; nbgrader's template renders markdown cells itself, so InertMarkdown cleans those;
# and every page carries a Content-Security-Policy under which nothing runs or loads.
c.HTMLExporter.sanitize_html = True
c.GenerateFeedback.exporter_class = InertHTMLExporter
