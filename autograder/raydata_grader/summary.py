"""The class summary an instructor reads first: averages, most-failed parts, who needs attention.

Its text cells (ids, statuses, the "why" column, which holds messages a student's code raised)
are escaped with :func:`~raydata_grader.records.escape_markdown`: a cell cannot hold HTML, a
link or a line break, and ``markdown_table`` escapes its ``|``, so no cell breaks its table.
"""

from __future__ import annotations

from raydata_course.tables import markdown_table
from raydata_grader.records import STATUSES, Row, escape_markdown

__all__ = ["summary_markdown"]


def _shorten(text: str, limit: int = 160) -> str:
    """``text`` cut at a word to at most ``limit`` characters, with an ellipsis when cut.

    Examples:
        >>> _shorten("one two three", limit=9)
        'one two…'
    """
    if len(text) <= limit:
        return text
    return text[:limit - 1].rsplit(" ", 1)[0].rstrip(";,") + "…"


def summary_markdown(rows: dict[tuple[str, str], Row], top: int = 5) -> str:
    """The class summary: average per exercise, most-failed grade cells, students to look at.

    Args:
        rows: the run's rows (:func:`~raydata_grader.records.read_rows`).
        top: most-failed grade cells listed per assignment.

    Returns:
        Markdown: three headed tables, their text cells escaped (:func:`escape_markdown`).
    """
    md = escape_markdown
    assignments = sorted({a for _, a in rows})
    averages = []
    for a in assignments:
        these = [r for (s, aa), r in rows.items() if aa == a]
        ran = [r for r in these if r.status not in ("missing", "invalid") and r.max_score]
        frac = [r.score / r.max_score for r in ran]
        all_frac = [r.score / r.max_score if r.max_score else 0.0 for r in these]
        counts = ", ".join(f"{s} {n}" for s in STATUSES if (n := sum(r.status == s for r in these)))
        avg = f"{100 * sum(frac) / len(frac):.0f}%" if frac else "n/a"
        averages.append([md(a), f"{len(ran)}/{len(these)}", avg,
                         f"{100 * sum(all_frac) / max(len(all_frac), 1):.0f}%", counts])
    fails: dict[tuple[str, str], list[int]] = {}
    for (s, a), r in rows.items():
        for cell, (score, max_score) in r.cells.items():
            tally = fails.setdefault((a, cell), [0, 0])
            tally[0] += score < max_score
            tally[1] += 1
    worst = sorted(((n, of, a, c) for (a, c), (n, of) in fails.items() if n),
                   key=lambda t: (-t[0] / t[1], t[2], t[3]))[:top * max(len(assignments), 1)]
    failed = [[md(a), md(c), n, of] for n, of, a, c in worst] or [["–", "none", 0, "–"]]
    attention = [r for r in rows.values()
                 if r.status in ("timeout", "crashed", "missing", "invalid") or (r.max_score and r.score / r.max_score < 0.5)]
    students = []
    for r in sorted(attention, key=lambda r: (r.student, r.assignment)):
        why = r.message if r.status != "graded" else "below half marks; " + r.message
        students.append([md(r.student), md(r.assignment), md(r.status), f"{r.score:g}/{r.max_score:g}",
                         md(_shorten(" ".join(why.split())))])
    students = students or [["–", "–", "–", "–", "nobody"]]
    return "\n".join([
        "# Class summary", "", "## Average per exercise", "",
        markdown_table(["assignment", "graded", "average (graded)", "average (all, missing = 0)", "statuses"],
                       averages, align="lrrrl"),
        "", "## Most-failed graded parts", "",
        markdown_table(["assignment", "grade cell", "failed", "of"], failed, align="llrr"),
        "", "## Students who need attention", "",
        markdown_table(["student", "assignment", "status", "score", "why"], students, align="lllrl"),
    ]) + "\n"
