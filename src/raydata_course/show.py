"""The one way a chapter shows code: the installed source of the course package or of Ray.

Chapters never paste code they can import. They show it from the installed files, so what
a reader sees is what runs:

- :func:`show_source` prints a function, method or class with a header naming its file and
  line (``# PushSplitCoordinator._push_block  (raydata_course/push_split/coordinator.py:312)``),
  without its docstring unless asked, or only the lines that mention given words, each with
  its line number;
- :func:`source_location` is that ``path:line`` alone;
- :func:`ray_source_line` finds the line of an installed Ray module that defines a default
  or a constant, so a chapter can cite where a value lives instead of quoting it from memory.

Examples:
    >>> source_location(source_location)  # doctest: +ELLIPSIS
    'raydata_course/show.py:...'
    >>> from raydata_course.units import mib
    >>> print(source_text(mib))
    def mib(num_bytes: float, digits: int = 0) -> str:
        return f"{num_bytes / MiB:,.{digits}f} MiB"
    >>> ray_source_line("ray.data.context", "class DataContext").path
    'ray/data/context.py'
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

__all__ = ["SourceLine", "source_location", "source_text", "show_source", "ray_source_line"]


@dataclass(frozen=True)
class SourceLine:
    """One line of installed source.

    Attributes:
        path: path below ``site-packages`` (or ``src/``), e.g.
            ``ray/data/_internal/execution/resource_manager.py``.
        line: 1-based line number.
        text: the line, stripped.
    """

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def _short_path(path: str) -> str:
    """A source path below ``site-packages/`` or ``src/``, whichever comes last."""
    for marker in ("site-packages/", "/src/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]
    return path


def source_location(obj: Any) -> str:
    """``path:line`` of where ``obj`` (a module, class, function or method) is defined.

    Raises:
        TypeError: if ``obj`` has no Python source (a builtin, an instance).
    """
    path = inspect.getsourcefile(obj)
    if path is None:
        raise TypeError(f"{obj!r} has no Python source file.")
    line = 1 if inspect.ismodule(obj) else inspect.getsourcelines(obj)[1]
    return f"{_short_path(path)}:{line}"


def source_text(obj: Any, *, docstring: bool = False) -> str:
    """The installed source of ``obj``, dedented, without its docstring unless ``docstring``.

    Raises:
        TypeError: if ``obj`` has no Python source.
    """
    src = textwrap.dedent(inspect.getsource(obj))
    if docstring:
        return src.rstrip("\n")
    lines = src.splitlines()
    node = ast.parse(src).body[0]
    body = getattr(node, "body", None)
    if body and ast.get_docstring(node) is not None:
        doc = body[0]
        del lines[doc.lineno - 1:doc.end_lineno]
    return "\n".join(lines).rstrip("\n")


def show_source(obj: Any, *, docstring: bool = False, only: Sequence[str] = ()) -> None:
    """Print the installed source of ``obj`` under a ``# name  (path:line)`` header.

    Args:
        obj: a function, method, class or module of the course package or of Ray.
        docstring: keep the docstring (default: leave it out; the chapter's prose explains).
        only: print only the lines that contain one of these words, each with its line
            number, instead of the whole definition.

    Raises:
        TypeError: if ``obj`` has no Python source.
        LookupError: if ``only`` is given and no line contains any of its words (the source
            changed: the chapter's text needs a look).
    """
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj)))
    print(f"# {name}  ({source_location(obj)})")
    if not only:
        print(source_text(obj, docstring=docstring), end="\n\n")
        return
    lines, first = inspect.getsourcelines(obj)
    hits = [(first + i, line.rstrip()) for i, line in enumerate(lines) if any(word in line for word in only)]
    if not hits:
        raise LookupError(f"no line of {name} contains any of {list(only)}: its source changed.")
    width = len(str(hits[-1][0]))
    for number, line in hits:
        print(f"{number:>{width}}: {line}")
    print()


def ray_source_line(module: str, pattern: str, occurrence: int = 1) -> SourceLine:
    """Find the ``occurrence``-th line containing ``pattern`` in an installed module.

    Args:
        module: a module name, e.g. ``"ray.data._internal.execution.resource_manager"``.
        pattern: plain text to look for.
        occurrence: which match to return, 1-based.

    Returns:
        A :class:`SourceLine` (path relative to ``site-packages``).

    Raises:
        LookupError: if the module has fewer than ``occurrence`` lines with ``pattern``.
    """
    mod = importlib.import_module(module)
    path = Path(inspect.getsourcefile(mod))
    root = path
    for _ in module.split("."):
        root = root.parent
    if path.name == "__init__.py":
        root = root.parent
    seen = 0
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if pattern in text:
            seen += 1
            if seen == occurrence:
                return SourceLine(path.relative_to(root).as_posix(), number, text.strip())
    raise LookupError(f"{pattern!r} occurs {seen} time(s) in {path}, not {occurrence}.")
