"""Progressive hints for the exercises: a nudge, a pointer, and the closest hint with the chapter.

In an exercise notebook::

    rc.hint("data02", "B")            # the first hint for Part B: a nudge
    rc.hint("data02", "B", level=2)   # a pointer to the API or the idea
    rc.hint("data02", "B", level=3)   # the closest one, and the chapter sections to reread

The hints live in ``hints.toml`` beside this module and ship with the package. None of them
holds the answer's code: a test compares every hint with the reference answers' lines, and
checks that each graded part has three levels and that every section a hint names exists in
its chapter.

Examples:
    >>> h = hint("data01", "b")
    >>> (h.assignment, h.part, h.level, h.levels)
    ('data01', 'B', 1, 3)
    >>> "Reread chapter 01" in hint("data01", "B", level=3).text
    True
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources

from raydata_course.layout import CourseRootNotFound, course_root

__all__ = ["Hint", "hint", "hint_levels", "load_hints"]

#: The file the hints are read from, in this package.
HINTS_FILE = "hints.toml"


@dataclass(frozen=True)
class Hint:
    """One hint: what :func:`hint` returns. Jupyter shows it as Markdown.

    Attributes:
        assignment: the exercise, e.g. ``"data02"``.
        part: the part's letter, upper case.
        level: this hint's level, 1 to ``levels``.
        levels: how many levels the part has; the last names the chapter sections.
        text: the hint, in Markdown.
    """

    assignment: str
    part: str
    level: int
    levels: int
    text: str

    def _footer(self) -> str:
        if self.level < self.levels:
            return (f"(hint {self.level} of {self.levels}; next: "
                    f'`rc.hint("{self.assignment}", "{self.part}", level={self.level + 1})`)')
        return f"(hint {self.level} of {self.levels}, the last)"

    def __str__(self) -> str:
        return f"{self.assignment} Part {self.part}, hint {self.level}: {self.text}\n{self._footer()}"

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        return f"**{self.assignment} Part {self.part}, hint {self.level}.** {self.text}\n\n*{self._footer()}*"


@functools.lru_cache(maxsize=1)
def load_hints() -> dict[str, dict[str, dict]]:
    """The hints file, parsed: ``{assignment: {part: {"levels": [str, ...], "see": [[chapter, heading], ...]}}}``.

    Raises:
        FileNotFoundError: if the package was installed without ``hints.toml``; reinstall it
            (``make setup``, or ``pip install -e .`` in the course folder).
    """
    source = resources.files("raydata_course").joinpath(HINTS_FILE)
    if not source.is_file():
        raise FileNotFoundError(f"{HINTS_FILE} is missing from the raydata_course package: reinstall it "
                                "(make setup, or pip install -e . in the course folder).")
    return tomllib.loads(source.read_text(encoding="utf-8"))


def _chapter_file(chapter: str) -> str:
    """``chapters/NN_<name>.ipynb`` for chapter ``NN`` when the course folder is found, else ``chapter NN``."""
    try:
        found = sorted((course_root() / "chapters").glob(f"{chapter}_*.ipynb"))
    except CourseRootNotFound:
        found = []
    return f"`chapters/{found[0].name}`" if found else f"chapter {chapter}"


def _see_text(see: list[list[str]]) -> str:
    places = [f'chapter {chapter}, section "{heading}" ({_chapter_file(chapter)})' for chapter, heading in see]
    return "Reread " + "; then ".join(places) + "."


def hint_levels(assignment: str, part: str) -> list[str]:
    """Every level of one part's hints, in order; the last one also names the chapter sections.

    Raises:
        ValueError: if ``assignment`` or ``part`` has no hints (the message lists those that do).
    """
    hints = load_hints()
    if assignment not in hints:
        raise ValueError(f"No hints for {assignment!r}: the exercises with hints are {', '.join(sorted(hints))}.")
    parts = hints[assignment]
    key = str(part).strip().upper()
    if key not in parts:
        raise ValueError(f"{assignment} has no Part {part!r}: its parts are {', '.join(sorted(parts))}.")
    entry = parts[key]
    *first, last = entry["levels"]
    return [*first, f"{last}\n\n{_see_text(entry['see'])}"]


def hint(assignment: str, part: str, level: int = 1) -> Hint:
    """A hint for one part of an exercise: level 1 is a nudge, level 2 points to the API or the
    idea, level 3 is the closest and names the chapter sections to reread. No level gives the
    answer's code.

    Args:
        assignment: the exercise, e.g. ``"data02"``.
        part: the part's letter, ``"A"`` to ``"D"`` (either case).
        level: 1 for the first hint; ask for the next level when it was not enough.

    Returns:
        A :class:`Hint`; Jupyter shows it as Markdown, ``print`` as text.

    Raises:
        ValueError: an unknown exercise or part, or a level below 1 or above the part's last.
    """
    levels = hint_levels(assignment, part)
    if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= len(levels):
        raise ValueError(f"{assignment} Part {str(part).upper()} has hint levels 1 to {len(levels)}; "
                         f"got level={level!r}.")
    return Hint(assignment, str(part).strip().upper(), level, len(levels), levels[level - 1])

