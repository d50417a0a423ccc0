"""Student names as a class submits them, and the folder key each one is filed under.

A student's name is the name of their folder or zip in the submissions folder (``José García``,
``李雷 Li``, ``ann lee`` for ``ann lee.zip``, an id of 250 characters): the grader keeps it as it
is in ``grades.csv``, ``grades.json``, the summary and the feedback pages. Every path the grader
writes for a student (``received/``, ``submitted/``, ``autograded/``, ``work/``, ``feedback/``,
``notes/``, ``repairs/``) and the id nbgrader's gradebook knows them by is the student's *key*,
:func:`student_key`:

* a name that is already a plain id (:data:`PLAIN_ID`: ASCII letters, digits and ``_.@+-``,
  starting with a letter or digit) of at most :data:`MAX_PLAIN_KEY_CHARS` characters is its
  own key, so the folders of such students are named as before;
* any other name gets a readable part (accents dropped, every other run of characters a
  ``-``, at most :data:`MAX_READABLE_CHARS`; ``student`` when nothing is left, as for a name
  in another script) and ``~`` and 16 hex digits of the SHA-256 of the name's UTF-8 bytes.

Keys are deterministic (the same name gets the same key in every run) and at most
:data:`MAX_KEY_CHARS` characters. No plain id contains ``~``, so a plain id is never another
student's key, and two names share a key only when 64 bits of SHA-256 collide. Names are
compared after Unicode NFC normalisation (a zip made on macOS spells ``é`` as ``e`` and a
combining accent), so one name spelled both ways is one student.

Examples:
    >>> student_key("amy")
    'amy'
    >>> student_key("José García")
    'Jose-Garcia~978edf99a5ad71c4'
    >>> student_key("李雷 Li")[:3], len(student_key("x" * 255))
    ('Li~', 81)
    >>> student_name(b"caf\\xe9".decode("utf-8", "surrogateescape"))
    'caf\\\\xe9'
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["PLAIN_ID", "MAX_PLAIN_KEY_CHARS", "MAX_READABLE_CHARS", "MAX_KEY_CHARS", "MAX_NAME_CHARS",
           "student_name", "student_key", "name_problem"]

#: A name that can be its own key: the ids the grader has always accepted.
PLAIN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]*$")
#: Longest plain id used as its own key (longer ones are hashed, so every path stays short).
MAX_PLAIN_KEY_CHARS = 64
#: Longest readable part of a hashed key.
MAX_READABLE_CHARS = 64
#: Longest key: a readable part, ``~`` and 16 hex digits.
MAX_KEY_CHARS = MAX_READABLE_CHARS + 1 + 16
#: Longest name a record may hold (a file name is at most 255 bytes; escaped, at most 4 times that).
MAX_NAME_CHARS = 1024

_OTHER = re.compile(r"[^A-Za-z0-9_.@+-]+")


def student_name(raw: str) -> str:
    """The name of the student whose folder or zip is named ``raw`` (without ``.zip``), as text.

    NFC-normalised; bytes that are not UTF-8 (``os.fsdecode`` gives them as lone surrogates)
    are written ``\\xNN`` and control characters ``\\xNN``/``\\uNNNN``, so the name can be
    printed, written as UTF-8 and shown on one line. Two different folder names can give the
    same text (a folder literally named ``caf\\xe9`` and one whose name holds the byte 0xE9):
    they are then one student, as ``amy/`` and ``amy.zip`` are.

    Args:
        raw: a file name as Python lists it (``str``, undecodable bytes as surrogates).

    Returns:
        The name, never empty (an empty ``raw`` gives ``'""'``).
    """
    data = raw.encode("utf-8", "surrogateescape") if raw else b""
    text = data.decode("utf-8", "backslashreplace")
    text = unicodedata.normalize("NFC", text)
    text = "".join(ch if ch.isprintable() or ch == " " else _escape(ch) for ch in text)
    return text or '""'


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def student_key(name: str) -> str:
    """The folder key of the student ``name``: the name itself when it is a short plain id, else
    a readable part, ``~`` and 16 hex digits of its SHA-256 (see the module's docstring).

    Args:
        name: a student's name (:func:`student_name`).

    Returns:
        A key of at most :data:`MAX_KEY_CHARS` characters, all of them ASCII letters, digits or
        ``_.@+-~``, that does not start with ``.``, ``-`` or ``~``.
    """
    if PLAIN_ID.match(name) and len(name) <= MAX_PLAIN_KEY_CHARS:
        return name
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    readable = _OTHER.sub("-", folded).strip("-.")[:MAX_READABLE_CHARS].rstrip("-.") or "student"
    if not readable[0].isalnum():
        readable = "s" + readable[:MAX_READABLE_CHARS - 1]
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}~{digest}"


def name_problem(name) -> str | None:
    """Why ``name`` cannot be a student's name in a record, or None when it can.

    A name is text of 1 to :data:`MAX_NAME_CHARS` printable characters (spaces allowed), with
    no ``/``, no lone surrogate, and not ``.`` or ``..``: what :func:`student_name` makes of a
    folder name. Anything else (``../a``, a name with a line break, a number) was not written
    by this grader.
    """
    if not isinstance(name, str):
        return f"it is {type(name).__name__}, not text"
    if not name or len(name) > MAX_NAME_CHARS:
        return f"it has {len(name)} characters (1 to {MAX_NAME_CHARS} are allowed)"
    if name in (".", "..") or "/" in name:
        return "it is a path, not a name"
    if any(not (ch.isprintable() or ch == " ") or "\ud800" <= ch <= "\udfff" for ch in name):
        return "it holds control characters or undecodable bytes"
    return None
