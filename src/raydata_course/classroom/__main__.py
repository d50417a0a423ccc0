"""Command line: ``python -m raydata_course.classroom {grade,check} ...``.

- ``grade SUBMISSIONS [--out DIR] [--assignment ID ...] [--cell-timeout S]
  [--notebook-timeout S] [--memory-gib G] [--ray-address ADDR] [--force]``: grade a class
  (instructors; needs the course checkout with ``solutions/`` and ``autograder/``).
- ``check [NOTEBOOK | ASSIGNMENT]``: the student self-check of a saved exercise notebook.

Exit status: 0 on success; for ``check``, 1 when a check or visible test fails.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_autograde"]:  # internal: one sandboxed autograde (see grade._grade_one)
        from raydata_course.classroom.grade import worker_main

        course, assignment, student, result, cell_timeout, max_chars = argv[1:7]
        return worker_main(course, assignment, student, result, int(cell_timeout), int(max_chars))
    parser = argparse.ArgumentParser(prog="python -m raydata_course.classroom", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade a class's submissions with nbgrader")
    g.add_argument("submissions", help="folder of <student>/<assignment>/*.ipynb folders or <student>.zip files")
    g.add_argument("--out", default="build/grading", help="grading folder, reused by later runs (default: build/grading)")
    g.add_argument("--assignment", action="append", dest="assignments", help="grade only this assignment (repeatable)")
    g.add_argument("--cell-timeout", type=int, default=180, help="per-cell timeout in seconds (default 180)")
    g.add_argument("--notebook-timeout", type=int, default=1200, help="per-notebook wall-time limit in seconds (default 1200)")
    g.add_argument("--memory-gib", type=float, default=6.0, help="per-notebook memory limit in GiB (default 6)")
    g.add_argument("--max-output-chars", type=int, default=20_000, help="output kept per cell, in characters")
    g.add_argument("--ray-address", default=None,
                   help="connect every kernel to this running Ray cluster instead of a fresh runtime per notebook")
    g.add_argument("--force", action="store_true", help="re-grade submissions that are unchanged since the last run")
    c = sub.add_parser("check", help="self-check a saved exercise notebook (students)")
    c.add_argument("target", nargs="?", default=None, help="the notebook's path, or an assignment id like data01")
    c.add_argument("--no-run", action="store_true", help="structural checks only; do not run the visible tests")
    args = parser.parse_args(argv)
    if args.command == "grade":
        import signal

        def _stop(signum, frame):  # SIGTERM unwinds like Ctrl-C, so running jobs are killed, not orphaned
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, _stop)
        try:
            from raydata_course.classroom.grade import GradeOptions, grade_class
        except ImportError as exc:  # the student bundle ships without the grader
            print(f"[grade] grading a class needs the instructor's course checkout ({exc})", file=sys.stderr)
            return 2

        options = GradeOptions(cell_timeout_s=args.cell_timeout, notebook_timeout_s=args.notebook_timeout,
                               memory_bytes=int(args.memory_gib * 1024**3), max_output_chars=args.max_output_chars,
                               ray_address=args.ray_address, force=args.force,
                               assignments=tuple(args.assignments) if args.assignments else None)
        try:
            grade_class(args.submissions, args.out, options)
        except (FileNotFoundError, ValueError) as exc:
            print(f"[grade] error: {exc}", file=sys.stderr)
            return 2
        return 0
    from raydata_course.classroom.selfcheck import self_check

    target = args.target
    is_path = target is not None and (target.endswith(".ipynb") or "/" in target)
    report = self_check(None if is_path else target, notebook=target if is_path else None, run=not args.no_run)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
