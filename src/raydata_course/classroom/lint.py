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
3. a cell whose ``grade_id`` the release does not know loses its nbgrader metadata, and so
   does a cell marked as graded, an answer, read-only or a task without a ``grade_id`` (nbgrader
   would stop the whole notebook on it: "nbgrader cell does not have a grade_id");
4. a repeated ``grade_id``: a copy of an *answer* cell stays as an ordinary code cell, in
   place, so the code runs exactly as it did for the student; a copy of a read-only or test
   cell is removed (it is the instructor's text);
5. a graded or read-only cell whose type changed (code ↔ markdown) is changed back;
6. an edited read-only or test cell gets the release text and metadata back. A notebook in
   nbgrader's source form (the reference solution) is not edited for lacking what the release
   adds (:data:`RELEASE_COMPUTED_KEYS`) or for the hidden-test regions the release takes out;
7. a deleted cell comes back from the release, after the cell that preceded it there. A
   deleted *answer* cell comes back empty, never as the ``raise NotImplementedError()``
   stub, which would overwrite a function the student defined in a cell of their own.

Given every exercise's grade ids, a notebook that belongs to another exercise
(:func:`~raydata_course.classroom.reading.exercise_of`) is ``invalid`` and named for what it
is, rather than repaired into this one's shape.

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
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import nbformat
from raydata_course.classroom.reading import (  # noqa: F401  (MAX_JSON_DEPTH and grade_id are part of this module's interface)
    _RESAVE,
    MAX_JSON_DEPTH,
    _nbg,
    read_notebook,
    _say,
    _why,
    exercise_grade_ids,
    exercise_of,
    grade_id,
)
from raydata_course.layout import KERNELSPEC

__all__ = [
    "LintResult",
    "lint_notebook",
    "grade_id",
    "unanswered_cells",
    "exercise_grade_ids",
    "exercise_of",
    "RELEASE_COMPUTED_KEYS",
]

#: Most repairs listed one by one (the rest are counted in one more line).
MAX_REPAIRS_LISTED = 50

#: A cell id nbformat accepts.
_CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")

#: What nbgrader's ``generate_assignment`` adds to the nbgrader metadata of every cell it releases
#: (its ``ComputeChecksums`` step). A notebook in nbgrader's *source* form (the reference solution,
#: ``solutions/dataNN/dataNN.ipynb``) has none of them; a copy of the release has them all.
RELEASE_COMPUTED_KEYS = ("checksum", "cell_type")

#: Text put in an answer cell that was missing from the submission.
RESTORED_ANSWER_TEXT = (
    "# This answer cell was missing from the submission; the grader put it back empty.\n"
    "# Code you wrote in other cells of the notebook still runs.\n"
)


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


def _same_nbgrader(cell, ref) -> bool:
    """Whether ``cell`` carries ``ref``'s nbgrader metadata. A key nbgrader's release computes
    (:data:`RELEASE_COMPUTED_KEYS`) counts only when ``cell`` has it: a notebook in source form
    (the reference solution) lacks them all, and that is no edit; a changed checksum is."""
    mine, theirs = _nbg(cell), dict(_nbg(ref))
    for key in RELEASE_COMPUTED_KEYS:
        if key not in mine:
            theirs.pop(key, None)
    return mine == theirs


def _same_text(cell, ref) -> bool:
    """Whether the read-only or test cell ``cell`` holds ``ref``'s text. A cell in nbgrader's
    source form (none of :data:`RELEASE_COMPUTED_KEYS`: the reference solution) also matches
    when its text is ``ref``'s once its hidden-test region is taken out, as nbgrader's release
    takes it out (``ClearHiddenTests``)."""
    mine, theirs = cell.get("source", ""), ref.get("source", "")
    if mine.strip() == theirs.strip():
        return True
    if any(key in _nbg(cell) for key in RELEASE_COMPUTED_KEYS):
        return False
    from nbgrader.preprocessors import ClearHiddenTests  # here, not at the top: nbgrader is slow to import

    released = copy.deepcopy(cell)
    try:
        ClearHiddenTests()._remove_hidden_test_region(released)
    except RuntimeError:  # an unclosed or nested hidden-test region: not the instructor's text
        return False
    return released.get("source", "").strip() == theirs.strip()


def _no_grade_id(number: int, nbg: dict) -> str:
    """The repair note for cell ``number`` whose nbgrader metadata ``nbg`` has no ``grade_id`` (removed)."""
    marked = [name for key, name in (("grade", "a graded test (grade: true)"), ("solution", "an answer cell"),
                                     ("locked", "a read-only cell"), ("task", "a task")) if nbg.get(key)]
    if not marked:
        return f"cell {number} carried nbgrader metadata without a grade_id; it runs as an ordinary cell"
    return (f"cell {number} is marked in its nbgrader metadata as {' and '.join(marked)} but has no grade_id, "
            "which nbgrader cannot grade (it would stop the whole notebook): the marking was removed, and the "
            "cell runs as an ordinary, ungraded cell. Only the exercise's own cells are graded: do not add or "
            "copy nbgrader metadata")


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


def lint_notebook(raw: bytes | str, release, *, kernelspec: dict | None = None, exercise: str | None = None,
                  exercises: Mapping[str, frozenset[str]] | None = None) -> LintResult:
    """Check a submitted notebook against its release notebook and repair its structure.

    Args:
        raw: the submitted file's bytes (or text).
        release: the release notebook (``nbformat`` v4), with nbgrader metadata on every
            answer, test and read-only cell.
        kernelspec: the kernelspec to force; default :data:`raydata_course.layout.KERNELSPEC`.
        exercise: the id of the exercise ``release`` is, and ``exercises`` every exercise's
            grade ids (:func:`exercise_grade_ids`): with both, a notebook that belongs to
            another exercise (:func:`exercise_of`) is ``invalid``, and says whose it is,
            instead of being repaired into ``release``'s shape.

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
        return _lint(raw, rel_ids, rel_by_id, kernelspec, exercise, exercises)
    except Exception as exc:  # a shape nothing above foresaw: the student's file, not the run, fails
        return _invalid(f"the grader could not read the notebook's structure ({_why(exc)}); {_RESAVE}")


def _lint(raw: bytes | str, rel_ids: list[str], rel_by_id: dict, kernelspec: dict, exercise: str | None,
          exercises: Mapping[str, frozenset[str]] | None) -> LintResult:
    from nbgrader.utils import is_locked, is_solution  # here, not at the top: nbgrader is slow to import

    nb, why = read_notebook(raw)
    if nb is None:
        return _invalid(why)
    if not nb.cells:
        return _invalid("the notebook has no cells (an empty notebook): submit the exercise notebook with your answers")
    owner = exercise_of(nb, exercises) if exercise and exercises else None
    if owner and owner != exercise:
        theirs = sorted({gid for c in nb.cells if (gid := grade_id(c))} & (exercises[owner] - set(rel_ids)))
        return _invalid(
            f"this is {owner}'s notebook, filed under {exercise}: its cells are {owner}'s "
            f"({', '.join(theirs[:3])}{', ...' if len(theirs) > 3 else ''}), none is {exercise}'s. Submit it as "
            f"{owner} ({owner}/{owner}.ipynb), and your {exercise} notebook as {exercise} ({exercise}/{exercise}.ipynb)")
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
    for number, cell in enumerate(nb.cells, 1):
        meta = cell["metadata"]
        if "nbgrader" in meta and (not isinstance(meta["nbgrader"], dict)
                                   or "grade_id" in meta["nbgrader"] and not isinstance(meta["nbgrader"]["grade_id"], str)):
            meta.pop("nbgrader")
            repairs.append("a cell carried malformed nbgrader metadata; it runs as an ordinary cell")
        elif "nbgrader" in meta and not meta["nbgrader"].get("grade_id"):
            repairs.append(_no_grade_id(number, meta.pop("nbgrader")))
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
            if not _same_text(cell, ref):
                repairs.append(f"the {_kind(ref)} {gid!r} was edited; the grader uses the original")
            elif not _same_nbgrader(cell, ref):
                repairs.append(f"the nbgrader metadata of {gid!r} was edited; the grader uses the original")
            cell["source"] = ref["source"]
            cell["metadata"] = copy.deepcopy(ref["metadata"])
        else:
            if not _same_nbgrader(cell, ref):
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
