"""A finished job's result, made into the grading folder's records (grader only).

The grading run (:mod:`raydata_grader.grade`) takes each :class:`~raydata_grader.jobs.JobResult`
as it comes, from whichever machine graded it, and here, in the run's own process and one at a
time, makes it part of the one grading folder:

- :func:`merge_result` checks that the result is the job's, writes the autograded notebook, made
  inert (:func:`raydata_grader.inert.inert_notebook`), into ``autograded/<key>/<id>/`` (with its
  ``timestamp.txt``, and no other file) and the worker's files into ``work/<key>/<id>/``
  (``<key>``: the job's student, the student's folder key), and applies the submission's gradebook
  record to the class's gradebook (:func:`raydata_grader.gradebook.apply_record`);
- :func:`row_of` makes its row of ``grades.csv`` from the result and what lint found, holding
  for review the points that rest on reported facts when the notebook holds code that could
  forge them (:func:`raydata_grader.review.hold`);
  :func:`failed_row` the row of a job that raised (the grader, or the machine under it,
  failed: such a row keeps no hash, so the next run grades it again).

File names that come back are checked to stay inside their folder.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from raydata_grader.gradebook import apply_record
from raydata_grader.inert import inert_notebook
from raydata_grader.jobs import GradeJob, JobResult, JobStopped
from raydata_grader.kit import CourseKit
from raydata_grader.records import Row
from raydata_grader.review import cells_to_hold, hold

__all__ = ["Planned", "merge_result", "row_of", "failed_row"]


@dataclass
class Planned:
    """A submission on its way to a job: what the row needs beside the job's result.

    Attributes:
        job: the job.
        note: the intake's note on it (two submissions found, say), or empty.
        digest: SHA-256 of the submitted file.
        lint_status: ``graded`` (nothing repaired) or ``repaired``.
        repairs: lint's repairs, one sentence each.
        student: the student's name for the row, when the job's ``student`` is their folder
            key (:mod:`raydata_grader.student_names`); empty: the job's.
        findings: lines that could forge a reported fact (:mod:`raydata_grader.forging`), one each.
        finding_rules: the scan's rules those lines tripped (to hold the checks whose observed
            facts they could imitate).
    """

    job: GradeJob
    note: str
    digest: str
    lint_status: str
    repairs: list[str]
    student: str = ""
    findings: list[str] = field(default_factory=list)
    finding_rules: list[str] = field(default_factory=list)


def _safe_name(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


def merge_result(out: Path, job: GradeJob, result: JobResult) -> None:
    """Put a job's autograded notebook, gradebook record and work files into the grading folder.

    Where they go is the job's (the run's own) student and assignment, not what came back. The
    notebook is stored inert (:func:`~raydata_grader.inert.inert_notebook`), whatever the job
    sent; of the other files in its folder only ``timestamp.txt`` is kept.

    Raises:
        ValueError: if the result or its gradebook record is another submission's.
        nbformat.ValidationError, json.JSONDecodeError: if the autograded notebook is not one.
        nbgrader.api.MissingEntry: if the class's gradebook lacks a cell of the record.
    """
    student, assignment = job.student, job.assignment
    if (result.student, result.assignment) != (student, assignment) or (
            result.gradebook is not None
            and (result.gradebook.student, result.gradebook.assignment) != (student, assignment)):
        raise ValueError(f"the result that came back for {student}/{assignment} is another submission's")
    autograded = out / "autograded" / student / assignment
    if autograded.exists():
        shutil.rmtree(autograded)
    for name, data in result.autograded.items():
        if name == f"{assignment}.ipynb":
            notebook, _ = inert_notebook(nbformat.reads(data.decode("utf-8"), as_version=4), keep_grader_notes=True)
            data = nbformat.writes(notebook).encode("utf-8")
        elif name != "timestamp.txt":
            continue
        autograded.mkdir(parents=True, exist_ok=True)
        (autograded / name).write_bytes(data)
    if result.gradebook is not None:
        apply_record(out, result.gradebook)
    work = out / "work" / student / assignment
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for name, data in result.work.items():
        if _safe_name(name) and "/" not in name:
            (work / name).write_bytes(data)


def row_of(planned: Planned, result: JobResult, kit: CourseKit, graded_at: str) -> Row:
    """The row of ``result``: its status (``repaired`` where lint repaired a notebook that graded), score, cells and messages."""
    job = planned.job
    status = result.status if result.status != "graded" else planned.lint_status
    notes = ([planned.note] if planned.note else []) + result.messages
    repaired = [f"{len(planned.repairs)} repair(s): " + "; ".join(planned.repairs)] if planned.repairs else []
    message = "; ".join(([planned.note] if planned.note else []) + repaired + result.messages)
    row = Row(planned.student or job.student, job.assignment, result.score, kit.max_score, status, message,
              cells=result.cells, repairs=planned.repairs, submission_sha256=planned.digest,
              source_sha256=kit.source_sha256, graded_at=graded_at, seconds=result.wall_s, notes=notes,
              cpu_seconds=result.cpu_s, node=result.node)
    if status in ("graded", "repaired"):
        row = hold(row, cells_to_hold(result.reported_cells, result.imitable_cells, planned.finding_rules),
                   planned.findings)
    return row


def failed_row(planned: Planned, error: BaseException, kit: CourseKit, graded_at: str) -> Row:
    """The row of a job that raised: the grader (or the machine under it) failed, not the student."""
    job = planned.job
    if type(error).__module__.startswith("ray."):  # Ray's own errors: the task failed on every try
        why = (f"the machine grading it failed every time it was tried ({type(error).__name__}: {str(error)[:200]}); "
               "the run went on. Grade again to retry it")
    elif isinstance(error, JobStopped):
        why = "its job was stopped on the machine grading it before it ended; the run went on. Grade again to retry it"
    else:
        why = (f"the grader failed on this submission ({type(error).__name__}: {str(error)[:200]}); the run went on. "
               "Instructor: report this with the submitted file (kept in received/)")
    return Row(planned.student or job.student, job.assignment, 0.0, kit.max_score, "crashed", why,  # no hash: retried
               source_sha256=kit.source_sha256, graded_at=graded_at, notes=[why])
