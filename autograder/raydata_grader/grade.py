"""Grade a whole class with one command, on top of nbgrader 0.9.6 (grader only).

``python -m raydata_grader grade SUBMISSIONS --out DIR`` (``make grade
SUBMISSIONS=path``) takes a folder of submissions, either laid out as
``<student>/<assignment>/<notebook>.ipynb`` (an optional nbgrader ``timestamp.txt`` next to
the notebook) or holding one zip per student (``<student>.zip`` with ``<assignment>/...``
inside, or any zip whose single top-level folder is the student id), and:

1. **collects** every candidate notebook per student and assignment without touching the
   originals (a verbatim copy goes to ``DIR/received/``). A student who submitted twice is
   graded on the latest submission (its folder's ``timestamp.txt``, else the file's date on
   disk; dates inside a zip are ignored). A symlink, an oversized or corrupt file, a zip
   that names another student: each is ``invalid`` with a reason, and the run goes on;
2. **lints and repairs** each notebook against the release (:mod:`raydata_course.classroom.lint`) and writes the
   repaired copy to nbgrader's ``DIR/submitted/``; files that are not notebooks are
   ``invalid``, absent ones ``missing``;
3. **autogrades** each notebook with nbgrader's ``autograde``, in a worker process
   (:mod:`.worker`, under :func:`.sandbox.run_limited`: wall time, memory) that holds the
   judge (:mod:`.judge`). The notebook's kernel runs in a sandbox
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
   with ``status`` one of ``graded``, ``repaired``, ``timeout``, ``crashed``, ``missing``,
   ``invalid``. A failure is never a silent 0: the status and message say what happened;
5. **writes feedback** per student with nbgrader's ``generate_feedback``
   (``DIR/feedback/<student>/<assignment>/<assignment>.html``), without hidden-test code
   (:class:`~raydata_grader.nbgrader_steps.HideHiddenTests`), with the grader's notes on top; and a short
   page for a submission nbgrader could not grade;
6. **prints a summary** (also ``DIR/summary.md``): the class average per exercise, the most
   failed grade cells, and the students who need attention.

Re-running is safe. Results live in ``DIR/grades.json``, keyed by student and assignment; a
submission whose bytes (and whose assignment source) have not changed is not graded again
(``--force`` re-grades), a student absent from this run keeps the rows of earlier runs, and
a submission that is missing this time never replaces an earlier grade.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from raydata_course.classroom.lint import lint_notebook
from raydata_course.layout import GRADER_CELL_TIMEOUT_S, HEADLESS_ENV, PROGRESS_ENV, TEMP_ROOT_ENV
from raydata_course.units import GiB
from raydata_grader.course_dir import release
from raydata_grader.feedback import write_feedback
from raydata_grader.intake import Candidate, choose, collect_submissions
from raydata_grader.integrity import IntegrityError, gradebook_problems, oracle_changes
from raydata_grader.judge import oracle_digests
from raydata_grader.outcome import classify, read_json
from raydata_grader.paths import ASSIGNMENTS, oracles_dir, release_notebook, source_notebook
from raydata_grader.records import Row, read_rows, save_rows
from raydata_grader.sandbox import run_limited
from raydata_grader.summary import summary_markdown
from raydata_grader.worker import worker_command

__all__ = ["GradeOptions", "SandboxUnavailable", "UNSANDBOXED_NOTE", "ensure_course", "grade_class"]

#: What every row graded with ``--no-sandbox`` says.
UNSANDBOXED_NOTE = ("graded WITHOUT a sandbox (--no-sandbox): the kernel ran as the grader's user, with the "
                    "grader's files and network in reach")
#: Memory the worker itself may use beside its sandboxed kernel (nbgrader, the judge, torch), in bytes.
WORKER_ALLOWANCE_BYTES = 2 * GiB


class SandboxUnavailable(RuntimeError):
    """This machine cannot sandbox a graded kernel, and the instructor did not opt out."""


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
            kernel a fresh runtime (only without a sandbox).
        force: re-grade submissions that were graded before, unchanged.
        assignments: grade only these (default: every course assignment found in the
            submissions).
        quiet: print only the summary.
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


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ensure_course(out: Path, assignments: tuple[str, ...]) -> None:
    """Make ``out`` an nbgrader course holding the current source and release of ``assignments``.

    The first run copies ``solutions/<id>/`` and generates the release (which creates the
    gradebook). Later runs keep the gradebook and regenerate only an assignment whose source
    changed.
    """
    out.mkdir(parents=True, exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):  # nbgrader runs `alembic` for a new gradebook
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    stale = []
    for assignment in assignments:
        src = source_notebook(assignment).parent
        dst = out / "solutions" / assignment
        same = dst.is_dir() and all(
            (dst / p.relative_to(src)).is_file() and (dst / p.relative_to(src)).read_bytes() == p.read_bytes()
            for p in src.rglob("*") if p.is_file())
        if not same:
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        if not same or not release_notebook(assignment, out).is_file() or not (out / "gradebook.db").is_file():
            stale.append(assignment)
    if stale:
        release(tuple(stale), course_dir=out)


def _max_score(release_nb) -> float:
    return float(sum(float(c.metadata.get("nbgrader", {}).get("points", 0) or 0)
                     for c in release_nb.cells if c.metadata.get("nbgrader", {}).get("grade")))


def _temp_root(student: str, assignment: str) -> str:
    tag = hashlib.sha1(f"{student}/{assignment}/{os.getpid()}/{time.time()}".encode()).hexdigest()[:10]
    return f"/tmp/rdg-{tag}"


def _grade_one(out: Path, cand: Candidate, lint, options: GradeOptions, support, log) -> tuple[str, float, dict, list[str], float]:
    assignment, student = cand.assignment, cand.student
    sub_dir = out / "submitted" / student / assignment
    if sub_dir.exists():
        shutil.rmtree(sub_dir)
    sub_dir.mkdir(parents=True)
    nbformat.write(lint.notebook, sub_dir / f"{assignment}.ipynb")
    if cand.timestamp_text:
        (sub_dir / "timestamp.txt").write_text(cand.timestamp_text + "\n")
    work = out / "work" / student / assignment
    work.mkdir(parents=True, exist_ok=True)
    result_path, progress_path, log_path = work / "result.json", work / "progress.json", work / "autograde.log"
    for p in (result_path, progress_path, log_path):
        p.unlink(missing_ok=True)
    temp_root = _temp_root(student, assignment)
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.update({TEMP_ROOT_ENV: temp_root, "RAY_TMPDIR": temp_root, HEADLESS_ENV: "1",
                PROGRESS_ENV: str(progress_path), "PYTHONUNBUFFERED": "1"})
    level = support.level if support is not None else "none"
    if options.ray_address and level == "none":
        env["RAY_ADDRESS"] = options.ray_address
        # Ray 2.60 starts local clusters with token authentication (~/.ray/auth_token); a driver
        # in another process sends the token only in token mode.
        if (Path.home() / ".ray" / "auth_token").is_file():
            env.setdefault("RAY_AUTH_MODE", "token")
    cmd = worker_command(out, assignment, student, result_path, options.cell_timeout_s, options.max_output_chars,
                         level, support.cgroups if support is not None else "", options.memory_bytes)
    # With cgroups, the kernel's own limit (memory_bytes) acts first; the watchdog's covers
    # the worker beside it.
    in_cgroup = level != "none" and bool(support.cgroups)
    watchdog_bytes = options.memory_bytes + (WORKER_ALLOWANCE_BYTES if in_cgroup else 0)
    outcome = run_limited(cmd, timeout_s=options.notebook_timeout_s, memory_bytes=watchdog_bytes, env=env,
                          log_path=log_path, ray_temp_root=temp_root, watch_tree_memory=not in_cgroup)
    instructor = frozenset(c.metadata["nbgrader"]["grade_id"] for c in lint.notebook.cells
                           if c.get("cell_type") == "code" and c.metadata.get("nbgrader", {}).get("locked")
                           and not c.metadata["nbgrader"].get("grade") and not c.metadata["nbgrader"].get("solution"))
    status, score, cells, messages = classify(read_json(result_path), outcome, read_json(progress_path), options,
                                               instructor)
    if level == "none":
        messages.append(UNSANDBOXED_NOTE)
    return status, score, cells, messages, outcome.wall_s


def _sandbox_support(options: GradeOptions, log):
    """The sandbox this run uses (None: ``--no-sandbox``).

    Raises:
        SandboxUnavailable: if the machine has none and the instructor did not opt out.
        ValueError: for ``ray_address`` with a sandbox.
    """
    if not options.sandbox:
        log("[grade] NO SANDBOX (--no-sandbox): kernels run as the grader's user, with its files and network "
            "in reach; only grade notebooks you trust this way. Every row will say so.")
        return None
    if options.ray_address:
        raise ValueError("--ray-address needs --no-sandbox: a sandboxed kernel starts its own Ray runtime and "
                         "reaches nothing outside its sandbox")
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


def _check_integrity(out: Path, assignment: str, release_nb, digests: dict[str, str], log) -> None:
    """Stop the run if the oracles changed; restore the gradebook's test cells if they did.

    Raises:
        IntegrityError: if an oracle file changed since the run started, or the gradebook
            still differs from the release after it was regenerated.
    """
    changes = oracle_changes(digests, oracle_digests(oracles_dir()))
    if changes:
        raise IntegrityError(f"the oracles changed while the class was being graded ({'; '.join(changes)}): "
                             "the grades already written were judged by the old ones. Check autograder/oracles/ "
                             "and grade again with --force.")
    problems = gradebook_problems(out, assignment, release_nb)
    if problems:
        log(f"[grade] WARNING: the gradebook's copy of {assignment} no longer matches the release "
            f"({'; '.join(problems[:3])}); regenerating it before the next notebook")
        release((assignment,), course_dir=out)
        problems = gradebook_problems(out, assignment, release_nb)
        if problems:
            raise IntegrityError(f"the gradebook in {out} does not match the release of {assignment} "
                                 f"({'; '.join(problems[:3])}), even after regenerating it: delete the grading "
                                 "folder and grade again.")


def _grade_candidate(out: Path, cand: Candidate, note: str, digest: str, release_nb, max_score: float,
                     source_sha: str, options: GradeOptions, support, log, graded_at: str) -> tuple[Row, bool]:
    """Lint, repair and autograde one chosen submission; return its row and whether nbgrader graded it."""
    student, assignment = cand.student, cand.assignment
    received = out / "received" / student / assignment
    if received.exists():
        shutil.rmtree(received)
    received.mkdir(parents=True)
    (received / Path(cand.origin.split("!")[-1]).name).write_bytes(cand.data)
    lint = lint_notebook(cand.data, release_nb)
    row = Row(student, assignment, 0.0, max_score, lint.status, "", repairs=lint.repairs,
              submission_sha256=digest, source_sha256=source_sha, graded_at=graded_at)
    messages = [note] if note else []
    if lint.status == "invalid":
        row.notes = messages + lint.problems
        row.message = "; ".join(row.notes)
        return row, False
    status, score, cells, run_messages, seconds = _grade_one(out, cand, lint, options, support, log)
    row.score, row.cells, row.seconds = score, cells, round(seconds, 1)
    row.status = status if status != "graded" else lint.status
    row.notes = messages + run_messages
    repaired = [f"{len(lint.repairs)} repair(s): " + "; ".join(lint.repairs)] if lint.repairs else []
    row.message = "; ".join(messages + repaired + run_messages)
    return row, status in ("graded", "timeout") or bool(cells)


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
        ValueError: if an assignment asked for is not one of the course's, or for
            ``ray_address`` with a sandbox.
        SandboxUnavailable: if the machine cannot sandbox kernels and ``options.sandbox`` is on.
        IntegrityError: if the oracles or the gradebook changed during the run.
    """
    options = options or GradeOptions()
    out = Path(out).resolve()
    log = (lambda *a: None) if options.quiet else (lambda *a: print(*a, flush=True))
    support = _sandbox_support(options, log)
    known = tuple(ASSIGNMENTS)
    if options.assignments:
        unknown = sorted(set(options.assignments) - set(known))
        if unknown:
            raise ValueError(f"unknown assignment(s) {unknown}; the course has {list(known)}")
    found, students, empty, notes = collect_submissions(submissions, known)
    wanted = tuple(options.assignments or sorted({a for _, a in found} | {a for _, a in empty if a != "*"}))
    for note in notes:
        log(f"[grade] {note}")
    if not wanted:
        log(f"[grade] no submissions of {list(known)} under {submissions}")
        return read_rows(out)
    start = time.monotonic()
    ensure_course(out, wanted)
    digests = oracle_digests(oracles_dir())
    rows = read_rows(out)
    releases = {a: nbformat.read(release_notebook(a, out), as_version=4) for a in wanted}
    source_sha = {a: _sha(source_notebook(a, out).read_bytes()) for a in wanted}
    max_scores = {a: _max_score(releases[a]) for a in wanted}
    now = lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    n_graded = 0
    for student in sorted(students):
        for assignment in wanted:
            key = (student, assignment)
            earlier = rows.get(key)
            cands = found.get(key, [])
            if not cands:
                why = empty.get(key) or empty.get((student, "*"))
                status = "invalid" if key in empty.invalid or (student, "*") in empty else "missing"
                message = why or f"no submission for {assignment}"
                if earlier and earlier.status not in ("missing", "invalid") and status == "missing":
                    log(f"[grade] {student}/{assignment}: missing this time; keeping the earlier grade ({earlier.status})")
                    continue
                rows[key] = Row(student, assignment, 0.0, max_scores[assignment], status, message, graded_at=now(),
                                notes=[message])
                (out / "received" / student / assignment).mkdir(parents=True, exist_ok=True)
                write_feedback(out, rows[key], "", False)
                log(f"[grade] {student}/{assignment}: {status}: {message}")
                save_rows(out, rows)
                continue
            cand, note = choose(cands)
            digest = _sha(cand.data)
            if (earlier and not options.force and earlier.submission_sha256 == digest
                    and earlier.source_sha256 == source_sha[assignment]):
                log(f"[grade] {student}/{assignment}: unchanged since {earlier.graded_at}; kept ({earlier.status}, {earlier.score:g})")
                continue
            _check_integrity(out, assignment, releases[assignment], digests, log)
            try:
                row, graded = _grade_candidate(out, cand, note, digest, releases[assignment], max_scores[assignment],
                                               source_sha[assignment], options, support, log, now())
                n_graded += row.seconds > 0
            except (KeyboardInterrupt, IntegrityError, SandboxUnavailable):
                raise
            except Exception as exc:  # the grader itself failed on this file: say so, and go on
                why = (f"the grader failed on this submission ({type(exc).__name__}: {str(exc)[:200]}); the run went on. "
                       "Instructor: report this with the submitted file (kept in received/)")
                log(f"[grade] {student}/{assignment}: ERROR {why}")
                row = Row(student, assignment, 0.0, max_scores[assignment], "crashed", why,  # no hash: retried next run
                          source_sha256=source_sha[assignment], graded_at=now(), notes=[why])
                graded = False
            rows[key] = row
            try:
                write_feedback(out, row, "", graded)
            except Exception as exc:
                log(f"[grade] {student}/{assignment}: could not write feedback ({type(exc).__name__}: {exc})")
            save_rows(out, rows)
            log(f"[grade] {student}/{assignment}: {row.status} {row.score:g}/{row.max_score:g}"
                + (f" in {row.seconds:.0f} s" if row.seconds else "") + (f": {row.message}" if row.message else ""))
    save_rows(out, rows)
    summary = summary_markdown(rows)
    (out / "summary.md").write_text(summary)
    wall = time.monotonic() - start
    print(summary)
    print(f"[grade] {n_graded} notebook(s) autograded in {wall:.0f} s"
          + (f" ({wall / n_graded:.0f} s per notebook)" if n_graded else "")
          + f"; grades: {out / 'grades.csv'}; feedback: {out / 'feedback'}; repair logs: {out / 'repairs'}")
    return rows
