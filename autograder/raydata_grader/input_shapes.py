"""What a failing check says about its input: its shape, never its values.

A hidden test's message names the kind of input that failed, and, through :func:`about_input`,
its shape (rows, blocks, columns, the arguments of the call), so that a student can build such
an input and reproduce the failure. It never names the input's values or the expected result:
those would let an answer be fitted to the hidden tests instead of being right.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from raydata_grader.remote import KernelRaised

__all__ = ["about_input", "describe_tables"]


def describe_tables(tables, *, sizes: bool = True, max_columns: int = 6) -> str:
    """The shape of a check's input, for a failure message: rows, blocks, their sizes, columns.

    Names the input's shape, never its values (what a message may say about a hidden input).

    Args:
        tables: the input's blocks, as ``pyarrow.Table``s (one per block).
        sizes: list each block's rows; pass False where the block sizes are the answer.
        max_columns: column names listed before "and N more".

    Returns:
        For example ``"a dataset of 103 rows in 4 blocks (26, 26, 26, 25 rows), column id"``.

    Examples:
        >>> import pyarrow as pa
        >>> describe_tables([pa.table({"id": [1, 2]}), pa.table({"id": [3]})])
        'a dataset of 3 rows in 2 blocks (2, 1 rows), column id'
        >>> describe_tables([pa.table({"id": []})])
        'a dataset of 0 rows in 1 block, column id'
    """
    rows = [t.num_rows for t in tables]
    names = list(tables[0].column_names) if tables else []
    blocks = f"{len(rows)} block" + ("" if len(rows) == 1 else "s")
    if sizes and len(rows) > 1:
        sizes = ", ".join(f"{n:,}" for n in rows) if len(rows) <= 8 else f"{min(rows):,} to {max(rows):,}"
        blocks += f" ({sizes} rows)"
    shown = ", ".join(names[:max_columns]) + (f" and {len(names) - max_columns} more" if len(names) > max_columns else "")
    column_word = "column" if len(names) == 1 else "columns"
    return f"a dataset of {sum(rows):,} rows in {blocks}, {column_word} {shown}"


@contextlib.contextmanager
def about_input(description: str) -> Iterator[None]:
    """Name the input when a check fails inside this block.

    An ``AssertionError`` raised inside gets ``" The input: <description>."`` appended; a
    :class:`KernelRaised` (the student's code raised) carries the description into the message
    the student reads. Use :func:`describe_tables` for datasets: shapes, blocks and columns,
    never values or expected results.

    Examples:
        >>> try:
        ...     with about_input("a dataset of 3 rows in 2 blocks, column id"):
        ...         assert False, "The counts are wrong."
        ... except AssertionError as exc:
        ...     print(exc)
        The counts are wrong. The input: a dataset of 3 rows in 2 blocks, column id.
    """
    try:
        yield
    except AssertionError as exc:
        text = str(exc).split("\nassert ", 1)[0].strip()
        if "The input:" in text:
            raise
        raise AssertionError(f"{text} The input: {description}.") from None
    except KernelRaised as exc:
        if not getattr(exc, "input_description", None):
            exc.input_description = description
        raise
