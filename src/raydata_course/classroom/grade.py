"""Grade a whole class with one command, on top of nbgrader 0.9.6 (grader only).

``python -m raydata_course.classroom grade SUBMISSIONS --out DIR`` (``make grade
SUBMISSIONS=path``) takes a folder of submissions, either laid out as
``<student>/<assignment>/<notebook>.ipynb`` (an optional nbgrader ``timestamp.txt`` next to
the notebook) or holding one zip per student (``<student>.zip`` with ``<assignment>/...``
inside, or any zip whose single top-level folder is the student id), and:

1. **collects** every candidate notebook per student and assignment without touching the
   originals (a verbatim copy goes to ``DIR/received/``). A student who submitted twice is
   graded on the latest submission (``timestamp.txt``, else the zip entry's date);
2. **lints and repairs** each notebook against the release (:mod:`.lint`) and writes the
   repaired copy to nbgrader's ``DIR/submitted/``; files that are not notebooks are
   ``invalid``, absent ones ``missing``;
3. **autogrades** each notebook with nbgrader's ``autograde``, in a child process
   (:mod:`.sandbox`) with a per-cell timeout, a wall-time limit and a memory limit, and a
   fresh Ray runtime of its own (``RAY_ADDRESS`` is removed from the kernel's environment and
   each kernel gets its own Ray temp folder), so one student's ``ray.shutdown()``,
   ``os._exit()``, actors or memory cannot reach another's. ``--ray-address`` instead
   connects every kernel to one running cluster; each driver is then its own Ray job with its
   own anonymous namespace, so actors and objects stay apart, but a memory limit covers
   only the kernel, not its tasks;
4. **writes** ``DIR/grades.csv`` (student, assignment, score, max_score, status, message),
   with ``status`` one of ``graded``, ``repaired``, ``timeout``, ``crashed``, ``missing``,
   ``invalid``. A failure is never a silent 0: the status and message say what happened;
5. **writes feedback** per student with nbgrader's ``generate_feedback``
   (``DIR/feedback/<student>/<assignment>/<assignment>.html``), without hidden-test code
   (:class:`.preprocessors.HideHiddenTests`), with the grader's notes on top; and a short
   page for a submission nbgrader could not grade;
6. **prints a summary** (also ``DIR/summary.md``): the class average per exercise, the most
   failed grade cells, and the students who need attention.

Re-running is safe. Results live in ``DIR/grades.json``, keyed by student and assignment; a
submission whose bytes (and whose assignment source) have not changed is not graded again
(``--force`` re-grades), a student absent from this run keeps the rows of earlier runs, and
a submission that is missing this time never replaces an earlier grade.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import html
import io
import json
import os
import re
import shutil
import sys
import time
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from raydata_course import grading
from raydata_course.classroom.lint import lint_notebook

__all__ = [
    "STATUSES",
    "GradeOptions",
    "Candidate",
    "Row",
    "collect_submissions",
    "grade_class",
    "read_rows",
    "summary_markdown",
]

#: Every status a row of ``grades.csv`` can have.
STATUSES = ("graded", "repaired", "timeout", "crashed", "missing", "invalid")
CSV_COLUMNS = ("student", "assignment", "score", "max_score", "status", "message")
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]*$")
MEMORY_ERRORS = ("MemoryError", "OutOfMemoryError", "ObjectStoreFullError")
GiB = 1024**3
#: Seconds nbclient waits for a cell's outputs after its execute reply (nbclient's default: 4).
IOPUB_TIMEOUT_S = 60


@dataclass
class GradeOptions:
    """Limits and switches for one grading run.

    Attributes:
        cell_timeout_s: nbgrader's per-cell timeout (``Execute.timeout``), in seconds.
        notebook_timeout_s: wall-time limit for one notebook's whole autograde, in seconds.
        memory_bytes: memory limit for one notebook, in bytes (see :mod:`.sandbox`).
        max_output_chars: output kept per cell, in characters.
        ray_address: connect every kernel to this running cluster instead of giving each
            kernel a fresh runtime.
        force: re-grade submissions that were graded before, unchanged.
        assignments: grade only these (default: every course assignment found in the
            submissions).
        quiet: print only the summary.
    """

    cell_timeout_s: int = 180
    notebook_timeout_s: int = 1200
    memory_bytes: int = 6 * GiB
    max_output_chars: int = 20_000
    ray_address: str | None = None
    force: bool = False
    assignments: tuple[str, ...] | None = None
    quiet: bool = False


@dataclass
class Candidate:
    """One notebook found for a student and assignment.

    Attributes:
        student: student id.
        assignment: assignment id.
        origin: where it came from (a path, or ``zip-path!member``), for messages.
        data: the file's bytes.
        timestamp: the submission time (nbgrader's ``timestamp.txt``, a zip entry's date),
            timezone-aware UTC, or None when unknown.
        timestamp_text: ``timestamp.txt``'s text, passed to nbgrader unchanged.
    """

    student: str
    assignment: str
    origin: str
    data: bytes
    timestamp: datetime | None = None
    timestamp_text: str | None = None


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


# ------------------------------------------------------------------------------ collect


def _parse_timestamp(text: str) -> datetime | None:
    from nbgrader.utils import parse_utc

    try:
        stamp = parse_utc(text.strip())
    except Exception:
        return None
    return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp


def _zip_time(info: zipfile.ZipInfo) -> datetime:
    return datetime(*info.date_time, tzinfo=timezone.utc)


def _skip(part: str) -> bool:
    return part.startswith(".") or part in ("__MACOSX", "__pycache__")


def collect_submissions(folder: str | os.PathLike, known: tuple[str, ...]) -> tuple[
        dict[tuple[str, str], list[Candidate]], set[str], dict[tuple[str, str], str], list[str]]:
    """Find every submitted notebook under ``folder``.

    Args:
        folder: a folder of ``<student>/`` folders and/or ``*.zip`` files.
        known: the course's assignment ids.

    Returns:
        ``(candidates, students, empty, notes)``: the notebooks per ``(student, assignment)``;
        every student id seen; ``(student, assignment)`` folders that held no notebook, with
        what they held; and notes about entries that were skipped.

    Raises:
        FileNotFoundError: if ``folder`` is not a folder.
    """
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder of submissions (expected <student>/<assignment>/*.ipynb or <student>.zip files)")
    found: dict[tuple[str, str], list[Candidate]] = {}
    students: set[str] = set()
    empty: dict[tuple[str, str], str] = {}
    notes: list[str] = []

    def add(student: str, assignment: str, origin: str, data: bytes, stamp_text: str | None, fallback: datetime | None):
        stamp = _parse_timestamp(stamp_text) if stamp_text else None
        found.setdefault((student, assignment), []).append(
            Candidate(student, assignment, origin, data, stamp or fallback, stamp_text.strip() if stamp_text and stamp else None))

    for entry in sorted(root.iterdir()):
        if _skip(entry.name):
            continue
        if entry.is_dir():
            student = entry.name
            if not STUDENT_ID.match(student):
                notes.append(f"skipped folder {entry.name!r}: not a valid student id")
                continue
            students.add(student)
            for sub in sorted(entry.iterdir()):
                if _skip(sub.name):
                    continue
                if sub.is_file() and sub.suffix == ".ipynb" and sub.stem in known:  # <student>/<id>.ipynb
                    add(student, sub.stem, str(sub), sub.read_bytes(), None, None)
                elif sub.is_dir() and sub.name in known:
                    stamp_file = sub / "timestamp.txt"
                    stamp_text = stamp_file.read_text() if stamp_file.is_file() else None
                    notebooks = sorted(p for p in sub.rglob("*.ipynb") if not any(_skip(x) for x in p.relative_to(sub).parts))
                    for nb_path in notebooks:
                        add(student, sub.name, str(nb_path), nb_path.read_bytes(), stamp_text, None)
                    if not notebooks:
                        held = sorted(p.name for p in sub.iterdir())
                        empty[(student, sub.name)] = (f"the {sub.name} folder holds no .ipynb file"
                                                      + (f" (only {', '.join(held)})" if held else " (it is empty)"))
                elif sub.is_dir():
                    notes.append(f"{student}: skipped folder {sub.name!r} (not a course assignment)")
        elif entry.suffix.lower() == ".zip":
            try:
                archive = zipfile.ZipFile(entry)
            except zipfile.BadZipFile:
                student = entry.stem
                if STUDENT_ID.match(student):
                    students.add(student)
                    empty[(student, "*")] = f"{entry.name} is not a readable zip file"
                else:
                    notes.append(f"skipped {entry.name}: not a zip file")
                continue
            with archive:
                members = [m for m in archive.infolist() if not m.is_dir()
                           and not any(_skip(x) for x in Path(m.filename).parts)]
                tops = {Path(m.filename).parts[0] for m in members if len(Path(m.filename).parts) > 1}
                student, strip = entry.stem, 0
                if len(tops) == 1 and not any(len(Path(m.filename).parts) == 1 for m in members):
                    top = next(iter(tops))
                    if top not in known:
                        student, strip = top, 1
                if not STUDENT_ID.match(student):
                    notes.append(f"skipped {entry.name}: {student!r} is not a valid student id")
                    continue
                students.add(student)
                by_assignment: dict[str, list[zipfile.ZipInfo]] = {}
                stamps: dict[str, str] = {}
                for m in members:
                    parts = Path(m.filename).parts[strip:]
                    if len(parts) == 1 and parts[0].endswith(".ipynb") and Path(parts[0]).stem in known:
                        by_assignment.setdefault(Path(parts[0]).stem, []).append(m)
                    elif len(parts) >= 2 and parts[0] in known:
                        if parts[-1] == "timestamp.txt" and len(parts) == 2:
                            stamps[parts[0]] = archive.read(m).decode("utf-8", "replace")
                        elif parts[-1].endswith(".ipynb"):
                            by_assignment.setdefault(parts[0], []).append(m)
                for assignment, infos in sorted(by_assignment.items()):
                    for m in infos:
                        add(student, assignment, f"{entry}!{m.filename}", archive.read(m), stamps.get(assignment), _zip_time(m))
                for assignment in known:
                    if assignment not in by_assignment and any(Path(m.filename).parts[strip:strip + 1] == (assignment,) for m in members):
                        empty[(student, assignment)] = f"the {assignment} folder in {entry.name} holds no .ipynb file"
        else:
            notes.append(f"skipped {entry.name}: neither a student folder nor a .zip")
    return found, students, empty, notes


def _choose(cands: list[Candidate]) -> tuple[Candidate, str]:
    """The submission to grade: the latest timestamp, then the exact file name, then the last found."""
    def key(item):
        i, c = item
        exact = Path(c.origin.split("!")[-1]).name == f"{c.assignment}.ipynb"
        return (c.timestamp or datetime.min.replace(tzinfo=timezone.utc), exact, i)

    ranked = sorted(enumerate(cands), key=key)
    chosen = ranked[-1][1]
    if len(cands) == 1:
        return chosen, ""
    others = [c for _, c in ranked[:-1]]

    def when(c):
        return c.timestamp.strftime("%Y-%m-%d %H:%M UTC") if c.timestamp else "no timestamp"
    note = (f"{len(cands)} submissions found: graded the latest, {_short(chosen.origin)} ({when(chosen)}), "
            "ignored " + ", ".join(f"{_short(c.origin)} ({when(c)})" for c in others))
    return chosen, note


def _short(origin: str) -> str:
    path, _, member = origin.partition("!")
    return f"{Path(path).name}!{member}" if member else "/".join(Path(path).parts[-3:])


# --------------------------------------------------------------------------- course dir


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ensure_course(out: Path, assignments: tuple[str, ...]) -> None:
    """Make ``out`` an nbgrader course holding the current source and release of ``assignments``.

    The first run copies ``solutions/<id>/`` and generates the release (which creates the
    gradebook). Later runs keep the gradebook and regenerate only an assignment whose source
    changed.
    """
    out.mkdir(parents=True, exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):  # nbgrader runs `alembic` for a new gradebook
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    stale = []
    for assignment in assignments:
        src = grading.source_notebook(assignment).parent
        dst = out / "solutions" / assignment
        same = dst.is_dir() and all(
            (dst / p.relative_to(src)).is_file() and (dst / p.relative_to(src)).read_bytes() == p.read_bytes()
            for p in src.rglob("*") if p.is_file())
        if not same:
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        if not same or not grading.release_notebook(assignment, out).is_file() or not (out / "gradebook.db").is_file():
            stale.append(assignment)
    if stale:
        grading.release(tuple(stale), course_dir=out)


def _max_score(release) -> float:
    return float(sum(float(c.metadata.get("nbgrader", {}).get("points", 0) or 0)
                     for c in release.cells if c.metadata.get("nbgrader", {}).get("grade")))


# ------------------------------------------------------------------------- the worker


def _autograde_preprocessors(config) -> list:
    from nbgrader.preprocessors import Execute, LimitOutput

    from raydata_course.classroom.preprocessors import LimitOutputSize, TrackedExecute

    steps = []
    for step in config.Autograde.autograde_preprocessors:
        steps.append(TrackedExecute if step is Execute else step)
        if step is LimitOutput:
            steps.append(LimitOutputSize)
    if LimitOutputSize not in steps:
        steps.insert(len(steps) - 1, LimitOutputSize)
    if TrackedExecute not in steps:
        raise RuntimeError("autograder/nbgrader_config.py's Autograde.autograde_preprocessors has no Execute step")
    return steps


def worker_main(course_dir: str, assignment: str, student: str, result_path: str, cell_timeout_s: int,
                max_output_chars: int) -> int:
    """Autograde one submission (runs inside the sandbox) and write a JSON result file.

    The result holds nbgrader's success flag, the gradebook's scores and, per error output
    in the autograded notebook, the cell's ``grade_id``, ``ename`` and ``evalue``.
    """
    base = grading.nbgrader_config(course_dir)
    score = grading.autograde(
        course_dir, assignment, student,
        **{"Execute.timeout": cell_timeout_s,
           # nbclient waits 4 s for a cell's last output after its reply and then fails the
           # whole notebook (nbgrader sets raise_on_iopub_timeout); a loaded machine needs more.
           "Execute.iopub_timeout": IOPUB_TIMEOUT_S,
           "Autograde.autograde_preprocessors": _autograde_preprocessors(base),
           "LimitOutputSize.max_chars": max_output_chars})
    errors = []
    graded_nb = Path(course_dir, "autograded", student, assignment, f"{assignment}.ipynb")
    if score.success and graded_nb.is_file():
        nb = nbformat.read(graded_nb, as_version=4)
        for index, cell in enumerate(nb.cells):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    errors.append({"index": index, "grade_id": cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"),
                                   "ename": output.get("ename", ""), "evalue": str(output.get("evalue", ""))[:500]})
    Path(result_path).write_text(json.dumps({
        "success": score.success, "score": score.score, "max_score": score.max_score,
        "cells": {k: list(v) for k, v in score.cells.items()}, "errors": errors, "log": score.log[-20_000:]}))
    return 0


# ----------------------------------------------------------------------- classify


def _where(progress: dict | None) -> str:
    if not progress:
        return "before the first cell"
    gid = progress.get("grade_id")
    return f"cell {gid!r}" if gid else f"cell {progress.get('index', 0) + 1} (one of your own cells)"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _classify(result: dict | None, outcome, progress: dict | None, options: GradeOptions,
              instructor_cells: frozenset[str] = frozenset()) -> tuple[str, float, dict, list[str]]:
    """(status, score, cells, messages) of one sandboxed autograde.

    ``instructor_cells`` are the release's read-only code cells that earn no points (set-up,
    tear-down). They are the instructor's code, put back by nbgrader, so an error there means
    the grading environment failed (Ray could not start on an overloaded machine, say), not
    the student: the row is ``crashed`` and says to grade it again.
    """
    if outcome.killed == "timeout":
        return "timeout", 0.0, {}, [f"stopped after the per-notebook limit of {options.notebook_timeout_s} s, "
                                    f"while running {_where(progress)} (nothing was graded)"]
    if outcome.killed == "memory":
        return "crashed", 0.0, {}, [f"stopped for using {outcome.peak_bytes / GiB:.1f} GiB, over the memory limit of "
                                    f"{options.memory_bytes / GiB:.1f} GiB, while running {_where(progress)} (nothing was graded)"]
    if not result or not result.get("success"):
        log = (result or {}).get("log", "")
        if "DeadKernelError" in log or "Kernel died" in log or "kernel died" in log:
            ended_s = outcome.ended_s or time.time()
            if progress and progress.get("started_s") and ended_s - progress["started_s"] >= options.cell_timeout_s:
                # nbgrader interrupts a cell at the limit; a kernel interrupted inside Ray's
                # client code can die of it (measured: data02's hidden tests under a short limit).
                return "timeout", 0.0, {}, [
                    f"{_where(progress)} ran past the per-cell limit of {options.cell_timeout_s} s, and the kernel "
                    "died when it was interrupted (Ray code stopped in the middle of a call can take the "
                    "kernel down): nothing after it ran, nothing was graded"]
            why = (f"the kernel died while running {_where(progress)} (os._exit(), sys.exit() in a subprocess, a crash in "
                   "native code, or running out of memory): nothing after it ran, nothing was graded")
        elif "Timeout waiting for IOPub output" in log:
            why = (f"the kernel stopped sending output for {IOPUB_TIMEOUT_S} s while running {_where(progress)}, "
                   "usually because the grading machine was overloaded: grade it again with --force")
        else:
            last = [ln for ln in log.strip().splitlines() if ln.strip()][-1:] or [f"exit status {outcome.returncode}"]
            why = f"nbgrader could not grade it ({last[0][:300]}), nothing was graded"
        return "crashed", 0.0, {}, [why]
    cells = result.get("cells", {})
    score = float(result.get("score", 0.0))
    errors = result.get("errors", [])
    messages = []
    timeouts = [e for e in errors if e["ename"] in ("CellTimeoutError", "TimeoutError") or "CellTimeoutError" in e["evalue"]]
    memory = [e for e in errors if e["ename"] in MEMORY_ERRORS]
    status = "graded"
    broken = [e for e in errors if e["grade_id"] in instructor_cells]
    if broken:
        status = "crashed"
        e = broken[0]
        messages.append(f"the instructor's cell {e['grade_id']!r} failed ({e['ename']}: {e['evalue'][:200]}): the grading "
                        "environment failed, not necessarily the student's code: grade it again with --force")
    if timeouts:
        status = "timeout" if status == "graded" else status
        names = sorted({e["grade_id"] or f"cell {e['index'] + 1}" for e in timeouts})
        messages.append(f"{', '.join(names)} ran past the per-cell limit of {options.cell_timeout_s} s and "
                        "was interrupted (the other cells were graded)")
    if memory:
        status = "crashed"  # over "timeout": a notebook that ran out of memory may also have timed out
        names = sorted({e["grade_id"] or f"cell {e['index'] + 1}" for e in memory})
        messages.append(f"{', '.join(names)} ran out of memory ({memory[0]['ename']}; the limit is "
                        f"{options.memory_bytes / GiB:.1f} GiB), the other cells were graded")
    failed = sorted(k for k, (s, m) in cells.items() if s < m)
    if failed:
        messages.append("lost points in " + ", ".join(failed))
    return status, score, cells, messages


# -------------------------------------------------------------------------- feedback


def _notes_markdown(row: Row, note: str) -> str:
    lines = [f"### Grader's notes: {row.assignment}, {row.student}", "",
             f"**Status: {row.status}** · score {row.score:g} / {row.max_score:g}", ""]
    if note:
        lines += [f"- {note}"]
    for msg in row.message.split("; "):
        if msg:
            lines.append(f"- {msg}")
    if row.repairs:
        lines += ["", "Repairs made before grading (the grader restores the exercise's structure; "
                  "avoid these next time):", ""]
        lines += [f"- {r}" for r in row.repairs]
    return "\n".join(lines) + "\n"


def _plain_feedback(row: Row) -> str:
    items = "".join(f"<li>{html.escape(m)}</li>" for m in row.message.split("; ") if m)
    repairs = "".join(f"<li>{html.escape(r)}</li>" for r in row.repairs)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(row.assignment)} feedback</title></head>"
            f"<body><h1>{html.escape(row.assignment)}: {html.escape(row.student)}</h1>"
            f"<p><b>Status: {row.status}</b>, score {row.score:g} / {row.max_score:g}</p><ul>{items}</ul>"
            + (f"<p>Repairs made before grading:</p><ul>{repairs}</ul>" if repairs else "")
            + "<p>Fix the problem, restart the kernel, run all cells, save, and submit again.</p></body></html>\n")


def _write_feedback(out: Path, row: Row, note: str, graded_by_nbgrader: bool) -> Path:
    from nbgrader.preprocessors import GetGrades
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

    from raydata_course.classroom.preprocessors import GraderNotes, HideHiddenTests

    target_dir = out / "feedback" / row.student / row.assignment
    target = target_dir / f"{row.assignment}.html"
    notes_path = out / "notes" / row.student / f"{row.assignment}.md"
    notes_path.parent.mkdir(parents=True, exist_ok=True)
    notes_path.write_text(_notes_markdown(row, note))
    if target_dir.exists():
        shutil.rmtree(target_dir)
    if graded_by_nbgrader:
        config = grading.nbgrader_config(out, **{
            "GenerateFeedback.preprocessors": [GetGrades, CSSHTMLHeaderPreprocessor, HideHiddenTests, GraderNotes],
            "GraderNotes.notes_directory": str(out / "notes")})
        result = grading.nbgrader_api(config).generate_feedback(row.assignment, row.student, force=True)
        if result.get("success") and target.is_file():
            return target
    target_dir.mkdir(parents=True, exist_ok=True)
    target.write_text(_plain_feedback(row))
    return target


# ----------------------------------------------------------------------------- state


def read_rows(out: str | os.PathLike) -> dict[tuple[str, str], Row]:
    """The rows kept in ``<out>/grades.json`` (empty when there is none)."""
    path = Path(out) / "grades.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {(r["student"], r["assignment"]): Row(**r) for r in data.get("rows", [])}


def _save(out: Path, rows: dict[tuple[str, str], Row]) -> None:
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


# --------------------------------------------------------------------------- summary


def summary_markdown(rows: dict[tuple[str, str], Row], top: int = 5) -> str:
    """The class summary: average per exercise, most-failed grade cells, students to look at."""
    lines = ["# Class summary", "", "## Average per exercise", "",
             "| assignment | graded | average (graded) | average (all, missing = 0) | statuses |",
             "|---|---|---|---|---|"]
    assignments = sorted({a for _, a in rows})
    for a in assignments:
        these = [r for (s, aa), r in rows.items() if aa == a]
        ran = [r for r in these if r.status not in ("missing", "invalid") and r.max_score]
        frac = [r.score / r.max_score for r in ran]
        all_frac = [r.score / r.max_score if r.max_score else 0.0 for r in these]
        counts = ", ".join(f"{s} {n}" for s in STATUSES if (n := sum(r.status == s for r in these)))
        avg = f"{100 * sum(frac) / len(frac):.0f}%" if frac else "n/a"
        lines.append(f"| {a} | {len(ran)}/{len(these)} | {avg} | {100 * sum(all_frac) / max(len(all_frac), 1):.0f}% | {counts} |")
    lines += ["", "## Most-failed graded parts", "", "| assignment | grade cell | failed | of |", "|---|---|---|---|"]
    fails: dict[tuple[str, str], list[int]] = {}
    for (s, a), r in rows.items():
        for cell, (score, max_score) in r.cells.items():
            tally = fails.setdefault((a, cell), [0, 0])
            tally[0] += score < max_score
            tally[1] += 1
    worst = sorted(((n, of, a, c) for (a, c), (n, of) in fails.items() if n), key=lambda t: (-t[0] / t[1], t[2], t[3]))[:top * max(len(assignments), 1)]
    lines += [f"| {a} | {c} | {n} | {of} |" for n, of, a, c in worst] or ["| – | none | 0 | – |"]
    lines += ["", "## Students who need attention", "", "| student | assignment | status | score | why |", "|---|---|---|---|---|"]
    attention = [r for r in rows.values()
                 if r.status in ("timeout", "crashed", "missing", "invalid") or (r.max_score and r.score / r.max_score < 0.5)]
    for r in sorted(attention, key=lambda r: (r.student, r.assignment)):
        why = r.message if r.status != "graded" else "below half marks; " + r.message
        lines.append(f"| {r.student} | {r.assignment} | {r.status} | {r.score:g}/{r.max_score:g} | {why[:160]} |")
    if not attention:
        lines.append("| – | – | – | – | nobody |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ main


def _temp_root(student: str, assignment: str) -> str:
    tag = hashlib.sha1(f"{student}/{assignment}/{os.getpid()}/{time.time()}".encode()).hexdigest()[:10]
    return f"/tmp/rdg-{tag}"


def _grade_one(out: Path, cand: Candidate, lint, options: GradeOptions, log) -> tuple[str, float, dict, list[str], float]:
    from raydata_course.classroom.preprocessors import PROGRESS_ENV
    from raydata_course.classroom.sandbox import run_limited

    assignment, student = cand.assignment, cand.student
    sub_dir = out / "submitted" / student / assignment
    if sub_dir.exists():
        shutil.rmtree(sub_dir)
    sub_dir.mkdir(parents=True)
    nbformat.write(lint.notebook, sub_dir / f"{assignment}.ipynb")
    if cand.timestamp_text:
        (sub_dir / "timestamp.txt").write_text(cand.timestamp_text + "\n")
    work = out / "work" / student / assignment
    work.mkdir(parents=True, exist_ok=True)
    result_path, progress_path, log_path = work / "result.json", work / "progress.json", work / "autograde.log"
    for p in (result_path, progress_path, log_path):
        p.unlink(missing_ok=True)
    temp_root = _temp_root(student, assignment)
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.update({"RAYDATA_COURSE_TMPDIR": temp_root, "RAY_TMPDIR": temp_root, "RAYDATA_COURSE_HEADLESS": "1",
                PROGRESS_ENV: str(progress_path), "PYTHONUNBUFFERED": "1"})
    if options.ray_address:
        env["RAY_ADDRESS"] = options.ray_address
        # Ray 2.60 starts local clusters with token authentication (~/.ray/auth_token); a driver
        # in another process sends the token only in token mode.
        if (Path.home() / ".ray" / "auth_token").is_file():
            env.setdefault("RAY_AUTH_MODE", "token")
    cmd = [sys.executable, "-m", "raydata_course.classroom", "_autograde", str(out), assignment, student,
           str(result_path), str(options.cell_timeout_s), str(options.max_output_chars)]
    outcome = run_limited(cmd, timeout_s=options.notebook_timeout_s, memory_bytes=options.memory_bytes, env=env,
                          log_path=log_path, ray_temp_root=temp_root)
    instructor = frozenset(c.metadata["nbgrader"]["grade_id"] for c in lint.notebook.cells
                           if c.get("cell_type") == "code" and c.metadata.get("nbgrader", {}).get("locked")
                           and not c.metadata["nbgrader"].get("grade") and not c.metadata["nbgrader"].get("solution"))
    status, score, cells, messages = _classify(_read_json(result_path), outcome, _read_json(progress_path), options,
                                               instructor)
    return status, score, cells, messages, outcome.wall_s


def grade_class(submissions: str | os.PathLike, out: str | os.PathLike, options: GradeOptions | None = None) -> dict[tuple[str, str], Row]:
    """Grade every submission under ``submissions`` into the course folder ``out``.

    Args:
        submissions: a folder of ``<student>/<assignment>/*.ipynb`` folders or ``*.zip`` files.
        out: the grading folder (created; reused by later runs).
        options: limits and switches (:class:`GradeOptions`).

    Returns:
        Every row now in ``<out>/grades.json``, this run's and earlier runs'.

    Raises:
        FileNotFoundError: if ``submissions`` is not a folder.
        ValueError: if an assignment asked for is not one of the course's.
    """
    options = options or GradeOptions()
    out = Path(out).resolve()
    log = (lambda *a: None) if options.quiet else (lambda *a: print(*a, flush=True))
    known = tuple(grading.ASSIGNMENTS)
    if options.assignments:
        unknown = sorted(set(options.assignments) - set(known))
        if unknown:
            raise ValueError(f"unknown assignment(s) {unknown}; the course has {list(known)}")
    found, students, empty, notes = collect_submissions(submissions, known)
    wanted = tuple(options.assignments or sorted({a for _, a in found} | {a for _, a in empty if a != "*"}))
    for note in notes:
        log(f"[grade] {note}")
    if not wanted:
        log(f"[grade] no submissions of {list(known)} under {submissions}")
        return read_rows(out)
    start = time.monotonic()
    ensure_course(out, wanted)
    rows = read_rows(out)
    releases = {a: nbformat.read(grading.release_notebook(a, out), as_version=4) for a in wanted}
    source_sha = {a: _sha(grading.source_notebook(a, out).read_bytes()) for a in wanted}
    max_scores = {a: _max_score(releases[a]) for a in wanted}
    now = lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    n_graded = 0
    for student in sorted(students):
        for assignment in wanted:
            key = (student, assignment)
            earlier = rows.get(key)
            cands = found.get(key, [])
            if not cands:
                why = empty.get(key) or empty.get((student, "*"))
                status = "invalid" if (student, "*") in empty else "missing"
                message = why or f"no submission for {assignment}"
                if earlier and earlier.status not in ("missing", "invalid") and status == "missing":
                    log(f"[grade] {student}/{assignment}: missing this time; keeping the earlier grade ({earlier.status})")
                    continue
                rows[key] = Row(student, assignment, 0.0, max_scores[assignment], status, message, graded_at=now())
                (out / "received" / student / assignment).mkdir(parents=True, exist_ok=True)
                _write_feedback(out, rows[key], "", False)
                log(f"[grade] {student}/{assignment}: {status}: {message}")
                _save(out, rows)
                continue
            cand, note = _choose(cands)
            digest = _sha(cand.data)
            if (earlier and not options.force and earlier.submission_sha256 == digest
                    and earlier.source_sha256 == source_sha[assignment]):
                log(f"[grade] {student}/{assignment}: unchanged since {earlier.graded_at}; kept ({earlier.status}, {earlier.score:g})")
                continue
            received = out / "received" / student / assignment
            if received.exists():
                shutil.rmtree(received)
            received.mkdir(parents=True)
            (received / Path(cand.origin.split("!")[-1]).name).write_bytes(cand.data)
            lint = lint_notebook(cand.data, releases[assignment])
            row = Row(student, assignment, 0.0, max_scores[assignment], lint.status, "", repairs=lint.repairs,
                      submission_sha256=digest, source_sha256=source_sha[assignment], graded_at=now())
            messages = [note] if note else []
            if lint.status == "invalid":
                row.message = "; ".join(messages + lint.problems)
                graded = False
            else:
                status, score, cells, run_messages, seconds = _grade_one(out, cand, lint, options, log)
                n_graded += 1
                row.score, row.cells, row.seconds = score, cells, round(seconds, 1)
                row.status = status if status != "graded" else lint.status
                if lint.repairs:
                    messages.append(f"{len(lint.repairs)} repair(s): " + "; ".join(lint.repairs))
                row.message = "; ".join(messages + run_messages)
                graded = status in ("graded", "timeout") or bool(cells)
            rows[key] = row
            _write_feedback(out, row, "", graded)
            _save(out, rows)
            log(f"[grade] {student}/{assignment}: {row.status} {row.score:g}/{row.max_score:g}"
                + (f" in {row.seconds:.0f} s" if row.seconds else "") + (f": {row.message}" if row.message else ""))
    _save(out, rows)
    summary = summary_markdown(rows)
    (out / "summary.md").write_text(summary)
    wall = time.monotonic() - start
    print(summary)
    print(f"[grade] {n_graded} notebook(s) autograded in {wall:.0f} s"
          + (f" ({wall / n_graded:.0f} s per notebook)" if n_graded else "")
          + f"; grades: {out / 'grades.csv'}; feedback: {out / 'feedback'}; repair logs: {out / 'repairs'}")
    return rows
