"""Grading helpers built on nbgrader 0.9.6.

Two audiences use this module:

- **Graded notebooks** call :func:`hidden_check` from inside their hidden-test blocks. The
  check itself lives in ``autograder/oracles/<assignment>.py``, which only the grader has;
  the notebook (and so the feedback HTML) holds nothing but the call. A failing check
  raises an ``AssertionError`` whose message tells the student what kind of input broke,
  never the hidden input or the expected value.
- **The course's tooling** (``make release``, ``make course``, the tests) uses the rest:
  load ``autograder/nbgrader_config.py``, regenerate ``exercises/`` from ``solutions/``,
  plant notebooks as submissions and autograde them with :class:`nbgrader.apps.NbGraderAPI`,
  and read per-cell scores back from the gradebook.

Examples:
    >>> strip_solution_markers("x = 1\\n### BEGIN SOLUTION\\ny = 2\\n### END SOLUTION\\n")
    'x = 1\\ny = 2\\n'
"""

from __future__ import annotations

import ast
import collections
import copy
import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from raydata_course._util import temporary_env

__all__ = [
    "ORACLES_ENV",
    "KERNEL_NAME",
    "ASSIGNMENTS",
    "HiddenOraclesUnavailable",
    "StderrToStdout",
    "RejectGraderAccess",
    "SubmissionScore",
    "hidden_check",
    "course_root",
    "nbgrader_config",
    "nbgrader_api",
    "source_notebook",
    "release_notebook",
    "reference_answers",
    "fill_answers",
    "strip_solution_markers",
    "release",
    "prepare_course_dir",
    "plant_submission",
    "autograde",
    "submission_score",
    "Mutant",
    "load_mutants",
    "reference_submission",
    "mutant_submission",
]

#: Environment variable naming the folder of hidden-test oracles (grader only).
ORACLES_ENV = "RAYDATA_COURSE_ORACLES"
#: The Jupyter kernel the course registers in its virtual environment, and forces on grading.
KERNEL_NAME = "raydata-course"


class HiddenOraclesUnavailable(RuntimeError):
    """A hidden test ran outside the grader, where the oracle modules are not available."""


# --------------------------------------------------------------------------- in notebooks


