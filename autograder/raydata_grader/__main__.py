"""The instructor's command line: ``python -m raydata_grader COMMAND ...``.

========================  ===================================================================
``grade SUBMISSIONS``     grade a class (``make grade SUBMISSIONS=path``): ``--out DIR``,
                          ``--assignment ID`` (repeatable), ``--cell-timeout S``,
                          ``--notebook-timeout S``, ``--memory-gib G``,
                          ``--max-output-chars N``, ``--no-sandbox``,
                          ``--ray-address ADDR`` (with ``--no-sandbox``), ``--force``,
                          ``--jobs N``, ``--cluster ADDR``, ``--cpus-per-notebook C``,
                          ``--retries N``
``release [ID ...]``      regenerate ``exercises/`` from ``solutions/`` (``make release``)
``course``                run every chapter, grade every reference solution, run the quick
                          lab (``make course``): ``--out DIR``, ``--skip-chapters``,
                          ``--skip-grading``, ``--skip-lab``
``bundle``                build the student zip and audit it (``make student-bundle``):
                          ``--out FILE``, ``--site DIR`` (the built playground)
``jupyter``               JupyterLab with formgrader (``make jupyter``): ``--port N``,
                          ``--no-browser``, ``--grading DIR``, other ``jupyter lab`` options
``review [S A]``          list the points held for review in a grading folder (``--out DIR``),
                          or decide one row: ``STUDENT ASSIGNMENT --accept`` / ``--reject``
                          (``--note TEXT``); also takes in decisions made in formgrader
``inventory``             write ``docs/grader/inventory.md``, every grade cell's facts and
                          where the judge gets them (``--check``: fail if it is stale or a
                          check names no fact; ``--out FILE``)
========================  ===================================================================

Exit status 0 on success; 1 when the job ran and failed (``course``; ``bundle``: the bundle would
be stale, name what it lacks or leak grader material), or when ``grade`` graded
nothing because every submission it found is missing or invalid (the rows say why); 2 on bad
input (``grade``: a submissions folder that holds no submission, a cluster that refuses this
process's token, no sandbox); 130 when ``grade`` was stopped (Ctrl-C, SIGTERM; what it graded so
far is kept). A failure ends with one line saying why.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from raydata_course.layout import GRADER_CELL_TIMEOUT_S
from raydata_course.units import GiB


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m raydata_grader", description="The course's instructor commands.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade a class's submissions with nbgrader")
    g.add_argument("submissions", help="folder of <student>/<assignment>/*.ipynb folders or <student>.zip files")
    g.add_argument("--out", default="build/grading", help="grading folder, reused by later runs (default: build/grading)")
    g.add_argument("--assignment", action="append", dest="assignments", help="grade only this assignment (repeatable)")
    g.add_argument("--cell-timeout", type=int, default=GRADER_CELL_TIMEOUT_S,
                   help=f"per-cell timeout in seconds (default {GRADER_CELL_TIMEOUT_S})")
    g.add_argument("--notebook-timeout", type=int, default=1200, help="per-notebook wall-time limit in seconds (default 1200)")
    g.add_argument("--memory-gib", type=float, default=6.0, help="per-notebook memory limit in GiB (default 6)")
    g.add_argument("--max-output-chars", type=int, default=20_000, help="output kept per cell, in characters")
    g.add_argument("--no-sandbox", action="store_true",
                   help="grade without a sandbox, where none can be had (macOS, no bubblewrap): only for notebooks "
                        "you trust; every row says so")
    g.add_argument("--ray-address", default=None,
                   help="with --no-sandbox: connect every kernel to this running Ray cluster instead of a fresh "
                        "runtime per notebook")
    g.add_argument("--force", action="store_true", help="re-grade submissions that are unchanged since the last run")
    g.add_argument("--jobs", type=int, default=None,
                   help="notebooks graded at once on this machine (default: as many as its cores and memory allow "
                        "for the per-notebook limits; the log says how many)")
    g.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help="grade on this running Ray cluster, one Ray task per notebook (default: $RAY_ADDRESS if set)")
    g.add_argument("--cpus-per-notebook", type=float, default=1.0, help="CPUs one notebook is given (default 1)")
    g.add_argument("--retries", type=int, default=3,
                   help="on a cluster, times a notebook is graded again after its node or worker died (default 3)")
    r = sub.add_parser("release", help="regenerate exercises/ from solutions/")
    r.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    c = sub.add_parser("course", help="run the chapters, grade the reference solutions, run the quick lab")
    c.add_argument("--out", type=Path, default=Path("build/course"), help="output folder (default build/course)")
    c.add_argument("--skip-chapters", action="store_true", help="do not run the chapters")
    c.add_argument("--skip-grading", action="store_true", help="do not grade the reference solutions")
    c.add_argument("--skip-lab", action="store_true", help="do not run the quick lab")
    b = sub.add_parser("bundle", help="build the student zip and prove it holds no grader material")
    b.add_argument("--out", type=Path, default=Path("build/student-bundle.zip"))
    b.add_argument("--site", type=Path, default=None,
                   help="the built playground to ship (default build/playground, from `make playground`)")
    j = sub.add_parser("jupyter", help="JupyterLab on the course, with formgrader")
    j.add_argument("--port", type=int, default=None, help="listen on this port only")
    j.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    j.add_argument("--grading", default=None, metavar="DIR",
                   help="show this grading folder (e.g. build/grading from `make grade`) in formgrader")
    v = sub.add_parser("review", help="list or decide the points held for an instructor's review")
    v.add_argument("student", nargs="?", help="the row to decide: student id")
    v.add_argument("assignment", nargs="?", help="the row to decide: assignment id")
    v.add_argument("--out", default="build/grading", help="grading folder (default: build/grading)")
    decision = v.add_mutually_exclusive_group()
    decision.add_argument("--accept", action="store_true", help="give the held points")
    decision.add_argument("--reject", action="store_true", help="keep the held points at 0")
    v.add_argument("--note", default="", help="a few words kept in the row's message (who decided, why)")
    i = sub.add_parser("inventory", help="write the table of every grade cell's facts and where the judge gets them")
    i.add_argument("--out", type=Path, default=Path("docs/grader/inventory.md"))
    i.add_argument("--check", action="store_true", help="fail if the table is stale or a check names no fact")
    return parser


def _inventory(args) -> int:
    from raydata_grader.facts import InventoryError, write_inventory
    from raydata_grader.paths import ASSIGNMENTS, oracles_dir

    try:
        current = write_inventory(args.out, tuple(ASSIGNMENTS), oracles_dir(), check=args.check)
    except InventoryError as exc:
        print(f"[inventory] error: {exc}", file=sys.stderr)
        return 1
    print(f"[inventory] {args.out} is " + ("up to date" if current else "written"))
    return 0


def _grade(args) -> int:
    from raydata_grader.grade import GradeOptions, NothingGraded, grade_class

    def stop(signum, frame):  # SIGTERM unwinds like Ctrl-C, so running jobs are killed, not orphaned
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    options = GradeOptions(cell_timeout_s=args.cell_timeout, notebook_timeout_s=args.notebook_timeout,
                           memory_bytes=int(args.memory_gib * GiB), max_output_chars=args.max_output_chars,
                           sandbox=not args.no_sandbox, ray_address=args.ray_address, force=args.force,
                           assignments=tuple(args.assignments) if args.assignments else None, jobs=args.jobs,
                           cluster=args.cluster, cpus_per_notebook=args.cpus_per_notebook, retries=args.retries)
    try:
        grade_class(args.submissions, args.out, options)
    except KeyboardInterrupt as exc:
        print(f"[grade] stopped ({exc or 'Ctrl-C'}): every notebook graded so far is saved in {args.out}; run the same "
              "command again to grade the rest", file=sys.stderr)
        return 130
    except NothingGraded as exc:
        print(f"[grade] {exc}", file=sys.stderr)
        return exc.exit_status
    return 0


def _bundle(args) -> int:
    import zipfile

    from raydata_course.units import MiB
    from raydata_grader.bundle import build_bundle

    try:
        path = build_bundle(args.out, site=args.site)
    except RuntimeError as exc:  # stale exercises, a name the bundle lacks, a leak: the message says which
        print(f"[student-bundle] error: {exc}", file=sys.stderr)
        return 1
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        unpacked = sum(info.file_size for info in z.infolist())
    print(f"[student-bundle] wrote {path} ({path.stat().st_size / MiB:.1f} MiB, {unpacked / MiB:.1f} MiB unpacked, "
          f"{len(names)} files); every link and make target it names is in it; audit clean")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return the exit status."""
    args, rest = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    if rest and args.command != "jupyter":
        _parser().error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "grade":
            return _grade(args)
        if args.command == "release":
            from raydata_grader.release import release_exercises

            release_exercises(tuple(args.assignments))
            return 0
        if args.command == "course":
            from raydata_grader.course_run import run_course

            return run_course(args.out, chapters=not args.skip_chapters, grading=not args.skip_grading,
                              lab=not args.skip_lab)
        if args.command == "bundle":
            return _bundle(args)
        if args.command == "review":
            from raydata_grader.review import review_main

            return review_main(args.out, args.student, args.assignment, args.accept, args.reject, args.note)
        if args.command == "inventory":
            return _inventory(args)
        from raydata_grader.formgrader import launch

        launch(port=args.port, open_browser=not args.no_browser, grading=args.grading, extra_args=rest)
        return 0  # not reached
    except (FileNotFoundError, ValueError) as exc:
        print(f"[{args.command}] error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        from raydata_grader.dispatch import ClusterError
        from raydata_grader.integrity import IntegrityError
        from raydata_grader.jobs import KitCorrupted, NodeMismatch, SandboxUnavailable

        if isinstance(exc, (SandboxUnavailable, IntegrityError, NodeMismatch, ClusterError, KitCorrupted)):
            print(f"[{args.command}] error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
