"""A student's zip, read within limits: its central directory checked before anything is unpacked.

A zip's identity is its file name (``<student>.zip``); inside it, either ``<assignment>/...``
(or ``<assignment>.ipynb``) at the top, or one top folder named after the student, which is
stripped. A single top folder that holds another student's assignment folders
(``alice.zip`` holding ``bob/data01/data01.ipynb``) makes the zip invalid for ``alice``; it
never becomes bob's. Its members are checked from the central directory first (count, sizes,
compression ratios and methods), never more than a limit + 1 bytes is unpacked, links are
refused and never followed, and dates inside the archive are ignored. Notebooks outside the
assignment folders are read within the same limits and recorded as :class:`Stray` entries.
The limits are :mod:`raydata_grader.submission_files`'s.
"""

from __future__ import annotations

import os
import re
import stat
import zipfile
from pathlib import Path

from raydata_grader.student_names import student_name
from raydata_grader.submission_files import (
    _AGAIN,
    _CLEAR,
    _check_caps,
    MAX_NOTEBOOK_BYTES,
    MAX_NOTEBOOKS_PER_ASSIGNMENT,
    MAX_STRAY_NOTEBOOKS,
    MAX_STRAYS_LISTED,
    MAX_ZIP_BYTES,
    MAX_ZIP_DIRECTORY_BYTES,
    MAX_ZIP_MEMBERS,
    MAX_ZIP_RATIO,
    MAX_ZIP_UNPACKED_BYTES,
    ZIP_RATIO_CHECK_BYTES,
    Candidate,
    Stray,
    Unusable,
    _mib,
    _mtime,
    _open_regular,
    _read_capped,
    _Refused,
    _readable_name,
    _say,
    _skip,
    _why,
)

__all__ = ["scan_zip"]

_ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}


def _member_parts(name: str) -> tuple[str, ...] | None:
    """A zip member's path parts, or None when it is absolute or climbs out with ``..``."""
    norm = name.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:", norm):
        return None
    parts = tuple(p for p in norm.split("/") if p not in ("", "."))
    if ".." in parts:
        return None
    return parts


def scan_zip(path: Path, student: str, known, add, refuse, empty: Unusable, notes: list[str]) -> None:
    """Read the zip ``path`` of ``student``: ``add`` each notebook of an assignment as a
    :class:`Candidate`, ``refuse(student, assignment, reason)`` what cannot be used, and record in
    ``empty`` the assignment folders without a notebook and the strays.

    Raises:
        _Refused: when the whole zip cannot be used (not a zip, too large, too many members, a
            zip bomb, another student's folder), with the reason for the student.
    """
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
        if student_name(top) == student:
            strip = 1
        elif top not in known and any(len(p) > 2 and p[1] in known for _, p in files):  # <someone>/<assignment>/...
            raise _Refused(f"the zip's folder {_say(top)} is not the student id {_say(student)} of its file name "
                           f"{shown}: a zip is graded as the student it is named after; put your assignment "
                           f"folders (e.g. {known[0] if known else 'data01'}/) at the top of {_say(name)}, or "
                           f"inside one folder named {_say(student)}")

    by_assignment: dict[str, list[tuple[zipfile.ZipInfo, tuple[str, ...]]]] = {}
    strays: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] = []
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
            if not info.is_dir():
                strays.append((info, parts))
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
    _zip_strays(archive, strays, student, name, known, empty)


def _zip_strays(archive: zipfile.ZipFile, members, student: str, name: str, known, empty: Unusable) -> None:
    """Record the zip's files outside its assignment folders as :class:`Stray` entries: its
    notebooks read (within the limits, at most :data:`MAX_STRAY_NOTEBOOKS`), its other files and
    folders named (at most :data:`MAX_STRAYS_LISTED`)."""
    shown = _say(name)
    notebooks = [(i, p) for i, p in members if p[-1].endswith(".ipynb")]
    others: list[str] = []
    for _, parts in members:
        if not parts[-1].endswith(".ipynb"):
            label = f"{parts[0]}/" if len(parts) > 1 else parts[0]
            if label not in others:
                others.append(label)
    for count, (info, parts) in enumerate(notebooks):
        where = f"no assignment {_say(parts[0], 40)}" if len(parts) > 1 else "not in an assignment folder"
        named = parts[-1][:-6] if parts[-1][:-6] in known else None
        data, why = None, where
        if count >= MAX_STRAY_NOTEBOOKS:
            why = f"{where} (not read: more than {MAX_STRAY_NOTEBOOKS} notebooks outside assignment folders)"
        else:
            try:
                data = _read_member(archive, info, shown)
            except _Refused as exc:
                why = f"{where}; and {exc.args[0]}"
            except Exception as exc:
                why = f"{where}; and it could not be unpacked ({_why(exc)})"
        empty.strays.append(Stray(student, f"{name}: {info.filename}", why, data, named, name))
    for label in others[:MAX_STRAYS_LISTED]:
        what = "no assignment" if label.endswith("/") else "not a notebook in an assignment folder"
        empty.strays.append(Stray(student, f"{name}: {label}",
                                  f"{what} {_say(label[:-1], 40)}" if label.endswith("/") else what, None, None, name))
    if len(others) > MAX_STRAYS_LISTED:
        empty.strays.append(Stray(student, f"{name}: {len(others) - MAX_STRAYS_LISTED} more files",
                                  "not in an assignment folder", None, None, name))


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
    _check_caps(data, f"{shown}: {member}")
    return data


