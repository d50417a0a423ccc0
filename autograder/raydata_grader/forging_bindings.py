"""The scan's rules for imports and bindings (:mod:`raydata_grader.forging_rules` uses them):
modules that reach the interpreter, run hidden code or start processes; modules that are not
installed; names the instructor's cells import or define, bound again; and a logger of the
notebook's own, which it may configure.
"""

from __future__ import annotations

import ast

from raydata_grader.forging_tables import (_GRADER_PACKAGE, _HIDDEN_CODE_MODULES, _INTROSPECTION_ATTRS,
                                           _INTROSPECTION_MODULES, _KERNEL_MODULES, _PROCESS_MODULES,
                                           _PROCESS_OS_CALLS)


__all__ = ["ImportRules", "own_logger_call"]


class ImportRules(ast.NodeVisitor):
    """The import and binding rules of :class:`raydata_grader.forging_rules.Scanner` (a mixin:
    it uses the scanner's ``flag``, ``protected``, ``is_module`` and
    ``_depth``)."""

    def visit_Import(self, node):
        for alias in node.names:
            self._flag_module(node, alias.name)
            self._not_installed(node, alias.name)
            bound = alias.asname or alias.name.split(".")[0]
            origin = alias.name if alias.asname else alias.name.split(".")[0]
            if self._rebinds_origin(bound, origin):
                self._rebinds(node, bound)

    def visit_ImportFrom(self, node):
        if node.level:
            self.flag(node, "runs-hidden-code", "a relative import (of a file the notebook may have written)")
        if node.module:
            self._flag_module(node, node.module)
            self._not_installed(node, node.module)
            for alias in node.names:
                if alias.name == "*":
                    if self.protected and self._depth == 0:
                        self.flag(node, "rebinds-imported", f"imports * from {node.module}, which may bind again "
                                                            "names the instructor's cells import or define")
                    continue
                self._flag_module(node, f"{node.module}.{alias.name}", imported_name=True)
                bound = alias.asname or alias.name
                if self._rebinds_origin(bound, f"{node.module}.{alias.name}"):
                    self._rebinds(node, bound)

    def _rebinds_origin(self, bound: str, origin: str) -> bool:
        """An import binding ``bound`` to something else than the instructor's cells did (the same
        object imported from another path, ``ray.data.MaterializedDataset``, is the same)."""
        before = self.protected.get(bound)
        if before is None or before == origin:
            return False
        return not before or before.rsplit(".", 1)[-1] != origin.rsplit(".", 1)[-1]

    def _not_installed(self, node, dotted: str) -> None:
        top = dotted.split(".")[0]
        if not self.is_module(top):
            self.flag(node, "runs-hidden-code", f"imports {top}, which is not installed (a file the notebook wrote?)")

    def visit_MatchAs(self, node):
        if node.name:
            self._rebinds(node, node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node):
        if node.name:
            self._rebinds(node, node.name)

    def visit_MatchMapping(self, node):
        if node.rest:
            self._rebinds(node, node.rest)
        self.generic_visit(node)

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

    def _rebinds(self, node: ast.AST, name: str) -> None:
        """A top-level binding of a name the instructor's cells import or define."""
        if self._depth == 0 and name in self.protected:
            self.flag(node, "rebinds-imported", f"binds {name} again, which the instructor's cells import or define")


def own_logger_call(node: ast.AST) -> bool:
    """``logging.getLogger("wine")`` (a constant name that is not Ray's, nor the root logger)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))):
        return False
    called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    if called != "getLogger" or len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
        return False
    name = node.args[0].value
    return isinstance(name, str) and bool(name.strip()) and name.split(".")[0] not in ("ray", "root")
