"""The rules of :mod:`raydata_grader.forging`: what in a student's cell could forge a reported fact.

:class:`Scanner` walks one cell's syntax tree (after IPython has turned its magics into calls)
and records a :class:`Finding` for each line that changes something imported, reaches the
interpreter's insides, rewrites a class's identity, runs code the grader cannot read, starts
or signals processes, or reaches the kernel's hooks. The module docstring of
:mod:`raydata_grader.forging` lists the rules in words.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["RULES", "Finding", "Scanner", "safe_magic_calls"]

RULES = ("patches-imported", "module-as-value", "imported-handed-over", "dynamic-attribute", "runs-hidden-code",
         "introspection", "class-identity", "private-attribute", "processes", "kernel-hooks")

#: Calls that run code the grader cannot read, or unpickle it.
_HIDDEN_CODE_CALLS = {"exec", "eval", "compile", "__import__", "breakpoint"}
_HIDDEN_CODE_MODULES = {"pickle", "cloudpickle", "dill", "marshal", "runpy", "codeop", "shelve", "copyreg"}
#: Modules that reach the interpreter's insides.
_INTROSPECTION_MODULES = {"ctypes", "gc", "inspect", "importlib", "builtins", "__builtin__", "_ctypes", "unittest",
                          "mock", "weakref", "_thread", "tracemalloc", "sysconfig", "site", "atexit"}
_INTROSPECTION_ATTRS = {
    ("sys", "modules"), ("sys", "_getframe"), ("sys", "settrace"), ("sys", "setprofile"), ("sys", "meta_path"),
    ("sys", "path_hooks"), ("sys", "path_importer_cache"), ("sys", "addaudithook"), ("sys", "_current_frames"),
    ("sys", "exc_info"), ("sys", "exception"), ("sys", "last_traceback"), ("sys", "setrecursionlimit"),
    ("sys", "setswitchinterval"), ("sys", "path"), ("threading", "settrace"), ("threading", "setprofile"),
    ("threading", "_active"), ("types", "FunctionType"), ("types", "CodeType"), ("types", "ModuleType"),
    ("types", "MethodType"), ("types", "CellType"), ("types", "FrameType"), ("types", "TracebackType"),
    ("os", "putenv"), ("os", "unsetenv"), ("concurrent.futures", "ProcessPoolExecutor"),
}
_FRAME_ATTRS = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next",
                "gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code"}
#: Dunders that reach a class's identity or an object's insides (reading ``__name__``,
#: ``__doc__``, ``__version__`` or calling ``__init__``/``__call__`` is fine).
_IDENTITY_DUNDERS = {"__class__", "__bases__", "__mro__", "__dict__", "__subclasses__", "__code__", "__globals__",
                     "__closure__", "__defaults__", "__kwdefaults__", "__builtins__", "__setattr__", "__delattr__",
                     "__getattribute__", "__self__", "__func__", "__wrapped__", "__loader__", "__spec__",
                     "__import__", "__reduce__", "__reduce_ex__", "__setstate__", "__init_subclass__",
                     "__set_name__"}
_SET_IDENTITY = {"__module__", "__qualname__", "__name__"}
_ISINSTANCE_HOOKS = {"__instancecheck__", "__subclasscheck__", "__subclasshook__", "__getattribute__", "__class__",
                     "__init_subclass__", "__set_name__", "__class_getitem__", "__prepare__"}
_PROCESS_MODULES = {"subprocess", "multiprocessing", "pty", "signal", "setproctitle", "prctl", "resource",
                    "concurrent.futures.process", "fcntl", "mmap", "socket", "asyncio.subprocess"}
_PROCESS_OS_CALLS = {"system", "popen", "fork", "forkpty", "kill", "killpg", "setsid", "setpgid", "execv", "execve",
                     "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp",
                     "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp",
                     "pidfd_open", "sched_setaffinity", "setpriority", "nice", "register_at_fork"}
_KERNEL_MODULES = {"IPython", "ipykernel", "jupyter_client", "zmq", "traitlets", "nbclient", "nbformat", "nbgrader"}
_SAFE_MAGICS = {"time", "timeit", "matplotlib"}
#: Control characters, shown as "?" in a quoted line (it goes to terminals and pages).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_DANGEROUS_ROOTS = (_HIDDEN_CODE_MODULES | _INTROSPECTION_MODULES | _PROCESS_MODULES | _KERNEL_MODULES)


@dataclass(frozen=True)
class Finding:
    """One line of a submission that could forge a reported fact.

    Attributes:
        cell: the cell's grade id (an answer cell), or ``"cell N"`` (1-based) for a cell the
            student added.
        line: the line number within the cell (1-based).
        code: the line as written (stripped, at most 200 characters).
        rule: one of :data:`RULES`.
        why: what the line does, in a few words.
    """

    cell: str
    line: int
    code: str
    rule: str
    why: str

    def describe(self) -> str:
        """One line for the instructor: where, the rule, why, and the code."""
        return f"{self.cell}, line {self.line} ({self.rule}: {self.why}): {self.code}"


def _root(node: ast.AST) -> ast.AST:
    """The base of an attribute or subscript chain (``a`` for ``a.b[c].d``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node


def _dotted(node: ast.AST) -> str | None:
    """``"a.b.c"`` for a chain of names and attributes, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class Scanner(ast.NodeVisitor):
    """One student cell's syntax tree, read for forging code (see the module docstring).

    Args:
        label: the cell's name in findings (its grade id, or ``"cell N"``).
        lines: the cell's source lines, to quote.
        imported: ``{name: dotted origin}`` bound by the notebook's imports.
        modules: those names that are modules.
        own_functions: the functions the student's cells define.
    """

    def __init__(self, label: str, lines: list[str], imported: dict[str, str], modules: set[str],
                 own_functions: set[str]):
        self.label, self.lines = label, lines
        self.imported, self.modules = dict(imported), set(modules)
        self.own_functions = own_functions
        self.findings: list[Finding] = []
        self._selfish: list[set[str]] = [set()]  # names that are the notebook's own objects (self, cls)
        self._metaclass = [False]

    # -- reporting
    def flag(self, node: ast.AST, rule: str, why: str) -> None:
        line = getattr(node, "lineno", 1)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        code = _CONTROL_CHARS.sub("?", code)
        finding = Finding(self.label, line, code[:200], rule, why)
        if finding not in self.findings:
            self.findings.append(finding)

    def _origin(self, node: ast.AST) -> str | None:
        """The dotted origin of a chain rooted at an imported name (``time.perf_counter``), else None."""
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head not in self.imported:
            return None
        return self.imported[head] + (f".{rest}" if rest else "")

    def _top_module(self, node: ast.AST) -> str | None:
        origin = self._origin(node)
        return origin.split(".")[0] if origin else None

    # -- scopes
    def visit_FunctionDef(self, node):
        own = set()
        args = node.args.posonlyargs + node.args.args
        if args and (self._in_class or any(isinstance(d, ast.Name) and d.id in ("classmethod", "staticmethod")
                                            for d in node.decorator_list)):
            own.add(args[0].arg)
        if node.name in _ISINSTANCE_HOOKS or (node.name == "mro" and self._metaclass[-1]):
            self.flag(node, "class-identity", f"defines {node.name}, which decides what a class claims to be")
        self._selfish.append(own)
        saved, self._in_class = self._in_class, False
        self.generic_visit(node)
        self._in_class = saved
        self._selfish.pop()

    visit_AsyncFunctionDef = visit_FunctionDef
    _in_class = False

    def visit_ClassDef(self, node):
        meta = any((isinstance(b, ast.Name) and b.id == "type") or self._origin(b) in ("builtins.type", "abc.ABCMeta")
                   for b in node.bases) or any(k.arg == "metaclass" for k in node.keywords)
        for stmt in node.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    if isinstance(t, ast.Name) and t.id in _SET_IDENTITY | {"__class__"}:
                        self.flag(stmt, "class-identity", f"sets {t.id} in a class body, which changes what the class claims to be")
        self._metaclass.append(meta)
        saved, self._in_class = self._in_class, True
        self.generic_visit(node)
        self._in_class = saved
        self._metaclass.pop()

    # -- assignments
    def _check_target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t, node)
            return
        if isinstance(target, ast.Starred):
            self._check_target(target.value, node)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root(target)
            if isinstance(root, ast.Name) and (root.id in self.imported or root.id in ("__builtins__", "builtins")):
                self.flag(node, "patches-imported", f"changes {root.id}, which the notebook imported")
            if isinstance(target, ast.Attribute) and target.attr in _SET_IDENTITY | _IDENTITY_DUNDERS:
                self.flag(node, "class-identity", f"sets {target.attr}")

    def _alias(self, target: ast.AST, value: ast.AST) -> None:
        """A name bound to something imported (no call in between) stands for it from then on."""
        if isinstance(target, ast.Name) and not isinstance(value, ast.Call):
            origin = self._origin(value)
            if origin is not None:
                self.imported[target.id] = origin
                if isinstance(value, ast.Name) and value.id in self.modules:
                    self.modules.add(target.id)

    def visit_Assign(self, node):
        for target in node.targets:
            self._check_target(target, node)
            self._alias(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._check_target(node.target, node)
        if node.value is not None:
            self._alias(node.target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for target in node.targets:
            self._check_target(target, node)
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        self._alias(node.target, node.value)
        self.generic_visit(node)

    # -- imports
    def visit_Import(self, node):
        for alias in node.names:
            self._flag_module(node, alias.name)

    def visit_ImportFrom(self, node):
        if node.module:
            self._flag_module(node, node.module)
            for alias in node.names:
                self._flag_module(node, f"{node.module}.{alias.name}", imported_name=True)

    def _flag_module(self, node, dotted: str, imported_name: bool = False) -> None:
        top = dotted.split(".")[0]
        if top in _HIDDEN_CODE_MODULES:
            self.flag(node, "runs-hidden-code", f"imports {dotted}")
        elif top in _INTROSPECTION_MODULES or dotted in {"unittest.mock"}:
            self.flag(node, "introspection", f"imports {dotted}")
        elif top in _PROCESS_MODULES or dotted in _PROCESS_MODULES:
            self.flag(node, "processes", f"imports {dotted}")
        elif top in _KERNEL_MODULES:
            self.flag(node, "kernel-hooks", f"imports {dotted}")
        elif imported_name and tuple(dotted.rsplit(".", 1)) in _INTROSPECTION_ATTRS:
            self.flag(node, "introspection", f"imports {dotted}")
        elif imported_name and dotted.rsplit(".", 1)[0] == "os" and dotted.rsplit(".", 1)[1] in _PROCESS_OS_CALLS:
            self.flag(node, "processes", f"imports {dotted}")
        elif any(part.startswith("_") and not part.startswith("__") for part in dotted.split(".")):
            self.flag(node, "private-attribute", f"imports {dotted}, a private module")

    # -- names, attributes, calls
    def visit_Name(self, node):
        if node.id in self.modules and isinstance(node.ctx, ast.Load) and not getattr(node, "_attr_base", False):
            self.flag(node, "module-as-value", f"uses the module {node.id} as a value")
        if node.id in ("__builtins__", "__loader__", "__spec__"):
            self.flag(node, "introspection", f"uses {node.id}")

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name):
            node.value._attr_base = True
        origin = self._origin(node)
        if origin is not None:
            head, _, attr = origin.rpartition(".")
            if (head, attr) in _INTROSPECTION_ATTRS or (head.split(".")[0], attr) in _INTROSPECTION_ATTRS:
                self.flag(node, "introspection", f"uses {head}.{attr}")
            if head == "os" and attr in _PROCESS_OS_CALLS:
                self.flag(node, "processes", f"uses os.{attr}")
            top = origin.split(".")[0]
            if top in _DANGEROUS_ROOTS and not self._dangerous_flagged(node):
                self.flag(node, "introspection", f"uses {origin}")
        if node.attr in _FRAME_ATTRS:
            self.flag(node, "introspection", f"reaches a frame ({node.attr})")
        elif node.attr in _IDENTITY_DUNDERS:
            root = _root(node)
            if not (node.attr in ("__class__", "__dict__") and isinstance(node.value, ast.Name)
                    and node.value.id in self._selfish[-1] and isinstance(node.ctx, ast.Load)):
                self.flag(node, "class-identity", f"reaches {node.attr}")
        elif node.attr.startswith("_") and not node.attr.startswith("__"):
            root = _root(node)
            if not (isinstance(root, ast.Name) and root.id in self._selfish[-1]):
                self.flag(node, "private-attribute", f"reaches the private attribute {node.attr}")
        self.generic_visit(node)

    def _dangerous_flagged(self, node) -> bool:
        return any(f.line == getattr(node, "lineno", 0) and f.rule in ("introspection", "processes", "runs-hidden-code",
                                                                        "kernel-hooks") for f in self.findings)

    def visit_Call(self, node):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else None
        if name in _HIDDEN_CODE_CALLS:
            self.flag(node, "runs-hidden-code", f"calls {name}")
        elif name in ("globals", "locals", "vars"):
            own = name == "vars" and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in self._selfish[-1]
            if not own:
                self.flag(node, "dynamic-attribute", f"calls {name}(), which reaches a namespace as a dict")
        elif name in ("setattr", "delattr"):
            target = node.args[0] if node.args else None
            if not (isinstance(target, ast.Name) and target.id in self._selfish[-1]):
                self.flag(node, "dynamic-attribute", f"calls {name} on something that is not self")
        elif name in ("getattr", "hasattr") and len(node.args) >= 2:
            attr = node.args[1]
            target = node.args[0]
            if isinstance(target, ast.Name) and isinstance(attr, ast.Constant):
                target._attr_base = True  # getattr(np, "float32") is np.float32
            own = isinstance(target, ast.Name) and target.id in self._selfish[-1]
            if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
                if not own:
                    self.flag(node, "dynamic-attribute", f"calls {name} with a computed attribute name")
            elif attr.value in _IDENTITY_DUNDERS | _FRAME_ATTRS or (
                    attr.value.startswith("_") and not attr.value.startswith("__") and not own):
                self.flag(node, "class-identity", f"reaches {attr.value} through {name}")
        elif name == "get_ipython":
            self._magic(node)
        elif name == "open" and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("/proc"):
            self.flag(node, "processes", "opens a file under /proc")
        if name == "type" and len(node.args) == 3:
            self.flag(node, "class-identity", "builds a class with type(name, bases, namespace)")
        if name in self.own_functions:
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Name) and arg.id in self.imported and arg.id not in self.modules:
                    self.flag(node, "imported-handed-over", f"hands {arg.id}, which the notebook imported, to its own function {name}")
        self.generic_visit(node)

    def _magic(self, node) -> None:
        """``get_ipython()`` alone, or the call IPython made of a magic or a shell escape."""
        parent = getattr(node, "_parent_call", None)
        if parent is not None:
            return
        self.flag(node, "kernel-hooks", "reaches the kernel (get_ipython, a magic or a shell escape)")

    def visit_Constant(self, node):
        if isinstance(node.value, str) and node.value.startswith("/proc/"):
            self.flag(node, "processes", "names a path under /proc")


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
