"""Where a grading run's jobs run: on this machine, several at once, or across a Ray cluster.

A run (:mod:`raydata_grader.grade`) submits every :class:`~raydata_grader.jobs.GradeJob` to one
runner and takes the results as they come, in any order:

- :class:`LocalRunner` (``--jobs N``, ``make grade JOBS=N``): up to N jobs at once on this
  machine. Each job is its own worker process, kernel, sandbox and Ray runtime; a thread of
  the run only waits on it (:func:`raydata_grader.jobs.run_job`). :func:`default_jobs` says
  how many the machine's cores and memory allow for the per-notebook limits;
- :class:`ClusterRunner` (``--cluster ADDRESS``, or ``RAY_ADDRESS``): every job is one Ray task
  that asks for the notebook's resources (``num_cpus``, and ``memory`` equal to its memory
  limit plus the worker's allowance), so Ray places it on whichever node has room. The
  course kit of each assignment is put in the object store once; the job and its result
  travel as task argument and return value, so the nodes share no file system with the
  run. If a node dies, Ray's task retries (``max_retries``) grade its notebooks again
  elsewhere; the run keys results by student and assignment, so each row is written once.

Before any job, :class:`ClusterRunner` asks every node for its installation digest, its
sandbox and its size (:class:`NodeFacts`), and refuses to start when a node differs from the
run's installation, cannot sandbox, or when no node can hold one notebook.

The judge stays trusted in both: it runs in the job's worker process, on the machine that runs
the kernel, outside the kernel's sandbox; the kernel reaches it through a Unix socket on that
machine, and, in a network namespace with loopback only, reaches nothing else: not the run,
not Ray's cluster, not another node.

Stopping a run (Ctrl-C, SIGTERM) stops every job: :class:`LocalRunner` sets the jobs' stop
event, :class:`ClusterRunner` cancels their tasks (Ray raises ``KeyboardInterrupt`` in them,
then kills those that linger); each job's processes die with it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Iterator

import psutil

from raydata_course.units import GiB
from raydata_grader.jobs import (GradeJob, JobLimits, JobResult, NodeMismatch, SandboxUnavailable,
                                 notebook_bytes_needed, run_job)
from raydata_grader.kit import CourseKit, installation_digest

__all__ = ["ClusterError", "ClusterTooSmall", "NodeFacts", "default_jobs", "LocalRunner", "ClusterRunner", "node_facts", "runner_for"]

#: Seconds every node gets to answer the check before the first notebook.
NODE_CHECK_S = 300.0
#: Seconds a cancelled Ray task gets to end its job before Ray kills its worker.
CANCEL_GRACE_S = 15.0
#: How often a run on a cluster checks, while no result comes, that some live node can still
#: take a notebook, and how long it waits when none can before it stops, in seconds.
STALL_CHECK_S, STALL_S = 30.0, 300.0


class ClusterError(RuntimeError):
    """The cluster cannot grade this run (the message says why and what to do)."""


class ClusterTooSmall(ClusterError):
    """No node of the cluster can hold one notebook's resources."""


