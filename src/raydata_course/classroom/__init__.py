"""Grading a class, and checking your own work before you submit.

For students, one call from an exercise notebook (save the notebook first)::

    import raydata_course.classroom as classroom
    classroom.self_check()          # or classroom.self_check("data01")

runs the notebook's structural checks and its visible tests on the saved file, in a fresh
kernel, and says what to fix. It cannot run or show a hidden test: those run only in the
grader. From a terminal: ``python -m raydata_course.classroom check exercises/data01/data01.ipynb``.

For instructors, ``python -m raydata_course.classroom grade SUBMISSIONS --out DIR`` (``make
grade SUBMISSIONS=path``) grades a whole class with nbgrader; see :mod:`.grade`.

Modules: :mod:`.lint` (structure checks and repairs, shared by both), :mod:`.selfcheck`
(students); :mod:`.grade`, :mod:`.sandbox` and :mod:`.preprocessors` are grader-only and not
part of the student bundle.
"""

from raydata_course.classroom.selfcheck import SelfCheckReport, self_check

__all__ = ["SelfCheckReport", "self_check"]
