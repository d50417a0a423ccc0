"""Where a student's names may lead (:mod:`raydata_grader.forging`): a name bound to something
imported however it got there, and the functions that change what they are handed.

The scan (:mod:`raydata_grader.forging_rules`) flags a change made through such a name. It
reads; it runs nothing.
"""

from __future__ import annotations

import ast

from raydata_grader.forging_tables import _DYNAMIC_BUILTINS, _SAFE_MAGICS, _dotted, _root

__all__ = ["RETURNS", "DATA_LIBRARIES", "library_value", "carries", "tainted_names", "storing_functions", "safe_magic_calls"]


def _value_names(node: ast.AST):
    """The names in ``node`` that are used as values: not called, not the base of an attribute
    that is called (``np`` in ``np.stack(x)``), not inside a call's arguments (see :func:`carries`)."""
    if isinstance(node, ast.Name):
        yield node
    elif isinstance(node, ast.Attribute):
        yield from _value_names(node.value)
    elif isinstance(node, ast.Call):
        return
    elif isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return
    else:
        for child in ast.iter_child_nodes(node):
            yield from _value_names(child)


def _is_constant_name(name: str) -> bool:
    return name.isupper() or (name.upper() == name and any(c.isalpha() for c in name))


#: Builtins whose result never is their argument (a number, a string, a bool).
_PLAIN_BUILTINS = {"len", "int", "float", "str", "bool", "range", "print", "isinstance", "issubclass", "hash", "id",
                   "repr", "abs", "round", "divmod", "format", "callable", "ord", "chr"}
#: Libraries whose attributes (dtypes, layers, optimizers) a notebook keeps as defaults and class
#: attributes: such a chain does not make a parameter or a class suspect.
DATA_LIBRARIES = ("numpy", "pandas", "pyarrow", "torch", "math", "matplotlib", "scipy", "sklearn")


def library_value(value: ast.AST, origins: dict[str, str]) -> bool:
    """``value`` is a name or attribute chain of one of :data:`DATA_LIBRARIES` (``np.float64``,
    ``torch.optim.Adam``): kept as a default or a class attribute, it patches nothing the judge reads."""
    dotted = _dotted(value)
    if dotted is None:
        return False
    origin = origins.get(dotted.split(".")[0], "")
    return origin.split(".")[0] in DATA_LIBRARIES


def carries(value: ast.AST, suspects: set[str], own_functions: set[str] = frozenset(),
            origins: dict[str, str] | None = None) -> bool:
    """Whether an expression may evaluate to one of ``suspects`` (names imported, or bound to
    something imported), so that setting an attribute of its result changes that thing.

    A name used as a value carries (``[SlowTrainer][0]``, ``a if c else time``); so does a call
    of ``type``, ``getattr``, ``vars`` and their kind, of a lambda or of one of the notebook's
    functions, and a call that is handed a suspect that is not a constant (``nullcontext(helpers)``;
    ``iter_batches(batch_size=BATCH_ROWS)`` does not carry), or an attribute of one that is not a
    library's (``nullcontext(rc.chapters.ch04.SlowTrainer)`` carries, ``astype(np.int64)`` does not;
    ``origins`` maps imported names to what they import).
    """
    for name in _value_names(value):
        if name.id in suspects:
            return True
    for node in ast.walk(value):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Lambda) or (isinstance(func, ast.Name) and (
                    func.id in _DYNAMIC_BUILTINS or func.id == "type" or func.id in own_functions)):
                return True
            if isinstance(func, ast.Name) and func.id in _PLAIN_BUILTINS:
                continue
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Starred):
                    arg = arg.value
                if isinstance(arg, ast.Name):
                    if arg.id in suspects and not _is_constant_name(arg.id):
                        return True
                    continue
                if isinstance(arg, ast.Attribute) and origins is not None:
                    dotted = _dotted(arg)
                    head = dotted.split(".")[0] if dotted else None
                    if head in suspects and not (head in origins and not origins[head].startswith("raydata_course")):
                        return True  # a course object (rc.chapters.x.SlowTrainer), or one reached from a suspect
                    continue
                if isinstance(arg, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.IfExp, ast.BoolOp, ast.NamedExpr)):
                    if any(n.id in suspects and not _is_constant_name(n.id) for n in _value_names(arg)):
                        return True  # next(iter([SlowTrainer])), sum([], SlowTrainer)
    return False


