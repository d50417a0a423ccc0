"""Structural lint and repair of a submitted exercise notebook, against its release.

nbgrader 0.9.6 grades a notebook by the ``grade_id`` in each cell's ``metadata.nbgrader``.
Students break that structure in a handful of ways, and nbgrader handles each badly: a
duplicated answer cell fails the whole autograde with a misleading "old metadata format"
error, a cell turned into markdown silently stops running, a deleted cell needs
``add_missing_cells`` and lands wherever nbgrader guesses, a foreign kernel name can fail to
start, and a file that is not a notebook stops the batch. :func:`lint_notebook` checks a
submission against the *release* notebook (what the student was given), repairs what can be
repaired without changing the meaning of the student's work, and says what it did in words a
student can act on. The instructor's grader (``make grade``) and the student self-check
(:func:`raydata_course.classroom.self_check`) share it.

Repairs, in order:

1. the kernel is set to the course kernel (:data:`raydata_course.layout.KERNEL_NAME`);
2. saved outputs are cleared (the grader runs the notebook again anyway);
3. a cell whose ``grade_id`` the release does not know loses its nbgrader metadata;
4. a repeated ``grade_id``: a copy of an *answer* cell stays as an ordinary code cell, in
   place, so the code runs exactly as it did for the student; a copy of a read-only or test
   cell is removed (it is the instructor's text);
5. a graded or read-only cell whose type changed (code ↔ markdown) is changed back;
6. an edited read-only or test cell gets the release text and metadata back;
7. a deleted cell comes back from the release, after the cell that preceded it there. A
   deleted *answer* cell comes back empty, never as the ``raise NotImplementedError()``
   stub, which would overwrite a function the student defined in a cell of their own.

A submission is hostile input. Whatever its bytes, :func:`lint_notebook` never raises
because of them: a file that is not UTF-8 JSON, JSON nested deeper than
:data:`MAX_JSON_DEPTH`, a number too long to read, or valid JSON of the wrong shape (``cells``
not a list, a cell that is a number, ``metadata`` a list, ``source`` a dict, a ``grade_id``
that is not text, ...) is ``invalid`` with a reason the student can act on; so is a notebook
that still fails nbformat's schema after repair, or holds text that can't be saved as UTF-8.

Examples:
    >>> import nbformat
    >>> rel = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
    ...     "x = 1", metadata={"nbgrader": {"grade_id": "a", "solution": True, "grade": False,
    ...                                     "locked": False, "cell_type": "code"}})])
    >>> lint_notebook(b"", rel).status
    'invalid'
    >>> sub = nbformat.writes(rel).encode()
    >>> result = lint_notebook(sub, rel)
    >>> result.status, result.repairs
    ('graded', [])
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import nbformat
from raydata_course.layout import KERNELSPEC

__all__ = [
    "LintResult",
    "lint_notebook",
    "grade_id",
    "unanswered_cells",
]

#: Deepest nesting of JSON arrays and objects accepted (Jupyter writes about 6; saved outputs
#: and widget state a few more).
MAX_JSON_DEPTH = 100

#: Most repairs listed one by one (the rest are counted in one more line).
MAX_REPAIRS_LISTED = 50

#: What a student should do about a file that is not a notebook Jupyter saved.
_RESAVE = ("open it in Jupyter, check that it shows your work, save it (File > Save Notebook) and submit "
           "the .ipynb file Jupyter saved; do not edit the file by hand")

#: A cell id nbformat accepts.
_CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")

#: Text put in an answer cell that was missing from the submission.
RESTORED_ANSWER_TEXT = (
    "# This answer cell was missing from the submission; the grader put it back empty.\n"
    "# Code you wrote in other cells of the notebook still runs.\n"
)


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


@dataclass
class LintResult:
    """What :func:`lint_notebook` found and did.

    Attributes:
        status: ``"graded"`` (nothing to repair), ``"repaired"`` (repaired, gradable) or
            ``"invalid"`` (not a gradable notebook; ``notebook`` is None).
        notebook: the repaired ``nbformat`` notebook (v4), or None when invalid.
        repairs: one sentence per repair, addressed to the student.
        problems: why the file is invalid (empty unless ``status == "invalid"``).
        notes: observations that are not repairs (e.g. answer cells still unanswered).
    """

    status: str
    notebook: Any = None
    repairs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """One line: the problems when invalid, else the repairs (empty when none)."""
        return "; ".join(self.problems if self.status == "invalid" else self.repairs)


def _invalid(*problems: str) -> LintResult:
    return LintResult("invalid", None, [], list(problems))


def _parse(raw: bytes | str) -> tuple[Any, str | None]:
    """Parse ``raw`` into an nbformat v4 notebook; return (notebook, None) or (None, why)."""
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


def _fresh_id(taken: set[str]) -> str:
    while True:
        new = uuid.uuid4().hex[:8]
        if new not in taken:
            taken.add(new)
            return new


def _set_type(cell, cell_type: str) -> None:
    cell["cell_type"] = cell_type
    if cell_type == "code":
        cell.setdefault("outputs", [])
        cell["execution_count"] = None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    if cell_type == "code":
        cell.pop("attachments", None)  # markdown-only field; invalid on a code cell


def _kind(cell) -> str:
    from nbgrader.utils import is_grade, is_solution  # here, not at the top: nbgrader is slow to import

    if is_solution(cell):
        return "answer cell"
    if is_grade(cell):
        return "test cell"
    return "read-only cell"


def unanswered_cells(notebook) -> list[str]:
    """``grade_id`` of each answer cell that still raises ``NotImplementedError()``."""
    from nbgrader.utils import is_solution  # here, not at the top: nbgrader is slow to import

    return [grade_id(c) for c in notebook.cells
            if is_solution(c) and c.get("cell_type") == "code"
            and "raise NotImplementedError()" in (c.get("source") if isinstance(c.get("source"), str) else "")]


def lint_notebook(raw: bytes | str, release, *, kernelspec: dict | None = None) -> LintResult:
    """Check a submitted notebook against its release notebook and repair its structure.

    Args:
        raw: the submitted file's bytes (or text).
        release: the release notebook (``nbformat`` v4), with nbgrader metadata on every
            answer, test and read-only cell.
        kernelspec: the kernelspec to force; default :data:`raydata_course.layout.KERNELSPEC`.

    Returns:
        A :class:`LintResult`. Its notebook is a repaired copy; ``raw`` is never changed.
        Whatever ``raw`` holds (any bytes, any JSON), the result is a status, never an
        exception: a file lint can't use is ``invalid``, with the reason in ``problems``.

    Raises:
        ValueError: if ``release`` has no nbgrader cells or repeats a ``grade_id`` (a broken
            release is the course's bug, not the student's).
    """
    kernelspec = kernelspec or KERNELSPEC
    rel_cells = [c for c in release.cells if grade_id(c)]
    rel_ids = [grade_id(c) for c in rel_cells]
    if not rel_ids:
        raise ValueError("the release notebook has no nbgrader cells; is it an exercise release?")
    if len(set(rel_ids)) != len(rel_ids):
        raise ValueError(f"the release notebook repeats a grade_id: {sorted(i for i in rel_ids if rel_ids.count(i) > 1)}")
    rel_by_id = {grade_id(c): c for c in rel_cells}
    try:
        return _lint(raw, rel_ids, rel_by_id, kernelspec)
    except Exception as exc:  # a shape nothing above foresaw: the student's file, not the run, fails
        return _invalid(f"the grader could not read the notebook's structure ({_why(exc)}); {_RESAVE}")


def _lint(raw: bytes | str, rel_ids: list[str], rel_by_id: dict, kernelspec: dict) -> LintResult:
    from nbgrader.utils import is_locked, is_solution  # here, not at the top: nbgrader is slow to import

    nb, why = _parse(raw)
    if nb is None:
        return _invalid(why)
    if not nb.cells:
        return _invalid("the notebook has no cells (an empty notebook): submit the exercise notebook with your answers")
    present = {grade_id(c) for c in nb.cells if grade_id(c)}
    if not present & set(rel_ids):
        return _invalid(
            "this notebook is not the exercise: none of its graded or read-only cells are there "
            "(was it re-created, or copied without its metadata?). Submit the exercise file you were given, with your answers"
        )

    repairs: list[str] = []
    nb = copy.deepcopy(nb)

    # 1. kernel
    spec = nb.metadata.get("kernelspec")
    current = spec.get("name") if isinstance(spec, dict) else spec
    if current is not None and current != kernelspec["name"]:
        repairs.append(f"the notebook's kernel was {_say(current)}; it is graded in the course kernel {kernelspec['name']!r}")
    nb.metadata["kernelspec"] = dict(kernelspec)

    # 2. saved outputs (not a repair: the grader always runs the notebook from scratch)
    for cell in nb.cells:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None

    # 3. malformed nbgrader metadata (not a dict), unknown grade ids, and 4. repeated grade ids
    for cell in nb.cells:
        meta = cell["metadata"]
        if "nbgrader" in meta and (not isinstance(meta["nbgrader"], dict)
                                   or "grade_id" in meta["nbgrader"] and not isinstance(meta["nbgrader"]["grade_id"], str)):
            meta.pop("nbgrader")
            repairs.append("a cell carried malformed nbgrader metadata; it runs as an ordinary cell")
    seen: set[str] = set()
    kept = []
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid is None:
            kept.append(cell)
            continue
        if gid not in rel_by_id:
            cell["metadata"].pop("nbgrader", None)
            repairs.append(f"a cell carried the unknown grade id {_say(gid)}; it runs as an ordinary cell")
            kept.append(cell)
            continue
        if gid in seen:
            if is_solution(rel_by_id[gid]):
                cell["metadata"].pop("nbgrader", None)
                cell["metadata"].pop("deletable", None)
                cell["metadata"].pop("editable", None)
                repairs.append(f"the answer cell {gid!r} appears more than once; the extra copy runs as an "
                               "ordinary code cell in the same place, so your code runs as it did for you")
                kept.append(cell)
            else:
                repairs.append(f"the {_kind(rel_by_id[gid])} {gid!r} appears more than once; the extra copy was removed")
            continue
        seen.add(gid)
        kept.append(cell)
    nb.cells = kept

    # 5. cell types, and 6. edited read-only cells
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid is None:
            continue
        ref = rel_by_id[gid]
        if cell.get("cell_type") != ref.get("cell_type"):
            repairs.append(f"the {_kind(ref)} {gid!r} was changed from {ref['cell_type']} to "
                           f"{_clip(cell.get('cell_type'), 30)}; it was changed back to {ref['cell_type']}")
            _set_type(cell, ref["cell_type"])
        if is_locked(ref):
            if cell.get("source", "").strip() != ref.get("source", "").strip():
                repairs.append(f"the {_kind(ref)} {gid!r} was edited; the grader uses the original")
            elif _nbg(cell) != _nbg(ref):
                repairs.append(f"the nbgrader metadata of {gid!r} was edited; the grader uses the original")
            cell["source"] = ref["source"]
            cell["metadata"] = copy.deepcopy(ref["metadata"])
        else:
            if _nbg(cell) != _nbg(ref):
                repairs.append(f"the nbgrader metadata of the answer cell {gid!r} was edited; the grader uses the original")
            cell["metadata"]["nbgrader"] = copy.deepcopy(_nbg(ref))

    # 7. deleted cells, restored after their predecessor in the release
    present_ids = {grade_id(c) for c in nb.cells if grade_id(c)}
    for index, gid in enumerate(rel_ids):
        if gid in present_ids:
            continue
        restored = copy.deepcopy(rel_by_id[gid])
        if is_solution(restored) and restored.get("cell_type") == "code":
            restored["source"] = RESTORED_ANSWER_TEXT
            repairs.append(f"the answer cell {gid!r} was deleted; it was put back empty (code you wrote in "
                           "other cells still runs)")
        else:
            repairs.append(f"the {_kind(restored)} {gid!r} was deleted; it was put back from the original")
        if restored.get("cell_type") == "code":
            restored["outputs"] = []
            restored["execution_count"] = None
        position = 0
        for prev in reversed(rel_ids[:index]):
            found = [i for i, c in enumerate(nb.cells) if grade_id(c) == prev]
            if found:
                position = found[0] + 1
                break
        nb.cells.insert(position, restored)
        present_ids.add(gid)

    # unique cell ids (nbformat 4.5+): duplicated cells share them
    taken: set[str] = set()
    for cell in nb.cells:
        cid = cell.get("id")
        if not isinstance(cid, str) or not _CELL_ID.match(cid) or cid in taken:
            cell["id"] = _fresh_id(taken)
        else:
            taken.add(cid)
    if nb.nbformat_minor < 5:
        nb.nbformat_minor = 5

    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        where = "/".join(str(p) for p in getattr(exc, "absolute_path", []))
        return _invalid(f"the notebook does not follow the notebook format even after repair ("
                        f"{_clip(getattr(exc, 'message', str(exc)))}" + (f", at {where}" if where else "")
                        + f"); {_RESAVE}")
    try:
        nbformat.writes(nb).encode("utf-8")
    except (UnicodeError, ValueError) as exc:  # e.g. a lone surrogate ("\\ud800") in a string
        return _invalid(f"the notebook holds text that can't be saved as UTF-8 ({_why(exc)}); {_RESAVE}")
    if len(repairs) > MAX_REPAIRS_LISTED:
        repairs = repairs[:MAX_REPAIRS_LISTED] + [f"... and {len(repairs) - MAX_REPAIRS_LISTED} more repairs like these"]
    notes = [f"the answer cell {gid!r} still raises NotImplementedError (not answered yet)"
             for gid in unanswered_cells(nb)]
    return LintResult("repaired" if repairs else "graded", nb, repairs, [], notes)


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
