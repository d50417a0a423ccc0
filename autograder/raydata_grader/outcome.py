"""How one sandboxed autograde ended, as a status and a message an instructor can act on.

:func:`classify` reads the worker's result file, the sandbox's :class:`~.sandbox.RunOutcome`
and the executor's progress record, and decides: ``graded``, ``timeout`` or ``crashed``, the
score and per-cell scores, and one sentence per thing that went wrong. A failure is never a
silent 0. A cell that ignored the interrupt at the per-cell limit (and so was stopped with its
kernel) is a ``timeout`` that says so, never blamed on the machine's load.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from raydata_course.layout import IOPUB_TIMEOUT_S
from raydata_course.units import GiB

__all__ = ["MEMORY_ERRORS", "classify", "read_json", "without_folders"]

#: Exceptions that mean a cell ran out of memory.
MEMORY_ERRORS = ("MemoryError", "OutOfMemoryError", "ObjectStoreFullError")


def where_running(progress: dict | None) -> str:
    """Words for the cell a progress record (``{"index", "grade_id", ...}``) names: its grade
    id, or its place counted from 1; "before the first cell" without a record."""
    if not progress:
        return "before the first cell"
    gid = progress.get("grade_id")
    return f"cell {gid!r}" if gid else f"cell {progress.get('index', 0) + 1} (one of your own cells)"


def without_folders(text: str, folders: dict[str | os.PathLike, str]) -> str:
    """``text`` with every mention of the instructor's folders replaced by a name for it.

    An error's text (an ``OSError``'s file name, say) can hold the path of the submissions
    folder or the grading folder, which a message to a student must not show.

    Args:
        text: the text, an exception's message say.
        folders: ``{folder: what to write instead}``, e.g. ``{out: "<grading folder>"}``; each
            folder is also replaced as its real path (links resolved).

    Examples:
        >>> without_folders("can't write '/srv/out/received/a.ipynb'", {"/srv/out": "<grading folder>"})
        "can't write '<grading folder>/received/a.ipynb'"
    """
    pairs = {}
    for folder, name in folders.items():
        for form in (os.fspath(folder), os.path.realpath(folder)):
            if form not in ("", "/", "."):
                pairs[form.rstrip("/")] = name
    for form in sorted(pairs, key=len, reverse=True):
        text = text.replace(form, pairs[form])
    return text


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _ignored_interrupt(log: str, outcome, progress: dict | None, options) -> bool:
    """Whether the autograde failed because the running cell ignored the interrupt at the per-cell limit.

    nbclient interrupts a cell at the limit ("Timeout waiting for execute reply", "Interrupting
    kernel") and then waits ``iopub_timeout`` for the cell to end; a kernel still running
    then fails the notebook with "Timeout waiting for IOPub output". The cell was interrupted
    when the log says so after the cell started, and it had run for at least the limit.
    """
    if "Interrupting kernel" not in log:
        return False
    started_s = (progress or {}).get("started_s")
    ended_s = outcome.ended_s or time.time()
    return bool(started_s) and ended_s - started_s >= options.cell_timeout_s


def classify(result: dict | None, outcome, progress: dict | None, options,
              instructor_cells: frozenset[str] = frozenset()) -> tuple[str, float, dict, list[str]]:
    """(status, score, cells, messages) of one sandboxed autograde.

    ``options`` is the run's :class:`~raydata_grader.grade.GradeOptions` (its limits are
    named in the messages).

    ``instructor_cells`` are the release's read-only code cells that earn no points (set-up,
    tear-down, a measured run). They are the instructor's code, put back by nbgrader, so an
    error there means the grading environment failed (Ray could not start on an overloaded
    machine, say), not the student: the row is ``crashed`` and says to grade it again. Unless
    one of the student's own cells (an answer cell or one they added) raised before it and
    the instructor's cell failed with a ``NameError`` or the same exception: an instructor's
    cell that calls the student's functions fails with them (data04's measured run after an
    unanswered Part B), so the row stays ``graded`` and says which of the student's cells
    raised first.
    """
    if outcome.killed == "timeout":
        return "timeout", 0.0, {}, [f"stopped after the per-notebook limit of {options.notebook_timeout_s} s, "
                                    f"while running {where_running(progress)} (nothing was graded)"]
    if outcome.killed == "memory":
        return "crashed", 0.0, {}, [f"stopped for using {outcome.peak_bytes / GiB:.1f} GiB, over the memory limit of "
                                    f"{options.memory_bytes / GiB:.1f} GiB, while running {where_running(progress)} (nothing was graded)"]
    if not result or not result.get("success"):
        log = (result or {}).get("log", "")
        oom_kills = int(((result or {}).get("sandbox") or {}).get("oom_kills") or 0)
        if oom_kills:
            return "crashed", 0.0, {}, [
                f"the notebook ran out of memory while running {where_running(progress)}: its processes (the kernel and "
                f"Ray's) passed the limit of {options.memory_bytes / GiB:.1f} GiB together, and the sandbox stopped "
                "one of them: nothing after it ran, nothing was graded"]
        if "DeadKernelError" in log or "Kernel died" in log or "kernel died" in log:
            ended_s = outcome.ended_s or time.time()
            if progress and progress.get("started_s") and ended_s - progress["started_s"] >= options.cell_timeout_s:
                # nbgrader interrupts a cell at the limit; a kernel interrupted inside Ray's
                # client code can die of it (measured: data02's hidden tests under a short limit).
                return "timeout", 0.0, {}, [
                    f"{where_running(progress)} ran past the per-cell limit of {options.cell_timeout_s} s, and the kernel "
                    "died when it was interrupted (Ray code stopped in the middle of a call can take the "
                    "kernel down): nothing after it ran, nothing was graded"]
            why = (f"the kernel died while running {where_running(progress)} (os._exit(), sys.exit() in a subprocess, a crash in "
                   "native code, or running out of memory): nothing after it ran, nothing was graded")
        elif "Timeout waiting for IOPub output" in log and _ignored_interrupt(log, outcome, progress, options):
            return "timeout", 0.0, {}, [
                f"{where_running(progress)} ran past the per-cell limit of {options.cell_timeout_s} s and ignored the "
                f"interrupt the grader sent it then (code that catches or ignores KeyboardInterrupt or SIGINT, "
                f"or a loop in native code that never returns to Python): after {IOPUB_TIMEOUT_S} s more the "
                "kernel was stopped. Nothing after it ran, nothing was graded"]
        elif "Timeout waiting for IOPub output" in log:
            why = (f"the kernel stopped sending output for {IOPUB_TIMEOUT_S} s while running {where_running(progress)}, "
                   "usually because the grading machine was overloaded: grade it again with --force")
        else:
            last = [ln for ln in log.strip().splitlines() if ln.strip()][-1:] or [f"exit status {outcome.returncode}"]
            why = f"nbgrader could not grade it ({last[0][:300]}), nothing was graded"
        return "crashed", 0.0, {}, [why]
    cells = result.get("cells", {})
    score = float(result.get("score", 0.0))
    errors = result.get("errors", [])
    messages = []
    timeouts = [e for e in errors if e["ename"] in ("CellTimeoutError", "TimeoutError") or "CellTimeoutError" in e["evalue"]]
    memory = [e for e in errors if e["ename"] in MEMORY_ERRORS]
    status = "graded"
    instructor_errors = [e for e in errors if e["grade_id"] in instructor_cells]
    # An instructor's cell that runs the student's functions fails with them: when one of the
    # student's own cells (an answer cell, or one they added; never a test cell, whose errors
    # are verdicts) raised before it, and the instructor's cell failed with a NameError (a
    # name the student's cell never defined) or with the same exception, the failure is the
    # student's and the row is graded. Anything else (Ray dying, say) stays the environment's.
    own = [e for e in errors if e["grade_id"] not in instructor_cells and e["grade_id"] not in cells]

    def student_cause(e: dict) -> dict | None:
        return min((o for o in own if o["index"] < e["index"] and e["ename"] in ("NameError", o["ename"])),
                   key=lambda o: o["index"], default=None)

    causes = {e["index"]: student_cause(e) for e in instructor_errors}
    caused = [e for e in instructor_errors if causes[e["index"]] is not None]
    broken = [e for e in instructor_errors if causes[e["index"]] is None]
    if broken:
        status = "crashed"
        e = broken[0]
        messages.append(f"the instructor's cell {e['grade_id']!r} failed ({e['ename']}: {e['evalue'][:200]}): the grading "
                        "environment failed, not necessarily the student's code: grade it again with --force")
    for e in caused[:1]:
        first = causes[e["index"]]
        where = repr(first["grade_id"]) if first["grade_id"] else f"cell {first['index'] + 1}"
        messages.append(f"the instructor's cell {e['grade_id']!r} failed ({e['ename']}: {e['evalue'][:200]}) after the "
                        f"student's {where} raised {first['ename']}: the student's code, not the grading environment")
    if timeouts:
        status = "timeout" if status == "graded" else status
        names = sorted({e["grade_id"] or f"cell {e['index'] + 1}" for e in timeouts})
        messages.append(f"{', '.join(names)} ran past the per-cell limit of {options.cell_timeout_s} s and "
                        "was interrupted (the other cells were graded)")
    if memory:
        status = "crashed"  # over "timeout": a notebook that ran out of memory may also have timed out
        names = sorted({e["grade_id"] or f"cell {e['index'] + 1}" for e in memory})
        messages.append(f"{', '.join(names)} ran out of memory ({memory[0]['ename']}; the limit is "
                        f"{options.memory_bytes / GiB:.1f} GiB), the other cells were graded")
    failed = sorted(k for k, (s, m) in cells.items() if s < m)
    if failed:
        messages.append("lost points in " + ", ".join(failed))
    return status, score, cells, messages
