"""Where each fact a check rests on is observed: the grader's inventory of trust (grader only).

Every check of the oracles (``@judges`` in ``autograder/oracles/<assignment>.py``) names the
facts its verdict rests on, and for each one where the judge gets it:

- :func:`recomputed`: the judge recomputes it from plain values the student's code returned
  (rows, arrays, tables, predictions), or from files it reads itself, and compares it with
  what it computed from its own inputs. A student earns it only by returning right values;
- :func:`observed`: the judge sees it from outside the student's Python process: a call it
  timed itself, the sandbox's ``/dev/shm`` or ``/tmp`` read from the host, the files the
  sandbox opened or wrote (the kernel's inotify and fanotify events), the processes running in
  the sandbox's PID namespace and their titles (:mod:`raydata_grader.outside`);
- :func:`reported`: a value the student's process computed and sent (a class's bases, a plan's
  compute strategy, Ray Data's own limit, a measurement of the notebook's own run). Code in
  the student's process can change how such a value is computed, so a reported fact never
  earns a point on its own: a notebook whose cells hold code that could forge one
  (:mod:`raydata_grader.forging`) has the points of every check that rests on a reported fact
  held for an instructor's review (:mod:`raydata_grader.review`).

``python -m raydata_grader inventory`` writes the table of every grade cell and its facts
(``docs/grader/inventory.md``); with ``--check`` it fails when a check names no fact or the
table on disk is not what the oracles say.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from raydata_grader.forging_tables import RULES

__all__ = ["RECOMPUTED", "OBSERVED", "REPORTED", "KINDS", "Fact", "recomputed", "observed", "reported",
           "facts_of", "rests_on_reported", "forged_by", "inventory_rows", "inventory_markdown", "InventoryError"]

RECOMPUTED = "recomputed"
OBSERVED = "observed outside"
REPORTED = "reported"
#: The kinds, from the strongest to the weakest.
KINDS = (RECOMPUTED, OBSERVED, REPORTED)


@dataclass(frozen=True)
class Fact:
    """One fact a check's verdict rests on.

    Attributes:
        kind: :data:`RECOMPUTED`, :data:`OBSERVED` or :data:`REPORTED`.
        what: the fact, in a few words ("every row's phenol_ratio", "the UDF's time").
        how: where the judge gets it ("each call timed by the judge", "the sandbox's /dev/shm
            read from the host").
        forged_by: for an observed fact that code in the sandbox could still imitate (a Ray
            actor of the student's named like Ray Data's, a private copy of a file the judge
            counts the opens of), the rules of :mod:`raydata_grader.forging` that flag such
            code: when the notebook trips one, the check's points are held for review as if
            the fact were reported.
    """

    kind: str
    what: str
    how: str
    forged_by: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"a fact's kind is one of {KINDS}, not {self.kind!r}")
        if not self.what.strip() or not self.how.strip():
            raise ValueError("a fact says what it is and how the judge gets it")
        unknown = set(self.forged_by) - set(RULES)
        if unknown:
            raise ValueError(f"forged_by names rules the scan does not have: {sorted(unknown)} (rules: {RULES})")
        if self.forged_by and self.kind != OBSERVED:
            raise ValueError("only an observed fact names forged_by (a reported fact is held on any finding)")


def recomputed(what: str, how: str = "recomputed by the judge from the values returned") -> Fact:
    """A fact the judge recomputes from returned plain values or files it reads itself."""
    return Fact(RECOMPUTED, what, how)


def observed(what: str, how: str, forged_by: tuple[str, ...] = ()) -> Fact:
    """A fact the judge sees from outside the student's process (``how`` says from where;
    ``forged_by``: the scan's rules that flag code which could imitate it, see :class:`Fact`)."""
    return Fact(OBSERVED, what, how, tuple(forged_by))


def reported(what: str, how: str) -> Fact:
    """A value the student's process computed and sent (``how`` says by what code)."""
    return Fact(REPORTED, what, how)


def facts_of(check: Callable) -> tuple[Fact, ...]:
    """The facts a check declared (``@judges(..., facts=...)``); empty when it declared none."""
    return tuple(getattr(check, "__facts__", ()))


def rests_on_reported(check: Callable) -> bool:
    """True when the check's verdict rests on at least one :func:`reported` fact."""
    return any(f.kind == REPORTED for f in facts_of(check))


def forged_by(check: Callable) -> list[str]:
    """The scan's rules that could imitate one of the check's observed facts (sorted, no repeats)."""
    return sorted({rule for f in facts_of(check) for rule in f.forged_by})


class InventoryError(ValueError):
    """A check that names no fact, or an inventory on disk that the oracles no longer match."""


def inventory_rows(assignments: tuple[str, ...], oracles: str | os.PathLike) -> list[dict]:
    """One row per grade cell and fact: ``{"assignment", "grade_id", "kind", "what", "how"}``.

    Grade cells come in the source notebook's order.

    Raises:
        InventoryError: if a grade cell's check declares no fact, or a grade cell has no check.
    """
    from raydata_course.classroom.lint import grade_id as _grade_id
    from raydata_grader.judge import load_checks
    from raydata_grader.paths import source_notebook

    import nbformat

    rows, missing = [], []
    for assignment in assignments:
        checks = load_checks(assignment, oracles)
        nb = nbformat.read(source_notebook(assignment), as_version=4)
        grade_ids = [_grade_id(c) for c in nb.cells
                     if c.get("cell_type") == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")]
        for gid in grade_ids:
            check = checks.get(gid)
            if check is None:
                missing.append(f"{assignment}/{gid}: no check judges this grade cell")
                continue
            facts = facts_of(check)
            if not facts:
                missing.append(f"{assignment}/{gid}: its check {check.__name__} names no fact "
                               "(@judges(..., facts=(recomputed(...), observed(...), reported(...))))")
            for fact in facts:
                rows.append({"assignment": assignment, "grade_id": gid, "check": check.__name__,
                             "kind": fact.kind, "what": fact.what, "how": fact.how,
                             "forged_by": list(fact.forged_by)})
    if missing:
        raise InventoryError("the inventory is incomplete:\n" + "\n".join(missing))
    return rows


def inventory_markdown(rows: list[dict]) -> str:
    """The inventory as a page: counts by kind, then one table per assignment."""
    from raydata_course.tables import markdown_table

    counts = {k: sum(r["kind"] == k for r in rows) for k in KINDS}
    cells = {(r["assignment"], r["grade_id"]) for r in rows}
    held = {(r["assignment"], r["grade_id"]) for r in rows if r["kind"] == REPORTED}
    imitable = {(r["assignment"], r["grade_id"]) for r in rows if r.get("forged_by")} - held
    lines = [
        "# What each grade cell rests on",
        "",
        "Generated by `python -m raydata_grader inventory` from the `@judges` checks in "
        "`autograder/oracles/`; do not edit by hand (the test suite fails when it is stale).",
        "",
        "- **recomputed**: the judge recomputes the fact from plain values the student's code returned, "
        "or from files it reads itself;",
        "- **observed outside**: the judge sees it from outside the student's Python process (a call it timed, "
        "the sandbox's memory and files read from the host, the processes in the sandbox);",
        "- **reported**: the student's process computed it and sent it. Such a fact never earns a point on its "
        "own: when the notebook holds code that could forge one, the check's points are held for review.",
        "",
        "An observed fact that code in the sandbox could still imitate names the scan's rules that flag such "
        "code (\"held if\"): a notebook that trips one has that check's points held for review too.",
        "",
        f"{len(cells)} grade cells; facts: " + ", ".join(f"{counts[k]} {k}" for k in KINDS)
        + f"; {len(held)} grade cells rest on at least one reported fact, and {len(imitable)} more on an "
        "observed fact that flagged code could imitate.",
        "",
    ]
    for assignment in sorted({r["assignment"] for r in rows}):
        mine = [r for r in rows if r["assignment"] == assignment]
        lines += [f"## {assignment}", "",
                  markdown_table(["grade cell", "fact", "kind", "where the judge gets it", "held if"],
                                 [[f"`{r['grade_id']}`", r["what"], r["kind"], r["how"],
                                   ", ".join(f"`{x}`" for x in r.get("forged_by", []))] for r in mine]), ""]
    return "\n".join(lines).rstrip() + "\n"


def write_inventory(path: str | os.PathLike, assignments: tuple[str, ...], oracles: str | os.PathLike,
                    check: bool = False) -> bool:
    """Write (or with ``check``, compare) the inventory page at ``path``; return whether it was current.

    Raises:
        InventoryError: if a check names no fact, or (``check``) the page on disk differs.
    """
    text = inventory_markdown(inventory_rows(assignments, oracles))
    path = Path(path)
    current = path.is_file() and path.read_text() == text
    if check:
        if not current:
            raise InventoryError(f"{path} is not what the oracles say: run `python -m raydata_grader inventory`")
        return True
    if not current:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return current
