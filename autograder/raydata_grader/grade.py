"""Grade a whole class with one command, on top of nbgrader 0.9.6 (grader only).

``python -m raydata_grader grade SUBMISSIONS --out DIR`` (``make grade
SUBMISSIONS=path``) takes a folder of submissions, either laid out as
``<student>/<assignment>/<notebook>.ipynb`` (an optional nbgrader ``timestamp.txt`` next to
the notebook) or holding one zip per student (``<student>.zip`` with ``<assignment>/...``
inside, or any zip whose single top-level folder is the student id), and:

1. **collects** every candidate notebook per student and assignment without touching the
   originals (a verbatim copy goes to ``DIR/received/``, zipped). Every folder or zip name is a
   student, kept in the rows; their files go under a short key of it (:mod:`.student_names`). A
   student who submitted twice is graded on the latest submission (its folder's ``timestamp.txt``,
   else the file's date on disk; dates inside a zip are ignored). A symlink, an oversized or
   corrupt file, a zip that names another student, a notebook outside its assignment's folder or
   of another exercise: each is ``invalid`` with a reason (:mod:`.strays`), and the run goes on;
2. **lints and repairs** each notebook against the release (:mod:`raydata_course.classroom.lint`), makes it
   inert (:mod:`.inert`) and writes it to nbgrader's ``DIR/submitted/``; files that are not notebooks are
   ``invalid``, absent ones ``missing``;
3. **autogrades** each notebook with nbgrader's ``autograde`` in a job of its own
   (:mod:`.jobs`): a private nbgrader course on the machine that runs it, a worker process
   (:mod:`.worker`, under :func:`.sandbox.run_limited`: wall time, memory) that holds the
   judge (:mod:`.judge`). Jobs run one after another, several at once on this machine
   (``--jobs N``; by default as many as its cores and memory allow for the per-notebook
   limits), or as Ray tasks across a Ray cluster (``--cluster ADDRESS`` or ``RAY_ADDRESS``):
   :mod:`.dispatch`. Each result comes back as data and is merged here, one at a time, into
   the one grading folder: the autograded notebook, the gradebook's record
   (:mod:`.gradebook`), the row. The notebook's kernel runs in a sandbox
   (:mod:`.kernel_sandbox`: bubblewrap, an unprivileged user, nothing secret mounted, private
   ``/tmp`` and ``/dev/shm``, its own PID namespace, loopback only, cgroup bounds on memory
   and processes) with a fresh Ray runtime of its own. Every grade cell is scored by the
   judge's verdict, decided outside the kernel. Before each notebook the grader checks that
   the gradebook still holds the release's test cells and that the oracles are unchanged
   (:mod:`.integrity`). Where no sandbox can be had, the grader refuses to grade unless the
   instructor passes ``--no-sandbox``; every row graded that way says so in its message.
   ``--ray-address`` (with ``--no-sandbox`` only) connects every kernel to one running
   cluster instead;
4. **writes** ``DIR/grades.csv`` (student, assignment, score, max_score, status, message),
   with ``status`` one of ``graded``, ``repaired``, ``review`` (points held for the instructor:
   :mod:`.review`), ``timeout``, ``crashed``, ``missing``, ``invalid``. A failure is never a
   silent 0: the status and message say what happened;
5. **writes feedback** per student with nbgrader's ``generate_feedback``
   (``DIR/feedback/<student>/<assignment>/<assignment>.html``), without hidden-test code
   (:class:`~raydata_grader.nbgrader_steps.HideHiddenTests`), with the grader's notes on top; and a short
   page for a submission nbgrader could not grade;
6. **prints a summary** (also ``DIR/summary.md``): the class average per exercise, the most
   failed grade cells, the students who need attention, and this run's throughput
   (notebooks per minute, CPU-seconds per notebook). While it grades it shows progress:
   done / total, failures so far and the time left.

A run that grades nothing (no submission, or every one missing or invalid) raises :class:`NothingGraded`.

Re-running is safe. Results live in ``DIR/grades.json``, keyed by student and assignment,
written after each notebook, so a run that was interrupted, run again, grades only what is
missing; a submission whose bytes (and whose assignment source) have not changed is not graded again
(``--force`` re-grades), a student absent from this run keeps the rows of earlier runs, and
a submission that is missing this time never replaces an earlier grade. A record the grader
cannot use is set aside and said (:func:`~raydata_grader.records.load_rows`), never a stop.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from raydata_course.classroom.lint import lint_notebook
from raydata_course.classroom.reading import exercise_of
from raydata_course.layout import GRADER_CELL_TIMEOUT_S
from raydata_course.units import GiB
from raydata_grader.dispatch import runner_for
from raydata_grader.course_dir import assignment_duedate, ensure_course
from raydata_grader.feedback import write_feedback
from raydata_grader.inert import inert_notebook, keep_received
from raydata_grader.integrity import IntegrityError, check_integrity
from raydata_grader.intake import choose, collect_submissions
from raydata_grader.jobs import (UNSANDBOXED_NOTE, WORKER_ALLOWANCE_BYTES, GradeJob, JobLimits, KitCorrupted,
                                 NodeMismatch, SandboxUnavailable)
from raydata_grader.kit import CourseKit, build_kit, installation_digest
from raydata_grader.judge import oracle_digests
from raydata_grader.outcome import without_folders
from raydata_grader.paths import ASSIGNMENTS, oracles_dir, release_notebook
from raydata_grader.progress import Progress
from raydata_grader.forging import find_forging
from raydata_grader.records import Row, load_rows, read_rows, save_rows  # noqa: F401  (read_rows: this module's interface before load_rows)
from raydata_grader.review import hold_in_gradebook, release_in_gradebook, sync_formgrader
from raydata_grader.results import Planned, failed_row, merge_result, row_of
from raydata_grader.scratch import sweep
from raydata_grader.strays import course_exercises, place_strays
from raydata_grader.student_names import student_key
from raydata_grader.summary import RunStats, summary_markdown

__all__ = ["GradeOptions", "SandboxUnavailable", "NodeMismatch", "UNSANDBOXED_NOTE", "WORKER_ALLOWANCE_BYTES",
           "NothingGraded", "ensure_course", "grade_class"]


class NothingGraded(RuntimeError):
    """The run graded nothing (the message says why). ``exit_status``, the command's: 2 when the
    folder holds no submission, 1 when every submission found is missing or invalid."""

    def __init__(self, message: str, exit_status: int):
        super().__init__(message)
        self.exit_status = exit_status


@dataclass
class GradeOptions:
    """Limits and switches for one grading run.

    Attributes:
        cell_timeout_s: nbgrader's per-cell timeout (``Execute.timeout``), in seconds
            (default :data:`raydata_course.layout.GRADER_CELL_TIMEOUT_S`).
        notebook_timeout_s: wall-time limit for one notebook's whole autograde, in seconds.
        memory_bytes: memory limit for one notebook, in bytes (see :mod:`.sandbox`).
        max_output_chars: output kept per cell, in characters.
        sandbox: run every kernel in a sandbox (:mod:`.kernel_sandbox`); False grades
            without one (``--no-sandbox``, only for notebooks you trust), and every row says so.
        ray_address: connect every kernel to this running cluster instead of giving each
            kernel a fresh runtime (only without a sandbox, and not with ``cluster``).
        force: re-grade submissions that were graded before, unchanged.
        assignments: grade only these (default: every course assignment found in the
            submissions).
        quiet: print only the summary (no progress, no line per notebook).
        jobs: notebooks graded at once on this machine; None: as many as its cores and
            memory allow for these limits (:func:`raydata_grader.dispatch.default_jobs`).
        cluster: grade on the Ray cluster at this address instead, one Ray task per notebook
            (``jobs`` is then ignored: Ray places the tasks).
        cpus_per_notebook: CPUs one notebook is given (what a Ray task asks for, and what
            the default ``jobs`` divides the cores by).
        retries: on a cluster, times a notebook is graded again after its node or worker died.
    """

    cell_timeout_s: int = GRADER_CELL_TIMEOUT_S
    notebook_timeout_s: int = 1200
    memory_bytes: int = 6 * GiB
    max_output_chars: int = 20_000
    sandbox: bool = True
    ray_address: str | None = None
    force: bool = False
    assignments: tuple[str, ...] | None = None
    quiet: bool = False
    jobs: int | None = None
    cluster: str | None = None
    cpus_per_notebook: float = 1.0
    retries: int = 3

    @property
    def limits(self) -> JobLimits:
        """What each job grades under."""
        return JobLimits(self.cell_timeout_s, self.notebook_timeout_s, self.memory_bytes, self.max_output_chars,
                         self.sandbox, self.ray_address)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sandbox_support(options: GradeOptions, log):
    """Check the run's options; return the sandbox this machine gives its kernels (None: ``--no-sandbox``,
    or a cluster's nodes grade).

    Raises:
        SandboxUnavailable: if the machine has none and the instructor did not opt out.
        ValueError: for ``ray_address`` with a sandbox or with ``cluster``, ``jobs`` below 1,
            ``cpus_per_notebook`` not above 0, or ``retries`` below 0.
    """
    if options.jobs is not None and options.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {options.jobs}")
    if options.cpus_per_notebook <= 0 or options.retries < 0:
        raise ValueError(f"--cpus-per-notebook must be above 0 and --retries at least 0, got "
                         f"{options.cpus_per_notebook:g} and {options.retries}")
    if options.ray_address and options.cluster:
        raise ValueError("--ray-address (every kernel joins one running cluster) and --cluster (every notebook is a "
                         "task on a cluster, its kernel with a runtime of its own) do not go together: pick one")
    if not options.sandbox:
        log("[grade] NO SANDBOX (--no-sandbox): kernels run as the grader's user, with its files and network "
            "in reach; only grade notebooks you trust this way. Every row will say so.")
        return None
    if options.ray_address:
        raise ValueError("--ray-address needs --no-sandbox: a sandboxed kernel starts its own Ray runtime and "
                         "reaches nothing outside its sandbox")
    if options.cluster:
        return None  # every node is checked before the first notebook (dispatch.ClusterRunner)
    from raydata_grader.kernel_sandbox import probe

    support = probe()
    if not support.available:
        raise SandboxUnavailable(
            f"this machine cannot sandbox the notebooks it grades ({support.why}). A submitted notebook is code "
            "written by someone else: install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) on Linux, or "
            "grade on a Linux machine that has it. To grade anyway, without a sandbox, pass --no-sandbox "
            "(GRADE_ARGS=--no-sandbox with make grade).")
    log(f"[grade] sandbox: {support.describe()}")
    return support


def _plan(out: Path, cand, note: str, digest: str, kit: CourseKit, release_nb, limits: JobLimits,
          graded_at: str, exercises: dict[str, frozenset[str]] | None = None) -> tuple[Row | None, Planned | None]:
    """Keep a verbatim copy of a chosen submission (zipped: no viewer renders it), lint and repair it (as a
    notebook of another of ``exercises``, invalid), and make it inert
    (:func:`~raydata_grader.inert.inert_notebook`); return its row (invalid) or its job, filed under the
    student's key."""
    student, assignment = cand.student, cand.assignment
    key = student_key(student)
    keep_received(out / "received" / key / assignment, cand.origin.split("!")[-1], cand.data)
    lint = lint_notebook(cand.data, release_nb, exercise=assignment, exercises=exercises)
    if lint.status == "invalid":
        notes = ([note] if note else []) + lint.problems
        row = Row(student, assignment, 0.0, kit.max_score, "invalid", "; ".join(notes), repairs=lint.repairs,
                  submission_sha256=digest, source_sha256=kit.source_sha256, graded_at=graded_at, notes=notes)
        return row, None
    sub_dir = out / "submitted" / key / assignment  # what formgrader shows as the submission
    if sub_dir.exists():
        shutil.rmtree(sub_dir)
    sub_dir.mkdir(parents=True)
    notebook, cut = inert_notebook(lint.notebook)
    data = nbformat.writes(notebook).encode("utf-8")
    (sub_dir / f"{assignment}.ipynb").write_bytes(data)
    if cand.timestamp_text:
        (sub_dir / "timestamp.txt").write_text(cand.timestamp_text + "\n")
    job = GradeJob(key, assignment, data, cand.timestamp_text, limits, installation_digest())
    found = find_forging(lint.notebook, release_nb)
    return None, Planned(job, "; ".join([note] + cut if note else cut), digest, lint.status, lint.repairs,
                         student=student, findings=[f.describe() for f in found],
                         finding_rules=sorted({f.rule for f in found}))


