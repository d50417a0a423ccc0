"""Mutants: plausible wrong answers, kept as fixtures, that the grader must not pass.

Each ``autograder/mutants/<assignment>/<name>.py`` defines ``ANSWERS`` (``{grade_id: code}``
replacing answer cells of the reference solution) and ``FAILS`` (the grade cells it must
fail), and may define ``OBSERVED_FAILS`` (those of them that only a grading in the sandbox
fails: the judge sees them from the host); its docstring says which mistake it makes. A
fixture named ``ok*`` with an empty
``FAILS`` is the opposite: a correct answer in another style, which must score full marks
(one that a check could fail by chance, for instance). :func:`mutant_groups` decides which mutants
can share one graded notebook, so the contract tests grade fewer notebooks.
"""

from __future__ import annotations

import ast
import collections
import os
from dataclasses import dataclass
from typing import Any

import nbformat

from raydata_course.classroom.lint import grade_id
from raydata_grader.answers import fill_answers, reference_submission, strip_solution_markers
from raydata_grader.paths import mutants_dir, source_notebook

__all__ = ["Mutant", "load_mutants", "part_of", "part_components", "mutant_groups", "mutant_submission"]


@dataclass(frozen=True)
class Mutant:
    """A plausible wrong answer kept as a fixture in ``autograder/mutants/<assignment>/``.

    Attributes:
        name: the fixture's file stem, e.g. ``m1_override_only``.
        description: the fixture's docstring: which mistake it makes.
        answers: ``{grade_id: code}`` replacing those answer cells of the reference answers.
        fails: grade cells that must score 0; every other grade cell must score full marks.
            Empty for a correct answer (``ok*``).
        observed_fails: those of ``fails`` that fail only where the judge observes the kernel's
            sandbox from the host (``OBSERVED_FAILS``; a split that is not a ``streaming_split``
            shows only in the sandbox's processes): graded without a sandbox, they pass.
    """

    name: str
    description: str
    answers: dict[str, str]
    fails: frozenset[str]
    observed_fails: frozenset[str] = frozenset()


def load_mutants(assignment: str, root: str | os.PathLike | None = None) -> list[Mutant]:
    """Load every mutant fixture of ``assignment``, sorted by name.

    Raises:
        ValueError: if a fixture lacks ``ANSWERS`` or ``FAILS``.
    """
    folder = mutants_dir(assignment, root)
    mutants = []
    for path in sorted(folder.glob("*.py")):
        namespace: dict[str, Any] = {}
        code = path.read_text()
        exec(compile(code, str(path), "exec"), namespace)
        if "ANSWERS" not in namespace or "FAILS" not in namespace:
            raise ValueError(f"{path} must define ANSWERS ({{grade_id: code}}) and FAILS (a set of grade_ids).")
        mutants.append(
            Mutant(path.stem, (namespace.get("__doc__") or "").strip(),
                   {k: v.strip("\n") + "\n" for k, v in namespace["ANSWERS"].items()},
                   frozenset(namespace["FAILS"]), frozenset(namespace.get("OBSERVED_FAILS", ())))
        )
    return mutants


def part_of(grade_id: str) -> str:
    """The exercise part a grade id belongs to: ``make_blocks_hidden`` -> ``make_blocks``."""
    return grade_id.rsplit("_", 1)[0]


def _defined_names(code: str) -> set[str]:
    """Names a cell defines at top level: functions, classes and assigned variables. Imports
    are left out: a module name means the same module in every cell, so it links nothing."""
    names: set[str] = set()
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _used_names(code: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}


def _only_definitions(code: str) -> bool:
    """True when running the cell only defines things: defs, classes, imports, docstrings."""
    allowed = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return all(isinstance(node, allowed) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
               for node in ast.parse(code).body)


def part_components(assignment: str, root: str | os.PathLike | None = None) -> dict[str, int]:
    """Group an exercise's parts by what their cells share, from the nbgrader source.

    Part ``X`` depends on part ``Y`` when ``X``'s answer or test cells (``X_answer``,
    ``X_visible``, ``X_hidden``) use a name that one of ``Y``'s cells defines at top level
    (a ``predict`` test calling the ``Predictor`` class of another part, or reading a
    variable that another part's visible test computed). Parts joined by such uses, in
    either direction, form one component.

    Returns:
        ``{part: component number}``; parts with the same number are coupled.
    """
    nb = nbformat.read(source_notebook(assignment, root), as_version=4)
    defines: dict[str, set[str]] = collections.defaultdict(set)
    uses: dict[str, set[str]] = collections.defaultdict(set)
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid is None or cell.cell_type != "code" or gid in ("setup", "teardown"):
            continue
        code = strip_solution_markers(cell.source)
        defines[part_of(gid)] |= _defined_names(code)
        uses[part_of(gid)] |= _used_names(code)
    parts = sorted(defines)
    component = {p: i for i, p in enumerate(parts)}
    for x in parts:
        for y in parts:
            if x != y and uses[x] & defines[y]:
                old, new = component[y], component[x]
                component = {p: (new if c == old else c) for p, c in component.items()}
    return component


def mutant_groups(assignment: str, mutants: list[Mutant],
                  root: str | os.PathLike | None = None) -> list[tuple[Mutant, ...]]:
    """Pack mutants that cannot affect each other's grade cells into shared notebooks.

    A mutant may share a notebook when its answer cells only define things (no statement
    that changes state when the cell runs, such as patching the grader) and every cell it
    fails belongs to a part coupled (:func:`part_components`) to a part it changes. Mutants
    in one group touch disjoint components, so the group's notebook must fail exactly the
    union of their ``fails``: each mutant's cells can fail only through its own answers.
    The others run alone. The contract tests grade one notebook per group.

    Returns:
        Groups in name order of their first mutant; every mutant appears in exactly one.
    """
    component = part_components(assignment, root)
    groups: list[tuple[list[Mutant], set[int]]] = []
    alone: list[Mutant] = []
    for mutant in mutants:
        changed = {component.get(part_of(g)) for g in mutant.answers}
        failed = {component.get(part_of(g)) for g in mutant.fails}
        if (None in changed | failed or not failed <= changed
                or not all(_only_definitions(code) for code in mutant.answers.values())):
            alone.append(mutant)
            continue
        for members, touched in groups:
            if not touched & changed:
                members.append(mutant)
                touched |= changed
                break
        else:
            groups.append(([mutant], set(changed)))
    out = [tuple(m) for m, _ in groups] + [(m,) for m in alone]
    return sorted(out, key=lambda g: g[0].name)


def mutant_submission(assignment: str, mutant: Mutant | tuple[Mutant, ...],
                      release_path: str | os.PathLike | None = None):
    """The reference submission with the answer cells of one mutant, or of a group of
    mutants (:func:`mutant_groups`), swapped in.

    Raises:
        ValueError: two mutants of the group replace the same answer cell.
    """
    group = mutant if isinstance(mutant, tuple) else (mutant,)
    answers = {k: v for m in group for k, v in m.answers.items()}
    if len(answers) != sum(len(m.answers) for m in group):
        raise ValueError(f"mutants {[m.name for m in group]} replace the same answer cell; grade them apart.")
    return fill_answers(reference_submission(assignment, release_path), answers)
