"""What the course's notebooks and README name, checked against what a folder holds.

A *link* is a Markdown link or image (``[text](path)``, ``![alt](path)``) or an HTML ``href``
or ``src``; one to another site (``https:``, ``mailto:``) or to an anchor of its own page is
not checked. A *make command* is a backticked ``make target [VAR=value ...]``, or the words
``make <target>`` where ``<target>`` is a target of the Makefile checked or of the course's
own: "make it run" is prose, "written by make lab" names a target.

:func:`broken_references` is what ``make student-bundle`` runs on the bundle before it writes
it (:func:`raydata_grader.bundle.build_bundle`), and what the tests run on the course.

Examples:
    >>> sorted(makefile_targets("lab: $(STAMP)\\n\\t@echo\\n.PHONY: lab\\nX ?= 1\\n%.o: %.c\\n"))
    ['lab']
    >>> [r.text for r in references("README.md", "See [ch 4](chapters/04.ipynb); run `make lab QUICK=1`.", {"lab"})]
    ['chapters/04.ipynb', 'lab QUICK=1']
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Callable, Collection, Iterable
from urllib.parse import unquote

__all__ = ["NOTEBOOK_FOLDERS", "Reference", "makefile_targets", "makefile_variables", "references",
           "broken_references"]

#: the folders whose notebooks students read.
NOTEBOOK_FOLDERS = ("chapters/", "exercises/", "playground/")

_RULE = re.compile(r"^([A-Za-z0-9_.\-][A-Za-z0-9_.\- ]*?)\s*::?(?!=)", re.M)
_VARIABLE_USE = re.compile(r"\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]")
_VARIABLE_SET = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?|:|::|\+)?=", re.M)
_MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
_MAKE_QUOTED = re.compile(r"`make\s+([^`]+)`")
_MAKE_WORDS = re.compile(r"\bmake\s+([a-z][a-z0-9_-]*)\b")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


@dataclass(frozen=True)
class Reference:
    """One thing a file names.

    Attributes:
        source: the naming file, relative to the folder checked.
        cell: the notebook cell's index, or None in a Markdown file.
        kind: ``"link"`` (``text`` is the path as written) or ``"make"`` (``text`` is what
            follows ``make``: targets and ``VAR=value`` arguments).
        text: as written.
    """

    source: str
    cell: int | None
    kind: str
    text: str

    def where(self) -> str:
        """``source`` with its cell, for a message."""
        return self.source if self.cell is None else f"{self.source} (cell {self.cell})"


def makefile_targets(makefile: str) -> set[str]:
    """The explicit targets a Makefile defines: each rule's names, without special targets
    (``.PHONY``), pattern rules (``%``) or targets built from variables."""
    targets = set()
    for match in _RULE.finditer(makefile):
        targets |= {name for name in match.group(1).split() if not name.startswith(".") and "%" not in name}
    return targets


def makefile_variables(makefile: str) -> set[str]:
    """Every variable a Makefile sets or reads (``NAME ?= ...``, ``$(NAME)``): what a
    ``make target NAME=value`` on the command line can mean something to."""
    return set(_VARIABLE_USE.findall(makefile)) | set(_VARIABLE_SET.findall(makefile))


def _texts(name: str, text: str) -> Iterable[tuple[int | None, str, str]]:
    """(cell index, cell type, source) of a notebook's cells, or the whole of a Markdown file."""
    if not name.endswith(".ipynb"):
        yield None, "markdown", text
        return
    try:
        cells = json.loads(text).get("cells", [])
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not a notebook (invalid JSON: {exc}).") from None
    for index, cell in enumerate(cells):
        source = cell.get("source", "")
        yield index, cell.get("cell_type", ""), "".join(source) if isinstance(source, list) else source


