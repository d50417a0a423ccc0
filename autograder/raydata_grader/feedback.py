"""What a student reads: a feedback page per submission, with the grader's notes on top.

A submission nbgrader graded gets nbgrader's own ``generate_feedback`` page, with the hidden
tests hidden (:class:`~raydata_grader.nbgrader_steps.HideHiddenTests`) and the grader's notes
(status, messages, repairs) as its first cell (:class:`~raydata_grader.nbgrader_steps.GraderNotes`).
One nbgrader could not grade (missing, invalid, crashed before grading) gets a short plain page
saying why and what to do.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path

from raydata_grader.course_dir import nbgrader_api, nbgrader_config
from raydata_grader.records import Row

__all__ = ["write_feedback"]


def _notes(row: Row) -> list[str]:
    """The row's findings, one sentence each (rows of earlier runs kept only the message)."""
    return [n for n in row.notes if n] or ([row.message] if row.message else [])


def _notes_markdown(row: Row, note: str) -> str:
    lines = [f"### Grader's notes: {row.assignment}, {row.student}", "",
             f"**Status: {row.status}** · score {row.score:g} / {row.max_score:g}", ""]
    if note:
        lines += [f"- {note}"]
    lines += [f"- {msg}" for msg in _notes(row)]
    if row.repairs:
        lines += ["", "Repairs made before grading (the grader restores the exercise's structure; "
                  "avoid these next time):", ""]
        lines += [f"- {r}" for r in row.repairs]
    return "\n".join(lines) + "\n"


def _plain_feedback(row: Row) -> str:
    items = "".join(f"<li>{html.escape(m)}</li>" for m in _notes(row))
    repairs = "".join(f"<li>{html.escape(r)}</li>" for r in row.repairs)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(row.assignment)} feedback</title></head>"
            f"<body><h1>{html.escape(row.assignment)}: {html.escape(row.student)}</h1>"
            f"<p><b>Status: {row.status}</b>, score {row.score:g} / {row.max_score:g}</p><ul>{items}</ul>"
            + (f"<p>Repairs made before grading:</p><ul>{repairs}</ul>" if repairs else "")
            + "<p>Fix the problem, restart the kernel, run all cells, save, and submit again.</p></body></html>\n")


def write_feedback(out: Path, row: Row, note: str, graded_by_nbgrader: bool) -> Path:
    """Write ``<out>/feedback/<student>/<assignment>/<assignment>.html`` for ``row``; return it.

    Args:
        out: the grading folder (an nbgrader course).
        row: the submission's row.
        note: one more line for the notes (may be empty).
        graded_by_nbgrader: nbgrader autograded it, so its own feedback page can be made;
            if that fails, or for False, a plain page is written instead.
    """
    from nbgrader.preprocessors import GetGrades
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

    from raydata_grader.nbgrader_steps import GraderNotes, HideHiddenTests

    target_dir = out / "feedback" / row.student / row.assignment
    target = target_dir / f"{row.assignment}.html"
    notes_path = out / "notes" / row.student / f"{row.assignment}.md"
    notes_path.parent.mkdir(parents=True, exist_ok=True)
    notes_path.write_text(_notes_markdown(row, note))
    if target_dir.exists():
        shutil.rmtree(target_dir)
    if graded_by_nbgrader:
        config = nbgrader_config(out, **{
            "GenerateFeedback.preprocessors": [GetGrades, CSSHTMLHeaderPreprocessor, HideHiddenTests, GraderNotes],
            "GraderNotes.notes_directory": str(out / "notes")})
        result = nbgrader_api(config).generate_feedback(row.assignment, row.student, force=True)
        if result.get("success") and target.is_file():
            return target
    target_dir.mkdir(parents=True, exist_ok=True)
    target.write_text(_plain_feedback(row))
    return target
