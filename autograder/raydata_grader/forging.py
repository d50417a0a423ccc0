"""Code in a submission that could forge what the kernel reports to the judge (grader only).

Some facts a check rests on can only come from the student's own process (a class's bases,
a plan's compute strategy, the limit Ray Data's executor reported, a measurement of the
notebook's own run: :func:`raydata_grader.facts.reported`). Code in that process can change
how such a value is computed: replace a clock, a course helper or a Ray function, rewrite a
class's identity, reach another frame's variables, or run code the grader cannot read. This
module reads every code cell the student wrote (answer cells and cells they added; never the
instructor's locked cells, which nbgrader puts back) and lists the lines that do any of that.
It reads; it never runs anything.

A notebook with findings keeps every point that rests on recomputed or observed facts; the
points of checks that rest on a reported fact are held until an instructor decides
(:mod:`raydata_grader.review`). So the rules are broad where honest answers never go, and an
answer written from the chapters never meets one (the tests scan the reference solutions,
every mutant and independent correct answers). What is flagged, by rule:

- ``patches-imported``: an assignment or ``del`` into something imported (``time.perf_counter
  = ...``, ``SlowTrainer.step = ...``, ``pq.write_table[...]``), into a name that may hold one
  however it got there (an alias, a for loop or ``with`` over it, a list, a condition, tuple
  unpacking, a parameter's default, a class attribute, a function that returns it: the names
  are followed to a fixed point), or into the result of a call that may return one (a lambda,
  ``getattr``, one of the notebook's functions). Display settings (``pd.options``,
  ``plt.rcParams``, ``torch.backends``) may be set;
- ``module-as-value``: a module used other than as ``module.attribute`` (kept in a variable,
  passed to a function, put in a list, reached with ``getattr``): the way to patch it out of sight;
- ``imported-handed-over``: something imported handed to a function of the notebook's own that
  sets attributes of its parameters;
- ``dynamic-attribute``: ``setattr`` / ``delattr`` (but on ``self``), ``getattr`` with a
  computed name, a namespace changed through ``vars()``, ``globals()`` or ``locals()``, these
  builtins used as values (``put = setattr``, ``map(setattr, ...)``), and library calls that set
  or reach attributes by a name given as data (``operator.attrgetter``, ``functools.update_wrapper``,
  ``string.Formatter().get_field``, ``pydoc.locate``, ``pkgutil.resolve_name``, pytest's
  ``MonkeyPatch``, pandas' accessor registration);
- ``runs-hidden-code``: ``exec``, ``eval``, ``compile``, ``__import__``, ``breakpoint``,
  unpickling (``pickle``, ``cloudpickle`` wherever it is reached from, ``dill``, ``marshal``,
  ``joblib``, ``read_pickle``, ``allow_pickle=True``, ``weights_only=False``), ``runpy``, ``codeop``,
  and code written to run later: a string naming a ``.py``/``.pth`` file or ``sitecustomize``, an
  import of a module that is not installed, a relative import;
- ``introspection``: ``ctypes``, ``gc``, ``inspect``, ``importlib``, ``builtins``, ``types``'
  function and code types, frames and tracebacks' frames (``f_back``, ``f_globals``, ...),
  ``sys.modules``, ``sys._getframe``, ``sys.settrace`` and their kind, ``threading.settrace``,
  ``unittest.mock``;
- ``class-identity``: ``__class__``, ``__bases__``, ``__mro__``, ``__dict__``, ``__module__`` or
  ``__qualname__`` set, and the hooks that decide ``isinstance`` (``__instancecheck__``,
  ``__subclasscheck__``, ``__subclasshook__``, a metaclass ``mro``), and the other dunders
  that reach a function's or an object's insides (``__code__``, ``__globals__``, ``__closure__``,
  ``__setattr__``, ...);
- ``private-attribute``: an underscore attribute of something that is not the notebook's own
  object (``trainer._ids``, ``ray._private``);
- ``processes``: ``subprocess``, ``os.system`` and the ``os`` calls that start, replace, signal
  or retitle processes, ``multiprocessing``, ``pty``, ``signal``, ``setproctitle``, ``prctl``,
  and paths under ``/proc``;
- ``kernel-hooks``: ``get_ipython`` and IPython's modules, and cell magics or shell escapes
  other than ``%time``, ``%timeit`` and ``%matplotlib``;
- ``rebinds-imported``: a top-level ``def``, ``class``, assignment, import, ``*`` import or
  ``match`` capture that binds again a name the instructor's cells import or define (a locked
  cell would call the student's one);
- ``logging-hooks``: filters, ``dictConfig`` and its kind, and a logger's ``propagate``,
  ``disabled`` or methods set (the judge reads Ray Data's warnings from the log);
- ``grader-internals``: ``raydata_course.judging`` (the judge's helpers in the kernel), named in
  code or in a string, and the Ray hooks the judge installs its probes through;
- ``impostor-name``: a class, function, task name or string named like the Ray processes the
  judge observes (``SplitCoordinator``, ``MapWorker``, ``Write``), which would show the same
  process title (checked only where an observed fact names it, :mod:`raydata_grader.facts`);
- ``copies-files``: copying a file or holding its bytes (``shutil.copy``, ``read_bytes``,
  ``BytesIO``, a binary ``open``): a private copy of a file whose opens the judge counts.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path

from raydata_grader.forging_flow import safe_magic_calls, storing_functions, tainted_names
from raydata_grader.forging_rules import Scanner, own_logger_call
from raydata_grader.forging_tables import RULES, Finding

__all__ = ["Finding", "find_forging", "student_cells", "describe_findings", "RULES"]

def _transform(source: str) -> str:
    """A cell's source as the kernel runs it (IPython's magics and shell escapes made calls)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython is a dependency of the grader
        return source
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - a cell IPython cannot read is read as written
        return source