def _bindings(tree: ast.AST):
    """``(target, value)`` for each binding in ``tree`` whose value is an expression: assignments,
    for loops (their iterable), with items, comprehensions and parameters' defaults."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield target, node.value
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            yield node.target, node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield node.target, node.iter
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield node.optional_vars, node.context_expr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
                yield ast.Name(arg.arg, ast.Store()), default
            for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                if default is not None:
                    yield ast.Name(arg.arg, ast.Store()), default
        elif isinstance(node, ast.ClassDef):
            # a class whose body holds something imported: its attributes reach it (Box.h.x = ...)
            for stmt in node.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                    yield ast.Name(node.name, ast.Store()), stmt.value


def _names_bound(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _names_bound(t)]
    if isinstance(target, ast.Starred):
        return _names_bound(target.value)
    return []


#: In :func:`tainted_names`'s answer, the prefix of an own function that may return something imported.
RETURNS = "return:"


def tainted_names(trees: list[ast.AST], imported: dict[str, str], own_functions: set[str]) -> set[str]:
    """Names the student's cells bind to something that may be imported (:func:`carries`), in
    any scope, to a fixed point (``a = time; b = [a]; for c in b: ...`` taints ``a``, ``b``, ``c``).

    An own function that may return such a value is in the answer as ``"return:<name>"``
    (:data:`RETURNS`): a call of it carries.
    """
    tainted: set[str] = set()
    pairs = [(names, value) for tree in trees for target, value in _bindings(tree)
             if (names := _names_bound(target))]
    returns = [(node.name, ret.value) for tree in trees for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               for ret in ast.walk(node) if isinstance(ret, (ast.Return, ast.Yield)) and ret.value is not None]
    returning: set[str] = set()  # own functions that may return something imported
    for _ in range(10):
        before = len(tainted) + len(returning)
        suspects = set(imported) | tainted
        for names, value in pairs:
            if library_value(value, imported):
                continue
            if carries(value, suspects, returning, imported):
                tainted.update(names)
        for name, value in returns:
            if carries(value, suspects, returning, imported):
                returning.add(name)
        if len(tainted) + len(returning) == before:
            break
    return (tainted | {f"{RETURNS}{name}" for name in returning}) - {"self", "cls"}


def storing_functions(trees: list[ast.AST]) -> set[str]:
    """The student's functions that set (or delete) an attribute or item through one of their
    parameters, in their own body or a function nested in it (``def patch(m): m.x = ...``)."""
    out = set()
    for tree in trees:
        methods = {id(stmt) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for stmt in cls.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            positional = node.args.posonlyargs + node.args.args
            if id(node) in methods and positional and not any(
                    isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list):
                positional = positional[1:]  # self or cls: the notebook's own object
            params = {a.arg for a in positional + node.args.kwonlyargs}
            if node.args.vararg:
                params.add(node.args.vararg.arg)
            if node.args.kwarg:
                params.add(node.args.kwarg.arg)
            for inner in ast.walk(node):
                targets = []
                if isinstance(inner, ast.Assign):
                    targets = inner.targets
                elif isinstance(inner, (ast.AugAssign, ast.AnnAssign)):
                    targets = [inner.target]
                elif isinstance(inner, ast.Delete):
                    targets = inner.targets
                elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id in ("setattr", "delattr"):
                    targets = inner.args[:1]
                for t in targets:
                    root = _root(t)
                    if isinstance(t, (ast.Attribute, ast.Subscript)) or (isinstance(inner, ast.Call)):
                        if isinstance(root, ast.Name) and root.id in params:
                            out.add(node.name)
    return out


def safe_magic_calls(tree: ast.AST) -> list[str]:
    """Mark ``get_ipython().run_line_magic('time', ...)`` and its safe kind as allowed; return the
    code they run (``%time x = f()`` runs ``x = f()``, ``%%time`` runs the cell's body), which
    is scanned like the rest of the cell."""
    bodies = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run_line_magic", "run_cell_magic")
                and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
                and node.func.value.func.id == "get_ipython" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in _SAFE_MAGICS):
            node.func.value._parent_call = node
            for arg in node.args[1:3]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.strip():
                    bodies.append(arg.value)
    return bodies
