"""One notebook's grading job: what travels to the machine that grades it, and what comes back.

A grading run (:mod:`raydata_grader.grade`) lints each submission on the instructor's machine,
then hands the repaired notebook to a job. A job grades it from start to end on whichever
machine runs it (this one, in a thread of the run: :mod:`raydata_grader.dispatch`; or a node
of a Ray cluster, as a Ray task), sharing no file with the run:

- it brings what it needs (:class:`GradeJob`: the notebook, its ``timestamp.txt``, the
  limits; :class:`CourseKit`: the assignment's source, release and an empty gradebook, and
  the oracle module, with its SHA-256) and writes them into a private folder of its own
  (``/tmp/rdg-<pid>-job...``, mode 0700, removed when it ends, :mod:`.scratch`);
- it autogrades there with :mod:`raydata_grader.worker` under
  :func:`~raydata_grader.sandbox.run_limited` (wall time, memory, the parent-death signal),
  the kernel in its sandbox with a fresh Ray runtime of its own, and the judge in the worker
  beside it, on the same machine (the kernel reaches it through a Unix socket in a folder
  that only its sandbox and the worker see);
- it returns a :class:`JobResult`: the status, score, per-cell scores and messages
  (:func:`raydata_grader.outcome.classify`), the autograded notebook, the submission's
  gradebook record (:class:`~raydata_grader.gradebook.GradebookRecord`), the worker's log
  and result files, and the wall and CPU seconds it took.

A job refuses to run on a machine whose installation differs from the run's
(:func:`raydata_grader.kit.installation_digest`: the grader, the student package, the nbgrader configuration,
Ray's, nbgrader's and Python's versions), or, when the run asks for a sandbox, on one that
cannot sandbox: both raise, and the run stops with the reason.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from raydata_course.layout import GRADING_CPUS, HEADLESS_ENV, MACHINE_CPUS_ENV, PROGRESS_ENV, TEMP_ROOT_ENV
from raydata_course.units import GiB
from raydata_grader.gradebook import GradebookRecord
from raydata_grader.inert import recorded_caps
from raydata_grader.kit import CourseKit, files_under, installation_digest, sha256
from raydata_grader.outcome import classify, read_json
from raydata_grader.sandbox import run_limited
from raydata_grader.scratch import owned_temp_dir, remove_owned, sweep
from raydata_grader.worker import worker_command

__all__ = ["SandboxUnavailable", "NodeMismatch", "JobStopped", "KitCorrupted", "UNSANDBOXED_NOTE",
           "WORKER_ALLOWANCE_BYTES", "JobLimits", "GradeJob", "JobResult", "run_job", "notebook_bytes_needed",
           "cpu_seconds"]

#: What every row graded with ``--no-sandbox`` says.
UNSANDBOXED_NOTE = ("graded WITHOUT a sandbox (--no-sandbox): the kernel ran as the grader's user, with the "
                    "grader's files and network in reach")
#: Memory the worker itself may use beside its sandboxed kernel (nbgrader, the judge, torch), in bytes.
WORKER_ALLOWANCE_BYTES = 2 * GiB
#: The most of the worker's log that comes back with a result, in bytes (its end is kept).
LOG_TAIL_BYTES = 1024 * 1024
#: Environment a Ray worker process gets from Ray, which a job does not pass on to its worker
#: and kernel: the kernel must start a Ray runtime of its own, as it would on the instructor's machine.
RAY_WORKER_ENV = ("RAY_ADDRESS", "RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_CLIENT_MODE", "RAY_LD_PRELOAD_ON_WORKERS",
                  "PYTHONBREAKPOINT", "OMP_NUM_THREADS")


class SandboxUnavailable(RuntimeError):
    """This machine cannot sandbox a graded kernel, and the instructor did not opt out."""


class NodeMismatch(RuntimeError):
    """A machine asked to grade has another installation of the course than the grading run's."""


class JobStopped(Exception):
    """The run stopped this job (Ctrl-C, SIGTERM) before it ended; it has no result."""


class KitCorrupted(RuntimeError):
    """A course kit arrived on the machine that grades with another oracle than the run's."""


