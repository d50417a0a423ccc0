"""Finding a class's submissions: folders and zips, the latest of several, never the originals.

Everything in a submissions folder is hostile input: a student chooses every name, date, size
and byte in it. :func:`collect_submissions` reads it under these rules, and turns whatever it
cannot use into a reason (the submission is graded ``invalid``), never into an exception that
stops the run:

* **Layout.** A folder laid out as ``<student>/<assignment>/<notebook>.ipynb`` (an optional
  nbgrader ``timestamp.txt`` next to the notebook, or a flat ``<student>/<assignment>.ipynb``),
  and/or one zip per student. Every candidate notebook is read into memory; the originals are
  only read.
* **Every name is a student.** A folder's or zip's name, whatever it holds (spaces, accents,
  another script, 255 characters, bytes that are not UTF-8), is the student's name
  (:func:`~raydata_grader.student_names.student_name`); the grader files their work under a
  short key of it (:func:`~raydata_grader.student_names.student_key`). Two names with one key
  are both refused. A file directly in the submissions folder is refused as a student of its
  own name. Only hidden entries (``.DS_Store``) and ``__MACOSX`` are passed over.
* **Nothing handed in is dropped.** A notebook outside an assignment folder (a mistyped
  ``data9/``, next to the folders), another folder or file, in a folder or a zip, is recorded
  as a :class:`Stray` (notebooks read within the same limits), which
  :func:`raydata_grader.strays.place_strays` turns into rows that say what was found.
* **A zip's identity is its file name.** ``<student>.zip`` is student ``<student>``. Inside it,
  either ``<assignment>/...`` (or ``<assignment>.ipynb``) at the top, or one top folder named
  like the zip's stem, which is stripped. A single top folder that holds another student's
  assignment folders (``alice.zip`` holding ``bob/data01/data01.ipynb``) makes the zip invalid
  for ``alice``; it never becomes bob's. Members with an absolute path or a ``..`` are skipped
  with a note.
* **Symbolic links are rejected, never followed**: a linked student folder, assignment folder,
  notebook, ``timestamp.txt`` or zip, and zip members that are links (Unix mode ``S_IFLNK`` in
  ``external_attr >> 16``). Decisions use ``lstat`` (``O_NOFOLLOW`` when opening), never a
  check that follows links.
* **Sizes are checked before anything is read or unpacked**: a notebook over
  :data:`MAX_NOTEBOOK_BYTES` is refused from its ``stat``; a zip over :data:`MAX_ZIP_BYTES` is
  refused unopened; a zip is refused when its central directory says it has more than
  :data:`MAX_ZIP_MEMBERS` members, a notebook member over :data:`MAX_NOTEBOOK_BYTES`, more
  than :data:`MAX_ZIP_UNPACKED_BYTES` in all, or a member over :data:`ZIP_RATIO_CHECK_BYTES`
  that compresses more than :data:`MAX_ZIP_RATIO` to 1 (a zip bomb). Reading never takes more
  than the limit + 1 bytes, whatever a header says.
* **Dates inside archives are ignored**: a zip entry's date and a ``timestamp.txt`` inside a
  zip are neither used to choose nor passed on to nbgrader. A folder's ``timestamp.txt`` (not
  in an archive) is. :func:`choose` picks the one to grade when a student submitted several:
  the latest by a folder's ``timestamp.txt``, else the file's modification time on disk (the
  notebook's, or the zip's for a zip member); then the exact name ``<assignment>.ipynb``; then
  the last found.

Examples:
    >>> import tempfile, pathlib
    >>> scratch = tempfile.TemporaryDirectory()
    >>> root = pathlib.Path(scratch.name)
    >>> (root / "amy" / "data01").mkdir(parents=True)
    >>> _ = (root / "amy" / "data01" / "data01.ipynb").write_text("{}")
    >>> (root / "bob").symlink_to(root / "amy")
    >>> (root / "José García" / "data01").mkdir(parents=True)
    >>> _ = (root / "José García" / "data01" / "data01.ipynb").write_text("{}")
    >>> found, students, empty, notes = collect_submissions(root, ("data01",))
    >>> sorted(found), sorted(students)
    ([('José García', 'data01'), ('amy', 'data01')], ['José García', 'amy', 'bob'])
    >>> empty[("bob", "*")].startswith("the folder 'bob' is a symbolic link")
    True
    >>> scratch.cleanup()
"""

