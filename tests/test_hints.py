"""Hints: every graded part has them, they point at real chapter sections, and none gives the answer."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

import raydata_course as rc
from raydata_course.hints import hint_levels, load_hints
from raydata_grader.bundle import find_secrets, secret_lines
from raydata_grader.paths import ASSIGNMENTS, source_notebook

ROOT = Path(__file__).resolve().parents[1]


def graded_parts(assignment: str) -> set[str]:
    """The letters of the parts that hold a grade cell, from the nbgrader source: a grade cell
    belongs to the part whose heading (``part_x``) came last before it."""
    part, parts = None, set()
    for cell in nbformat.read(source_notebook(assignment), as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id", "")
        if cell.cell_type == "markdown" and re.fullmatch(r"part_[a-z]", gid):
            part = gid[-1].upper()
        elif meta.get("grade") and part is not None:
            parts.add(part)
    return parts


def chapter_headings(chapter: str) -> set[str]:
    (path,) = (ROOT / "chapters").glob(f"{chapter}_*.ipynb")
    return {line[3:].strip() for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"
            for line in cell.source.splitlines() if line.startswith("## ")}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_graded_part_has_three_levels_and_a_chapter(assignment):
    hints = load_hints()
    parts = graded_parts(assignment)
    assert parts == set(hints.get(assignment, {})), f"{assignment}: graded parts {sorted(parts)} vs hinted"
    for part in sorted(parts):
        entry = hints[assignment][part]
        assert len(entry["levels"]) == 3 and all(t.strip() for t in entry["levels"]), (assignment, part)
        assert entry["see"], f"{assignment} {part}: the last level must name a chapter section"
        for chapter, heading in entry["see"]:
            assert heading in chapter_headings(chapter), f"{assignment} {part}: no section {heading!r} in chapter {chapter}"
        levels = hint_levels(assignment, part)
        # the third level is a hint of its own, closer than the second, and then the chapter
        assert levels[-1].startswith(entry["levels"][-1]) and "\n\nReread chapter" in levels[-1]
        assert "chapters/" in levels[-1] and not entry["levels"][-1].startswith("Reread")
        assert len(levels) == len(set(levels)), "each level must say something new"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_release_tells_students_how_to_ask(assignment):
    intro = nbformat.read(ROOT / "exercises" / assignment / f"{assignment}.ipynb", as_version=4).cells[0].source
    assert f'rc.hint("{assignment}", "A")' in intro


def test_no_hint_holds_a_line_of_an_answer():
    secrets = secret_lines(ROOT)
    texts = "\n".join(t for a in load_hints().values() for e in a.values() for t in e["levels"])
    assert find_secrets(texts, secrets) == []
    # the check sees an answer line when one is there (it is not vacuous)
    line = next(iter(sorted(secrets["solutions"])))
    assert find_secrets(texts + "\n" + line, secrets) != []


def test_hint_levels_and_errors():
    first = rc.hint("data02", "b")
    assert (first.part, first.level) == ("B", 1) and 'level=2' in str(first) and first.levels >= 3
    last = rc.hint("data02", "B", level=first.levels)
    assert "the last" in last._repr_markdown_() and "chapter 02" in last.text
    with pytest.raises(ValueError, match="exercises with hints are data01"):
        rc.hint("data09", "A")
    with pytest.raises(ValueError, match="its parts are A, B, C, D"):
        rc.hint("data01", "E")
    for bad in (0, first.levels + 1, "2", True):
        with pytest.raises(ValueError, match="hint levels 1 to"):
            rc.hint("data01", "A", level=bad)
