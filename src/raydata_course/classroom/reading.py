"""Reading a submitted notebook file, and telling which exercise it is.

A submission is hostile input: :func:`read_notebook` turns any bytes into an ``nbformat`` v4
notebook or a reason a student can act on (not UTF-8, not JSON, nested deeper than
:data:`MAX_JSON_DEPTH`, a number too long to read, valid JSON of the wrong shape), and never
raises because of them. :func:`exercise_of` tells, from a notebook's cells' ``grade_id``, which
exercise it belongs to, so that a notebook filed under the wrong exercise (or outside any
exercise's folder) is named for what it is. The lint (:mod:`.lint`) and the grader share both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import nbformat

__all__ = ["MAX_JSON_DEPTH", "grade_id", "read_notebook", "exercise_grade_ids", "exercise_of"]

#: Deepest nesting of JSON arrays and objects accepted (Jupyter writes about 6; saved outputs
#: and widget state a few more).
MAX_JSON_DEPTH = 100

#: What a student should do about a file that is not a notebook Jupyter saved.
_RESAVE = ("open it in Jupyter, check that it shows your work, save it (File > Save Notebook) and submit "
           "the .ipynb file Jupyter saved; do not edit the file by hand")


def _nbg(cell) -> dict:
    meta = cell.get("metadata")
    nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
    return nbg if isinstance(nbg, dict) else {}


def grade_id(cell) -> str | None:
    """The cell's nbgrader ``grade_id``, or None for an ordinary cell (or one whose id is not text)."""
    gid = _nbg(cell).get("grade_id") if isinstance(cell, dict) else None
    return gid if isinstance(gid, str) else None


def _say(value, limit: int = 60) -> str:
    """``value`` quoted for a message (escaped, clipped when long)."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit - 4] + "...'"


def _why(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _what(value) -> str:
    """The JSON type of ``value``, in words."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "text", list: "a list", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _too_deep(data, limit: int) -> bool:
    """True when JSON ``data`` nests arrays and objects more than ``limit`` deep (checked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _shape_problem(data) -> str | None:
    """Why the notebook JSON ``data`` (nbformat 4) has a shape lint can't work on, or None."""
    if not isinstance(data.get("metadata", {}), dict):
        return f"the notebook's metadata is {_what(data['metadata'])}, not an object"
    for key in ("nbformat", "nbformat_minor"):
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], int)):
            return f"the notebook's format version ({key}) is {_what(data[key])}, not a whole number"
    cells = data.get("cells")
    if not isinstance(cells, list):
        return f"the notebook's cells are {_what(cells)}, not a list of cells"
    for number, cell in enumerate(cells, 1):
        where = f"cell {number} of the notebook"
        if not isinstance(cell, dict):
            return f"{where} is {_what(cell)}, not a cell"
        if not isinstance(cell.get("cell_type"), str):
            return f"{where} has a cell type that is {_what(cell.get('cell_type'))}, not text"
        if "metadata" in cell and not isinstance(cell["metadata"], dict):
            return f"{where} has metadata that is {_what(cell['metadata'])}, not an object"
        source = cell.get("source", "")
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(x, str) for x in source)):
            return f"{where} has a source that is {_what(source)}, not text"
        if "id" in cell and not isinstance(cell["id"], str):
            return f"{where} has an id that is {_what(cell['id'])}, not text"
        for key, kind in (("outputs", list), ("attachments", dict)):
            if key in cell and not isinstance(cell[key], kind):
                return f"{where} has {key} that are {_what(cell[key])}, not {_what(kind())}"
    return None


