"""The grading run's records: one :class:`Row` per student and assignment, kept across runs.

Rows live in ``<out>/grades.json`` (with what a later run needs to skip unchanged work), and
are written out as ``grades.csv`` (student, assignment, score, max_score, status, message)
and one repair log per student (``repairs/<student>.md``). Files are replaced atomically.

Much of a row's text comes from a submission (the messages its code raised, what lint found
in it), so every file written from rows treats it as hostile: ``grades.csv`` guards against
formula injection (:func:`csv_cell`), markdown gets :func:`escape_markdown`, and
:func:`read_rows` refuses a ``grades.json`` whose shape is not the one :func:`save_rows` writes;
:func:`load_rows`, which a grading run uses, sets such a file or row aside and says so.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from raydata_grader.student_names import PLAIN_ID, name_problem, student_key

__all__ = ["STATUSES", "CSV_COLUMNS", "Row", "read_rows", "load_rows", "save_rows", "escape_markdown", "csv_cell"]

#: Every status a row of ``grades.csv`` can have.
STATUSES = ("graded", "repaired", "review", "timeout", "crashed", "missing", "invalid")
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
        cpu_seconds: CPU time of the autograde (the worker, its kernel and everything they
            waited for), in seconds.
        node: the host name of the machine that graded it.
        held: ``{grade_id: [points held, max_score]}``: points the judge passed that rest on a
            fact the kernel reported, held for an instructor's review because the notebook
            holds code that could forge such a fact (status ``review``; :mod:`raydata_grader.review`).
            Not in ``score`` until an instructor gives them.
        findings: the lines of the notebook that could forge a reported fact
            (:func:`raydata_grader.forging.find_forging`), one each, for the instructor.
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
    cpu_seconds: float = 0.0
    node: str = ""
    held: dict[str, list[float]] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The folder key of the row's student, which names every file of theirs the grader writes
        (:func:`raydata_grader.student_names.student_key`)."""
        return student_key(self.student)


#: Line breaks of any kind, with the blanks around them (a message is written on one line).
_LINE_BREAKS = re.compile(r"[ \t]*(?:\r\n|[\r\n\v\f\x1c-\x1e\x85\u2028\u2029])\s*")
#: Control characters other than line breaks (ANSI colour codes, NUL, ...), shown as ``\xNN``.
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f]")
#: Markdown's inline punctuation: code spans, emphasis, links and images, strikethrough.
_INLINE = re.compile(r"_+|[\\`*\[\]!~]")
#: What starts a block at the beginning of a line: a heading, a list item.
_BLOCK_START = re.compile(r"^(?:#|[-+]|(\d{1,9})([.)]))")


def _utf8_safe(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot encode) written as ``\\udXXX``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _escape_inline(match: re.Match) -> str:
    run = match.group(0)
    if run[0] != "_":
        return "\\" + run
    start, end = match.span()
    before = match.string[start - 1] if start else " "
    after = match.string[end] if end < len(match.string) else " "
    if before.isalnum() and after.isalnum():  # inside a word (grade_id): never emphasis in CommonMark
        return run
    return run.replace("_", "\\_")


def escape_markdown(text: str) -> str:
    r"""``text`` as Markdown that renders as that text, on one line: no markup, links or HTML.

    HTML's ``&``, ``<`` and ``>`` become entities (no raw HTML, no ``<...>`` links; a bare
    ``http(s)://`` URL may still be linked by a renderer that links them); Markdown's
    backslash, backticks, ``*``, ``[``, ``]``, ``!`` and ``~`` are backslash-escaped, and so
    are underscores that could start or end emphasis (those inside a word, as in a grade
    id, are left alone: they never do); a ``#``, ``-``, ``+`` or ``1.`` that would start a
    heading or a list is escaped. Line breaks become spaces, and the text is stripped, so it
    cannot start a block of its own (a heading, an indented code block, a table). Other
    control characters (ANSI colour codes) are shown as ``\xNN``, and lone surrogates as
    ``\udXXX``, so that the text can be written as UTF-8 and printed to a terminal. ``|`` is
    kept: on one line it cannot make a table, and ``markdown_table`` escapes it in cells.

    Args:
        text: any text (``str()`` of anything else).

    Returns:
        The escaped text.

    Examples:
        >>> print(escape_markdown('<script>alert(1)</script> & [x](javascript:alert(1))'))
        &lt;script&gt;alert(1)&lt;/script&gt; &amp; \[x\](javascript:alert(1))
        >>> print(escape_markdown("# *big* ![img](x.png) in `add_bands_hidden`\n    code"))
        \# \*big\* \!\[img\](x.png) in \`add_bands_hidden\` code
        >>> print(escape_markdown("1. _x_ | y\x1b[31m"))
        1\. \_x\_ | y\\x1b\[31m
    """
    text = _LINE_BREAKS.sub(" ", _utf8_safe(str(text))).replace("\t", " ").strip()
    text = _CONTROLS.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)
    text = _INLINE.sub(_escape_inline, html.escape(text, quote=False))
    return _BLOCK_START.sub(lambda m: f"{m.group(1)}\\{m.group(2)}" if m.group(1) else "\\" + m.group(0), text)


