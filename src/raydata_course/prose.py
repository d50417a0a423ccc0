"""Figures in a notebook's prose, and the cells that back them.

A figure (a time, a size, a rate, a percentage, a ratio) is backed only by a code cell of the
same section (a ``#`` or ``##`` heading opens a section): by an output that carries the same
number with the same unit, or by a number the code sets with its unit (``64 * MiB``,
``step_s=0.1``, ``time.sleep(0.2)``). A figure written in words (``five times``, ``twice
the``) can never be backed: write the digits and print them.

Examples:
    >>> import nbformat
    >>> nb = nbformat.v4.new_notebook(cells=[
    ...     nbformat.v4.new_markdown_cell("## 1. Timing\\nThe epoch took *3.4 s*, 2-fold the 1.7 s."),
    ...     nbformat.v4.new_code_cell("print('epoch 3.4 s')")])
    >>> nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="epoch 3.4 s\\n")]
    >>> [f.text for f in unbacked_figures(nb)]
    ['2-fold', '1.7 s']
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

__all__ = ["ProseFigure", "prose_figures", "unbacked_figures", "sections"]

# --------------------------------------------------------------------------------- units

#: Every unit, as written, mapped to the one spelling a backing output must carry (a family).
#: Word units match in any case ("Seconds", "MS"); one-letter ones only as written.
_UNIT_WORDS = {
    "ns": "ns", "nanoseconds?": "ns", "µs": "µs", "us": "µs", "microseconds?": "µs",
    "ms": "ms", "msecs?": "ms", "milliseconds?": "ms",
    "secs?": "s", "seconds?": "s", "mins?": "min", "minutes?": "min", "hrs?": "h", "hours?": "h",
    "bytes?": "B", "kb": "KB", "kib": "KiB", "mb": "MB", "mib": "MiB", "gb": "GB", "gib": "GiB",
    "tb": "TB", "tib": "TiB", "percent": "%", "per cent": "%", "fold": "×",
}
_UNIT_LETTERS = {"s": "s", "h": "h", "B": "B", "%": "%", "×": "×", "x": "×"}
#: A rate: anything per second (``rows/s``, ``items/s``, ``MiB/s``, ``images per second``).
_RATE = r"(?P<per>[A-Za-z]+)(?:/s(?:ec)?\b|\s+per\s+(?i:second|sec)\b)"
#: ``N times`` is a ratio only when it compares (``3 times the budget``, ``5 times faster``).
_TIMES = (r"times\s+(?=(?i:the|as|faster|slower|more|less|larger|smaller|longer|shorter|bigger|"
          r"higher|lower|over|what)\b)")
_WORD_UNIT = "|".join(sorted(_UNIT_WORDS, key=len, reverse=True))
_UNIT = (_RATE + r"|(?P<word>(?i:" + _WORD_UNIT + r"))(?![\w/])"
         r"|(?P<letter>[shB](?![\w/])|%|×(?!\s*\d)|x(?=[\s.,;:)]|$))|(?P<times>" + _TIMES + ")")
_SEP = r"(?:[ \u00a0]|-|[ \u00a0]?-[ \u00a0]?)?"
_DIGITS = r"(?<![\w.])(?P<number>\d[\d,]*(?:\.\d+)?)"
_FIGURE = re.compile(_DIGITS + _SEP + "(?:" + _UNIT + ")")
_NUMBER_WORD = (r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
                r"thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|a dozen|dozens|"
                r"a hundred|a thousand|several|a few")
#: A figure in words: a number word with a unit, ``-fold`` or a comparing ``times``.
_WORDS_FIGURE = re.compile(
    r"\b(?i:" + _NUMBER_WORD + r")(?:(?:\s+or\s+|\s*-\s*|\s+to\s+)(?i:" + _NUMBER_WORD + r"))?"
    r"(?:" + _SEP + r"(?:(?i:fold)\b|" + _TIMES + r"|(?i:" + _WORD_UNIT + r")(?![\w/])|" + _RATE + r")"
    r"|(?i:fold)\b)")
#: Comparisons without a number: they cannot be backed by a printed figure.
_VAGUE = re.compile(r"\b(twice (?:as|the|that|its)|thrice|(?:doubles?|triples?) (?:the|this|its|their)|"
                    r"half as|orders? of magnitude|an order of magnitude|far (?:longer|faster|slower)|"
                    r"(?:up to|within|about|under|over|nearly|almost|less than|more than) (?:a|one|half a) "
                    r"(?:second|minute|millisecond|hour))\b", re.IGNORECASE)
_FENCE = re.compile(r"```.*?```", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_EMPHASIS = re.compile(r"\*+|(?<!\w)_+|_+(?!\w)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_HEADING = re.compile(r"^#{1,2}\s", re.MULTILINE)


def _family(match: re.Match) -> str:
    """The unit family of a figure match: ``"s"``, ``"MiB"``, ``"rows/s"``, ``"%"``, ``"×"``."""
    if match["per"]:
        return match["per"].lower() + "/s"
    if match["times"]:
        return "×"
    if match["letter"]:
        return _UNIT_LETTERS[match["letter"]]
    word = " ".join(match["word"].lower().split())
    for pattern, family in _UNIT_WORDS.items():
        if re.fullmatch(pattern, word):
            return family
    raise AssertionError(f"unit {word!r} has no family")  # pragma: no cover: _UNIT_WORDS is the regex


@dataclass(frozen=True)
class ProseFigure:
    """A figure stated in a markdown cell.

    Attributes:
        cell: index of the markdown cell.
        text: the figure as written (``"64 MiB"``, ``"1.5×"``, ``"five times"``, ``"twice as"``).
        number: its number without thousands separators (``"1438"``), or None for a figure in
            words, which no output can back.
        unit: the unit family a backing output must carry (``"s"``, ``"MiB"``, ``"rows/s"``,
            ``"%"``, ``"×"``), or None with ``number``.
        section: index of the section (``#``/``##`` heading) the cell belongs to.
        context: up to 60 characters of the sentence around it.
    """

    cell: int
    text: str
    number: str | None
    unit: str | None
    section: int
    context: str


def sections(notebook) -> list[int]:
    """The section index of each cell: a markdown cell with a ``#`` or ``##`` heading opens one."""
    index, found = 0, []
    for position, cell in enumerate(notebook.cells):
        if position and cell.get("cell_type") == "markdown" and _HEADING.search(cell.get("source", "")):
            index += 1
        found.append(index)
    return found


def _prose(source: str) -> str:
    text = _LINK_TARGET.sub("]", _INLINE_CODE.sub(" ", _FENCE.sub(" ", source)))
    return _EMPHASIS.sub("", text)


def prose_figures(notebook) -> list[ProseFigure]:
    """Every speed, size, time, percentage or ratio figure the markdown cells of ``notebook`` state.

    Digits with a unit, spaced, joined or hyphenated (``20 ms``, ``20ms``, ``20-ms``), in any
    case (``20 MS``, ``3 Seconds``), in italics or bold (``*3.4* s``); rates of anything per
    second (``900 items/s``); ``percent`` and ``%``; ratios (``1.5×``, ``3-fold``, ``2 times
    the budget``); figures in words (``five times faster``, ``two or three times the
    budget``, ``ten-fold``, ``twice the``); comparisons in words (``orders of magnitude``).
    Code (inline and fenced) and link targets are not prose. ``8×8`` is a shape, ``called 3
    times`` a count.

    Examples:
        >>> import nbformat
        >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        ...     "Blocks of 64 MiB, `2 s` in code, 8×8 pixels, 1.5× faster, twice as slow.")])
        >>> [(f.text, f.number, f.unit) for f in prose_figures(nb)]
        [('64 MiB', '64', 'MiB'), ('1.5×', '1.5', '×'), ('twice as', None, None)]
    """
    found = []
    section_of = sections(notebook)
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") != "markdown":
            continue
        text = _prose(cell.get("source", ""))
        hits = []
        for match in _FIGURE.finditer(text):
            hits.append((match.start(), match.end(), _THOUSANDS.sub("", match["number"]), _family(match)))
        for pattern in (_WORDS_FIGURE, _VAGUE):
            for match in pattern.finditer(text):
                if not any(start < match.end() and match.start() < end for start, end, *_ in hits):
                    hits.append((match.start(), match.end(), None, None))
        for start, end, number, unit in sorted(hits):
            found.append(ProseFigure(index, text[start:end].strip(), number, unit, section_of[index],
                                     " ".join(text[max(0, start - 30) : end + 30].split())))
    return found


def _output_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        for mime in ("text/plain", "text/markdown"):
            value = output.get("data", {}).get(mime)
            if value:
                parts.append(value if isinstance(value, str) else "".join(value))
    return _THOUSANDS.sub("", "\n".join(parts))


def _output_figures(text: str) -> set[tuple[str, str]]:
    """The (number, unit family) pairs an output prints, as :func:`prose_figures` reads them."""
    return {(_THOUSANDS.sub("", m["number"]), _family(m)) for m in _FIGURE.finditer(text)}


#: Names that carry their unit (``step_s``, ``timeout_ms``, ``budget_mib``), as the course names them.
_NAME_UNITS = {"s": "s", "sec": "s", "seconds": "s", "ms": "ms", "min": "min", "mib": "MiB",
               "gib": "GiB", "kib": "KiB", "percent": "%", "pct": "%"}
_UNIT_CONSTANTS = {"KiB": "KiB", "MiB": "MiB", "GiB": "GiB", "KB": "KB", "MB": "MB", "GB": "GB"}


def _code_figures(source: str) -> set[tuple[str, str]]:
    """The (number, unit family) pairs a code cell sets: ``64 * MiB``, ``step_s=0.1``,
    ``time.sleep(0.2)``, and a fraction compared with (``>= 0.92`` sets ``92 %``).

    Numbers in strings and comments set nothing.
    """
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
                  if t.type in (tokenize.NAME, tokenize.NUMBER, tokenize.OP)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return set()
    found = set()
    for i, token in enumerate(tokens):
        if token.type != tokenize.NUMBER:
            continue
        number = token.string.replace("_", "")
        before = [t.string for t in tokens[max(0, i - 2) : i]]
        after = [t.string for t in tokens[i + 1 : i + 3]]
        if len(after) == 2 and after[0] == "*" and after[1] in _UNIT_CONSTANTS:
            found.add((number, _UNIT_CONSTANTS[after[1]]))
        if len(before) == 2 and before[1] == "(" and before[0] == "sleep":
            found.add((number, "s"))
        if len(before) == 2 and before[1] in ("=", ":") and "_" in before[0]:
            unit = _NAME_UNITS.get(before[0].rsplit("_", 1)[1].lower())
            if unit:
                found.add((number, unit))
        if before and before[-1] in ("<", "<=", ">", ">=") and re.fullmatch(r"0?\.\d+", number):
            percent = f"{float(number) * 100:.10g}"
            found.add((percent, "%"))
    return found


def unbacked_figures(notebook) -> list[ProseFigure]:
    """The figures of :func:`prose_figures` that no code cell of their own section backs.

    A figure is backed by a code cell of the same section whose output carries the same
    number with the same unit family (``3.4 s`` by ``epoch: 3.4 s``, not by ``3.4`` alone nor
    by ``3.4 MiB``; ``1.5×`` by ``1.5x``; ``40 %`` by ``40 percent``), or whose code sets the
    number with its unit (``256 * MiB``, ``step_s=0.1``, ``time.sleep(0.2)``; numbers inside
    strings and comments set nothing). A measured value changes from run to run, so prose
    that copies one from an earlier run is caught on the next. A figure in words is never
    backed: write digits and print them.

    Args:
        notebook: a notebook, executed (as :func:`raydata_course.notebooks.execute_notebook`
            writes it) or not; without outputs only the code can back a figure.

    Returns:
        The unbacked figures, in order; empty when every figure is backed.
    """
    section_of = sections(notebook)
    backing: dict[int, set[tuple[str, str]]] = {}
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") != "code":
            continue
        pairs = _output_figures(_output_text(cell)) | _code_figures(cell.get("source", ""))
        backing.setdefault(section_of[index], set()).update(pairs)
    return [f for f in prose_figures(notebook)
            if f.number is None or (f.number, f.unit) not in backing.get(f.section, set())]
