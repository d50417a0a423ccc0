"""Before each notebook: the grading folder's gradebook and the oracles are what they should be.

A graded kernel runs in a sandbox that cannot reach the gradebook or the oracles. Should that
ever fail (a kernel bug, a grader run with ``--no-sandbox``), a notebook could have changed what
every later notebook is graded against: the instructor's test cells that nbgrader restores
from the gradebook, or the judge's checks. So the grader checks both before each notebook:

- :func:`gradebook_problems`: every read-only and grade cell of the release has a copy in the
  gradebook whose source, with nbgrader's hidden-test blocks removed, is the release's, and
  each grade cell's points are the release's;
- :func:`oracle_changes`: every oracle file still has the SHA-256 it had when the run started
  (:func:`raydata_grader.judge.oracle_digests`).
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat

from raydata_grader.course_dir import release
from raydata_grader.judge import oracle_digests
from raydata_grader.paths import oracles_dir

__all__ = ["IntegrityError", "gradebook_problems", "oracle_changes", "check_integrity"]


class IntegrityError(RuntimeError):
    """The gradebook or the oracles changed during a grading run; the run stops."""


def _without_hidden_tests(source: str) -> str:
    from nbgrader.preprocessors import ClearHiddenTests

    cell = nbformat.v4.new_code_cell(source)
    try:
        ClearHiddenTests()._remove_hidden_test_region(cell)
    except RuntimeError:
        return source
    return cell.source


def gradebook_problems(course_dir: str | os.PathLike, assignment: str, release_nb) -> list[str]:
    """What differs between the gradebook's copy of ``assignment`` and its release notebook.

    Args:
        course_dir: the grading folder (its ``gradebook.db``).
        assignment: assignment id (its notebook has the same name).
        release_nb: the release notebook (nbformat).

    Returns:
        One sentence per difference; empty when the gradebook matches the release.
    """
    from nbgrader.api import Gradebook, MissingEntry

    problems: list[str] = []
    url = f"sqlite:///{Path(course_dir).resolve() / 'gradebook.db'}"
    try:
        with Gradebook(url) as gb:
            notebook = gb.find_notebook(assignment, assignment)
            sources = {c.name: c for c in notebook.source_cells}
            points = {c.name: float(c.max_score) for c in notebook.grade_cells}
    except MissingEntry:
        return [f"the gradebook has no notebook {assignment!r}"]
    for cell in release_nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id")
        if not gid or not (meta.get("locked") or meta.get("grade")):
            continue
        stored = sources.get(gid)
        if stored is None:
            problems.append(f"cell {gid!r} is missing from the gradebook")
            continue
        if meta.get("locked") and _without_hidden_tests(stored.source or "").rstrip() != cell.source.rstrip():
            problems.append(f"the gradebook's copy of cell {gid!r} differs from the release")
        if meta.get("grade") and points.get(gid) != float(meta.get("points", 0) or 0):
            problems.append(f"grade cell {gid!r} is worth {points.get(gid)} points in the gradebook, "
                            f"{meta.get('points')} in the release")
    return problems


def oracle_changes(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """Oracle files added, removed or changed between two :func:`~raydata_grader.judge.oracle_digests`."""
    changed = [f"{name} changed" for name in sorted(set(before) & set(now)) if before[name] != now[name]]
    changed += [f"{name} was removed" for name in sorted(set(before) - set(now))]
    changed += [f"{name} was added" for name in sorted(set(now) - set(before))]
    return changed


def check_integrity(out: Path, assignment: str, release_nb, digests: dict[str, str], log) -> None:
    """Stop the run if the oracles changed; restore the gradebook's test cells if they did.

    The grading run calls it for each assignment before any job, and again before it merges
    each result into the grading folder ``out``.

    Raises:
        IntegrityError: if an oracle file changed since the run started, or the gradebook
            still differs from the release after it was regenerated.
    """
    changes = oracle_changes(digests, oracle_digests(oracles_dir()))
    if changes:
        raise IntegrityError(f"the oracles changed while the class was being graded ({'; '.join(changes)}): "
                             "the grades already written were judged by the old ones. Check autograder/oracles/ "
                             "and grade again with --force.")
    problems = gradebook_problems(out, assignment, release_nb)
    if problems:
        log(f"[grade] WARNING: the gradebook's copy of {assignment} no longer matches the release "
            f"({'; '.join(problems[:3])}); regenerating it before the next notebook")
        release((assignment,), course_dir=out)
        problems = gradebook_problems(out, assignment, release_nb)
        if problems:
            raise IntegrityError(f"the gradebook in {out} does not match the release of {assignment} "
                                 f"({'; '.join(problems[:3])}), even after regenerating it: delete the grading "
                                 "folder and grade again.")
