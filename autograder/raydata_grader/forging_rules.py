"""The rules of :mod:`raydata_grader.forging`: what in a student's cell could forge a reported fact.

:class:`Scanner` walks one cell's syntax tree (after IPython has turned its magics into calls)
and records a :class:`Finding` for each line that changes something imported, reaches the
interpreter's insides, rewrites a class's identity, runs code the grader cannot read, starts
or signals processes, or reaches the kernel's hooks. The module docstring of
:mod:`raydata_grader.forging` lists the rules in words.
"""

from __future__ import annotations

import ast

from raydata_grader.forging_bindings import ImportRules, own_logger_call
from raydata_grader.forging_flow import RETURNS, carries, library_value
from raydata_grader.forging_tables import (_CONTROL_CHARS, _COPY_ATTRS, _COPY_CALLS, _DANGEROUS_ROOTS,
                                           _DYNAMIC_ATTRS, _DYNAMIC_BUILTINS, _FRAME_ATTRS, _GRADER_HOOK_ATTRS,
                                           _GRADER_PACKAGE, _HIDDEN_CODE_CALLS, _HIDDEN_CODE_MODULES,
                                           _IDENTITY_DUNDERS, _IMPOSTOR_TEXT, _INTROSPECTION_ATTRS,
                                           _ISINSTANCE_HOOKS, _LOGGING_ATTRS, _LOGGING_CALLS, _PROCESS_OS_CALLS,
                                           _SET_IDENTITY, _SETTABLE, _UNPICKLING_ATTRS, IMPOSTOR_NAMES, RULES,
                                           _NAMED_ACCESS_CALLS, _NAMESPACE_MUTATORS, _NAMEDTUPLE_API,
                                           _PYTHON_FILE_TEXT, Finding, _dotted, _root)

__all__ = ["RULES", "Finding", "Scanner", "own_logger_call"]


class Scanner(ImportRules):
    """One student cell's syntax tree, read for forging code (see the module docstring).

    Args:
        label: the cell's name in findings (its grade id, or ``"cell N"``).
        lines: the cell's source lines, to quote.
        imported: ``{name: dotted origin}`` bound by the notebook's imports.
        modules: those names that are modules.
        own_functions: the functions the student's cells define.
        protected: ``{name: dotted origin}`` the instructor's cells import, and ``{name: ""}``
            they define (a student's cell that binds one again at the top level replaces what a
            locked cell uses).
        tainted: names the student's cells bind to something that may be imported
            (:func:`tainted_names`).
        storing_functions: the student's functions that set an attribute through a parameter.
        is_module: ``dotted origin -> bool``, whether it names a module.
        own_loggers: names the student's cells bind to a logger of their own (not Ray's).
    """

    def __init__(self, label: str, lines: list[str], imported: dict[str, str], modules: set[str],
                 own_functions: set[str], protected: dict[str, str] | None = None, tainted: set[str] = frozenset(),
                 storing_functions: set[str] = frozenset(), is_module=lambda dotted: False,
                 own_loggers: set[str] = frozenset()):
        self.label, self.lines = label, lines
        self.imported, self.modules = dict(imported), set(modules)
        self.own_functions = own_functions
        self.protected, self.tainted = dict(protected or {}), set(tainted)
        self.storing_functions, self.is_module = set(storing_functions), is_module
        self.findings: list[Finding] = []
        self._selfish: list[set[str]] = [set()]  # names that are the notebook's own objects (self, cls)
        self._metaclass = [False]
        self._depth = 0  # functions and classes around the node (0: the cell's top level)
        self.own_loggers = set(own_loggers)

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
            if default is not None and not library_value(default, self.imported) and self._carries(default):
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
                    isinstance(root, ast.Name) and root.id in self._selfish[-1]) and not self._own_logger(target.value):
                self.flag(node, "logging-hooks", f"sets {target.attr}, which decides what a logger keeps")

    def _own_logger(self, node: ast.AST) -> bool:
        """``node`` is a logger of the notebook's own: ``getLogger("wine")`` or a name bound to one."""
        if isinstance(node, ast.Name):
            return node.id in self.own_loggers
        return own_logger_call(node)

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
            if isinstance(node.ctx, ast.Load) and not getattr(node, "_attr_base", False) and "." in origin and (
                    self.is_module(origin) or (origin.startswith("raydata_course.") and self.is_module(attr))):
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
        elif node.attr.startswith("_") and not node.attr.startswith("__") and node.attr not in _NAMEDTUPLE_API:
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
            pass  # reading is fine; changing the namespace is flagged where it happens (a store, update)
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
        if attr in _LOGGING_CALLS and not (attr in ("addFilter", "removeFilter", "removeHandler")
                                           and self._own_logger(func.value)):
            self.flag(node, "logging-hooks", f"calls {attr}, which changes what logging keeps")
        if attr in _NAMED_ACCESS_CALLS or name in _NAMED_ACCESS_CALLS:
            self.flag(node, "dynamic-attribute", f"calls {attr or name}, which sets or reaches attributes by a name "
                                                 "given as data")
        if (attr or name) == "wraps" and any(k.arg in ("assigned", "updated") for k in node.keywords):
            self.flag(node, "dynamic-attribute", "calls wraps with the attributes to copy, which sets them by name")
        if (attr in _NAMESPACE_MUTATORS and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
                and func.value.func.id in ("vars", "globals", "locals")):
            self.flag(node, "dynamic-attribute", f"changes a namespace through {func.value.func.id}()")
        if (attr == "options" or name == "remote" or attr == "remote") and any(
                k.arg == "name" and not isinstance(k.value, ast.Constant) for k in node.keywords):
            self.flag(node, "impostor-name", "names a Ray task or actor with a name computed at run time")
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
        if isinstance(node.value, str) and len(node.value) < 400 and _PYTHON_FILE_TEXT.search(node.value):
            self.flag(node, "runs-hidden-code", "names a Python file or a start-up hook (code written to run later)")
