"""One autograde, inside the sandbox: ``python -m raydata_grader.worker --course DIR ...``.

The grader (:mod:`raydata_grader.grade`) starts this command under
:func:`~raydata_grader.sandbox.run_limited` for every notebook it grades. It runs nbgrader's
autograde with the course's preprocessors, the per-cell limit and the output cap, and writes
a JSON result file: nbgrader's success flag, the gradebook's scores and, per error output in
the autograded notebook, the cell's ``grade_id``, ``ename`` and ``evalue``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat

from raydata_grader.course_dir import autograde, nbgrader_config

__all__ = ["worker_command", "worker_main", "main"]


def _autograde_preprocessors(config) -> list:
    from nbgrader.preprocessors import Execute, LimitOutput

    from raydata_grader.nbgrader_steps import LimitOutputSize, TrackedExecute

    steps = []
    for step in config.Autograde.autograde_preprocessors:
        steps.append(TrackedExecute if step is Execute else step)
        if step is LimitOutput:
            steps.append(LimitOutputSize)
    if LimitOutputSize not in steps:
        steps.insert(len(steps) - 1, LimitOutputSize)
    if TrackedExecute not in steps:
        raise RuntimeError("autograder/nbgrader_config.py's Autograde.autograde_preprocessors has no Execute step")
    return steps


def worker_main(course_dir: str, assignment: str, student: str, result_path: str, cell_timeout_s: int,
                max_output_chars: int) -> int:
    """Autograde one submission (runs inside the sandbox) and write a JSON result file.

    The result holds nbgrader's success flag, the gradebook's scores and, per error output
    in the autograded notebook, the cell's ``grade_id``, ``ename`` and ``evalue``.
    """
    base = nbgrader_config(course_dir)
    score = autograde(
        course_dir, assignment, student,
        **{"Execute.timeout": cell_timeout_s,
           "Autograde.autograde_preprocessors": _autograde_preprocessors(base),
           "LimitOutputSize.max_chars": max_output_chars})
    errors = []
    graded_nb = Path(course_dir, "autograded", student, assignment, f"{assignment}.ipynb")
    if score.success and graded_nb.is_file():
        nb = nbformat.read(graded_nb, as_version=4)
        for index, cell in enumerate(nb.cells):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    errors.append({"index": index, "grade_id": cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"),
                                   "ename": output.get("ename", ""), "evalue": str(output.get("evalue", ""))[:500]})
    Path(result_path).write_text(json.dumps({
        "success": score.success, "score": score.score, "max_score": score.max_score,
        "cells": {k: list(v) for k, v in score.cells.items()}, "errors": errors, "log": score.log[-20_000:]}))
    return 0


def worker_command(course_dir: str | Path, assignment: str, student: str, result_path: str | Path,
                   cell_timeout_s: int, max_output_chars: int) -> list[str]:
    """The command line that runs :func:`worker_main` in a fresh Python process."""
    return [sys.executable, "-m", "raydata_grader.worker", "--course", str(course_dir), "--assignment", assignment,
            "--student", student, "--result", str(result_path), "--cell-timeout", str(cell_timeout_s),
            "--max-output-chars", str(max_output_chars)]


def main(argv: list[str] | None = None) -> int:
    """The worker's command line (see :func:`worker_command`)."""
    parser = argparse.ArgumentParser(prog="python -m raydata_grader.worker",
                                     description="Autograde one submission (the grader runs this in a sandbox).")
    parser.add_argument("--course", required=True, help="the grading folder (an nbgrader course)")
    parser.add_argument("--assignment", required=True)
    parser.add_argument("--student", required=True)
    parser.add_argument("--result", required=True, help="JSON file to write the result to")
    parser.add_argument("--cell-timeout", type=int, required=True, help="per-cell limit, seconds")
    parser.add_argument("--max-output-chars", type=int, required=True, help="output kept per cell, characters")
    args = parser.parse_args(argv)
    return worker_main(args.course, args.assignment, args.student, args.result, args.cell_timeout,
                       args.max_output_chars)


if __name__ == "__main__":
    sys.exit(main())