#: The first characters that make a spreadsheet read a cell as a formula (or a DDE command).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """``value`` made safe as a text cell of a CSV file a spreadsheet may open.

    A cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return would be read
    as a formula by Excel, LibreOffice or Google Sheets (``=HYPERLINK(...)`` in a message a
    student's code raised), so it gets a leading single quote ``'``, which spreadsheets show
    as a text marker. Lone surrogates (which UTF-8 cannot encode) are written as ``\\udXXX``.
    Only for text: write numbers as numbers.

    Examples:
        >>> print(csv_cell('=HYPERLINK("http://evil.example","click")'))
        '=HYPERLINK("http://evil.example","click")
        >>> csv_cell("graded"), csv_cell("-1 point")
        ('graded', "'-1 point")
    """
    value = _utf8_safe(str(value))
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def _bad(path: Path, what: str) -> ValueError:
    return ValueError(f"{path} is not a grades file this grader wrote: {what}. It is corrupt or was edited by "
                      f"hand: delete it and grade again with --force (every submission is then graded anew).")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: Longest assignment id a record may hold.
MAX_ASSIGNMENT_CHARS = 64


def _row_problem(item) -> str | None:
    """What is wrong with ``item`` as a row of ``grades.json`` (None: nothing)."""
    if not isinstance(item, dict):
        return f"it is a {type(item).__name__}, not an object"
    fields = {f.name: f for f in dataclasses.fields(Row)}
    unknown = sorted(str(k)[:40] for k in item if k not in fields)
    required = [n for n, f in fields.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in item]
    if unknown or missing:
        return f"it has unknown field(s) {unknown} or lacks {missing}"
    kinds = {"student": str, "assignment": str, "status": str, "message": str, "submission_sha256": str,
             "source_sha256": str, "graded_at": str, "node": str}
    for name, value in item.items():
        if name in ("score", "max_score", "seconds", "cpu_seconds"):
            ok = _is_number(value)
        elif name in ("repairs", "notes", "findings"):
            ok = isinstance(value, list) and all(isinstance(x, str) for x in value)
        elif name in ("cells", "held"):
            ok = isinstance(value, dict) and all(
                isinstance(v, list) and len(v) == 2 and all(_is_number(x) for x in v) for v in value.values())
        else:
            ok = isinstance(value, kinds.get(name, str))
        if not ok:
            return f"it has a {name} of the wrong type or shape ({str(value)[:80]!r})"
    why = name_problem(item["student"])
    if why:
        return f"it has student {item['student'][:80]!r}, which is not a student's name: {why}"
    if not PLAIN_ID.match(item["assignment"]) or len(item["assignment"]) > MAX_ASSIGNMENT_CHARS:
        return f"it has assignment {item['assignment'][:80]!r}, which is not a valid id"
    if item["status"] not in STATUSES:
        return f"it has status {item['status'][:80]!r}, not one of {list(STATUSES)}"
    return None


def _row_from_json(path: Path, index: int, item) -> Row:
    """One row of ``grades.json``, checked field by field; raises ``ValueError`` (:func:`_bad`)."""
    why = _row_problem(item)
    if why:
        raise _bad(path, f"row {index}: {why}")
    return Row(**item)


def read_rows(out: str | os.PathLike) -> dict[tuple[str, str], Row]:
    """The rows kept in ``<out>/grades.json`` (empty when there is none).

    Raises:
        ValueError: if the file is not JSON, or not in the shape :func:`save_rows` writes
            (``{"rows": [...]}``, every row with the fields of :class:`Row`, of their types, a
            valid student and assignment id, a status of :data:`STATUSES`). The message names
            the file and says what to do: delete it and grade again with ``--force``.
    """
    path = Path(out) / "grades.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_bytes())
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise _bad(path, f"it is not JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows", []), list):
        raise _bad(path, 'its top level is not {"rows": [...]}')
    rows = [_row_from_json(path, i, item) for i, item in enumerate(data.get("rows", []))]
    return {(r.student, r.assignment): r for r in rows}


def load_rows(out: str | os.PathLike) -> tuple[dict[tuple[str, str], Row], list[str]]:
    """The rows of ``<out>/grades.json`` that this grader can use, and a line for each it set aside.

    Unlike :func:`read_rows`, a record the grader cannot use never stops a run: a file that is
    not JSON in the shape :func:`save_rows` writes is renamed ``grades.json.unusable-<UTC
    time>`` and the run starts from no rows; a row that is not one (a name that cannot be a
    student's, a field of the wrong type, an unknown status, a second row for one student and
    assignment) is appended, with why, to ``grades.rejected.jsonl`` and left out. Either way the
    submissions concerned are graded anew, and the next :func:`save_rows` writes only good rows.

    Returns:
        ``(rows, problems)``: the rows by ``(student, assignment)``; one line per file or row
        set aside, saying where it went.

    Raises:
        OSError: if ``grades.json`` exists but cannot be read or moved aside.
    """
    folder = Path(out)
    path = folder / "grades.json"
    if not path.is_file():
        return {}, []
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
        shape_ok = isinstance(data, dict) and isinstance(data.get("rows", []), list)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        data, shape_ok = None, False
    if not shape_ok:
        aside = folder / f"grades.json.unusable-{_stamp()}"
        os.replace(path, aside)
        return {}, [f"{path} is not a grades file this grader wrote (not JSON, or not {{\"rows\": [...]}}): moved to "
                    f"{aside.name}; every submission is graded anew"]
    rows: dict[tuple[str, str], Row] = {}
    problems: list[str] = []
    rejected: list[dict] = []
    for index, item in enumerate(data.get("rows", [])):
        why = _row_problem(item)
        if why is None and (item["student"], item["assignment"]) in rows:
            why = "it is a second row for the same student and assignment"
        if why:
            rejected.append({"set_aside": _stamp(), "row": item, "why": why})
            problems.append(f"grades.json row {index} was set aside in grades.rejected.jsonl ({why[:200]}); "
                            "its submission is graded anew")
            continue
        row = Row(**item)
        rows[(row.student, row.assignment)] = row
    if rejected:
        with open(folder / "grades.rejected.jsonl", "a") as f:
            for entry in rejected:
                f.write(json.dumps(entry, ensure_ascii=True) + "\n")
    return rows, problems


def _stamp() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def save_rows(out: Path, rows: dict[tuple[str, str], Row]) -> None:
    """Write ``grades.json``, ``grades.csv`` and the repair logs of ``rows`` into ``out``.

    In ``grades.csv`` the text cells (student, assignment, status, message) go through
    :func:`csv_cell`, so a message like ``=HYPERLINK(...)`` is written ``'=HYPERLINK(...)``
    and a spreadsheet shows it as text; score and max_score are written as numbers
    (``f"{score:g}"``), unquoted. The repair logs are Markdown, their text escaped with
    :func:`escape_markdown`. ``grades.json`` keeps the text as it is (JSON is safe).
    """
    ordered = [rows[k] for k in sorted(rows)]
    tmp = out / "grades.json.tmp"
    tmp.write_text(json.dumps({"rows": [dataclasses.asdict(r) for r in ordered]}, indent=1))
    os.replace(tmp, out / "grades.json")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_COLUMNS)
    for r in ordered:
        writer.writerow([csv_cell(r.student), csv_cell(r.assignment), f"{r.score:g}", f"{r.max_score:g}",
                         csv_cell(r.status), csv_cell(r.message)])
    (out / "grades.csv.tmp").write_text(buf.getvalue())
    os.replace(out / "grades.csv.tmp", out / "grades.csv")
    repairs_dir = out / "repairs"
    repairs_dir.mkdir(exist_ok=True)
    by_key: dict[str, list[Row]] = {}
    for r in ordered:
        by_key.setdefault(r.key, []).append(r)
    for key, student_rows in by_key.items():
        lines = [f"# Repair log: {escape_markdown(student_rows[0].student)}", ""]
        for r in student_rows:
            lines.append(f"## {escape_markdown(r.assignment)}: {escape_markdown(r.status)}")
            lines += [f"- {escape_markdown(x)}" for x in r.repairs] or ["- no repairs"]
            lines.append("")
        (repairs_dir / f"{key}.md").write_text("\n".join(lines))
