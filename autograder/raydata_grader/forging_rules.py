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
         "introspection", "class-identity", "private-attribute", "processes", "kernel-hooks", "rebinds-imported",
         "logging-hooks", "grader-internals", "impostor-name", "copies-files")

#: Calls that run code the grader cannot read, or unpickle it.
_HIDDEN_CODE_CALLS = {"exec", "eval", "compile", "__import__", "breakpoint"}
_HIDDEN_CODE_MODULES = {"pickle", "cloudpickle", "dill", "marshal", "runpy", "codeop", "shelve", "copyreg", "joblib",
                        "jsonpickle", "_pickle", "pickletools"}
#: Calls (by attribute name) that unpickle whatever they are given.
_UNPICKLING_ATTRS = {"read_pickle", "unsafe_load", "full_load", "load_pickle"}
#: Builtins that reach attributes or run code: as values (kept, passed, mapped) they hide a call.
_DYNAMIC_BUILTINS = {"setattr", "getattr", "delattr", "hasattr", "vars", "globals", "locals", "exec", "eval",
                     "compile", "__import__", "breakpoint"}
#: Library calls that reach an attribute by a name given as data.
_DYNAMIC_ATTRS = {("operator", "attrgetter"), ("operator", "methodcaller"), ("operator", "setitem"),
                  ("operator", "delitem"), ("functools", "reduce")}
#: Calls that change what logging keeps (the grader reads Ray Data's warnings from the log).
_LOGGING_CALLS = {"addFilter", "removeFilter", "dictConfig", "fileConfig", "listen", "setLoggerClass",
                  "setLogRecordFactory", "removeHandler"}
#: Attributes of a logger or handler that decide what it keeps.
_LOGGING_ATTRS = {"propagate", "disabled", "handle", "callHandlers", "filters", "handlers", "filter", "emit",
                  "manager", "isEnabledFor", "getEffectiveLevel", "makeRecord", "root"}
#: The names the judge sees Ray's processes by (``ray::SplitCoordinator.get``, ``ray::MapWorker(...)``,
#: ``ray::Write``): a class, function or task of the notebook's own by such a name imitates them.
IMPOSTOR_NAMES = ("SplitCoordinator", "MapWorker", "Write", "ReadRange", "StreamingExecutor")
_IMPOSTOR_TEXT = re.compile(r"SplitCoordinator|MapWorker|^\s*ray::|^\s*_?(Write|ReadRange)\s*$")
#: Calls that copy a file or hold its bytes (a private copy of a file whose opens the judge counts).
_COPY_CALLS = {("shutil", "copy"), ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "copyfileobj"),
               ("shutil", "copytree"), ("shutil", "move"), ("os", "link"), ("os", "symlink"), ("os", "sendfile"),
               ("os", "copy_file_range"), ("os", "read"), ("os", "open"), ("io", "BytesIO"), ("io", "FileIO"),
               ("mmap", "mmap")}
_COPY_ATTRS = {"read_bytes", "write_bytes", "save_classifier", "hardlink_to", "symlink_to", "link_to"}
#: Imported things a notebook may set (display and determinism settings); nothing the judge reads.
_SETTABLE = ("pandas.options", "pandas.set_option", "torch.backends", "matplotlib.rcParams",
             "matplotlib.pyplot.rcParams", "numpy.set_printoptions")