def hidden_check(assignment: str, check: str, *args: Any, **kwargs: Any) -> None:
    """Run hidden test ``check`` of ``assignment`` on the student's objects.

    The oracle is ``<$RAYDATA_COURSE_ORACLES>/<assignment>.py``; ``check`` names one of its
    functions, called as ``check(*args, **kwargs)``.

    Args:
        assignment: assignment id, e.g. ``"data01"``.
        check: name of the oracle function.
        *args: passed through, usually the student's functions.
        **kwargs: passed through.

    Raises:
        AssertionError: the check failed. The message is the oracle's student-facing
            explanation; the traceback stops here, so no oracle source reaches feedback.
        HiddenOraclesUnavailable: ``RAYDATA_COURSE_ORACLES`` is unset or lacks the module.
    """
    folder = os.environ.get(ORACLES_ENV)
    path = Path(folder, f"{assignment}.py") if folder else None
    if path is None or not path.is_file():
        raise HiddenOraclesUnavailable(
            f"Hidden tests for {assignment} run only in the course's grader "
            f"({ORACLES_ENV} is {'unset' if not folder else repr(folder)}). "
            "Students: use the visible tests and `Validate` instead."
        )
    spec = importlib.util.spec_from_file_location(f"_raydata_course_oracle_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    try:
        getattr(module, check)(*args, **kwargs)
    except AssertionError as exc:
        message = str(exc) or f"hidden test {check!r} failed"
    except HiddenOraclesUnavailable:
        raise
    except Exception as exc:  # the student's code raised inside the oracle
        message = (
            f"hidden test {check!r}: your code raised {type(exc).__name__}: {exc}. "
            "Run your function on a few datasets of different shapes to reproduce it."
        )
    else:
        return
    raise AssertionError(message) from None


# ------------------------------------------------------------------ nbgrader preprocessor


def _stderr_to_stdout_cell(cell):
    if cell.get("cell_type") == "code":
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output["name"] = "stdout"
    return cell


try:
    from nbgrader.preprocessors import NbGraderPreprocessor as _NbGraderPreprocessor
except ImportError:  # pragma: no cover - nbgrader is pinned in requirements.txt
    _NbGraderPreprocessor = object


class StderrToStdout(_NbGraderPreprocessor):
    """nbgrader preprocessor: a grade cell fails only when it raises, not when it logs.

    nbgrader 0.9.6 scores a code grade cell 0 when *any* output is on stderr
    (``nbgrader/utils.py``, ``determine_grade``). Ray writes its INFO log lines ("Starting
    execution of Dataset ...") and forwarded worker logs to stderr, so a correct answer would
    score 0. Run after ``Execute``, this relabels stderr stream outputs as stdout, keeping
    their text for the feedback. Exceptions (``error`` outputs) still fail the cell.

    Examples:
        >>> cell = {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stderr", "text": "x"}]}
        >>> _stderr_to_stdout_cell(cell)["outputs"][0]["name"]
        'stdout'
    """

    def preprocess_cell(self, cell, resources, cell_index):
        return _stderr_to_stdout_cell(cell), resources


#: What an answer cell may not mention: the hidden-test machinery and where it lives.
GRADER_ACCESS_PATTERN = r"hidden_check|raydata_course\.grading|RAYDATA_COURSE_ORACLES|autograder[/.\\]oracles|_raydata_course_oracle"


def _reject_grader_access_cell(cell):
    import re

    meta = cell.get("metadata", {})
    if cell.get("cell_type") != "code" or not meta.get("nbgrader", {}).get("solution"):
        return cell
    source = cell.get("source", "")
    match = re.search(GRADER_ACCESS_PATTERN, source)
    if match:
        meta.setdefault("raydata_course", {})["rejected_source"] = source
        cell["source"] = (
            "raise RuntimeError(\"The grader did not run this answer cell: it refers to "
            f"{match.group(0)!r}, part of the hidden-test machinery. Answer cells may not touch the "
            "grader; remove that line and submit again.\")"
        )
    return cell


class RejectGraderAccess(_NbGraderPreprocessor):
    """nbgrader preprocessor: an answer cell that reaches for the grader is not run.

    Hidden tests run in the student's kernel, so an answer cell could replace
    ``hidden_check`` or read the oracle files. The hidden cells reload the grading module
    before they call it, and this preprocessor, run before ``Execute``, replaces any answer
    cell that mentions the machinery (see ``GRADER_ACCESS_PATTERN``) with a ``raise`` that
    says why. The original source is kept in the cell's metadata
    (``raydata_course.rejected_source``), so nothing is lost.

    Examples:
        >>> cell = {"cell_type": "code", "metadata": {"nbgrader": {"solution": True}},
        ...         "source": "import raydata_course.grading as g; g.hidden_check = print"}
        >>> _reject_grader_access_cell(cell)["source"].startswith("raise RuntimeError")
        True
        >>> cell["metadata"]["raydata_course"]["rejected_source"][:6]
        'import'
    """

    def preprocess_cell(self, cell, resources, cell_index):
        return _reject_grader_access_cell(cell), resources


# ------------------------------------------------------------------------ course tooling


def course_root() -> Path:
    """Return the course's root folder (the one holding ``autograder/`` and ``solutions/``).

    ``$RAYDATA_COURSE_ROOT`` wins; otherwise the checkout this package is installed from
    (editable install), then the current folder and its parents.

    Raises:
        FileNotFoundError: if no folder with ``autograder/nbgrader_config.py`` is found.
    """
    candidates = []
    if os.environ.get("RAYDATA_COURSE_ROOT"):
        candidates.append(Path(os.environ["RAYDATA_COURSE_ROOT"]))
    candidates.append(Path(__file__).resolve().parents[2])
    here = Path.cwd().resolve()
    candidates.extend([here, *here.parents])
    for root in candidates:
        if (root / "autograder" / "nbgrader_config.py").is_file():
            return root
    raise FileNotFoundError(
        "Could not find the course root (a folder with autograder/nbgrader_config.py). Run "
        "from inside the course checkout or set RAYDATA_COURSE_ROOT."
    )


def _discover_assignments() -> tuple[str, ...]:
    """Ids ``dataNN`` with a source notebook ``solutions/<id>/<id>.ipynb``, in order."""
    try:
        solutions = course_root() / "solutions"
    except FileNotFoundError:
        return ()
    # The glob already limits both names to dataNN; the notebook must be named after its folder.
    return tuple(sorted(p.parent.name for p in solutions.glob("data[0-9][0-9]/data[0-9][0-9].ipynb")
                        if p.stem == p.parent.name))


#: The course's assignments, in order: every ``solutions/<id>/<id>.ipynb`` with ``id`` like
#: ``data01``, found when this module is imported (empty outside a course checkout).
ASSIGNMENTS: tuple[str, ...] = _discover_assignments()


def nbgrader_config(course_dir: str | os.PathLike | None = None, **overrides: Any):
    """Load ``autograder/nbgrader_config.py``, optionally re-rooted at ``course_dir``.

    Args:
        course_dir: run nbgrader in this folder instead of the course root (its own
            ``solutions/``, ``exercises/``, ``submitted/`` and ``gradebook.db``).
        **overrides: ``"Class.trait"`` keys set on top, e.g. ``{"Execute.timeout": 60}``.

    Returns:
        A ``traitlets.config.Config``.
    """
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    path = course_root() / "autograder" / "nbgrader_config.py"
    config = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    if course_dir is not None:
        course_dir = Path(course_dir).resolve()
        config.CourseDirectory.root = str(course_dir)
        config.CourseDirectory.db_url = f"sqlite:///{course_dir / 'gradebook.db'}"
    extra = Config()
    for key, value in overrides.items():
        cls, trait = key.split(".")
        extra[cls][trait] = value
    config.merge(extra)
    return config


def nbgrader_api(config):
    """Return an :class:`nbgrader.apps.NbGraderAPI` for ``config``, quiet about the exchange."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config)


def source_notebook(assignment: str, root: str | os.PathLike | None = None) -> Path:
    """Path of an assignment's nbgrader source notebook (``solutions/<id>/<id>.ipynb``)."""
    return Path(root or course_root()) / "solutions" / assignment / f"{assignment}.ipynb"


def release_notebook(assignment: str, root: str | os.PathLike | None = None) -> Path:
    """Path of an assignment's released notebook (``exercises/<id>/<id>.ipynb``)."""
    return Path(root or course_root()) / "exercises" / assignment / f"{assignment}.ipynb"


def strip_solution_markers(source: str) -> str:
    """Remove nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines from code."""
    lines = source.splitlines(keepends=True)
    kept = [ln for ln in lines if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
    return "".join(kept)


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def reference_answers(assignment: str, root: str | os.PathLike | None = None) -> dict[str, str]:
    """The reference solution of every answer cell, keyed by ``grade_id``.

    Returns:
        ``{grade_id: code}`` for each cell whose nbgrader metadata has ``solution: true``,
        with the solution markers removed.
    """
    nb = nbformat.read(source_notebook(assignment, root), as_version=4)
    return {
        _grade_id(c): strip_solution_markers(c.source)
        for c in nb.cells
        if c.get("metadata", {}).get("nbgrader", {}).get("solution")
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
    answer_ids = {
        _grade_id(c) for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    }
    unknown = set(answers) - answer_ids
    if unknown:
        raise KeyError(f"no answer cell with grade_id {sorted(unknown)}; answer cells: {sorted(answer_ids)}")
    for cell in nb.cells:
        if _grade_id(cell) in answers:
            cell.source = answers[_grade_id(cell)]
    return nb


def release(
    assignments: tuple[str, ...] = ASSIGNMENTS, course_dir: str | os.PathLike | None = None
) -> list[Path]:
    """Regenerate the student release of each assignment with ``nbgrader generate_assignment``.

    Args:
        assignments: assignment ids.
        course_dir: generate inside this folder (which must hold ``solutions/``) instead of
            the course root.

    Returns:
        The release notebooks written.

    Raises:
        RuntimeError: with nbgrader's log, if generation fails.
    """
    config = nbgrader_config(course_dir)
    api = nbgrader_api(config)
    root = Path(config.CourseDirectory.root)
    written = []
    for assignment in assignments:
        result = api.generate_assignment(assignment, force=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed:\n{result.get('log', '')}\n{result.get('error', '')}")
        written.append(release_notebook(assignment, root))
    return written


def prepare_course_dir(course_dir: str | os.PathLike, assignments: tuple[str, ...] = ASSIGNMENTS) -> Path:
    """Make a scratch nbgrader course: copy ``solutions/`` and generate the release there.

    Generating (rather than copying ``exercises/``) also records every assignment and its
    source cells in the scratch gradebook, which ``autograde`` needs.

    Args:
        course_dir: an empty or missing folder.
        assignments: assignment ids to release.

    Returns:
        ``course_dir`` as a :class:`~pathlib.Path`.

    Raises:
        FileExistsError: if ``course_dir`` exists and is not empty.
    """
    folder = Path(course_dir)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} is not empty; give prepare_course_dir a new folder.")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(course_root() / "solutions", folder / "solutions")
    release(assignments, course_dir=folder)
    return folder


def plant_submission(
    course_dir: str | os.PathLike, assignment: str, student: str, notebook
) -> Path:
    """Put ``notebook`` (an nbformat notebook or a path) where nbgrader expects a submission.

    Returns:
        ``<course_dir>/submitted/<student>/<assignment>/<assignment>.ipynb``.
    """
    target = Path(course_dir) / "submitted" / student / assignment / f"{assignment}.ipynb"
    if target.parent.exists():
        shutil.rmtree(target.parent)
    target.parent.mkdir(parents=True)
    if isinstance(notebook, (str, os.PathLike)):
        shutil.copyfile(notebook, target)
    else:
        nbformat.write(notebook, target)
    return target


@dataclass
class SubmissionScore:
    """Scores of one autograded submission, read from nbgrader's gradebook.

    Attributes:
        assignment: assignment id.
        student: student id.
        score: points earned.
        max_score: points available.
        cells: ``{grade_id: (score, max_score)}`` for every grade cell.
        success: whether ``nbgrader autograde`` completed.
        log: nbgrader's captured log.
    """

    assignment: str
    student: str
    score: float
    max_score: float
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)
    success: bool = True
    log: str = ""


def autograde(
    course_dir: str | os.PathLike,
    assignment: str,
    student: str,
    *,
    env: dict[str, str] | None = None,
    **overrides: Any,
) -> SubmissionScore:
    """Autograde one planted submission with hidden oracles available, and read its scores.

    Args:
        course_dir: the course folder holding ``solutions/``, ``submitted/`` and the gradebook.
        assignment: assignment id.
        student: student id (a folder under ``submitted/``).
        env: extra environment for the grading kernel, e.g. ``{"RAY_ADDRESS": addr}`` to grade
            on a running cluster instead of starting one per notebook.
        **overrides: nbgrader config overrides, see :func:`nbgrader_config`.

    Returns:
        A :class:`SubmissionScore`. ``success`` is False when nbgrader could not grade the
        notebook; the score is then 0 and ``log`` says why.
    """
    config = nbgrader_config(course_dir, **overrides)
    api = nbgrader_api(config)
    oracles = str(course_root() / "autograder" / "oracles")
    with temporary_env({ORACLES_ENV: oracles, "RAYDATA_COURSE_HEADLESS": "1", **(env or {})}):
        result = api.autograde(assignment, student, force=True)
    log = (result.get("log") or "") + (result.get("error") or "")
    if not result["success"]:
        return SubmissionScore(assignment, student, 0.0, 0.0, {}, False, log)
    return submission_score(course_dir, assignment, student, log=log)


def submission_score(course_dir: str | os.PathLike, assignment: str, student: str, log: str = "") -> SubmissionScore:
    """Read one submission's total and per-cell scores from ``<course_dir>/gradebook.db``."""
    from nbgrader.api import Gradebook

    url = f"sqlite:///{Path(course_dir).resolve() / 'gradebook.db'}"
    with Gradebook(url) as gb:
        sub = gb.find_submission(assignment, student)
        cells = {
            g.name: (float(g.score), float(g.max_score)) for nb in sub.notebooks for g in nb.grades
        }
        return SubmissionScore(assignment, student, float(sub.score), float(sub.max_score), cells, True, log)


# ---------------------------------------------------------------------------- mutants


@dataclass(frozen=True)
class Mutant:
    """A plausible wrong answer kept as a fixture in ``autograder/mutants/<assignment>/``.

    Attributes:
        name: the fixture's file stem, e.g. ``m1_override_only``.
        description: the fixture's docstring: which mistake it makes.
        answers: ``{grade_id: code}`` replacing those answer cells of the reference answers.
        fails: grade cells that must score 0; every other grade cell must score full marks.
    """

    name: str
    description: str
    answers: dict[str, str]
    fails: frozenset[str]


def load_mutants(assignment: str, root: str | os.PathLike | None = None) -> list[Mutant]:
    """Load every mutant fixture of ``assignment``, sorted by name.

    Raises:
        ValueError: if a fixture lacks ``ANSWERS`` or ``FAILS``.
    """
    folder = Path(root or course_root()) / "autograder" / "mutants" / assignment
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
                   frozenset(namespace["FAILS"]))
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
        gid = _grade_id(cell)
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


def reference_submission(assignment: str, release_path: str | os.PathLike | None = None):
    """The release notebook with every answer cell filled with the reference solution."""
    release_nb = nbformat.read(release_path or release_notebook(assignment), as_version=4)
    return fill_answers(release_nb, reference_answers(assignment))


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
