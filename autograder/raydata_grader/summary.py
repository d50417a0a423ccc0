"""The class summary an instructor reads first: averages, most-failed parts, who needs attention.

When the run autograded notebooks, a last table gives its throughput (:class:`RunStats`):
notebooks per minute of wall time, and CPU-seconds per notebook (the worker, its kernel and
everything they waited for), with how the run was spread (one machine, N at once, or a Ray
cluster, and how many notebooks each host graded).

Its text cells (ids, statuses, the "why" column, which holds messages a student's code raised)
are escaped with :func:`~raydata_grader.records.escape_markdown`: a cell cannot hold HTML, a
link or a line break, and ``markdown_table`` escapes its ``|``, so no cell breaks its table.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from raydata_course.tables import markdown_table
from raydata_grader.records import STATUSES, Row, escape_markdown

__all__ = ["RunStats", "summary_markdown"]


@dataclass
class RunStats:
    """What one grading run did, for its throughput.

    Attributes:
        mode: where it graded, in words (the runner's own description).
        slots: notebooks it could grade at once.
        wall_s: wall time of the whole run, in seconds (set when it ends).
        autograde_s: each autograded notebook's wall time, in seconds.
        cpu_s: each autograded notebook's CPU time, in seconds.
        driver_s: seconds the grading process spent on each result (merging it into the
            grading folder, writing its feedback and the grades), one result at a time.
        hosts: notebooks graded per host name.
    """

    mode: str
    slots: int
    wall_s: float = 0.0
    autograde_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    driver_s: list[float] = field(default_factory=list)
    hosts: Counter = field(default_factory=Counter)

    def add(self, wall_s: float, cpu_s: float, host: str, driver_s: float = 0.0) -> None:
        """Count one autograded notebook."""
        self.autograde_s.append(wall_s)
        self.cpu_s.append(cpu_s)
        self.driver_s.append(round(driver_s, 3))
        self.hosts[host] += 1

    def append_to(self, path) -> None:
        """Add this run's figures to ``path`` as one JSON line (``runs.jsonl`` in the grading folder)."""
        import json
        from datetime import datetime, timezone

        line = {"ended": datetime.now(timezone.utc).isoformat(timespec="seconds"), "mode": self.mode,
                "slots": self.slots, "notebooks": self.notebooks, "wall_s": round(self.wall_s, 1),
                "autograde_s": self.autograde_s, "cpu_s": self.cpu_s, "driver_s": self.driver_s,
                "hosts": dict(self.hosts)}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")

    @property
    def notebooks(self) -> int:
        """Notebooks autograded."""
        return len(self.autograde_s)

    @property
    def per_minute(self) -> float:
        """Notebooks autograded per minute of the run's wall time."""
        return 60.0 * self.notebooks / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_seconds_per_notebook(self) -> float:
        """Mean CPU-seconds per autograded notebook."""
        return statistics.fmean(self.cpu_s) if self.cpu_s else 0.0


def _shorten(text: str, limit: int = 160) -> str:
    """``text`` cut at a word to at most ``limit`` characters, with an ellipsis when cut.

    Examples:
        >>> _shorten("one two three", limit=9)
        'one two…'
    """
    if len(text) <= limit:
        return text
    return text[:limit - 1].rsplit(" ", 1)[0].rstrip(";,") + "…"


def summary_markdown(rows: dict[tuple[str, str], Row], run: RunStats | None = None, top: int = 5) -> str:
    """The class summary: average per exercise, most-failed grade cells, students to look at, throughput.

    Args:
        rows: the run's rows (:func:`~raydata_grader.records.read_rows`).
        run: this run's figures; None when it autograded nothing (no throughput table).
        top: most-failed grade cells listed per assignment.

    Returns:
        Markdown: three or four headed tables, their text cells escaped (:func:`escape_markdown`).
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
    throughput = []
    if run is not None and run.notebooks:
        hosts = ", ".join(f"{md(h)} {n}" for h, n in sorted(run.hosts.items()))
        throughput = ["", "## This run", "", markdown_table(
            ["notebooks", "at once", "wall time (s)", "notebooks per minute", "CPU-seconds per notebook (mean)",
             "autograde seconds per notebook (median)", "graded where"],
            [[run.notebooks, run.slots, f"{run.wall_s:.0f}", f"{run.per_minute:.2f}",
              f"{run.cpu_seconds_per_notebook:.1f}", f"{statistics.median(run.autograde_s):.1f}", hosts]],
            align="rrrrrrl"), "", md(run.mode)]
    return "\n".join([
        "# Class summary", "", "## Average per exercise", "",
        markdown_table(["assignment", "graded", "average (graded)", "average (all, missing = 0)", "statuses"],
                       averages, align="lrrrl"),
        "", "## Most-failed graded parts", "",
        markdown_table(["assignment", "grade cell", "failed", "of"], failed, align="llrr"),
        "", "## Students who need attention", "",
        markdown_table(["student", "assignment", "status", "score", "why"], students, align="lllrl"),
        *throughput,
    ]) + "\n"