@dataclass(frozen=True)
class JobLimits:
    """The bounds and switches one job grades under (set from the run's options).

    Attributes:
        cell_timeout_s: nbgrader's per-cell timeout, in seconds.
        notebook_timeout_s: wall-time limit for the whole autograde, in seconds.
        memory_bytes: the notebook's memory limit (its kernel and everything it starts), in bytes.
        max_output_chars: output kept per cell, in characters.
        sandbox: run the kernel in a sandbox; False grades without one (every row says so).
        ray_address: without a sandbox, connect the kernel to this running cluster instead of
            a fresh runtime.
    """

    cell_timeout_s: int
    notebook_timeout_s: int
    memory_bytes: int
    max_output_chars: int
    sandbox: bool = True
    ray_address: str | None = None


def notebook_bytes_needed(limits: JobLimits, cgroups: bool = True) -> int:
    """Memory one job may take, in bytes: what a run admits per notebook, and what a Ray task asks for.

    - With a sandbox and cgroups: the notebook's limit (the kernel's cgroup, its private
      ``/tmp`` and ``/dev/shm`` included), plus :data:`WORKER_ALLOWANCE_BYTES` for the worker
      beside it (nbgrader, the judge).
    - With a sandbox and no cgroups (a grader that is not root): the limit bounds the
      processes (the watchdog's PSS sum), but the sandbox's private tmpfs mounts are memory
      it does not count, so their sizes are added.
    - Without a sandbox: the limit (the watchdog's sum covers worker and kernel).
    """
    if not limits.sandbox:
        return limits.memory_bytes
    if cgroups:
        return limits.memory_bytes + WORKER_ALLOWANCE_BYTES
    from raydata_grader.kernel_sandbox import SandboxLimits

    return limits.memory_bytes + SandboxLimits().scratch_bytes


@dataclass(frozen=True)
class GradeJob:
    """One submission to autograde, as it travels to the machine that grades it.

    Attributes:
        student: student id.
        assignment: assignment id.
        notebook: the repaired notebook (nbformat JSON, bytes).
        timestamp_text: its folder's ``timestamp.txt`` (passed to nbgrader), or None.
        limits: the job's :class:`JobLimits`.
        digest: the grading run's :func:`installation_digest`; the machine's must match.
    """

    student: str
    assignment: str
    notebook: bytes
    timestamp_text: str | None
    limits: JobLimits
    digest: str


@dataclass
class JobResult:
    """How one job ended, and what it made.

    Attributes:
        student, assignment: the submission.
        status: ``graded``, ``timeout`` or ``crashed`` (:func:`raydata_grader.outcome.classify`).
        score: points earned.
        cells: ``{grade_id: [score, max_score]}`` (empty when nothing was graded).
        messages: one sentence per thing that went wrong (the unsandboxed note, and what the
            output caps cut, included).
        wall_s: wall time of the autograde, in seconds.
        cpu_s: CPU time of the autograde, in seconds (:func:`cpu_seconds`).
        node: the host name of the machine that graded it.
        autograded: ``{file name: bytes}`` of nbgrader's ``autograded/<student>/<id>/`` folder
            (empty when nbgrader did not get that far).
        gradebook: the submission's gradebook record, or None when nbgrader did not grade it.
        work: ``{file name: bytes}``: the worker's ``result.json`` and ``progress.json``, and
            the end of its ``autograde.log`` (at most :data:`LOG_TAIL_BYTES`).
        reported_cells: grade cells whose verdict rests on a fact the kernel reported
            (:attr:`raydata_grader.judge.Verdict.reported`): their points are held for review
            when the notebook holds code that could forge one.
        imitable_cells: ``{grade cell: the scan's rules}`` for cells whose verdict rests on an
            observed fact that flagged code could imitate
            (:attr:`raydata_grader.judge.Verdict.forged_by`).
    """

    student: str
    assignment: str
    status: str
    score: float
    cells: dict[str, list[float]]
    messages: list[str]
    wall_s: float
    cpu_s: float
    node: str
    autograded: dict[str, bytes] = field(default_factory=dict)
    gradebook: GradebookRecord | None = None
    work: dict[str, bytes] = field(default_factory=dict)
    reported_cells: list[str] = field(default_factory=list)
    imitable_cells: dict[str, list[str]] = field(default_factory=dict)

    @property
    def graded_by_nbgrader(self) -> bool:
        """nbgrader autograded it: there is an autograded notebook and a gradebook record."""
        return bool(self.autograded) and self.gradebook is not None


