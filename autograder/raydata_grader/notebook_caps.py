"""How much a notebook may carry: counted on the raw file at intake, and on outputs as they come.

A submitted notebook's size in bytes says little about what parsing it costs: 20 MiB of ``{}``
becomes about 530 MiB of Python objects in one ``json.loads``, and the grader parses a
submission more than once (lint reads it as JSON and again with nbformat, then copies it).
So at intake, after the file's bytes are read within their limit
(:data:`raydata_grader.submission_files.MAX_NOTEBOOK_BYTES`), :func:`notebook_cap_problem`
checks, before anything parses the notebook into objects:

1. **JSON values and containers**, counted on the file's skeleton (its bytes with every string
   emptied by one regular expression: no objects are made): at most :data:`MAX_JSON_VALUES`
   values and :data:`MAX_JSON_CONTAINERS` objects and lists;
2. **cells and attachments**, by a scan that keeps only sizes (``json.loads`` with an
   ``object_pairs_hook`` that turns each object into its size as soon as it is read): at most
   :data:`MAX_NOTEBOOK_CELLS` cells and :data:`MAX_ATTACHMENT_BYTES` of attachments in all.

A notebook over a cap is refused with a reason that names the cap and by how much it is over.
While a notebook runs, what its kernel sends is measured with :func:`json_chars` (every field,
metadata and error fields included) against the output caps of
:class:`raydata_grader.nbgrader_steps.TrackedExecute` and
:class:`~raydata_grader.nbgrader_steps.LimitOutputSize`.

Examples:
    >>> notebook_cap_problem(b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}') is None
    True
    >>> cells = ",".join(['{"cell_type": "raw", "metadata": {}, "source": ""}'] * 1_001)
    >>> notebook_cap_problem(('{"cells": [' + cells + '], "metadata": {}}').encode()).split(":")[0]
    'it holds 1,001 cells, 1 over the limit of 1,000 cells per notebook'
    >>> json_chars({"text/plain": "abc"})
    21
"""

from __future__ import annotations

import json
import re

from raydata_course.units import MiB

__all__ = ["MAX_NOTEBOOK_CELLS", "MAX_ATTACHMENT_BYTES", "MAX_JSON_VALUES", "MAX_JSON_CONTAINERS",
           "notebook_cap_problem", "json_chars"]

#: Most cells a notebook may have (the releases have about 20).
MAX_NOTEBOOK_CELLS = 1_000
#: Most bytes of attachments (images pasted into markdown cells, as stored: base64) in one notebook.
MAX_ATTACHMENT_BYTES = 1 * MiB
#: Most JSON values (strings, numbers, objects, lists...) in a notebook file; a saved line of
#: output or source is one value. 20 MiB of one-character strings would be about 4 million.
MAX_JSON_VALUES = 1_000_000
#: Most JSON objects and lists in a notebook file (a cell with outputs is about ten).
MAX_JSON_CONTAINERS = 200_000

#: One JSON string, escapes included (the unrolled form: linear, no backtracking).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


#: What a student does about a notebook over a cap.
_CLEAR = ("clear the outputs (Kernel > Restart Kernel and Clear Outputs of All Cells), delete the cells you do not "
          "need, save, and submit again")
_SHRINK = "remove or shrink the images pasted into markdown cells, save, and submit again"


def _over(count: int, limit: int, what: str) -> str:
    return f"{count:,} {what}, {count - limit:,} over the limit of {limit:,} {what} per notebook: {_CLEAR}"


class _Object(int):
    """A JSON object, read as its size in characters."""


class _Cell(_Object):
    """A cell, read as its size in characters, and its attachments' size."""

    attachment_chars: int = 0


