"""One autograde, in its own process: ``python -m raydata_grader.worker --course DIR ...``.

The grader (:mod:`raydata_grader.grade`) starts this command under
:func:`~raydata_grader.sandbox.run_limited` (wall time, memory) for every notebook it grades.
The worker is trusted: it holds the judge (:mod:`raydata_grader.judge`) and runs nbgrader's
autograde, whose kernel it starts in a sandbox (:mod:`raydata_grader.kernel_sandbox`). It writes
a JSON result file: nbgrader's success flag, the gradebook's scores (which come from the
judge's verdicts), the worker's own CPU seconds and peak resident memory, the submission's whole
gradebook record
(:class:`~raydata_grader.gradebook.GradebookRecord`, which the grading run applies to the
class's gradebook), the verdicts, how the kernel was confined, and, per error output in the
autograded notebook, the cell's ``grade_id``, ``ename`` and ``evalue``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path

import nbformat

from raydata_grader.course_dir import autograde

__all__ = ["worker_command", "worker_main", "main"]


def worker_main(course_dir: str, assignment: str, student: str, result_path: str, cell_timeout_s: int,
                max_output_chars: int, sandbox_level: str = "none", cgroups: str = "",
                memory_bytes: int | None = None, oracles: str | None = None) -> int:
    """Autograde one submission and write a JSON result file (see the module docstring).

    Args:
        course_dir: the grading folder (an nbgrader course).
        assignment: assignment id.
        student: student id.
        result_path: where to write the result.
        cell_timeout_s: the per-cell limit, in seconds.
        max_output_chars: output kept per cell, in characters.
        sandbox_level: ``"root"`` or ``"user"`` (what :func:`~raydata_grader.kernel_sandbox.probe`
            found), or ``"none"`` for no sandbox.
        cgroups: ``"v1"``, ``"v2"`` or ``""``.
        memory_bytes: the sandbox's memory limit, in bytes (default: the sandbox's default).
        oracles: the oracles' folder (default: the checkout's ``autograder/oracles/``).
    """
    sandbox = limits = None
    if sandbox_level != "none":
        from raydata_grader.kernel_sandbox import SandboxLimits, SandboxSupport

        sandbox = SandboxSupport(sandbox_level, cgroups)
        limits = SandboxLimits(memory_bytes=memory_bytes) if memory_bytes else SandboxLimits()
    score = autograde(
        course_dir, assignment, student, sandbox=sandbox, limits=limits, log=lambda line: print(line, flush=True),
        oracles=oracles, **{"Execute.timeout": cell_timeout_s, "LimitOutputSize.max_chars": max_output_chars})
    errors = []
    record = None
    if score.success:
        from raydata_grader.gradebook import read_record

        record = read_record(course_dir, assignment, student).to_json()
    graded_nb = Path(course_dir, "autograded", student, assignment, f"{assignment}.ipynb")
    if score.success and graded_nb.is_file():
        nb = nbformat.read(graded_nb, as_version=4)
        for index, cell in enumerate(nb.cells):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    errors.append({"index": index, "grade_id": cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"),
                                   "ename": str(output.get("ename", ""))[:200], "evalue": str(output.get("evalue", ""))[:500]})
    usage = resource.getrusage(resource.RUSAGE_SELF)
    Path(result_path).write_text(json.dumps({
        "success": score.success, "score": score.score, "max_score": score.max_score,
        "cells": {k: list(v) for k, v in score.cells.items()}, "gradebook": record, "verdicts": score.verdicts, "sandbox": score.sandbox,
        "worker_cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "worker_peak_rss_bytes": usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024),
        "errors": errors, "log": score.log[-20_000:]}))
    return 0


def worker_command(course_dir: str | Path, assignment: str, student: str, result_path: str | Path,
                   cell_timeout_s: int, max_output_chars: int, sandbox_level: str = "none", cgroups: str = "",
                   memory_bytes: int | None = None, oracles: str | Path | None = None) -> list[str]:
    """The command line that runs :func:`worker_main` in a fresh Python process."""
    cmd = [sys.executable, "-m", "raydata_grader.worker", "--course", str(course_dir), "--assignment", assignment,
           "--student", student, "--result", str(result_path), "--cell-timeout", str(cell_timeout_s),
           "--max-output-chars", str(max_output_chars), "--sandbox", sandbox_level, "--cgroups", cgroups]
    cmd += ["--memory-bytes", str(memory_bytes)] if memory_bytes else []
    return cmd + (["--oracles", str(oracles)] if oracles else [])


def main(argv: list[str] | None = None) -> int:
    """The worker's command line (see :func:`worker_command`)."""
    parser = argparse.ArgumentParser(prog="python -m raydata_grader.worker",
                                     description="Autograde one submission (the grader runs this for every notebook).")
    parser.add_argument("--course", required=True, help="the grading folder (an nbgrader course)")
    parser.add_argument("--assignment", required=True)
    parser.add_argument("--student", required=True)
    parser.add_argument("--result", required=True, help="JSON file to write the result to")
    parser.add_argument("--cell-timeout", type=int, required=True, help="per-cell limit, seconds")
    parser.add_argument("--max-output-chars", type=int, required=True, help="output kept per cell, characters")
    parser.add_argument("--sandbox", choices=("root", "user", "none"), default="none",
                        help="how to confine the kernel (what kernel_sandbox.probe found), or none")
    parser.add_argument("--cgroups", choices=("v1", "v2", ""), default="", help="writable cgroup version, if any")
    parser.add_argument("--memory-bytes", type=int, default=None, help="the sandbox's memory limit, bytes")
    parser.add_argument("--oracles", default=None, help="the oracles' folder (default: the checkout's)")
    args = parser.parse_args(argv)
    return worker_main(args.course, args.assignment, args.student, args.result, args.cell_timeout,
                       args.max_output_chars, args.sandbox, args.cgroups, args.memory_bytes, args.oracles)


if __name__ == "__main__":
    sys.exit(main())