from __future__ import annotations

import os
import stat
from datetime import datetime, timezone
from pathlib import Path

from raydata_grader.submission_files import (  # noqa: F401  (the limits are part of this module's interface)
    MAX_NOTEBOOK_BYTES,
    MAX_ZIP_BYTES,
    MAX_ZIP_MEMBERS,
    MAX_ZIP_RATIO,
    MAX_ZIP_UNPACKED_BYTES,
    Candidate,
    Stray,
    Unusable,
    MAX_FOLDER_DEPTH,
    MAX_FOLDER_ENTRIES,
    MAX_NOTEBOOKS_PER_ASSIGNMENT,
    MAX_STRAY_NOTEBOOKS,
    MAX_STRAYS_LISTED,
    MAX_TIMESTAMP_BYTES,
    _AGAIN,
    _Refused,
    _entries,
    _StrayReader,
    _walk,
    _mtime,
    _parse_timestamp,
    _read_file,
    _readable_name,
    _say,
    _skip,
    _why,
)
from raydata_grader.student_names import PLAIN_ID, student_key, student_name
from raydata_grader.submission_zips import scan_zip

__all__ = [
    "STUDENT_ID",
    "MAX_NOTEBOOK_BYTES",
    "MAX_ZIP_BYTES",
    "MAX_ZIP_UNPACKED_BYTES",
    "MAX_ZIP_MEMBERS",
    "MAX_ZIP_RATIO",
    "Candidate",
    "Stray",
    "Unusable",
    "collect_submissions",
    "choose",
]

#: A plain id (ASCII letters, digits, ``_.@+-``): an assignment id, and a student name that is its
#: own folder key (:mod:`raydata_grader.student_names`). Any other student name is kept too.
STUDENT_ID = PLAIN_ID


def collect_submissions(folder: str | os.PathLike, known: tuple[str, ...]) -> tuple[
        dict[tuple[str, str], list[Candidate]], set[str], Unusable, list[str]]:
    """Find every submitted notebook under ``folder``, under the rules of this module.

    Nothing in ``folder`` makes this raise: an entry that can't be used (a symlink, a corrupt,
    oversized or unreadable file, a zip naming another student, ...) becomes a reason in
    ``empty`` when its student id is known, else a note; the scan goes on.

    Args:
        folder: a folder of ``<student>/`` folders and/or ``<student>.zip`` files.
        known: the course's assignment ids.

    Returns:
        ``(candidates, students, empty, notes)``: the notebooks per ``(student, assignment)``;
        every student id seen; an :class:`Unusable` dict of ``(student, assignment)`` (or
        ``(student, "*")`` when the assignment is unknown, e.g. a corrupt zip) → what was wrong:
        folders that held no notebook (with what they held), and refused submissions (keys in
        ``empty.invalid``); and notes for the instructor about entries skipped or refused.

    Raises:
        FileNotFoundError: if ``folder`` is not a folder.
    """
    root = Path(folder)
    if not root.is_dir():  # the instructor's own argument: following a link here is fine
        raise FileNotFoundError(f"{root} is not a folder of submissions (expected <student>/<assignment>/*.ipynb or <student>.zip files)")
    found: dict[tuple[str, str], list[Candidate]] = {}
    students: set[str] = set()
    empty = Unusable()
    notes: list[str] = []

    def refuse(student: str, assignment: str, reason: str) -> None:
        key = (student, assignment)
        students.add(student)
        if key in empty.invalid:
            if reason not in empty[key]:
                empty[key] += "; " + reason
        else:
            empty[key] = reason
            empty.invalid.add(key)
        notes.append(f"{student}: refused: {reason}")

    def add(cand: Candidate) -> None:
        found.setdefault((cand.student, cand.assignment), []).append(cand)

    try:
        entries = _entries(root)
    except OSError as exc:
        return found, students, empty, [f"could not list {root} ({_why(exc)}): nothing was collected"]
    for entry in entries:
        name = entry.name
        if _skip(name):
            continue
        is_zip = name.lower().endswith(".zip") and len(name) > 4
        student = student_name(name[:-4] if is_zip else name)
        try:
            st = os.lstat(entry.path)
            if stat.S_ISLNK(st.st_mode):
                what = "zip file" if is_zip else "folder"
                refuse(student, "*", f"the {what} {_say(name)} is a symbolic link, which the grader does not "
                                     f"follow: submit the {what} itself, not a link to it")
            elif stat.S_ISDIR(st.st_mode) and not is_zip:
                students.add(student)
                _scan_student(Path(entry.path), student, known, add, refuse, empty, notes)
            elif is_zip:
                students.add(student)
                scan_zip(Path(entry.path), student, known, add, refuse, empty, notes)
            else:
                refuse(student, "*", _loose_file(name, known))
        except _Refused as exc:
            refuse(student, "*", exc.args[0])
        except Exception as exc:  # anything else about this one entry: refuse it, go on
            refuse(student, "*", f"{_say(name)} could not be read ({_why(exc)}): {_AGAIN}")
    _refuse_shared_keys(students, refuse)
    return found, students, empty, notes