@lru_cache(maxsize=512)
def _is_module(dotted: str) -> bool:
    """True when ``dotted`` names an installed module or package, found on disk without importing it."""
    top, *rest = dotted.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if not rest:
        return True
    places = list(spec.submodule_search_locations or [])
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        found_dir = [Path(p) / part for p in places if (Path(p) / part).is_dir()]
        found_file = any(Path(p, f"{part}{ext}").is_file() for p in places for ext in (".py", ".pyc", ".so"))
        if last:
            return bool(found_dir) or found_file or any(list(Path(p).glob(f"{part}.*.so")) for p in places)
        if not found_dir:
            return False
        places = [str(d) for d in found_dir]
    return False


def student_cells(nb, release_nb=None) -> list[tuple[str, str]]:
    """``[(label, source)]`` of the code cells the student wrote, in order.

    A cell is the instructor's when its grade id is a locked cell of the release (nbgrader
    puts the release's source back before the kernel runs it); every other code cell is the
    student's: answer cells by their grade id, added cells as ``"cell N"``.
    """
    locked = _locked_ids(release_nb)
    return [(_label(index, cell), _source(cell)) for index, cell in enumerate(nb.get("cells", []))
            if cell.get("cell_type") == "code" and _grade_id(cell) not in locked]


def _grade_id(cell) -> str | None:
    meta = (cell.get("metadata") or {}).get("nbgrader") or {}
    return meta.get("grade_id") if isinstance(meta.get("grade_id"), str) else None


def _label(index: int, cell) -> str:
    """A cell's name in findings: its grade id, or ``"cell N"`` (1-based)."""
    return _grade_id(cell) or f"cell {index + 1}"


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _locked_ids(release_nb) -> set[str]:
    """The grade ids of the release's locked code cells (the instructor's; empty without a release)."""
    locked = set()
    if release_nb is not None:
        for cell in release_nb.get("cells", []):
            meta = (cell.get("metadata") or {}).get("nbgrader") or {}
            if cell.get("cell_type") == "code" and meta.get("locked") and not meta.get("solution") and meta.get("grade_id"):
                locked.add(meta["grade_id"])
    return locked


def _parse(code: str) -> ast.AST | None:
    """``code``'s syntax tree, or None when it does not parse (such a cell raises when it runs
    and defines nothing)."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _imports(tree: ast.AST) -> tuple[dict[str, str], set[str]]:
    """``({name: dotted origin}, module names)`` bound by the import statements in ``tree``."""
    names: dict[str, str] = {}
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                origin = alias.name if alias.asname else alias.name.split(".")[0]
                names[bound] = origin
                modules.add(bound)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    continue
                bound = alias.asname or alias.name
                origin = f"{node.module}.{alias.name}"
                names[bound] = origin
                if _is_module(origin):
                    modules.add(bound)
    return names, modules


def find_forging(nb, release_nb=None) -> list[Finding]:
    """The lines of the student's code cells that could forge a reported fact (see the module docstring).

    Args:
        nb: the submitted notebook (an nbformat node, after lint's repairs).
        release_nb: the release, to tell the instructor's locked cells (not scanned) from the
            student's; None scans every code cell.

    Returns:
        The findings, cell by cell, in line order. A cell that does not parse is skipped (it
        raises when it runs, and defines nothing).
    """
    locked = _locked_ids(release_nb)
    imported: dict[str, str] = {}
    modules: set[str] = set()
    protected: dict[str, str] = {}  # {name: origin} the instructor's cells import (def/class: "")
    mine = []  # (label, source, code as the kernel runs it, tree, names imported before this cell)
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = _source(cell)
        code = _transform(source)
        tree = _parse(code)
        if _grade_id(cell) not in locked:
            mine.append((_label(index, cell), source, code, tree, dict(imported)))
        if tree is None:
            continue
        names, mods = _imports(tree)
        imported.update(names)
        modules |= mods
        if _grade_id(cell) in locked:
            protected.update(names)
            protected.update({n.name: "" for n in tree.body
                              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))})
    trees = [tree for _, _, _, tree, _ in mine if tree is not None]
    own_functions = {n.name for t in trees for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    tainted = tainted_names(trees, imported, own_functions)
    storing = storing_functions(trees)
    own_loggers = {t.id for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Assign) and own_logger_call(n.value)
                   for t in n.targets if isinstance(t, ast.Name)}
    findings: list[Finding] = []
    for label, source, code, tree, earlier in mine:
        if tree is None:
            continue
        # Without a release to tell the instructor's cells, the earlier cells' imports are guarded.
        guarded = protected if release_nb is not None else {**protected, **earlier}
        scanner = Scanner(label, source.splitlines() if code == source else code.splitlines(), imported, modules,
                          own_functions, protected=guarded, tainted=tainted, storing_functions=storing,
                          is_module=_is_module, own_loggers=own_loggers)
        pending, seen = [tree], 0
        while pending and seen < 50:  # a magic's code, and a magic's within it
            node = pending.pop()
            seen += 1
            for body in safe_magic_calls(node):
                inner = _parse(_transform(body))
                if inner is not None:
                    pending.append(inner)
            try:
                scanner.visit(node)
            except RecursionError:
                scanner.flag(node, "runs-hidden-code", "nests code too deep to read")
        findings += scanner.findings
    return findings


def describe_findings(findings: list[Finding], limit: int = 20) -> list[str]:
    """One line per finding (at most ``limit``, then how many more)."""
    lines = [f.describe() for f in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"... and {len(findings) - limit} more")
    return lines