def grade_class(submissions: str | os.PathLike, out: str | os.PathLike, options: GradeOptions | None = None) -> dict[tuple[str, str], Row]:
    """Grade every submission under ``submissions`` into the course folder ``out``.

    Args:
        submissions: a folder of ``<student>/<assignment>/*.ipynb`` folders or ``*.zip`` files.
        out: the grading folder (created; reused by later runs).
        options: limits and switches (:class:`GradeOptions`).

    Returns:
        Every row now in ``<out>/grades.json``, this run's and earlier runs'.

    Raises:
        FileNotFoundError: if ``submissions`` is not a folder.
        ValueError: if an assignment asked for is not one of the course's, for ``ray_address``
            with a sandbox or with ``cluster``, or for ``jobs`` below 1.
        SandboxUnavailable: if the machine (or a node of the cluster) cannot sandbox kernels
            and ``options.sandbox`` is on.
        NodeMismatch: if a node of the cluster has another installation of the course.
        raydata_grader.dispatch.ClusterTooSmall: if no node of the cluster can hold one notebook.
        IntegrityError: if the oracles or the gradebook changed during the run.
    """
    options = options or GradeOptions()
    out = Path(out).resolve()
    log = (lambda *a: None) if options.quiet else (lambda *a: print(*a, flush=True))
    if options.cluster is None and os.environ.get("RAY_ADDRESS") and options.ray_address is None:
        options = replace(options, cluster=os.environ["RAY_ADDRESS"])
        log(f"[grade] RAY_ADDRESS is set: grading on the Ray cluster at {options.cluster} (unset it to grade here)")
    support = _sandbox_support(options, log)
    if options.cluster:  # one line on a token the cluster refuses, before ray.init's 20 s of warnings
        from raydata_grader.cluster_auth import check_cluster_auth

        check_cluster_auth(options.cluster)
    known = tuple(ASSIGNMENTS)
    if options.assignments:
        unknown = sorted(set(options.assignments) - set(known))
        if unknown:
            raise ValueError(f"unknown assignment(s) {unknown}; the course has {list(known)}")
    found, students, empty, notes = collect_submissions(submissions, known)
    exercises = course_exercises(known)
    stray_notes, stray_log = place_strays(found, empty, lambda data: exercise_of(data, exercises), known)
    wanted = tuple(options.assignments or sorted({a for _, a in found} | {a for _, a in empty if a != "*"})
                   or (known if students else ()))  # only whole refused submissions: every assignment's row says so
    for note in notes + stray_log:
        log(f"[grade] {note}")
    if not students:
        raise NothingGraded(f"nothing was graded: {submissions} holds no submission (a folder per student, "
                            "<student>/<assignment>/<assignment>.ipynb, or a zip per student, <student>.zip)", 2)
    start = time.monotonic()
    ensure_course(out, wanted)
    kits = {a: replace(build_kit(out, a), duedate=assignment_duedate(out, a)) for a in wanted}
    digests = oracle_digests(oracles_dir())
    stale = [a for a in wanted if digests.get(f"{a}.py") != kits[a].oracle_sha256]
    if stale:
        raise IntegrityError(f"the oracles of {stale} changed while the run was starting: grade again")
    rows, record_problems = load_rows(out)
    for problem in record_problems:
        log(f"[grade] {problem}")
    for decided in sync_formgrader(out):  # decisions on held points made in formgrader since the last run
        rows[(decided.student, decided.assignment)] = decided
        log(f"[grade] {decided.student}/{decided.assignment}: reviewed in formgrader, now {decided.status}")
    releases = {a: nbformat.read(release_notebook(a, out), as_version=4) for a in wanted}
    now = lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    planned: list[Planned] = []
    kept = 0
    for assignment in wanted:
        check_integrity(out, assignment, releases[assignment], digests, log)
    for student in sorted(students):
        for assignment in wanted:
            key = (student, assignment)
            kit = kits[assignment]
            earlier = rows.get(key)
            cands = found.get(key, [])
            if not cands:
                why = empty.get(key) or empty.get((student, "*"))
                status = "invalid" if key in empty.invalid or (student, "*") in empty else "missing"
                message = why or f"no submission for {assignment}"
                if earlier and earlier.status not in ("missing", "invalid") and status == "missing":
                    log(f"[grade] {student}/{assignment}: missing this time; keeping the earlier grade ({earlier.status})")
                    continue
                rows[key] = Row(student, assignment, 0.0, kit.max_score, status, message, graded_at=now(),
                                notes=[message])
                (out / "received" / student_key(student) / assignment).mkdir(parents=True, exist_ok=True)
                write_feedback(out, rows[key], "", False)
                log(f"[grade] {student}/{assignment}: {status}: {message}")
                save_rows(out, rows)
                continue
            cand, note = choose(cands)
            note = "; ".join([note] * bool(note) + stray_notes.get(key, []))
            digest = _sha(cand.data)
            if (earlier and not options.force and earlier.submission_sha256 == digest
                    and earlier.source_sha256 == kit.source_sha256):
                log(f"[grade] {student}/{assignment}: unchanged since {earlier.graded_at}; kept ({earlier.status}, {earlier.score:g})")
                kept += earlier.status != "invalid"
                continue
            try:
                row, job = _plan(out, cand, note, digest, kit, releases[assignment], options.limits, now(), exercises)
            except (KeyboardInterrupt, IntegrityError):
                raise
            except Exception as exc:  # the grader itself failed on this file: say so, and go on
                said = without_folders(str(exc), {out: "<grading folder>", submissions: "<submissions folder>"})
                why = (f"the grader failed on this submission ({type(exc).__name__}: {said[:200]}); the run went "
                       "on. Instructor: report this with the submitted file (kept in received/)")
                row, job = Row(student, assignment, 0.0, kit.max_score, "crashed", why,
                               source_sha256=kit.source_sha256, graded_at=now(), notes=[why]), None
            if row is not None:
                rows[key] = row
                write_feedback(out, row, "", False)
                save_rows(out, rows)
                log(f"[grade] {student}/{assignment}: {row.status}: {row.message}")
            if job is not None:
                planned.append(job)
    stats = RunStats(mode="", slots=0)
    try:
        if planned:
            stats = _grade_jobs(out, planned, kits, releases, digests, rows, options, support, log, now)
    finally:  # also when stopped: what a killed job left on this machine (its folders, its cgroup) goes
        sweep()
    save_rows(out, rows)
    stats.wall_s = time.monotonic() - start
    if stats.notebooks:
        stats.append_to(out / "runs.jsonl")
    summary = summary_markdown(rows, stats if stats.notebooks else None)
    (out / "summary.md").write_text(summary)
    print(summary)
    print(f"[grade] {stats.notebooks} notebook(s) autograded in {stats.wall_s:.0f} s"
          + (f" ({stats.per_minute:.1f} per minute, {stats.cpu_seconds_per_notebook:.0f} CPU-seconds per notebook)"
             if stats.notebooks else "")
          + f"; grades: {out / 'grades.csv'}; feedback: {out / 'feedback'}; repair logs: {out / 'repairs'}")
    if not planned and not kept:
        raise NothingGraded(f"nothing was graded: none of the submissions of the {len(students)} student(s) under "
                            f"{submissions} could be graded (each is missing or invalid; {out / 'grades.csv'} says "
                            "why, row by row)", 1)
    return rows