def read_notebook(raw: bytes | str) -> tuple[Any, str | None]:
    """Parse ``raw`` into an nbformat v4 notebook; return ``(notebook, None)`` or ``(None, why)``.

    Never raises because of ``raw``'s bytes: ``why`` says, in words a student can act on, what is
    wrong with the file. Every cell of the notebook has a ``metadata`` dict.
    """
    if isinstance(raw, (bytearray, memoryview)):
        raw = bytes(raw)
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None, "the file is not a Jupyter notebook: it is not UTF-8 text (a binary file?)"
    elif isinstance(raw, str):
        text = raw
    else:
        return None, f"the grader was given {type(raw).__name__}, not the bytes of a file"
    if not text.strip():
        return None, "the file is empty (0 bytes of notebook): save the notebook in Jupyter, then submit it"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, (f"the file is not a Jupyter notebook: it is not valid JSON ({exc.msg} at line "
                      f"{exc.lineno}, column {exc.colno}); submit the .ipynb file that Jupyter saved")
    except RecursionError:
        return None, f"the file is not a Jupyter notebook: its JSON is nested too deeply to read; {_RESAVE}"
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return None, f"the file is not a readable Jupyter notebook ({_why(exc)}); {_RESAVE}"
    if not isinstance(data, dict) or "cells" not in data and "worksheets" not in data:
        return None, "the file is JSON but not a Jupyter notebook (it has no cells)"
    if _too_deep(data, MAX_JSON_DEPTH):
        return None, (f"the file is not a Jupyter notebook: its JSON is nested more than {MAX_JSON_DEPTH} "
                      f"levels deep; {_RESAVE}")
    if "cells" in data:
        problem = _shape_problem(data)
        if problem:
            return None, f"the file is not a readable Jupyter notebook: {problem}; {_RESAVE}"
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # duplicate cell ids and the like: repaired below
            nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises several types for malformed notebooks
        return None, f"the file is not a readable Jupyter notebook ({_why(exc)}); {_RESAVE}"
    problem = _shape_problem(nb) if isinstance(nb, dict) else "it is not a notebook"
    if problem:  # an older format, converted
        return None, f"the file is not a readable Jupyter notebook: {problem}; {_RESAVE}"
    for cell in nb.cells:
        cell.setdefault("metadata", nbformat.NotebookNode())
    return nb, None


def exercise_grade_ids(release) -> frozenset[str]:
    """Every ``grade_id`` of a release (or source) notebook's nbgrader cells."""
    return frozenset(gid for c in release.cells if (gid := grade_id(c)))


def exercise_of(notebook, exercises: Mapping[str, frozenset[str]]) -> str | None:
    """The exercise a notebook belongs to, told from its cells' ``grade_id``, or None.

    Only the ids that one exercise has and no other count (every exercise has an ``intro``, a
    ``setup`` and a ``teardown``): the notebook belongs to an exercise when it holds some of
    that exercise's own ids and none of another's. A notebook with no such id (re-created
    without its metadata, not an exercise at all) or with the ids of two exercises (cells
    pasted from one into the other) belongs to none.

    Args:
        notebook: an ``nbformat`` notebook, or a file's bytes or text (read as
            :func:`lint_notebook` reads it; a file it cannot read belongs to none).
        exercises: ``{exercise id: its grade ids}`` (:func:`exercise_grade_ids` of each release).

    Returns:
        The exercise id, or None.

    Examples:
        >>> ids = {"data01": frozenset({"setup", "a_answer"}), "data02": frozenset({"setup", "b_answer"})}
        >>> import nbformat
        >>> cell = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade_id": "b_answer"}})
        >>> exercise_of(nbformat.v4.new_notebook(cells=[cell]), ids)
        'data02'
        >>> exercise_of(b"not a notebook", ids) is None
        True
    """
    if isinstance(notebook, (bytes, bytearray, memoryview, str)):
        try:
            notebook, _ = read_notebook(notebook)
        except Exception:
            notebook = None
        if notebook is None:
            return None
    try:
        ids = {gid for c in notebook.cells if (gid := grade_id(c))}
    except (AttributeError, TypeError):
        return None
    owners = []
    for name, own in exercises.items():
        others = set().union(*(v for k, v in exercises.items() if k != name))
        if ids & (own - others):
            owners.append(name)
    return owners[0] if len(owners) == 1 else None
