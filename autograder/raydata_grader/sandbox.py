"""Run one grading job in a child process with a wall-time and a memory limit (grader only).

nbgrader has a per-cell timeout and nothing else: no limit on a notebook's total time, none on
memory (nbgrader #1429), and a kernel that fills the machine takes the whole batch down.
:func:`run_limited` starts the job in its own session and enforces, for the job and every
process it starts (the Jupyter kernel, and the Ray cluster that the kernel starts):

- **memory, per process**: ``RLIMIT_DATA`` (private writable memory: heap, anonymous
  ``mmap``), inherited by every descendant. An allocation beyond it fails at once with
  ``MemoryError`` instead of pushing the machine into swap. Ray's object store is shared
  memory (``MAP_SHARED`` on ``/dev/shm``), which the limit does not count; it is sized by
  :func:`raydata_course.setup`.
- **memory, all processes together**: a watchdog sums the proportional set size (PSS, which
  counts shared pages once across processes) of the whole process tree every
  ``memory_poll_s`` and stops the tree when the sum passes the limit.
- **wall time**: the tree is stopped after ``timeout_s``.

Every process the job started is killed when it ends, whatever the outcome, including Ray
processes that outlived their parent (found by ``RAYDATA_COURSE_TMPDIR`` in their environment,
see :func:`raydata_course.cluster.ray_processes`).

Examples:
    >>> import sys
    >>> out = run_limited([sys.executable, "-c", "print('ok')"], timeout_s=30, memory_bytes=2 * 1024**3)
    >>> out.returncode, out.killed
    (0, None)
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from dataclasses import dataclass

import psutil

__all__ = ["RunOutcome", "run_limited", "tree_memory_bytes"]


@dataclass
class RunOutcome:
    """How a limited run ended.

    Attributes:
        returncode: the job's exit status (negative: killed by that signal).
        wall_s: seconds from start to end.
        killed: ``"timeout"`` or ``"memory"`` when the sandbox stopped the job, else None.
        peak_bytes: the largest PSS sum of the process tree that the watchdog saw, in bytes.
        leftovers_killed: processes still alive after the job ended, killed by the sandbox.
        ended_s: when the job ended (``time.time()``, seconds since the epoch); None if unknown.
    """

    returncode: int
    wall_s: float
    killed: str | None
    peak_bytes: int
    leftovers_killed: int
    ended_s: float | None = None


def _limit_memory(memory_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def tree_memory_bytes(procs: list[psutil.Process]) -> int:
    """Sum the PSS (RSS where PSS is unreadable) of ``procs``, in bytes; gone ones count 0."""
    total = 0
    for proc in procs:
        try:
            try:
                total += proc.memory_full_info().pss
            except (psutil.AccessDenied, AttributeError):
                total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _kill(procs) -> int:
    killed = 0
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                proc.kill()
                killed += 1
        except psutil.Error:
            pass
    psutil.wait_procs(list(procs), timeout=5)
    return killed


def run_limited(
    cmd: list[str],
    *,
    timeout_s: float,
    memory_bytes: int,
    env: dict[str, str] | None = None,
    log_path: str | os.PathLike | None = None,
    ray_temp_root: str | None = None,
    memory_poll_s: float = 1.0,
    watch_tree_memory: bool = True,
) -> RunOutcome:
    """Run ``cmd`` under a wall-time and memory limit, then kill everything it left behind.

    Args:
        cmd: the command (its first element an executable).
        timeout_s: wall-clock limit for the whole job, in seconds.
        memory_bytes: limit per process (``RLIMIT_DATA``) and for the tree's PSS sum, in bytes.
        env: the job's environment (default: this process's).
        log_path: file receiving the job's stdout and stderr (default: discarded).
        ray_temp_root: the ``RAYDATA_COURSE_TMPDIR`` the job's Ray clusters use; Ray
            processes under it are killed at the end.
        memory_poll_s: seconds between watchdog measurements.
        watch_tree_memory: sum the tree's PSS and stop it past ``memory_bytes``. Off where
            the job's kernel runs in a memory cgroup of its own (the cgroup bounds it, and
            reading every process's ``smaps`` each second costs CPU); ``RLIMIT_DATA`` still
            bounds each process.

    Returns:
        A :class:`RunOutcome`.

    Raises:
        ValueError: if a limit is not positive.
    """
    if timeout_s <= 0 or memory_bytes <= 0:
        raise ValueError(f"limits must be positive, got timeout_s={timeout_s}, memory_bytes={memory_bytes}")
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    start = time.monotonic()
    killed = None
    peak = 0
    seen: dict[int, psutil.Process] = {}
    proc = None
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_limit_memory(memory_bytes))
        root = psutil.Process(proc.pid)
        next_poll = start
        while proc.poll() is None:
            now = time.monotonic()
            if now - start > timeout_s:
                killed = "timeout"
                break
            if now >= next_poll:
                procs = _tree(root)
                seen.update({p.pid: p for p in procs})
                used = tree_memory_bytes(procs) if watch_tree_memory else 0
                peak = max(peak, used)
                if used > memory_bytes:
                    killed = "memory"
                    break
                next_poll = now + memory_poll_s
            time.sleep(0.1)
        if killed:
            procs = _tree(root)
            seen.update({p.pid: p for p in procs})
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            _kill(procs)
        proc.wait()
        ended_s = time.time()
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): take the job's whole tree down with us
        if proc is not None and proc.poll() is None:
            procs = _tree(psutil.Process(proc.pid))
            seen.update({p.pid: p for p in procs})
            _kill(procs)
        raise
    finally:
        if log is not subprocess.DEVNULL:
            log.close()
    leftovers = [p for p in seen.values() if p.pid != proc.pid]
    if ray_temp_root:
        from raydata_course.cluster import ray_processes

        for info in ray_processes(ray_temp_root):
            try:
                leftovers.append(psutil.Process(info["pid"]))
            except psutil.Error:
                pass
    n_left = _kill(leftovers)
    if ray_temp_root:
        remove_tree(ray_temp_root)
    return RunOutcome(proc.returncode, time.monotonic() - start, killed, peak, n_left, ended_s)


def remove_tree(path: str | os.PathLike) -> None:
    """Remove the folder ``path`` and everything in it, whatever a kernel left there.

    ``shutil.rmtree`` recurses once per level, so a tree nested deeper than Python's recursion
    limit raises ``RecursionError`` (which ``ignore_errors`` does not cover); ``rm -rf`` (on
    this file system only) then removes what is left. A missing ``path`` is not an error.
    """
    import shutil

    if not os.path.lexists(path):
        return
    try:
        shutil.rmtree(path)
    except (OSError, RecursionError):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", os.fspath(path)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