def default_jobs(limits: JobLimits, cpus_per_notebook: float = 1.0, cgroups: bool = True) -> tuple[int, str]:
    """How many notebooks this machine can grade at once for ``limits``, and why, in words.

    The smaller of the logical CPUs this process may run on divided by ``cpus_per_notebook``
    and the available memory divided by what one job may take
    (:func:`~raydata_grader.jobs.notebook_bytes_needed`), and at least 1.

    Returns:
        ``(jobs, reason)``; the reason is one line for the run's log.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    available = psutil.virtual_memory().available
    per_notebook = notebook_bytes_needed(limits, cgroups)
    by_cpu = int(cpus // cpus_per_notebook)
    by_memory = int(available // per_notebook)
    jobs = max(1, min(by_cpu, by_memory))
    reason = (f"{jobs} at once: {cpus} logical CPUs / {cpus_per_notebook:g} per notebook = {by_cpu}; "
              f"{available / GiB:.1f} GiB available / {per_notebook / GiB:.1f} GiB per notebook = {by_memory}")
    return jobs, reason


class LocalRunner:
    """Run up to ``jobs`` grading jobs at once on this machine (threads that wait on worker processes).

    Use it as a context manager: :meth:`submit` every job, then iterate :meth:`completed`.
    Leaving it on an exception stops every running job and drops the queued ones.

    Args:
        jobs: most jobs at once (1: one after another).
        kits: the course kit of every assignment, by id.
    """

    def __init__(self, jobs: int, kits: dict[str, CourseKit]):
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1, got {jobs}")
        self.jobs = self.slots = jobs
        self.kits = kits
        self._stop = threading.Event()
        self._pending: dict[Future, GradeJob] = {}
        self._pool: ThreadPoolExecutor | None = None

    def describe(self) -> str:
        """One line for the log: where and how many at once."""
        return f"on this machine ({socket.gethostname()}), {self.jobs} notebook(s) at once"

    def __enter__(self) -> "LocalRunner":
        self._pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="grade-job")
        return self

    def submit(self, job: GradeJob) -> None:
        """Queue ``job``."""
        assert self._pool is not None, "use the runner as a context manager"
        self._pending[self._pool.submit(run_job, self.kits[job.assignment], job, self._stop)] = job

    def completed(self) -> Iterator[tuple[GradeJob, JobResult | BaseException]]:
        """Each submitted job with its result, or the exception it raised, as they end."""
        for future in as_completed(list(self._pending)):
            job = self._pending.pop(future)
            error = future.exception()
            yield job, (error if error is not None else future.result())

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class NodeFacts:
    """What a node of the cluster offers for grading (:func:`node_facts`, run on the node).

    Attributes:
        node_id: Ray's node id.
        host: the node's host name.
        digest: its :func:`~raydata_grader.jobs.installation_digest`.
        sandbox: ``"root"``, ``"user"`` or ``"none"`` (:func:`raydata_grader.kernel_sandbox.probe`).
        cgroups: ``"v1"``, ``"v2"`` or ``""``.
        why: for ``sandbox == "none"``, why not.
    """

    node_id: str
    host: str
    digest: str
    sandbox: str
    cgroups: str
    why: str


def node_facts() -> NodeFacts:
    """This node's :class:`NodeFacts` (runs as a Ray task pinned to each node)."""
    import ray

    from raydata_grader.kernel_sandbox import probe

    support = probe()
    return NodeFacts(ray.get_runtime_context().get_node_id(), socket.gethostname(), installation_digest(),
                     support.level, support.cgroups, support.why)


def _grade_task(kit: CourseKit, job: GradeJob) -> JobResult:
    """One job as a Ray task (Ray resolves ``kit`` from the object store on the node)."""
    import ray

    result = run_job(kit, job)
    result.node = f"{result.node}/{ray.get_runtime_context().get_node_id()[:8]}"
    return result


