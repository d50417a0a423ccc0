"""Reference answers into a release notebook: the submission that must score full marks.

Examples:
    >>> strip_solution_markers("x = 1\\n### BEGIN SOLUTION\\ny = 2\\n### END SOLUTION\\n")
    'x = 1\\ny = 2\\n'
"""

from __future__ import annotations

import copy
import os

import nbformat
from nbgrader.utils import is_solution

from raydata_course.classroom.lint import grade_id
from raydata_grader.paths import release_notebook, source_notebook

__all__ = ["strip_solution_markers", "reference_answers", "fill_answers", "reference_submission"]


def strip_solution_markers(source: str) -> str:
    """Remove nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines from code."""
    lines = source.splitlines(keepends=True)
    kept = [ln for ln in lines if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
    return "".join(kept)


def reference_answers(assignment: str, root: str | os.PathLike | None = None) -> dict[str, str]:
    """The reference solution of every answer cell, keyed by ``grade_id``.

    Returns:
        ``{grade_id: code}`` for each cell whose nbgrader metadata has ``solution: true``,
        with the solution markers removed.
    """
    nb = nbformat.read(source_notebook(assignment, root), as_version=4)
    return {
        grade_id(c): strip_solution_markers(c.source)
        for c in nb.cells
        if is_solution(c)
    }


def fill_answers(notebook, answers: dict[str, str]):
    """Return a copy of a release notebook with answer cells replaced.

    Args:
        notebook: an ``nbformat`` notebook, usually the release.
        answers: ``{grade_id: code}``; every key must name an answer cell.

    Raises:
        KeyError: if a ``grade_id`` in ``answers`` is not an answer cell of the notebook.
    """
    nb = copy.deepcopy(notebook)
    answer_ids = {grade_id(c) for c in nb.cells if is_solution(c)}
    unknown = set(answers) - answer_ids
    if unknown:
        raise KeyError(f"no answer cell with grade_id {sorted(unknown)}; answer cells: {sorted(answer_ids)}")
    for cell in nb.cells:
        if grade_id(cell) in answers:
            cell.source = answers[grade_id(cell)]
    return nb


def reference_submission(assignment: str, release_path: str | os.PathLike | None = None):
    """The release notebook with every answer cell filled with the reference solution."""
    release_nb = nbformat.read(release_path or release_notebook(assignment), as_version=4)
    return fill_answers(release_nb, reference_answers(assignment))
