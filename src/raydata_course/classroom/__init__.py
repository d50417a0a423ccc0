"""Checking your own work before you submit (and the structure checks the grader shares).

For students, one call from an exercise notebook (save the notebook first)::

    import raydata_course.classroom as classroom
    classroom.self_check()          # or classroom.self_check("data01")

runs the notebook's structural checks and its visible tests on the saved file, in a fresh
kernel, and says what to fix. It cannot run or show a hidden test: those run only in the
grader. From a terminal: ``python -m raydata_course.classroom check exercises/data01/data01.ipynb``.

Modules: :mod:`.lint` (structure checks and repairs against the released exercise; the
instructor's grader runs the same code on every submission), :mod:`.reading` (a submitted
file read as hostile input, and which exercise it belongs to) and :mod:`.selfcheck`.
"""

from raydata_course.classroom.selfcheck import SelfCheckReport, self_check

__all__ = ["SelfCheckReport", "self_check"]
