"""The grading run's records: one :class:`Row` per student and assignment, kept across runs.

Rows live in ``<out>/grades.json`` (with what a later run needs to skip unchanged work), and
are written out as ``grades.csv`` (student, assignment, score, max_score, status, message)
and one repair log per student (``repairs/<student>.md``). Files are replaced atomically.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["STATUSES", "CSV_COLUMNS", "Row", "read_rows", "save_rows"]

#: Every status a row of ``grades.csv`` can have.
STATUSES = ("graded", "repaired", "timeout", "crashed", "missing", "invalid")
CSV_COLUMNS = ("student", "assignment", "score", "max_score", "status", "message")


@dataclass
class Row:
    """One row of ``grades.csv``, with what the grader keeps to re-run safely.

    Attributes:
        student, assignment, score, max_score, status, message: the CSV columns.
        cells: ``{grade_id: [score, max_score]}`` from the gradebook (empty when not graded).
        repairs: the repairs made, one sentence each.
        submission_sha256: hash of the graded file's bytes.
        source_sha256: hash of the assignment's source notebook when graded.
        graded_at: ISO time of grading.
        seconds: wall time of the autograde, in seconds.
        notes: what the grader found, one sentence each (``message`` is them joined with
            ``"; "``, with the repairs summed up); the feedback lists them.
    """

    student: str
    assignment: str
    score: float
    max_score: float
    status: str
    message: str
    cells: dict[str, list[float]] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    submission_sha256: str = ""
    source_sha256: str = ""
    graded_at: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def read_rows(out: str | os.PathLike) -> dict[tuple[str, str], Row]:
    """The rows kept in ``<out>/grades.json`` (empty when there is none)."""
    path = Path(out) / "grades.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {(r["student"], r["assignment"]): Row(**r) for r in data.get("rows", [])}


def save_rows(out: Path, rows: dict[tuple[str, str], Row]) -> None:
    """Write ``grades.json``, ``grades.csv`` and the repair logs of ``rows`` into ``out``."""
    ordered = [rows[k] for k in sorted(rows)]
    tmp = out / "grades.json.tmp"
    tmp.write_text(json.dumps({"rows": [dataclasses.asdict(r) for r in ordered]}, indent=1))
    os.replace(tmp, out / "grades.json")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_COLUMNS)
    for r in ordered:
        writer.writerow([r.student, r.assignment, f"{r.score:g}", f"{r.max_score:g}", r.status, r.message])
    (out / "grades.csv.tmp").write_text(buf.getvalue())
    os.replace(out / "grades.csv.tmp", out / "grades.csv")
    repairs_dir = out / "repairs"
    repairs_dir.mkdir(exist_ok=True)
    by_student: dict[str, list[Row]] = {}
    for r in ordered:
        by_student.setdefault(r.student, []).append(r)
    for student, student_rows in by_student.items():
        lines = [f"# Repair log: {student}", ""]
        for r in student_rows:
            lines.append(f"## {r.assignment}: {r.status}")
            lines += [f"- {x}" for x in r.repairs] or ["- no repairs"]
            lines.append("")
        (repairs_dir / f"{student}.md").write_text("\n".join(lines))