def cpu_seconds(result: dict | None, outcome) -> float:
    """CPU time one autograde used, in seconds.

    With a cgroup around the kernel, the worker's own CPU (``RUSAGE_SELF``, in the result)
    plus the cgroup's (the kernel, Ray and every process they started, daemons included).
    Otherwise ``wait4``'s figure for the worker (:attr:`~raydata_grader.sandbox.RunOutcome.cpu_s`):
    the worker and every descendant that was waited for, which misses processes that were
    killed without being waited for (Ray's daemons, at the kernel's end).
    """
    sandbox = (result or {}).get("sandbox") or {}
    worker, kernel = (result or {}).get("worker_cpu_seconds"), sandbox.get("kernel_cpu_seconds")
    if isinstance(worker, (int, float)) and isinstance(kernel, (int, float)):
        return round(float(worker) + float(kernel), 2)
    return outcome.cpu_s


def _job_env(temp_root: str, progress_path: Path, limits: JobLimits, sandboxed: bool) -> dict[str, str]:
    env = dict(os.environ)
    for name in RAY_WORKER_ENV:
        env.pop(name, None)
    env.update({TEMP_ROOT_ENV: temp_root, "RAY_TMPDIR": temp_root, HEADLESS_ENV: "1",
                PROGRESS_ENV: str(progress_path), "PYTHONUNBUFFERED": "1", MACHINE_CPUS_ENV: str(GRADING_CPUS)})
    if limits.ray_address and not sandboxed:
        env["RAY_ADDRESS"] = limits.ray_address
        # Ray 2.60 starts local clusters with token authentication (~/.ray/auth_token); a driver
        # in another process sends the token only in token mode.
        if (Path.home() / ".ray" / "auth_token").is_file():
            env.setdefault("RAY_AUTH_MODE", "token")
    return env


def _set_duedate(course: Path, assignment: str, duedate: str) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(assignment, duedate=duedate)


def _check_machine(job: GradeJob):
    """The sandbox this machine offers for ``job`` (None: none asked for).

    Raises:
        NodeMismatch: if this installation's digest is not the run's.
        SandboxUnavailable: if the job needs a sandbox and this machine has none.
    """
    host = socket.gethostname()
    if installation_digest() != job.digest:
        raise NodeMismatch(
            f"{host} has another installation of the course than the grading run's (its grader, student package, "
            "nbgrader configuration, or Python, Ray or nbgrader version differ): install the same checkout on every "
            "node (make setup), or leave that node out of the cluster")
    if not job.limits.sandbox:
        return None
    from raydata_grader.kernel_sandbox import probe

    support = probe()
    if not support.available:
        raise SandboxUnavailable(
            f"{host} cannot sandbox the notebooks it grades ({support.why}). A submitted notebook is code written by "
            "someone else: install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) on every node that grades, "
            "or pass --no-sandbox to grade without one (only for notebooks you trust).")
    return support