class ClusterRunner:
    """Run every grading job as a Ray task on a running Ray cluster.

    Use it as a context manager: entering connects (``ray.init(address)``), checks every
    node (:class:`NodeFacts`) and puts the kits in the object store; leaving cancels what is
    still running on an exception, and disconnects.

    Args:
        address: the cluster's address (``ray://`` is not supported: the run is a driver).
        kits: the course kit of every assignment, by id.
        limits: the jobs' limits (the tasks ask for the resources they imply).
        cpus_per_notebook: CPUs each task asks for.
        retries: times Ray grades a notebook again after its node or worker died.
        log: called with lines for the run's log.

    Raises (on entering):
        RuntimeError: if this process is already connected to Ray.
        NodeMismatch: if a node's installation differs from this one.
        SandboxUnavailable: if the jobs need a sandbox and a node that could grade cannot
            sandbox, or the nodes that could grade sandbox differently (with and without cgroups).
        ClusterTooSmall: if no node can hold one notebook's CPUs and memory.
        ClusterError: if a node did not answer the check within :data:`NODE_CHECK_S`.
    """

    def __init__(self, address: str, kits: dict[str, CourseKit], limits: JobLimits, cpus_per_notebook: float = 1.0,
                 retries: int = 3, log=print):
        self.address = address
        self.kits = kits
        self.limits = limits
        self.cpus_per_notebook = cpus_per_notebook
        self.retries = retries
        self.log = log
        self._pending: dict = {}
        self._kit_refs: dict = {}
        self._task = None
        self.slots = 0
        self.cgroups = True
        self.nodes: list[NodeFacts] = []

    def describe(self) -> str:
        """One line for the log: where and how many at once."""
        return (f"on the Ray cluster at {self.address}: {len(self.nodes)} node(s), up to {self.slots} notebook(s) "
                f"at once, each a task of {self.cpus_per_notebook:g} CPU and "
                f"{notebook_bytes_needed(self.limits, self.cgroups) / GiB:.1f} GiB, retried up to {self.retries} times")

    def __enter__(self) -> "ClusterRunner":
        import ray

        if ray.is_initialized():
            raise RuntimeError("this process is already connected to a Ray cluster: grade from a process of its own "
                               "(python -m raydata_grader grade --cluster ADDRESS ...)")
        # A cluster with token authentication needs RAY_AUTH_MODE=token (and the token) here, as for any Ray
        # driver given an explicit address (Ray 2.60 turns it on by itself only for a local cluster it finds).
        ray.init(address=self.address, log_to_driver=False, logging_level="WARNING", namespace="raydata-grader")
        try:
            self._check_nodes()
            self._kit_refs = {a: ray.put(kit) for a, kit in self.kits.items()}
            self._task = ray.remote(_grade_task).options(
                num_cpus=self.cpus_per_notebook, memory=notebook_bytes_needed(self.limits, self.cgroups),
                max_retries=self.retries, retry_exceptions=False)
        except BaseException:
            ray.shutdown()
            raise
        return self

    def _check_nodes(self) -> None:
        import ray
        from ray.exceptions import GetTimeoutError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = [n for n in ray.nodes() if n.get("Alive")]
        probe = ray.remote(node_facts)
        refs = [probe.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote() for n in alive]
        try:
            facts = ray.get(refs, timeout=NODE_CHECK_S)
        except GetTimeoutError:
            raise ClusterError(f"not every node of the cluster at {self.address} answered the grader's check within "
                               f"{NODE_CHECK_S:.0f} s (is one busy, or starting?): try again, or leave it out") from None
        self.nodes = facts
        mine = installation_digest()
        odd = [f.host for f in facts if f.digest != mine]
        if odd:
            raise NodeMismatch(f"node(s) {', '.join(odd)} have another installation of the course than this machine "
                               "(the grader, the student package, the nbgrader configuration, or Python, Ray or "
                               "nbgrader): install the same checkout on every node (make setup)")
        # What a notebook may take depends on the sandbox: every node that grades must offer the same one.
        kinds = {(f.sandbox, f.cgroups) for node, f in zip(alive, facts)
                 if float(node.get("Resources", {}).get("CPU", 0)) >= self.cpus_per_notebook}
        if self.limits.sandbox and any(kind == "none" for kind, _ in kinds):
            bad = [f"{f.host} ({f.why})" for f in facts if f.sandbox == "none"]
            raise SandboxUnavailable(
                f"node(s) {', '.join(bad)} cannot sandbox the notebooks they would grade: install bubblewrap there "
                "(and grade as root, for the cgroup bounds), leave them out, or pass --no-sandbox (only for "
                "notebooks you trust)")
        if self.limits.sandbox and len(kinds) > 1:
            raise SandboxUnavailable(
                "the nodes sandbox notebooks differently (" + "; ".join(f"{f.host}: {f.sandbox}, cgroups "
                                                                          f"{f.cgroups or 'none'}" for f in facts)
                + "), so one notebook would get other limits on another node: run every node the same way "
                "(as root, with writable cgroups)")
        self.cgroups = all(c for _, c in kinds) if kinds else True
        need_bytes = notebook_bytes_needed(self.limits, self.cgroups)
        sizes = []
        for node, fact in zip(alive, facts):
            res = node.get("Resources", {})
            cpus, memory = float(res.get("CPU", 0)), float(res.get("memory", 0))
            fits = int(min(cpus // self.cpus_per_notebook, memory // need_bytes))
            sizes.append(f"{fact.host}/{fact.node_id[:8]}: {cpus:g} CPU, {memory / GiB:.1f} GiB -> {fits}")
            self.slots += max(fits, 0)
        if self.slots == 0:
            raise ClusterTooSmall(
                f"no node of the cluster at {self.address} can hold one notebook: each needs "
                f"{self.cpus_per_notebook:g} CPU and {need_bytes / GiB:.1f} GiB of Ray's memory resource (the "
                f"per-notebook limit of {self.limits.memory_bytes / GiB:.1f} GiB plus what the grader needs beside "
                f"it); the nodes offer {'; '.join(sizes)}. Lower --memory-gib, or add a larger node.")
        self.log(f"[grade] cluster nodes (CPU, Ray memory -> notebooks at once): {'; '.join(sizes)}")

    def submit(self, job: GradeJob) -> None:
        """Start ``job`` as a Ray task."""
        self._pending[self._task.remote(self._kit_refs[job.assignment], job)] = job

    def _capacity(self) -> int:
        """Notebooks the live nodes could take at once, by their total CPUs and memory."""
        import ray

        need_bytes = notebook_bytes_needed(self.limits, self.cgroups)
        slots = 0
        for node in ray.nodes():
            if node.get("Alive"):
                res = node.get("Resources", {})
                slots += int(min(float(res.get("CPU", 0)) // self.cpus_per_notebook,
                                 float(res.get("memory", 0)) // need_bytes))
        return slots

    def completed(self) -> Iterator[tuple[GradeJob, JobResult | BaseException]]:
        """Each submitted job with its result, or the exception it ended with, as they end.

        An exception the job raised itself comes as itself (``RayTaskError``'s cause); a task
        that failed more often than ``retries`` (its node or worker died each time) comes as
        Ray's error.

        Raises:
            ClusterTooSmall: when, for :data:`STALL_S` in a row, no live node could take a
                notebook (every node that could has died, and none has joined): Ray would keep
                the rest waiting forever. What was graded is kept; run again to grade the rest.
        """
        import ray
        from ray.exceptions import RayTaskError

        stalled_since = None
        while self._pending:
            ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=STALL_CHECK_S)
            if not ready:
                if self._capacity() > 0:
                    stalled_since = None
                    continue
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since >= STALL_S:
                    raise ClusterTooSmall(
                        f"for {STALL_S:.0f} s no live node of the cluster at {self.address} could take a notebook "
                        f"({len(self._pending)} still to grade): the nodes that could have died or left. Add a node "
                        "and run the same command again: it grades only what is missing.")
                continue
            stalled_since = None
            job = self._pending.pop(ready[0])
            try:
                yield job, ray.get(ready[0])
            except RayTaskError as exc:
                yield job, exc.cause if isinstance(exc.cause, BaseException) else exc
            except ray.exceptions.RayError as exc:
                yield job, exc

    def __exit__(self, exc_type, exc, tb) -> None:
        import ray

        try:
            if exc_type is not None and self._pending:
                refs = list(self._pending)
                for ref in refs:
                    ray.cancel(ref, force=False)
                deadline = time.monotonic() + CANCEL_GRACE_S
                left = refs
                while left and time.monotonic() < deadline:
                    _, left = ray.wait(left, num_returns=len(left), timeout=0.5)
                for ref in left:
                    ray.cancel(ref, force=True)
        finally:
            ray.shutdown()


def runner_for(options, kits: dict[str, CourseKit], support, log):
    """The runner a grading run's options ask for (:class:`~raydata_grader.grade.GradeOptions`):
    a :class:`ClusterRunner` with ``cluster``, else a :class:`LocalRunner` of ``jobs`` (by
    default as many as :func:`default_jobs` finds room for, said in the log)."""
    if options.cluster:
        return ClusterRunner(options.cluster, kits, options.limits, options.cpus_per_notebook, options.retries, log)
    if options.jobs is not None:
        return LocalRunner(options.jobs, kits)
    jobs, reason = default_jobs(options.limits, options.cpus_per_notebook, bool(support and support.cgroups))
    log(f"[grade] notebooks graded {reason} (--jobs N to choose)")
    return LocalRunner(jobs, kits)
