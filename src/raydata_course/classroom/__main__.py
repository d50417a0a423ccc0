"""Command line: ``python -m raydata_course.classroom check [NOTEBOOK | ASSIGNMENT] [--no-run]``.

The student self-check of a saved exercise notebook (see :mod:`.selfcheck`). Exit status: 0
when the notebook is ready to submit, 1 when a check or visible test fails or an answer cell
is still unanswered, 2 when the notebook cannot be found. (Instructors grade a class with
``make grade``, the grader's command line.)
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the self-check; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m raydata_course.classroom", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="self-check a saved exercise notebook")
    c.add_argument("target", nargs="?", default=None, help="the notebook's path, or an assignment id like data01")
    c.add_argument("--no-run", action="store_true", help="structural checks only; do not run the visible tests")
    args = parser.parse_args(argv)
    from raydata_course.classroom.selfcheck import self_check

    target = args.target
    is_path = target is not None and (target.endswith(".ipynb") or "/" in target)
    try:
        report = self_check(None if is_path else target, notebook=target if is_path else None, run=not args.no_run)
    except FileNotFoundError as exc:
        print(f"[check] {exc}", file=sys.stderr)
        return 2
    return 0 if report.ready else 1


if __name__ == "__main__":
    sys.exit(main())
