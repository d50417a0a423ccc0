"""Reading back the Markdown tables the course writes (for assertions on their cells)."""

from __future__ import annotations

import re

__all__ = ["markdown_rows"]


def markdown_rows(text: str) -> list[list[str]]:
    """Every row of every Markdown table in ``text`` (header rows included, separator rows
    left out), each as a list of stripped cell texts."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line[1:-1])]
        if all(set(c) <= set(":-") for c in cells):
            continue
        rows.append(cells)
    return rows
