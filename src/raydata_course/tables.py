"""Markdown tables, written one way for the whole course (the lab's reports, the grader's
summaries), with the ``tabulate`` library.

Examples:
    >>> print(markdown_table(["variant", "peak MiB"], [["train-slow", "836"], ["a|b", "1,024"]], align="lr"))
    | variant    |   peak MiB |
    |:-----------|-----------:|
    | train-slow |        836 |
    | a\\|b       |      1,024 |
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["markdown_table"]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, align: str | None = None) -> str:
    """A GitHub-flavoured Markdown table.

    Cells are written as given (``str(cell)``: format numbers before), with ``|`` escaped
    so that a cell cannot break its row.

    Args:
        headers: the column titles.
        rows: one sequence of cells per row, as long as ``headers``.
        align: one letter per column, ``l``/``r``/``c``; default all left.

    Returns:
        The table, one line per row, no trailing newline.

    Raises:
        ValueError: if a row or ``align`` does not have one entry per column.
    """
    from tabulate import tabulate

    width = len(headers)
    align = align or "l" * width
    bad = [i for i, row in enumerate(rows) if len(row) != width]
    if bad or len(align) != width:
        raise ValueError(f"every row and align need {width} entries (one per column); rows {bad} and "
                         f"align {align!r} do not.")
    names = {"l": "left", "r": "right", "c": "center"}
    cells = [[str(cell).replace("|", "\\|") for cell in row] for row in rows]
    return tabulate(cells, headers=[h.replace("|", "\\|") for h in headers], tablefmt="pipe",
                    colalign=[names[a] for a in align], disable_numparse=True)
