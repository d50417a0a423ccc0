"""Finding a class's submissions: folders and zips, the latest of several, never the originals.

:func:`collect_submissions` takes a folder laid out as ``<student>/<assignment>/<notebook>.ipynb``
(an optional nbgrader ``timestamp.txt`` next to the notebook) or holding one zip per student
(``<student>.zip`` with ``<assignment>/...`` inside, or any zip whose single top-level folder
is the student id), and returns every candidate notebook by student and assignment, read
into memory; the originals are only read. :func:`choose` picks the one to grade when a
student submitted twice: the latest ``timestamp.txt`` (else the zip entry's date).
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["STUDENT_ID", "Candidate", "collect_submissions", "choose"]

#: What a student id may look like (it names folders and files of the grading run).
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]*$")


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


def choose(cands: list[Candidate]) -> tuple[Candidate, str]:
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