def _loose_file(name: str, known) -> str:
    """Why a file directly in the submissions folder is not graded, and what to do."""
    first = known[0] if known else "data01"
    example = f", e.g. {student_name(name[:-6])[:40]}/{first}/{first}.ipynb" if name.endswith(".ipynb") else ""
    return (f"{_say(name)} is a file directly in the submissions folder, where the grader reads one folder "
            f"per student (<student>/<assignment>/<assignment>.ipynb) or one zip (<student>.zip): put a "
            f"student's notebook in their folder{example}")


def _refuse_shared_keys(students: set[str], refuse) -> None:
    """Refuse every student whose folder key (:func:`student_key`) another name also has: their
    files would land in one folder. With 64 bits of SHA-256 in a key, a class never meets one."""
    owners: dict[str, list[str]] = {}
    for student in sorted(students):
        owners.setdefault(student_key(student), []).append(student)
    for key, names in owners.items():
        if len(names) > 1:
            for student in names:
                refuse(student, "*", f"the grader files this student under {key!r}, and so it would "
                                     f"{', '.join(_say(n, 40) for n in names if n != student)}: rename one folder")


def _scan_student(folder: Path, student: str, known, add, refuse, empty: Unusable, notes: list[str]) -> None:
    try:
        subs = _entries(folder)
    except OSError as exc:
        raise _Refused(f"the folder {_say(student)} could not be listed ({_why(exc)}): {_AGAIN}") from None
    strays = _StrayReader(student, known, empty)
    for sub in subs:
        if _skip(sub.name):
            continue
        shown = f"{student}/{sub.name}"
        assignment = None
        try:
            st = os.lstat(sub.path)
            if sub.name.endswith(".ipynb") and sub.name[:-6] in known:  # <student>/<id>.ipynb
                assignment = sub.name[:-6]
                data, st = _read_file(Path(sub.path), _say(shown), "notebook", MAX_NOTEBOOK_BYTES)
                add(Candidate(student, assignment, sub.path, data, _mtime(st), None, "file date"))
            elif sub.name in known:
                assignment = sub.name
                if stat.S_ISLNK(st.st_mode):
                    raise _Refused(f"the {assignment} folder ({_say(shown)}) is a symbolic link, which the grader "
                                   f"does not follow: submit the folder itself, not a link to it")
                if stat.S_ISDIR(st.st_mode):
                    _scan_assignment(Path(sub.path), student, assignment, add, empty, notes)
                else:
                    strays.other(shown, f"a file named like the {assignment} folder")
            elif stat.S_ISLNK(st.st_mode):
                notes.append(f"{student}: skipped {_say(sub.name)} (a symbolic link, never followed)")
            elif stat.S_ISDIR(st.st_mode):
                notes.append(f"{student}: {_say(sub.name)} is not a course assignment; looking for notebooks in it")
                strays.folder(Path(sub.path), shown, sub.name)
            elif sub.name.endswith(".ipynb"):
                strays.notebook(Path(sub.path), shown, "not in an assignment folder")
            else:
                strays.other(shown, "not a notebook in an assignment folder")
        except _Refused as exc:
            refuse(student, assignment or "*", exc.args[0])
        except Exception as exc:
            refuse(student, assignment or "*", f"{_say(shown)} could not be read ({_why(exc)}): {_AGAIN}")
    strays.close()