#: The grader's own package inside the course (what the judge calls in the kernel).
_GRADER_PACKAGE = "raydata_course.judging"
#: Ray's hooks that the judge installs its own probes through.
_GRADER_HOOK_ATTRS = {"custom_execution_callback_classes"}
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
    ("abc", "ABCMeta"), ("logging", "config"),
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
        protected: names the instructor's cells import or define (a student's cell that binds
            one again at the top level replaces what a locked cell uses).
        tainted: names the student's cells bind to something that may be imported
            (:func:`tainted_names`).
        storing_functions: the student's functions that set an attribute through a parameter.
        is_module: ``dotted origin -> bool``, whether it names a module.
    """

    def __init__(self, label: str, lines: list[str], imported: dict[str, str], modules: set[str],
                 own_functions: set[str], protected: set[str] = frozenset(), tainted: set[str] = frozenset(),
                 storing_functions: set[str] = frozenset(), is_module=lambda dotted: False):
        self.label, self.lines = label, lines
        self.imported, self.modules = dict(imported), set(modules)
        self.own_functions = own_functions
        self.protected, self.tainted = set(protected), set(tainted)
        self.storing_functions, self.is_module = set(storing_functions), is_module
        self.findings: list[Finding] = []
        self._selfish: list[set[str]] = [set()]  # names that are the notebook's own objects (self, cls)
        self._metaclass = [False]
        self._depth = 0  # functions and classes around the node (0: the cell's top level)

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
        self._rebinds(node, node.name)
        self._impostor(node, node.name)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None and self._carries(default):
                self.flag(default, "patches-imported", "a parameter's default holds something imported")
        self._selfish.append(own)
        saved, self._in_class = self._in_class, False
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1
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
        self._rebinds(node, node.name)
        self._impostor(node, node.name)
        self._metaclass.append(meta)
        saved, self._in_class = self._in_class, True
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1
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
        if isinstance(target, ast.Name):
            self._rebinds(node, target.id)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root(target)
            chain = target
            while isinstance(chain, ast.Subscript):
                chain = chain.value
            origin = self._origin(chain) or ""
            settable = any(origin == x or origin.startswith(x + ".") for x in _SETTABLE)
            if isinstance(root, ast.Name):
                if root.id in self.imported or root.id in ("__builtins__", "builtins"):
                    if not settable:
                        self.flag(node, "patches-imported", f"changes {root.id}, which the notebook imported")
                elif root.id in self.tainted and root.id not in self._selfish[-1]:
                    self.flag(node, "patches-imported", f"changes {root.id}, which may hold something imported")
            elif isinstance(root, ast.Call):
                func = root.func
                if isinstance(func, ast.Name) and func.id == "type":
                    self.flag(node, "class-identity", "sets an attribute of an object's class (type(...))")
                elif (isinstance(func, ast.Lambda) or (isinstance(func, ast.Name) and (
                        func.id in _DYNAMIC_BUILTINS or func.id in self.own_functions))
                        or not isinstance(func, (ast.Name, ast.Attribute))):
                    self.flag(node, "patches-imported", "changes what a call returned, which may be something imported")
            else:
                self.flag(node, "patches-imported", "changes something reached through an expression (a list, "
                                                    "a condition, ...) that may hold something imported")
            if isinstance(target, ast.Attribute) and target.attr in _SET_IDENTITY | _IDENTITY_DUNDERS:
                self.flag(node, "class-identity", f"sets {target.attr}")
            if isinstance(target, ast.Attribute) and target.attr in _LOGGING_ATTRS and not (
                    isinstance(root, ast.Name) and root.id in self._selfish[-1]):
                self.flag(node, "logging-hooks", f"sets {target.attr}, which decides what a logger keeps")

    def _rebinds(self, node: ast.AST, name: str) -> None:
        """A top-level binding of a name the instructor's cells import or define."""
        if self._depth == 0 and name in self.protected:
            self.flag(node, "rebinds-imported", f"binds {name} again, which the instructor's cells import or define")

    def _impostor(self, node: ast.AST, name: str) -> None:
        if name.lstrip("_") in IMPOSTOR_NAMES:
            self.flag(node, "impostor-name", f"names something {name}, as Ray Data names the processes the judge watches")

    def _carries(self, value: ast.AST) -> bool:
        """Whether ``value`` may evaluate to something imported (see :func:`carries`)."""
        returning = {n[len(RETURNS):] for n in self.tainted if n.startswith(RETURNS)}
        return carries(value, set(self.imported) | self.tainted, returning, self.imported)

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
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_For(self, node):
        self._check_target(node.target, node)
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node):
        if node.optional_vars is not None:
            self._check_target(node.optional_vars, node.context_expr)
        self.generic_visit(node)

    def visit_comprehension(self, node):
        if not isinstance(node.target, ast.Name):
            self._check_target(node.target, node.iter)
        self.generic_visit(node)

    def visit_Global(self, node):
        for name in node.names:
            if name in self.protected:
                self.flag(node, "rebinds-imported", f"declares {name} global, which the instructor's cells import or define")

    # -- imports
    def visit_Import(self, node):
        for alias in node.names:
            self._flag_module(node, alias.name)
            bound = alias.asname or alias.name.split(".")[0]
            origin = alias.name if alias.asname else alias.name.split(".")[0]
            if self.protected_origins.get(bound, origin) != origin:
                self._rebinds(node, bound)

    def visit_ImportFrom(self, node):
        if node.module:
            self._flag_module(node, node.module)
            for alias in node.names:
                self._flag_module(node, f"{node.module}.{alias.name}", imported_name=True)
                bound = alias.asname or alias.name
                if self.protected_origins.get(bound, f"{node.module}.{alias.name}") != f"{node.module}.{alias.name}":
                    self._rebinds(node, bound)

    protected_origins: dict = {}

    def _flag_module(self, node, dotted: str, imported_name: bool = False) -> None:
        top = dotted.split(".")[0]
        parts = dotted.split(".")
        if dotted == _GRADER_PACKAGE or dotted.startswith(_GRADER_PACKAGE + "."):
            self.flag(node, "grader-internals", f"imports {dotted}, the grader's code in the kernel")
        if top in _HIDDEN_CODE_MODULES or any(part in _HIDDEN_CODE_MODULES for part in parts):
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
        if (node.id in _DYNAMIC_BUILTINS and isinstance(node.ctx, ast.Load) and not getattr(node, "_called", False)
                and node.id not in self.imported):
            self.flag(node, "dynamic-attribute", f"uses {node.id} as a value (it reaches attributes or runs code)")

    def visit_Attribute(self, node):
        node.value._attr_base = True
        origin = self._origin(node)
        if origin is not None:
            head, _, attr = origin.rpartition(".")
            if (head, attr) in _INTROSPECTION_ATTRS or (head.split(".")[0], attr) in _INTROSPECTION_ATTRS:
                self.flag(node, "introspection", f"uses {head}.{attr}")
            if (head, attr) in _DYNAMIC_ATTRS:
                self.flag(node, "dynamic-attribute", f"uses {head}.{attr}, which reaches attributes by a name given as data")
            if head == "os" and attr in _PROCESS_OS_CALLS:
                self.flag(node, "processes", f"uses os.{attr}")
            top = origin.split(".")[0]
            if top in _DANGEROUS_ROOTS and not self._dangerous_flagged(node):
                self.flag(node, "introspection", f"uses {origin}")
            if any(part in _HIDDEN_CODE_MODULES for part in origin.split(".")[1:]):
                self.flag(node, "runs-hidden-code", f"uses {origin}, which unpickles")
            if origin == _GRADER_PACKAGE or origin.startswith(_GRADER_PACKAGE + "."):
                self.flag(node, "grader-internals", f"reaches {_GRADER_PACKAGE}, the grader's code in the kernel")
            if (isinstance(node.ctx, ast.Load) and not getattr(node, "_attr_base", False)
                    and "." in origin and self.is_module(origin)):
                self.flag(node, "module-as-value", f"uses the module {origin} as a value")
            if (head, attr) in _COPY_CALLS:
                self.flag(node, "copies-files", f"uses {head}.{attr}, which copies a file or holds its bytes")
        if node.attr in _GRADER_HOOK_ATTRS:
            self.flag(node, "grader-internals", f"reaches {node.attr}, through which the judge installs its probes")
        if node.attr == "judging" and origin is None:
            self.flag(node, "grader-internals", "reaches an attribute named judging (the grader's code in the kernel)")
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
        func._called = True
        name = func.id if isinstance(func, ast.Name) else None
        attr = func.attr if isinstance(func, ast.Attribute) else None
        if name in self.imported:
            name = None  # an imported function of that name, not the builtin
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
            attr_arg = node.args[1]
            target = node.args[0]
            if isinstance(target, ast.Name) and isinstance(attr_arg, ast.Constant):
                target._attr_base = True  # getattr(np, "float32") is np.float32
            own = isinstance(target, ast.Name) and target.id in self._selfish[-1]
            if not (isinstance(attr_arg, ast.Constant) and isinstance(attr_arg.value, str)):
                if not own:
                    self.flag(node, "dynamic-attribute", f"calls {name} with a computed attribute name")
            else:
                if attr_arg.value in _IDENTITY_DUNDERS | _FRAME_ATTRS or (
                        attr_arg.value.startswith("_") and not attr_arg.value.startswith("__") and not own):
                    self.flag(node, "class-identity", f"reaches {attr_arg.value} through {name}")
                base = self._origin(target)
                if base is not None and self.is_module(f"{base}.{attr_arg.value}"):
                    self.flag(node, "module-as-value", f"reaches the module {base}.{attr_arg.value} through {name}")
                if attr_arg.value == "judging":
                    self.flag(node, "grader-internals", "reaches judging (the grader's code in the kernel)")
        elif name == "get_ipython":
            self._magic(node)
        elif name == "open" and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("/proc"):
            self.flag(node, "processes", "opens a file under /proc")
        if name == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            if mode is not None and not (isinstance(mode, ast.Constant) and "b" not in str(mode.value)):
                self.flag(node, "copies-files", "opens a file in binary mode (or a mode given as data)")
        if name == "type" and len(node.args) == 3:
            self.flag(node, "class-identity", "builds a class with type(name, bases, namespace)")
        if attr in _UNPICKLING_ATTRS:
            self.flag(node, "runs-hidden-code", f"calls {attr}, which unpickles")
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg == "allow_pickle" and not (isinstance(value, ast.Constant) and value.value is False):
                self.flag(node, "runs-hidden-code", "loads with allow_pickle, which unpickles")
            elif keyword.arg == "weights_only" and not (isinstance(value, ast.Constant) and value.value is True):
                self.flag(node, "runs-hidden-code", "loads with weights_only off, which unpickles")
            elif keyword.arg == "name" and isinstance(value, ast.Constant) and isinstance(value.value, str):
                self._impostor(node, value.value.strip())
        if attr in _LOGGING_CALLS:
            self.flag(node, "logging-hooks", f"calls {attr}, which changes what logging keeps")
        if attr in _COPY_ATTRS:
            self.flag(node, "copies-files", f"calls {attr}, which copies a file or holds its bytes")
        if attr == "register" and (self._origin(func.value) is not None or self._carries(func.value)):
            self.flag(node, "class-identity", "registers a class with something imported (a virtual subclass "
                                              "passes isinstance)")
        if name in self.own_functions and name in self.storing_functions:
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if self._carries(arg):
                    self.flag(node, "imported-handed-over",
                              f"hands something imported to its own function {name}, which sets attributes of its "
                              "parameters")
                    break
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
        if isinstance(node.value, str) and _GRADER_PACKAGE in node.value:
            self.flag(node, "grader-internals", f"names {_GRADER_PACKAGE}, the grader's code in the kernel")
        if isinstance(node.value, str) and len(node.value) < 200 and _IMPOSTOR_TEXT.search(node.value):
            self.flag(node, "impostor-name", "names one of the processes the judge watches")


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
                   "repr", "abs", "round", "min", "max", "sum", "divmod", "format", "callable", "ord", "chr"}


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
                if isinstance(arg, ast.Name) and arg.id in suspects and not _is_constant_name(arg.id):
                    return True
                if isinstance(arg, ast.Attribute) and origins is not None:
                    dotted = _dotted(arg)
                    head = dotted.split(".")[0] if dotted else None
                    if head in suspects and not (head in origins and not origins[head].startswith("raydata_course")):
                        return True  # a course object (rc.chapters.x.SlowTrainer), or one reached from a suspect
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