def run_job(kit: CourseKit, job: GradeJob, stop: threading.Event | None = None) -> JobResult:
    """Grade ``job`` on this machine, in a private folder, and return what came of it.

    Args:
        kit: the assignment's :class:`CourseKit`.
        job: the submission and its limits.
        stop: set by another thread to end the job at once (it then raises :class:`JobStopped`).

    Returns:
        A :class:`JobResult`.

    Raises:
        NodeMismatch: if this machine's installation is not the run's.
        SandboxUnavailable: if the job needs a sandbox and this machine cannot give one.
        JobStopped: if ``stop`` was set (or the task was cancelled) before the job ended.
        KitCorrupted: if the kit's oracle does not hash to its recorded SHA-256.
    """
    sweep()
    support = _check_machine(job)
    if sha256(kit.oracle) != kit.oracle_sha256:
        raise KitCorrupted(f"the oracle of {kit.assignment} arrived changed on {socket.gethostname()} (its SHA-256 "
                           "is not the kit's): grade again")
    limits = job.limits
    root = owned_temp_dir("job")
    temp_root = str(owned_temp_dir())
    try:
        course = root / "course"
        for name, data in kit.files.items():
            target = course / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if kit.duedate:
            _set_duedate(course, kit.assignment, kit.duedate)
        oracles = root / "oracles"
        oracles.mkdir(mode=0o700)
        (oracles / f"{kit.assignment}.py").write_bytes(kit.oracle)
        submitted = course / "submitted" / job.student / job.assignment
        submitted.mkdir(parents=True)
        (submitted / f"{job.assignment}.ipynb").write_bytes(job.notebook)
        if job.timestamp_text:
            (submitted / "timestamp.txt").write_text(job.timestamp_text + "\n")
        work = root / "work"
        work.mkdir()
        result_path, progress_path, log_path = work / "result.json", work / "progress.json", work / "autograde.log"
        level = support.level if support is not None else "none"
        cgroups = support.cgroups if support is not None else ""
        cmd = worker_command(course, job.assignment, job.student, result_path, limits.cell_timeout_s,
                             limits.max_output_chars, level, cgroups, limits.memory_bytes, oracles=oracles)
        outcome = run_limited(cmd, timeout_s=limits.notebook_timeout_s,
                              memory_bytes=notebook_bytes_needed(limits, bool(cgroups)),
                              env=_job_env(temp_root, progress_path, limits, support is not None),
                              log_path=log_path, ray_temp_root=temp_root, watch_tree_memory=not cgroups, stop=stop)
        if outcome.killed == "stopped":
            raise JobStopped(f"{job.student}/{job.assignment} was stopped")
        notebook = nbformat.reads(job.notebook.decode("utf-8"), as_version=4)
        instructor = frozenset(c.metadata["nbgrader"]["grade_id"] for c in notebook.cells
                               if c.get("cell_type") == "code" and c.metadata.get("nbgrader", {}).get("locked")
                               and not c.metadata["nbgrader"].get("grade")
                               and not c.metadata["nbgrader"].get("solution"))
        result = read_json(result_path)
        status, score, cells, messages = classify(result, outcome, read_json(progress_path), limits, instructor)
        if support is None:
            messages.append(UNSANDBOXED_NOTE)
        record = None
        if result and result.get("success") and result.get("gradebook"):
            record = GradebookRecord.from_json(result["gradebook"])
        autograded_dir = course / "autograded" / job.student / job.assignment
        autograded = files_under(autograded_dir) if autograded_dir.is_dir() else {}
        messages += recorded_caps(autograded.get(f"{job.assignment}.ipynb", b""))  # output the caps cut
        work_files = {p.name: p.read_bytes() for p in (result_path, progress_path) if p.is_file()}
        if log_path.is_file():
            with open(log_path, "rb") as f:
                f.seek(max(0, log_path.stat().st_size - LOG_TAIL_BYTES))
                work_files[log_path.name] = f.read()
        verdicts = (result or {}).get("verdicts") or {}
        reported_cells = sorted(str(gid) for gid, v in verdicts.items() if isinstance(v, dict) and v.get("reported"))
        imitable_cells = {str(gid): [str(r) for r in v["forged_by"]] for gid, v in verdicts.items()
                          if isinstance(v, dict) and isinstance(v.get("forged_by"), list) and v["forged_by"]}
        return JobResult(job.student, job.assignment, status, score, {k: list(v) for k, v in cells.items()},
                         messages, round(outcome.wall_s, 1), cpu_seconds(result, outcome), socket.gethostname(), autograded,
                         record, work_files, reported_cells, imitable_cells)
    except KeyboardInterrupt as exc:  # a cancelled Ray task: run_limited has killed the job's processes
        raise JobStopped(f"{job.student}/{job.assignment} was cancelled") from exc
    finally:
        remove_owned(root)
        remove_owned(temp_root)