def _scan_assignment(folder: Path, student: str, assignment: str, add, empty: Unusable, notes: list[str]) -> None:
    """Every notebook under ``<student>/<assignment>/``, with the folder's ``timestamp.txt``."""
    base = f"{student}/{assignment}"
    stamp_text, stamp = None, None
    stamp_path = folder / "timestamp.txt"
    try:
        os.lstat(stamp_path)
    except FileNotFoundError:
        pass
    else:
        try:
            raw, _ = _read_file(stamp_path, _say(f"{base}/timestamp.txt"), "timestamp.txt", MAX_TIMESTAMP_BYTES)
        except _Refused as exc:
            if not exc.too_big:
                raise
            notes.append(f"{student}: ignored {base}/timestamp.txt (over {MAX_TIMESTAMP_BYTES} bytes)")
        else:
            text = raw.decode("utf-8", "replace").strip()
            stamp = _parse_timestamp(text)
            if stamp is None:
                notes.append(f"{student}: ignored {base}/timestamp.txt (not a date: {_say(text, 60)})")
            elif len(text) <= 100 and text.isprintable():
                stamp_text = text

    linked: list[str] = []
    notebooks, held, bad_names = _walk(folder, base, assignment, f"{assignment}/{assignment}.ipynb", linked)
    notes.extend(f"{student}: skipped {_say(shown)} (a symbolic link, never followed)" for shown in linked)
    if bad_names:
        raise _Refused(f"{_say(bad_names[0])} has a file name that is not valid text (undecodable bytes or control "
                       f"characters): rename it {assignment}.ipynb and {_AGAIN}")
    if len(notebooks) > MAX_NOTEBOOKS_PER_ASSIGNMENT:
        raise _Refused(f"the {assignment} folder holds {len(notebooks)} notebooks, more than the "
                       f"{MAX_NOTEBOOKS_PER_ASSIGNMENT} the grader looks at: submit only {assignment}.ipynb")
    readable = []
    for path, shown in sorted(notebooks):
        data, st = _read_file(Path(path), _say(shown), "notebook", MAX_NOTEBOOK_BYTES)
        readable.append(Candidate(student, assignment, path, data, stamp or _mtime(st), stamp_text,
                                  "timestamp.txt" if stamp else "file date"))
    for cand in readable:  # all or nothing: a refused notebook refuses the folder
        add(cand)
    if not readable:
        listed = ", ".join(_say(n, 40) if not _readable_name(n) else n for n in sorted(held)[:10])
        more = f" and {len(held) - 10} more" if len(held) > 10 else ""
        empty.setdefault((student, assignment), f"the {assignment} folder holds no .ipynb file"
                         + (f" (only {listed}{more})" if held else " (it is empty)"))


def choose(cands: list[Candidate]) -> tuple[Candidate, str]:
    """The submission to grade among one student's candidates for one assignment.

    Ranked by: the latest ``timestamp`` (a folder's ``timestamp.txt``, else the file's
    modification time on disk), then the exact file name ``<assignment>.ipynb``, then the last
    found.

    Args:
        cands: at least one :class:`Candidate`, as :func:`collect_submissions` found them.

    Returns:
        ``(chosen, note)``: the candidate, and a note for the student naming what was graded
        and what was ignored (empty when there was only one).

    Raises:
        IndexError: if ``cands`` is empty.
    """
    def key(item):
        i, c = item
        exact = Path(c.origin.split("!")[-1]).name == f"{c.assignment}.ipynb"
        return (c.timestamp or datetime.min.replace(tzinfo=timezone.utc), exact, i)

    if not cands:
        raise IndexError("choose() needs at least one candidate")
    ranked = sorted(enumerate(cands), key=key)
    chosen = ranked[-1][1]
    if len(cands) == 1:
        return chosen, ""
    others = [c for _, c in ranked[:-1]]

    def when(c):
        if not c.timestamp:
            return "no date"
        text = c.timestamp.strftime("%Y-%m-%d %H:%M UTC")
        return f"{text}, {c.timestamp_from}" if c.timestamp_from else text
    note = (f"{len(cands)} submissions found: graded the latest, {_short(chosen.origin)} ({when(chosen)}), "
            "ignored " + ", ".join(f"{_short(c.origin)} ({when(c)})" for c in others))
    return chosen, note


def _short(origin: str) -> str:
    path, _, member = origin.partition("!")
    return f"{Path(path).name}!{member}" if member else "/".join(Path(path).parts[-3:])