def references(name: str, text: str, targets: Collection[str]) -> list[Reference]:
    """The links and make commands in one file: a notebook (``.ipynb``: links in its markdown
    cells, make commands in every cell) or a Markdown file.

    Args:
        name: the file's path, relative to the folder checked.
        text: its content.
        targets: the target names that count as a command when written without backticks.
    """
    found: list[Reference] = []
    for cell, cell_type, source in _texts(name, text):
        if cell_type == "markdown":
            for match in [*_MD_LINK.finditer(source), *_HTML_LINK.finditer(source)]:
                found.append(Reference(name, cell, "link", match.group(1)))
        quoted = [m.group(1).strip() for m in _MAKE_QUOTED.finditer(source)]
        found += [Reference(name, cell, "make", command) for command in quoted]
        unquoted = _MAKE_QUOTED.sub(" ", source)
        found += [Reference(name, cell, "make", m.group(1)) for m in _MAKE_WORDS.finditer(unquoted)
                  if m.group(1) in targets]
    return found


def _link_problem(ref: Reference, names: Collection[str], folders: set[str]) -> str | None:
    target = unquote(ref.text.split("#", 1)[0].split("?", 1)[0])
    if not target or _EXTERNAL.match(ref.text):
        return None
    if target.startswith("/"):
        return f"{ref.where()}: links to {ref.text}, an absolute path"
    path = posixpath.normpath(posixpath.join(posixpath.dirname(ref.source), target))
    if path == ".." or path.startswith("../"):
        return f"{ref.where()}: links to {ref.text}, outside the folder"
    if path not in names and path not in folders:
        return f"{ref.where()}: links to {ref.text} ({path}), which is not there"
    return None


def _make_problems(ref: Reference, targets: set[str], variables: set[str]) -> list[str]:
    try:
        words = shlex.split(ref.text)
    except ValueError:
        words = ref.text.split()
    problems = []
    for word in words:
        assignment = _ASSIGNMENT.match(word)
        if assignment:
            if assignment.group(1) not in variables:
                problems.append(f"{ref.where()}: names `make {ref.text}`, but the Makefile has no variable "
                                f"{assignment.group(1)}")
        elif not word.startswith("-") and word not in targets:
            problems.append(f"{ref.where()}: names `make {ref.text}`, but the Makefile has no target {word}")
    return problems


def broken_references(names: Collection[str], read: Callable[[str], str], *, makefile: str = "Makefile",
                      other_targets: Collection[str] = (), within: tuple[str, ...] = NOTEBOOK_FOLDERS,
                      skip: tuple[str, ...] = ()) -> list[str]:
    """Every link and make command in a folder's notebooks and top-level ``README.md`` that
    the folder does not hold.

    Args:
        names: every file in the folder, as paths relative to it (``chapters/01_x.ipynb``).
        read: returns a file's text, given its name.
        makefile: the Makefile whose targets and variables the commands must name.
        other_targets: more target names that count as a command when written without
            backticks (the course's, when checking the student bundle).
        within: the folders whose notebooks are checked (``chapters/``, ``exercises/`` and
            ``playground/``: what students read).
        skip: path prefixes under those whose notebooks are not checked (copies of others, say).

    Returns:
        One line per problem, naming the file, the cell and what is missing; empty when
        everything named is there.

    Raises:
        ValueError: ``makefile`` is not among ``names``.
    """
    names = set(names)
    if makefile not in names:
        raise ValueError(f"{makefile} is not in the folder checked, so its make commands cannot be checked.")
    folders = {"/".join(n.split("/")[:i]) for n in names for i in range(1, n.count("/") + 1)}
    make_text = read(makefile)
    targets, variables = makefile_targets(make_text), makefile_variables(make_text)
    named = targets | set(other_targets)
    problems = []
    for name in sorted(names):
        if name != "README.md" and not (name.endswith(".ipynb") and name.startswith(within)) \
                or (skip and name.startswith(skip)):
            continue
        for ref in references(name, read(name), named):
            if ref.kind == "link":
                problem = _link_problem(ref, names, folders)
                problems += [problem] if problem else []
            else:
                problems += _make_problems(ref, targets, variables)
    return problems
