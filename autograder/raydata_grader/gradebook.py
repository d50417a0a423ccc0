"""One submission's grades as data: read from a job's own gradebook, applied to the class's.

A grading job autogrades one submission in a private nbgrader course of its own, on
whichever machine runs it (:mod:`raydata_grader.jobs`). What nbgrader's autograde wrote
into that course's gradebook for the submission (its timestamp, and per notebook the late
penalty, each grade cell's automatic score and each answer cell's automatic comment) comes
back as a :class:`GradebookRecord`, and the grading run applies it to the class's gradebook
(``<out>/gradebook.db``) with nbgrader's own :class:`nbgrader.api.Gradebook`, as nbgrader's
``SaveAutoGrades`` and ``AssignLatePenalties`` would have. Manual scores an instructor gave
in formgrader are kept, and such a cell is flagged for review, as nbgrader does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["NotebookRecord", "GradebookRecord", "read_record", "apply_record"]


@dataclass(frozen=True)
class NotebookRecord:
    """One notebook of a submission, as nbgrader's autograde left it in the gradebook.

    Attributes:
        name: the notebook's name (``data01`` for ``data01.ipynb``).
        late_penalty: points taken for lateness (nbgrader's ``late_submission_penalty``), or None.
        grades: ``{grade_id: automatic score}`` (points; None where autograde gave none).
        comments: ``{cell id: automatic comment}`` (nbgrader writes ``"No response."`` for an
            answer cell left as released, else None).
    """

    name: str
    late_penalty: float | None = None
    grades: dict[str, float | None] = field(default_factory=dict)
    comments: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class GradebookRecord:
    """A submission's automatic grades, detached from the gradebook that holds them.

    Attributes:
        assignment: assignment id.
        student: student id.
        timestamp: the submission's time (ISO 8601, UTC) as nbgrader recorded it, or None.
        notebooks: one :class:`NotebookRecord` per notebook of the assignment.
    """

    assignment: str
    student: str
    timestamp: str | None
    notebooks: tuple[NotebookRecord, ...]

    def to_json(self) -> dict:
        """The record as a JSON-ready dict (:meth:`from_json` reads it back)."""
        return {"assignment": self.assignment, "student": self.student, "timestamp": self.timestamp,
                "notebooks": [{"name": n.name, "late_penalty": n.late_penalty, "grades": dict(n.grades),
                               "comments": dict(n.comments)} for n in self.notebooks]}

    @classmethod
    def from_json(cls, data: dict) -> "GradebookRecord":
        """The record :meth:`to_json` wrote.

        Raises:
            ValueError: if ``data`` is not in that shape.
        """
        try:
            notebooks = tuple(
                NotebookRecord(str(n["name"]), None if n["late_penalty"] is None else float(n["late_penalty"]),
                               {str(k): None if v is None else float(v) for k, v in n["grades"].items()},
                               {str(k): None if v is None else str(v) for k, v in n["comments"].items()})
                for n in data["notebooks"])
            return cls(str(data["assignment"]), str(data["student"]),
                       None if data["timestamp"] is None else str(data["timestamp"]), notebooks)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a gradebook record ({type(exc).__name__}: {exc})") from None


def _url(course_dir: str | os.PathLike) -> str:
    return f"sqlite:///{Path(course_dir).resolve() / 'gradebook.db'}"


def read_record(course_dir: str | os.PathLike, assignment: str, student: str) -> GradebookRecord:
    """What ``<course_dir>/gradebook.db`` holds for one autograded submission.

    Raises:
        nbgrader.api.MissingEntry: if the gradebook has no such submission.
    """
    from nbgrader.api import Gradebook

    with Gradebook(_url(course_dir)) as gb:
        sub = gb.find_submission(assignment, student)
        notebooks = tuple(
            NotebookRecord(nb.name, nb.late_submission_penalty,
                           {g.name: None if g.auto_score is None else float(g.auto_score) for g in nb.grades},
                           {c.name: c.auto_comment for c in nb.comments})
            for nb in sub.notebooks)
        stamp = sub.timestamp.isoformat() if sub.timestamp is not None else None
        return GradebookRecord(assignment, student, stamp, notebooks)


def apply_record(course_dir: str | os.PathLike, record: GradebookRecord) -> None:
    """Write ``record`` into ``<course_dir>/gradebook.db`` (the student and submission are made if new).

    Only the automatic fields change: a manual score stays, and its cell is flagged for
    manual review (``needs_manual_grade``), as nbgrader's ``SaveAutoGrades`` does.

    Raises:
        nbgrader.api.MissingEntry: if the gradebook does not hold the assignment, or a notebook
            or cell of the record (the record was made from another release).
    """
    import warnings

    from nbgrader.api import Gradebook

    with Gradebook(_url(course_dir)) as gb, warnings.catch_warnings():
        # nbgrader's add_submission builds the submission's rows before adding them to its
        # session, and SQLAlchemy says so ("... not in session, add operation ... will not proceed").
        warnings.filterwarnings("ignore", message=".*not in session.*")
        gb.update_or_create_student(record.student)
        extra = {"timestamp": record.timestamp} if record.timestamp else {}
        gb.update_or_create_submission(record.assignment, record.student, **extra)
        for nb in record.notebooks:
            submitted = gb.find_submission_notebook(nb.name, record.assignment, record.student)
            submitted.late_submission_penalty = nb.late_penalty
            for grade_id, score in nb.grades.items():
                grade = gb.find_grade(grade_id, nb.name, record.assignment, record.student)
                grade.auto_score = score
                grade.needs_manual_grade = grade.manual_score is not None or score is None
            for cell_id, text in nb.comments.items():
                gb.find_comment(cell_id, nb.name, record.assignment, record.student).auto_comment = text
        gb.db.commit()

