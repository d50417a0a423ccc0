"""What a submissions folder holds, read within limits: files, folders and zips a student chose.

Every name, size, date and byte here comes from a student, so nothing is trusted: a file is
opened without following links (``O_NOFOLLOW``) and checked with ``fstat`` before it is read;
no read takes more than its limit + 1 bytes, whatever a header says; a zip's central
directory is checked (members, sizes, compression ratios, methods) before anything in it is
unpacked. What cannot be used raises :class:`_Refused` with a reason for the student, which
:mod:`raydata_grader.intake` turns into an ``invalid`` row. The limits are this module's
constants, with their units in their names. A notebook found becomes a :class:`Candidate`;
what cannot be graded, an entry of :class:`Unusable`.
"""

from __future__ import annotations

import os
import re
import stat
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from raydata_course.units import MiB

__all__ = [
    "Candidate",
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
#: Most entries walked in one assignment folder, and how deep.
MAX_FOLDER_ENTRIES = 10_000
MAX_FOLDER_DEPTH = 16

_READ_CHUNK_BYTES = 1 * MiB
_ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
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


class Unusable(dict):
    """``(student, assignment)`` (or ``(student, "*")``) → why nothing there can be graded.

    A plain dict to code that does not know better. :attr:`invalid` holds the keys whose
    reason is a *refused* submission (a symlink, a corrupt or oversized file, a zip naming
    another student: grade ``invalid``) rather than a folder with no notebook in it
    (``missing``). A ``(student, "*")`` key is always in :attr:`invalid`.
    """

    def __init__(self):
        super().__init__()
        self.invalid: set[tuple[str, str]] = set()


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
    fd, st = _open_regular(path, shown, what, max_bytes)
    try:
        data = _read_capped(lambda n: os.read(fd, n), max_bytes)
    except OSError as exc:
        raise _Refused(f"{shown} could not be read ({_why(exc)}): {_AGAIN}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise _Refused(f"{shown} grew past the {_mib(max_bytes)} limit for a {what} while it was being read: {_AGAIN}")
    return data, st


def _entries(path: Path) -> list[os.DirEntry]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


def _member_parts(name: str) -> tuple[str, ...] | None:
    """A zip member's path parts, or None when it is absolute or climbs out with ``..``."""
    norm = name.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:", norm):
        return None
    parts = tuple(p for p in norm.split("/") if p not in ("", "."))
    if ".." in parts:
        return None
    return parts


def _scan_zip(path: Path, student: str, known, add, refuse, empty: Unusable, notes: list[str]) -> None:
    name = path.name
    fd, st = _open_regular(path, _say(name), "zip file", MAX_ZIP_BYTES)
    when = _mtime(st)
    with os.fdopen(fd, "rb") as handle:
        try:
            end = zipfile._EndRecData(handle)  # the end record: member count and directory size, before parsing
        except Exception:
            end = None
        if end is None:
            raise _Refused(f"{_say(name)} is not a readable zip file (no zip directory at its end): make the zip "
                           f"again with your system's zip tool and {_AGAIN}")
        if end[zipfile._ECD_ENTRIES_TOTAL] > MAX_ZIP_MEMBERS:
            raise _Refused(f"{_say(name)} holds {end[zipfile._ECD_ENTRIES_TOTAL]:,} files, more than the "
                           f"{MAX_ZIP_MEMBERS:,} a submission may hold: zip only your assignment folders' notebooks")
        if end[zipfile._ECD_SIZE] > MAX_ZIP_DIRECTORY_BYTES:
            raise _Refused(f"{_say(name)} has a zip directory of {_mib(end[zipfile._ECD_SIZE])}, over the "
                           f"{_mib(MAX_ZIP_DIRECTORY_BYTES)} limit: zip only your assignment folders' notebooks")
        handle.seek(0)
        try:
            archive = zipfile.ZipFile(handle)
        except Exception as exc:
            raise _Refused(f"{_say(name)} is not a readable zip file ({_why(exc)}): make the zip again with your "
                           f"system's zip tool and {_AGAIN}") from None
        with archive:
            _read_zip(archive, path, student, when, known, add, refuse, empty, notes)


def _read_zip(archive: zipfile.ZipFile, path: Path, student: str, when, known, add, refuse,
              empty: Unusable, notes: list[str]) -> None:
    name = path.name
    infos = archive.infolist()
    shown = _say(name)
    if len(infos) > MAX_ZIP_MEMBERS:
        raise _Refused(f"{shown} holds {len(infos):,} files, more than the {MAX_ZIP_MEMBERS:,} a submission may "
                       "hold: zip only your assignment folders' notebooks")
    total = sum(i.file_size for i in infos)
    if total > MAX_ZIP_UNPACKED_BYTES:
        raise _Refused(f"{shown} would unpack to {_mib(total)}, over the {_mib(MAX_ZIP_UNPACKED_BYTES)} limit: "
                       "zip only your notebooks (no data files or outputs)")
    for info in infos:
        if info.file_size >= ZIP_RATIO_CHECK_BYTES and info.file_size > MAX_ZIP_RATIO * max(info.compress_size, 1):
            raise _Refused(f"{shown}: {_say(info.filename)} unpacks to {_mib(info.file_size)} from "
                           f"{info.compress_size:,} bytes, more than {MAX_ZIP_RATIO}:1 (a zip bomb?): zip only your "
                           f"notebooks, with their outputs cleared (Kernel > Restart Kernel and Clear Outputs of All "
                           f"Cells), and {_AGAIN}")

    members = []  # (info, parts) of the members that count
    for info in infos:
        parts = _member_parts(info.filename)
        if parts is None:
            notes.append(f"{student}: skipped member {_say(info.filename)} of {shown} (an absolute path or one "
                         "that climbs out with '..')")
            continue
        if not parts or any(_skip(p) for p in parts):
            continue
        members.append((info, parts))
    files = [(i, p) for i, p in members if not i.is_dir()]
    tops = {p[0] for _, p in members}
    strip = 0
    if len(tops) == 1 and files and all(len(p) > 1 for _, p in files):
        top = next(iter(tops))
        if top == student:
            strip = 1
        elif top not in known:
            raise _Refused(f"the zip's folder {_say(top)} is not the student id {_say(student)} of its file name "
                           f"{shown}: a zip is graded as the student it is named after; put your assignment "
                           f"folders (e.g. {known[0] if known else 'data01'}/) at the top of {student}.zip, or "
                           f"inside one folder named {student}")

    by_assignment: dict[str, list[tuple[zipfile.ZipInfo, tuple[str, ...]]]] = {}
    seen_folders: set[str] = set()
    skipped_folders: set[str] = set()
    linked: set[str] = set()  # assignments refused for a link in this zip
    for info, parts in members:
        parts = parts[strip:]
        if not parts:
            continue
        if len(parts) == 1 and parts[0].endswith(".ipynb") and parts[0][:-6] in known:
            assignment = parts[0][:-6]
        elif parts[0] in known:
            assignment = parts[0]
            seen_folders.add(assignment)
        else:
            assignment = None
        if stat.S_ISLNK(info.external_attr >> 16):  # never followed (nor unpacked): the submission is refused
            refuse(student, assignment or "*", _zip_link(shown, info.filename))
            linked.add(assignment or "*")
            continue
        if assignment is None:
            if len(parts) > 1 and parts[0] not in skipped_folders:
                skipped_folders.add(parts[0])
                notes.append(f"{student}: skipped folder {_say(parts[0])} in {shown} (not a course assignment)")
            continue
        if info.is_dir() or not parts[-1].endswith(".ipynb"):
            continue  # a timestamp.txt inside a zip is ignored, like every date inside an archive
        by_assignment.setdefault(assignment, []).append((info, parts))

    for assignment, items in sorted(by_assignment.items()):
        if assignment in linked:
            continue
        try:
            if len(items) > MAX_NOTEBOOKS_PER_ASSIGNMENT:
                raise _Refused(f"{shown} holds {len(items)} notebooks for {assignment}, more than the "
                               f"{MAX_NOTEBOOKS_PER_ASSIGNMENT} the grader looks at: zip only {assignment}.ipynb")
            cands = [Candidate(student, assignment, f"{path}!{info.filename}",
                               _read_member(archive, info, shown), when, None, "file date" if when else "")
                     for info, _ in items]
        except _Refused as exc:
            refuse(student, assignment, exc.args[0])
            continue
        except Exception as exc:
            refuse(student, assignment, f"{shown}: the {assignment} notebook could not be unpacked ({_why(exc)}): "
                                        f"make the zip again with your system's zip tool and {_AGAIN}")
            continue
        for cand in cands:
            add(cand)
    for assignment in sorted(seen_folders - set(by_assignment)):
        if (student, assignment) not in empty:
            empty[(student, assignment)] = f"the {assignment} folder in {name} holds no .ipynb file"


def _zip_link(shown: str, member: str) -> str:
    return (f"{shown}: {_say(member)} is a symbolic link inside the zip, which the grader does not follow: "
            f"zip the file itself, not a link to it, and {_AGAIN}")


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, shown: str) -> bytes:
    """A notebook member's bytes: its declared size checked first, never more than the limit + 1 read."""
    member = _say(info.filename)
    if not _readable_name(info.filename):
        raise _Refused(f"{shown}: the member {member} has a name that is not valid text (control characters): "
                       f"rename it and zip it again")
    if info.file_size > MAX_NOTEBOOK_BYTES:
        raise _Refused(f"{shown}: {member} is {_mib(info.file_size)}, over the {_mib(MAX_NOTEBOOK_BYTES)} limit for "
                       f"a notebook: {_CLEAR.replace('submit again', 'zip it again')}")
    if info.compress_type not in _ZIP_METHODS:
        raise _Refused(f"{shown}: {member} is compressed with zip method {info.compress_type}, which the grader "
                       f"does not unpack: make the zip with the standard (deflate) compression and {_AGAIN}")
    with archive.open(info) as stream:
        data = _read_capped(stream.read, MAX_NOTEBOOK_BYTES)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise _Refused(f"{shown}: {member} unpacks to more than its zip header says (over the "
                       f"{_mib(MAX_NOTEBOOK_BYTES)} limit): make the zip again and {_AGAIN}")
    return data