def _size(value) -> int:
    """Characters ``value`` (already summarized by :func:`_summarize` below it) takes as JSON."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, list):
        return 2 + sum(_size(v) + 1 for v in value)
    if isinstance(value, bool):
        return 5
    if isinstance(value, _Object):
        return int(value)
    if isinstance(value, int):
        return len(str(value))
    return 5  # true, false, null, a float


def _summarize(pairs: list) -> int:
    """``json.loads``'s object hook: an object becomes its size, and a cell keeps its attachments' size."""
    size = 2 + sum(len(k) + 4 + _size(v) for k, v in pairs)
    keys = {k for k, _ in pairs}
    if "cells" in keys or "worksheets" in keys:
        return dict(pairs)  # the notebook (or an nbformat 3 worksheet): its cells are counted
    if "cell_type" in keys:
        cell = _Cell(size)
        cell.attachment_chars = sum(_size(v) for k, v in pairs if k == "attachments")
        return cell
    return _Object(size)


def _cells(top: dict) -> list:
    if isinstance(top.get("cells"), list):
        return top["cells"]
    sheets = top.get("worksheets")
    if isinstance(sheets, list):
        return [c for s in sheets if isinstance(s, dict) and isinstance(s.get("cells"), list) for c in s["cells"]]
    return []


def notebook_cap_problem(data: bytes) -> str | None:
    """Why the notebook file ``data`` carries more than the grader takes, or None.

    The counts of JSON values and containers are exact for valid JSON and never made from
    objects; the count of cells and attachment bytes come from a scan that keeps only sizes.
    A file that is not JSON (or nests too deeply to scan) is None here: lint says what is wrong
    with it.

    Args:
        data: the notebook file's bytes (already within the byte limit).

    Returns:
        ``"it holds N <what>, M over the limit of L <what> per notebook: <what to do>"`` for the
        first cap the file is over, or None.
    """
    skeleton = _STRING.sub(b'""', data)
    containers = skeleton.count(b"{") + skeleton.count(b"[")
    values = skeleton.count(b",") + containers + 1
    del skeleton
    if values > MAX_JSON_VALUES:
        return "it holds " + _over(values, MAX_JSON_VALUES, "JSON values")
    if containers > MAX_JSON_CONTAINERS:
        return "it holds " + _over(containers, MAX_JSON_CONTAINERS, "JSON objects and lists")
    try:
        top = json.loads(data, object_pairs_hook=_summarize)
    except (ValueError, RecursionError, TypeError):
        return None
    if not isinstance(top, dict):
        return None
    cells = _cells(top)
    if len(cells) > MAX_NOTEBOOK_CELLS:
        return "it holds " + _over(len(cells), MAX_NOTEBOOK_CELLS, "cells")
    attached = sum(c.attachment_chars for c in cells if isinstance(c, _Cell))
    if attached > MAX_ATTACHMENT_BYTES:
        return (f"it carries {attached / MiB:.1f} MiB of attachments (images pasted into markdown cells), "
                f"{(attached - MAX_ATTACHMENT_BYTES) / MiB:.1f} MiB over the limit of "
                f"{MAX_ATTACHMENT_BYTES / MiB:.1f} MiB per notebook: {_SHRINK}")
    return None


def json_chars(value, limit: int | None = None) -> int:
    """About how many characters ``value`` takes as JSON: every key and string, with its quotes,
    and every number, ``true``, ``false`` and ``null``; nested values without recursion.

    Args:
        value: a JSON-like value (dicts, lists, strings, numbers, booleans, None).
        limit: stop counting once the count passes it (the count returned is then above
            ``limit``, and not exact); None counts everything.

    Returns:
        The count, in characters.
    """
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2
            for key, child in item.items():
                total += (len(key) if isinstance(key, str) else 20) + 4
                if isinstance(child, (dict, list, tuple)):
                    stack.append(child)
                else:
                    total += json_chars(child)
                if limit is not None and total > limit:
                    return total
        elif isinstance(item, (list, tuple)):
            total += 2 + len(item)
            if limit is not None and total > limit:
                return total
            stack.extend(item)
        else:
            total += 5 if item is None or isinstance(item, (bool, float)) else len(str(item))
        if limit is not None and total > limit:
            return total
    return total