def _grade_jobs(out: Path, planned: list[Planned], kits: dict[str, CourseKit], releases, digests, rows, options,
                support, log, now) -> RunStats:
    """Run the planned jobs and merge each result as it comes; return the run's figures."""
    by_key = {(p.job.student, p.job.assignment): p for p in planned}
    runner = runner_for(options, kits, support, log)
    with runner:
        log(f"[grade] grading {len(planned)} notebook(s) {runner.describe()}")
        stats = RunStats(mode=runner.describe(), slots=runner.slots)
        for p in planned:
            runner.submit(p.job)
        with Progress(len(planned), quiet=options.quiet) as progress:
            for job, result in runner.completed():
                p = by_key[(job.student, job.assignment)]
                kit = kits[job.assignment]
                if isinstance(result, (NodeMismatch, SandboxUnavailable, KitCorrupted, KeyboardInterrupt)):
                    raise result  # the machine or the run is wrong, not this notebook: stop, say why
                merging = time.monotonic()
                check_integrity(out, job.assignment, releases[job.assignment], digests, log)
                graded = merged = False
                if isinstance(result, BaseException):  # JobStopped on its node, a grader bug, Ray gave up
                    row = failed_row(p, result, kit, now())
                else:
                    try:
                        earlier = rows.get((p.student or job.student, job.assignment))
                        merge_result(out, job, result)
                        row, graded, merged = row_of(p, result, kit, now()), result.graded_by_nbgrader, True
                        release_in_gradebook(out, earlier)
                        hold_in_gradebook(out, row)
                    except Exception as exc:  # a result this run cannot take in: that row only, the run goes on
                        row = failed_row(p, exc, kit, now())
                rows[(row.student, row.assignment)] = row
                try:
                    write_feedback(out, row, "", graded)
                except Exception as exc:
                    progress.write(f"[grade] {row.student}/{row.assignment}: could not write feedback "
                                   f"({type(exc).__name__}: {exc})")
                save_rows(out, rows)
                if merged:
                    stats.add(result.wall_s, result.cpu_s, result.node, time.monotonic() - merging)
                progress.done(f"[grade] {row.student}/{row.assignment}: {row.status} {row.score:g}/{row.max_score:g}"
                              + (f" in {row.seconds:.0f} s on {row.node}" if row.seconds else "")
                              + (f": {row.message}" if row.message else ""),
                              failed=row.status not in ("graded", "repaired"))
    return stats
