"""Points held for an instructor's review, and the instructor's decision (grader only).

Some checks rest on a fact only the student's process can report (:mod:`raydata_grader.facts`).
When the notebook holds code that could forge such a fact (:mod:`raydata_grader.forging`),
the points those checks passed are **held**: the row's status is ``review``, its score leaves
them out, its ``held`` field keeps them, and the class's gradebook gives each held grade cell a
manual score of 0 flagged "needs manual grade", so formgrader shows it waiting. Every other
point (recomputed or observed outside the kernel) counts as usual. The instructor reads the
quoted lines (``grades.json``'s ``findings``, the notes on the feedback page, and
``python -m raydata_grader review``) and decides:

- ``python -m raydata_grader review --out DIR STUDENT ASSIGNMENT --accept``: the held points
  are given (the gradebook's automatic scores count again);
- ``... --reject``: they stay at 0 (the manual scores of 0 stay, no longer flagged);
- or in formgrader: saving a manual score for every held cell decides it; the next ``review``
  or ``grade`` run takes that score into the row.

Either way the row becomes ``graded`` (``repaired`` if lint repaired it) and its message says
how it was decided. Grading the same submission again keeps the decision (an unchanged
submission is not graded again); a new submission is judged afresh.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from raydata_grader.records import Row, load_rows, save_rows

__all__ = ["cells_to_hold", "hold", "hold_in_gradebook", "release_in_gradebook", "decide", "sync_formgrader", "pending",
           "review_main"]


def cells_to_hold(reported_cells, imitable_cells: dict[str, list[str]], finding_rules) -> set[str]:
    """The grade cells whose points a notebook with findings has held.

    Args:
        reported_cells: cells whose verdict rests on a reported fact (held on any finding).
        imitable_cells: ``{cell: the scan's rules}`` for cells whose verdict rests on an observed
            fact that code could imitate (:attr:`raydata_grader.facts.Fact.forged_by`).
        finding_rules: the rules the notebook's findings tripped.

    Returns:
        The reported cells, and the imitable cells whose rules the findings tripped.
    """
    tripped = set(finding_rules)
    return set(reported_cells) | {gid for gid, rules in imitable_cells.items() if tripped & set(rules)}


def hold(row: Row, reported_cells: list[str] | set[str], findings: list[str]) -> Row:
    """``row`` with the points of ``reported_cells`` held when there are ``findings``.

    Args:
        row: the row as grading made it (its ``cells`` from the gradebook's automatic scores).
        reported_cells: grade cells whose verdict rests on a reported fact, or on an observed
            fact that one of the findings could imitate.
        findings: the lines that could forge one (:meth:`raydata_grader.forging.Finding.describe`).

    Returns:
        The row, with ``findings`` kept; when a reported cell scored points, ``review`` status,
        those points moved from ``cells`` and ``score`` to ``held``, and the message saying so.
    """
    if not findings:
        return row
    held = {gid: list(row.cells[gid]) for gid in sorted(reported_cells)
            if gid in row.cells and row.cells[gid][0] > 0}
    first = findings[0] if len(findings) == 1 else f"{findings[0]} (and {len(findings) - 1} more)"
    if not held:
        note = ("the notebook holds code that could forge what its kernel reports to the grader, but no point "
                f"rested on a reported fact: {first}")
        return replace(row, findings=list(findings), notes=[*row.notes, note],
                       message="; ".join(x for x in (row.message, note) if x))
    points = sum(v[0] for v in held.values())
    cells = {gid: ([0.0, v[1]] if gid in held else list(v)) for gid, v in row.cells.items()}
    note = (f"{points:g} point(s) held for the instructor's review ({', '.join(held)}): those checks rest on facts "
            f"the kernel reported or that the notebook's code could imitate, and it holds code that could forge "
            f"them: {first}")
    return replace(row, status="review", score=max(row.score - points, 0.0), cells=cells, held=held,
                   findings=list(findings), notes=[*row.notes, note],
                   message="; ".join(x for x in (row.message, note) if x))


def _url(out: str | os.PathLike) -> str:
    return f"sqlite:///{Path(out).resolve() / 'gradebook.db'}"


def hold_in_gradebook(out: str | os.PathLike, row: Row) -> None:
    """Give each of ``row.held``'s grade cells a manual score of 0 flagged for manual grading."""
    if not row.held:
        return
    from nbgrader.api import Gradebook

    with Gradebook(_url(out)) as gb:
        for gid in row.held:
            grade = gb.find_grade(gid, row.assignment, row.assignment, row.key)
            grade.manual_score = 0.0
            grade.needs_manual_grade = True
        gb.db.commit()


def release_in_gradebook(out: str | os.PathLike, earlier: Row | None) -> None:
    """Undo an earlier hold that nobody decided (before the submission is graded again).

    A held cell still at manual score 0 and flagged goes back to its automatic score; a cell an
    instructor graded in formgrader meanwhile keeps their score.
    """
    if earlier is None or not earlier.held or earlier.status != "review":
        return
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(_url(out)) as gb:
        for gid in earlier.held:
            try:
                grade = gb.find_grade(gid, earlier.assignment, earlier.assignment, earlier.key)
            except MissingEntry:
                continue
            if grade.needs_manual_grade and grade.manual_score == 0:
                grade.manual_score = None
                grade.needs_manual_grade = grade.auto_score is None
        gb.db.commit()


def _decided_status(row: Row) -> str:
    return "repaired" if row.repairs else "graded"


def decide(out: str | os.PathLike, student: str, assignment: str, accept: bool, note: str = "") -> Row:
    """Record the instructor's decision on one row in review.

    Args:
        out: the grading folder.
        student, assignment: the row (the student's name as in ``grades.csv``).
        accept: give the held points (True) or keep them at 0 (False).
        note: a few words for the row's message (who decided, why).

    Returns:
        The updated row (saved in ``grades.json`` and ``grades.csv``; feedback rewritten).

    Raises:
        KeyError: if there is no such row.
        ValueError: if the row is not in review.
    """
    from nbgrader.api import Gradebook

    out = Path(out)
    rows, _ = load_rows(out)
    row = rows.get((student, assignment))
    if row is None:
        raise KeyError(f"no row for {student}/{assignment} in {out / 'grades.json'}")
    if row.status != "review" or not row.held:
        raise ValueError(f"{student}/{assignment} is {row.status}, not in review: nothing is held")
    with Gradebook(_url(out)) as gb:
        for gid in row.held:
            grade = gb.find_grade(gid, assignment, assignment, row.key)
            grade.manual_score = None if accept else 0.0
            grade.needs_manual_grade = False
        gb.db.commit()
    given = sum(v[0] for v in row.held.values()) if accept else 0.0
    cells = {gid: (list(row.held[gid]) if accept and gid in row.held else list(v)) for gid, v in row.cells.items()}
    said = (f"reviewed: the {sum(v[0] for v in row.held.values()):g} held point(s) were "
            + ("given" if accept else "not given") + (f" ({note})" if note else ""))
    decided = replace(row, status=_decided_status(row), score=row.score + given, cells=cells, held={},
                      notes=[*row.notes, said], message="; ".join(x for x in (row.message, said) if x))
    rows[(student, assignment)] = decided
    save_rows(out, rows)
    _rewrite_feedback(out, decided)
    return decided


def _rewrite_feedback(out: Path, row: Row) -> None:
    from raydata_grader.feedback import write_feedback

    graded = (out / "autograded" / row.key / row.assignment).is_dir()
    try:
        write_feedback(out, row, "", graded)
    except Exception as exc:  # noqa: BLE001 - the decision is recorded; say what failed
        print(f"[review] {row.student}/{row.assignment}: could not rewrite feedback ({type(exc).__name__}: {exc})")


def sync_formgrader(out: str | os.PathLike) -> list[Row]:
    """Take into the rows the decisions an instructor made in formgrader; return the rows decided.

    A row in review is decided when every held grade cell has been saved in formgrader (nbgrader
    then clears its "needs manual grade" flag): the cell's score is the gradebook's (the manual
    score if one is set, else the automatic one).
    """
    from nbgrader.api import Gradebook, MissingEntry

    out = Path(out)
    if not (out / "gradebook.db").is_file() or not (out / "grades.json").is_file():
        return []
    rows, _ = load_rows(out)
    decided = []
    with Gradebook(_url(out)) as gb:
        for key, row in sorted(rows.items()):
            if row.status != "review" or not row.held:
                continue
            scores = {}
            try:
                for gid in row.held:
                    grade = gb.find_grade(gid, row.assignment, row.assignment, row.key)
                    if grade.needs_manual_grade:
                        break
                    scores[gid] = float(grade.score)
            except MissingEntry:
                continue
            if len(scores) != len(row.held):
                continue
            cells = {gid: ([scores[gid], v[1]] if gid in scores else list(v)) for gid, v in row.cells.items()}
            said = f"reviewed in formgrader: {sum(scores.values()):g} of the held point(s) given"
            rows[key] = replace(row, status=_decided_status(row), score=row.score + sum(scores.values()), cells=cells,
                                held={}, notes=[*row.notes, said], message="; ".join(x for x in (row.message, said) if x))
            decided.append(rows[key])
    if decided:
        save_rows(out, rows)
        for row in decided:
            _rewrite_feedback(out, row)
    return decided


def pending(out: str | os.PathLike) -> list[Row]:
    """Rows still in review, by student and assignment."""
    return [r for _, r in sorted(load_rows(out)[0].items()) if r.status == "review"]


def review_main(out: str, student: str | None, assignment: str | None, accept: bool, reject: bool, note: str) -> int:
    """The ``review`` command: list what is held, or decide one row. Exit status 0, or 2 on bad input."""
    out_dir = Path(out)
    if not (out_dir / "grades.json").is_file():
        print(f"[review] no grading folder at {out_dir} (no grades.json): grade a class first (make grade)")
        return 2
    for row in sync_formgrader(out_dir):
        print(f"[review] {row.student}/{row.assignment}: decided in formgrader, now {row.status} {row.score:g}/{row.max_score:g}")
    if student or assignment or accept or reject:
        if not (student and assignment) or accept == reject:
            print("[review] to decide, name the student and the assignment, and --accept or --reject")
            return 2
        try:
            row = decide(out_dir, student, assignment, accept, note)
        except (KeyError, ValueError) as exc:
            print(f"[review] {exc.args[0] if exc.args else exc}")
            return 2
        print(f"[review] {row.student}/{row.assignment}: {row.status} {row.score:g}/{row.max_score:g}: {row.notes[-1]}")
        return 0
    waiting = pending(out_dir)
    if not waiting:
        print("[review] nothing is held for review")
        return 0
    for row in waiting:
        points = sum(v[0] for v in row.held.values())
        print(f"{row.student}/{row.assignment}: {points:g} point(s) held in {', '.join(row.held)} "
              f"(scored {row.score:g}/{row.max_score:g} without them). The lines:")
        for line in row.findings:
            print(f"    {line}")
    print(f"[review] {len(waiting)} row(s) in review: decide each with "
          "`python -m raydata_grader review --out DIR STUDENT ASSIGNMENT --accept` (or --reject), or in formgrader")
    return 0
