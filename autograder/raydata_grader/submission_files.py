"""What a submissions folder holds, read within limits: files, folders and zips a student chose.

Every name, size, date and byte here comes from a student, so nothing is trusted: a file is
opened without following links (``O_NOFOLLOW``) and checked with ``fstat`` before it is read;
no read takes more than its limit + 1 bytes, whatever a header says; a zip's central
directory is checked (members, sizes, compression ratios, methods) before anything in it is
unpacked (:mod:`raydata_grader.submission_zips`). A notebook's bytes, once read, are checked
against the caps of :mod:`raydata_grader.notebook_caps` (JSON values, cells, attachments)
before anything parses them. What cannot be used raises :class:`_Refused` with a reason for
the student, which :mod:`raydata_grader.intake` turns into an ``invalid`` row. The limits are
this module's constants, with their units in their names. A notebook found becomes a
:class:`Candidate`; what cannot be graded, an entry of :class:`Unusable`; what was handed in
outside an assignment's folder, a :class:`Stray`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from raydata_course.units import MiB
from raydata_grader.notebook_caps import notebook_cap_problem

__all__ = [
    "Candidate",
    "Stray",
    "Unusable",
    "MAX_NOTEBOOK_BYTES",
    "MAX_ZIP_BYTES",
    "MAX_ZIP_UNPACKED_BYTES",
    "MAX_ZIP_MEMBERS",
    "MAX_ZIP_DIRECTORY_BYTES",
    "MAX_ZIP_RATIO",
    "ZIP_RATIO_CHECK_BYTES",
    "MAX_TIMESTAMP_BYTES",
    "MAX_NOTEBOOKS_PER_ASSIGNMENT",
    "MAX_FOLDER_ENTRIES",
    "MAX_FOLDER_DEPTH",
    "MAX_STRAY_NOTEBOOKS",
    "MAX_STRAYS_LISTED",
]

#: Largest notebook file read (a folder's file, or a zip member's unpacked size).
MAX_NOTEBOOK_BYTES = 20 * MiB
#: Largest zip file opened.
MAX_ZIP_BYTES = 200 * MiB
#: Largest total unpacked size of a zip's members, as its central directory states it.
MAX_ZIP_UNPACKED_BYTES = 200 * MiB
#: Most members (files and folders) a zip may hold.
MAX_ZIP_MEMBERS = 1_000
#: Largest central directory read (it lists the members; ~100 bytes each for honest zips).
MAX_ZIP_DIRECTORY_BYTES = 4 * MiB
#: Highest unpacked:packed ratio for a member over :data:`ZIP_RATIO_CHECK_BYTES` (zip bombs).
MAX_ZIP_RATIO = 200
#: Members at least this large (unpacked) must not compress more than :data:`MAX_ZIP_RATIO`.
ZIP_RATIO_CHECK_BYTES = 1 * MiB
#: Largest ``timestamp.txt`` read (a larger one is ignored).
MAX_TIMESTAMP_BYTES = 4096
#: Most notebooks one student may hand in for one assignment (folder or zip).
MAX_NOTEBOOKS_PER_ASSIGNMENT = 20
#: Most notebooks read from outside assignment folders, per student (to tell whose they are).
MAX_STRAY_NOTEBOOKS = 20
#: Most other stray files and folders named, per student (the rest are counted).
MAX_STRAYS_LISTED = 10
#: Most entries walked in one assignment folder, and how deep.
MAX_FOLDER_ENTRIES = 10_000
MAX_FOLDER_DEPTH = 16

_READ_CHUNK_BYTES = 1 * MiB
_AGAIN = "submit it again"
_CLEAR = ("clear the outputs (Kernel > Restart Kernel and Clear Outputs of All Cells), "
          "save, and submit again")


@dataclass
class Candidate:
    """One notebook found for a student and assignment.

    Attributes:
        student: student id.
        assignment: assignment id.
        origin: where it came from (a path, or ``zip-path!member``), for messages.
        data: the file's bytes.
        timestamp: the submission time used to choose between submissions, timezone-aware
            UTC: a folder's ``timestamp.txt``, else the file's modification time on disk (the
            zip's, for a zip member); None when unknown.
        timestamp_text: a folder's ``timestamp.txt`` text, passed to nbgrader unchanged; None
            for a zip member (dates inside archives are ignored) or when there is none.
        timestamp_from: where ``timestamp`` came from: ``"timestamp.txt"``,
            ``"file date"`` or ``""`` (unknown).
    """

    student: str
    assignment: str
    origin: str
    data: bytes
    timestamp: datetime | None = None
    timestamp_text: str | None = None
    timestamp_from: str = ""


@dataclass
class Stray:
    """Something a student handed in outside an assignment's folder: the intake cannot grade it
    where it is, and :mod:`raydata_grader.strays` decides what it means.

    Attributes:
        student: the student's name.
        shown: where it was, as the student would write it (``carol/data9/data01.ipynb``, or
            ``carol.zip: hw/data01.ipynb``), for messages.
        why: why it is not graded there (``no assignment 'data9'``), for messages.
        data: a notebook's bytes (read within the same limits as any notebook); None for a
            file that is not a notebook, a folder without one, or a notebook that was refused.
        named: the assignment its file name names (``data01`` for ``data01.ipynb``), or None.
        zip_name: the zip it was in, or None for a folder.
    """

    student: str
    shown: str
    why: str
    data: bytes | None = None
    named: str | None = None
    zip_name: str | None = None


class Unusable(dict):
    """``(student, assignment)`` (or ``(student, "*")``) → why nothing there can be graded.

    A plain dict to code that does not know better. :attr:`invalid` holds the keys whose
    reason is a *refused* submission (a symlink, a corrupt or oversized file, a zip naming
    another student: grade ``invalid``) rather than a folder with no notebook in it
    (``missing``). A ``(student, "*")`` key is always in :attr:`invalid`. :attr:`strays` holds
    what students handed in outside an assignment's folder (:class:`Stray`), for
    :func:`raydata_grader.strays.place_strays`.
    """

    def __init__(self):
        super().__init__()
        self.invalid: set[tuple[str, str]] = set()
        self.strays: list[Stray] = []


class _Refused(Exception):
    """This entry can't be used; ``args[0]`` says why, to the student; ``too_big`` when only its size is wrong."""

    def __init__(self, reason: str, too_big: bool = False):
        super().__init__(reason)
        self.too_big = too_big


def _parse_timestamp(text: str) -> datetime | None:
    from nbgrader.utils import parse_utc

    try:
        stamp = parse_utc(text.strip())
        return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp.astimezone(timezone.utc)
    except Exception:
        return None


def _mtime(st: os.stat_result) -> datetime | None:
    try:
        return datetime.fromtimestamp(st.st_mtime, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def _skip(part: str) -> bool:
    return part.startswith(".") or part in ("__MACOSX", "__pycache__")


def _say(text: str, limit: int = 80) -> str:
    """``text`` quoted for a message: escaped when not printable, clipped when long."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 4] + "...'"


def _readable_name(name: str) -> bool:
    """A name that is valid text (no undecodable bytes) and holds no control characters."""
    return bool(name) and name.isprintable() and not any("\udc80" <= ch <= "\udcff" for ch in name)


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "named pipe"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"), (stat.S_ISBLK, "device")):
        if test(mode):
            return name
    return "special file"


def _why(exc: BaseException) -> str:
    # an OSError's text names the file by its path in the instructor's submissions folder:
    # the message says which file already, so only the reason is kept
    text = (exc.strerror or "") if isinstance(exc, OSError) and exc.filename is not None else str(exc).strip()
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read_capped(read, cap: int) -> bytes:
    """Read with ``read(n)`` until EOF, never more than ``cap + 1`` bytes in all."""
    chunks, size = [], 0
    while size <= cap:
        chunk = read(min(_READ_CHUNK_BYTES, cap + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _open_regular(path: Path, shown: str, what: str, max_bytes: int) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading without following a link; refuse anything but a file under ``max_bytes``."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _Refused(f"{shown} is a symbolic link, which the grader does not follow: put the {what} itself "
                       f"there (a copy, not a link) and {_AGAIN}")
    if not stat.S_ISREG(st.st_mode):
        raise _Refused(f"{shown} is a {_kind(st.st_mode)}, not a file: put the {what} itself there and {_AGAIN}")
    if st.st_size > max_bytes:
        raise _Refused(f"{shown} is {_mib(st.st_size)}, over the {_mib(max_bytes)} limit for a {what}: "
                       + (_CLEAR if what == "notebook" else "submit only your notebooks (no data files or outputs)"),
                       too_big=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _Refused(f"{shown} could not be opened ({_why(exc)}): {_AGAIN}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:  # it changed since lstat
        os.close(fd)
        raise _Refused(f"{shown} changed while it was being read: {_AGAIN}")
    return fd, st


def _read_file(path: Path, shown: str, what: str, max_bytes: int) -> tuple[bytes, os.stat_result]:
    """A file's bytes and its ``fstat``, within ``max_bytes``; a ``"notebook"`` also within the caps on
    what it carries (:func:`_check_caps`). Raises :class:`_Refused` with the reason."""
    fd, st = _open_regular(path, shown, what, max_bytes)
    try:
        data = _read_capped(lambda n: os.read(fd, n), max_bytes)
    except OSError as exc:
        raise _Refused(f"{shown} could not be read ({_why(exc)}): {_AGAIN}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise _Refused(f"{shown} grew past the {_mib(max_bytes)} limit for a {what} while it was being read: {_AGAIN}")
    if what == "notebook":
        _check_caps(data, shown)
    return data, st


def _check_caps(data: bytes, shown: str) -> None:
    """Refuse a notebook whose bytes carry more than the grader takes (:func:`notebook_cap_problem`)."""
    problem = notebook_cap_problem(data)
    if problem:
        raise _Refused(f"{shown}: {problem}")


def _entries(path: Path) -> list[os.DirEntry]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


def _walk(folder: Path, base: str, label: str, hint: str, skipped: list[str]) -> tuple[
        list[tuple[str, str]], list[str], list[str]]:
    """The notebooks under ``folder`` (shown to the student as ``base``), within the limits.

    ``label`` names the folder in a refusal, ``hint`` is what to submit instead; the links
    skipped (never followed) are added to ``skipped``.

    Returns:
        ``(notebooks, held, bad_names)``: ``(path, shown)`` of every ``.ipynb`` file; the names
        directly in ``folder``; the notebooks whose names are not valid text.

    Raises:
        _Refused: for more than :data:`MAX_FOLDER_ENTRIES` entries, folders nested deeper than
            :data:`MAX_FOLDER_DEPTH`, a folder that cannot be listed, or a linked notebook or
            ``timestamp.txt``.
    """
    notebooks: list[tuple[str, str]] = []
    bad_names: list[str] = []
    held: list[str] = []
    walked = 0
    stack = [(folder, base, 0)]
    while stack:
        here, shown_here, depth = stack.pop()
        try:
            subs = _entries(here)
        except OSError as exc:
            raise _Refused(f"the folder {_say(shown_here)} could not be listed ({_why(exc)}): {_AGAIN}") from None
        for sub in subs:
            walked += 1
            if walked > MAX_FOLDER_ENTRIES:
                raise _Refused(f"the {label} folder holds more than {MAX_FOLDER_ENTRIES:,} files and folders: "
                               f"submit only your notebook ({hint})")
            if depth == 0:
                held.append(sub.name)
            if _skip(sub.name):
                continue
            shown = f"{shown_here}/{sub.name}"
            if sub.is_symlink():
                if sub.name.endswith(".ipynb") or sub.name == "timestamp.txt":
                    raise _Refused(f"{_say(shown)} is a symbolic link, which the grader does not follow: put the "
                                   f"file itself there (a copy, not a link) and {_AGAIN}")
                skipped.append(shown)
            elif sub.is_dir(follow_symlinks=False):
                if depth + 1 >= MAX_FOLDER_DEPTH:
                    raise _Refused(f"the {label} folder nests folders more than {MAX_FOLDER_DEPTH} deep: "
                                   f"submit only your notebook ({hint})")
                stack.append((Path(sub.path), shown, depth + 1))
            elif sub.name.endswith(".ipynb"):
                if not _readable_name(sub.name):
                    bad_names.append(shown)
                else:
                    notebooks.append((sub.path, shown))
    return notebooks, held, bad_names


class _StrayReader:
    """Records what a student's folder holds outside its assignment folders as :class:`Stray`
    entries: notebooks read within the limits (at most :data:`MAX_STRAY_NOTEBOOKS`), other
    files and folders named (at most :data:`MAX_STRAYS_LISTED`, the rest counted)."""

    def __init__(self, student: str, known, empty: Unusable):
        self.student, self.known, self.empty = student, known, empty
        self.read = 0
        self.others = 0

    def notebook(self, path: Path, shown: str, where: str) -> None:
        named = path.name[:-6] if path.name[:-6] in self.known else None
        data, why = None, where
        if self.read >= MAX_STRAY_NOTEBOOKS:
            why = f"{where} (not read: more than {MAX_STRAY_NOTEBOOKS} notebooks outside assignment folders)"
        else:
            self.read += 1
            try:
                data, _ = _read_file(path, _say(shown), "notebook", MAX_NOTEBOOK_BYTES)
            except _Refused as exc:
                why = f"{where}; and {exc.args[0]}"
        self.empty.strays.append(Stray(self.student, shown, why, data, named))

    def other(self, shown: str, why: str) -> None:
        self.others += 1
        if self.others <= MAX_STRAYS_LISTED:
            self.empty.strays.append(Stray(self.student, shown, why))

    def folder(self, path: Path, shown: str, name: str) -> None:
        where = f"no assignment {_say(name, 40)}"
        try:
            notebooks, held, bad_names = _walk(path, shown, _say(name, 40), "<assignment>/<assignment>.ipynb", [])
        except _Refused as exc:
            self.other(shown + "/", f"{where}; and {exc.args[0]}")
            return
        for bad in bad_names:
            self.other(bad, f"{where}; and its file name is not valid text")
        for nb_path, nb_shown in notebooks:
            self.notebook(Path(nb_path), nb_shown, where)
        if not notebooks and not bad_names:
            listed = ", ".join(_say(n, 40) for n in sorted(held)[:5]) or "nothing"
            self.other(shown + "/", f"{where}, and no notebook in it (it holds {listed})")

    def close(self) -> None:
        if self.others > MAX_STRAYS_LISTED:
            self.empty.strays.append(Stray(self.student, f"{self.student}/: {self.others - MAX_STRAYS_LISTED} "
                                                         "more files", "not in an assignment folder"))
