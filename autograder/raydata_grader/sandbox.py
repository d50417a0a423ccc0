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
- **wall time**: the tree is stopped after ``timeout_s``;
- **the caller's life**: the job gets the parent-death signal (Linux ``PR_SET_PDEATHSIG``,
  ``SIGKILL``), so a grader that is killed outright (a Ray worker whose node died) takes the
  job with it instead of leaving it running; a ``stop`` event ends it from another thread.

On Linux the limits and the signal are set by util-linux's ``setpriv --pdeathsig KILL`` and
``prlimit`` in front of the command, not by Python code between ``fork`` and ``exec``
(``preexec_fn``, which is not safe while other threads run, and a grading run waits on
several jobs from several threads). Elsewhere (macOS, grading ``--no-sandbox``) ``preexec_fn``
sets the memory limits, and there is no parent-death signal.

Every process the job started is killed when it ends, whatever the outcome, including Ray
processes that outlived their parent (found by ``RAYDATA_COURSE_TMPDIR`` in their environment,
see :func:`raydata_course.cluster.ray_processes`). The job's CPU time (user + system, of the
job and of every process it and its descendants waited for: the kernel and, inside its
sandbox, Ray) comes from ``wait4``.

Examples:
    >>> import sys
    >>> out = run_limited([sys.executable, "-c", "print('ok')"], timeout_s=30, memory_bytes=2 * 1024**3)
    >>> out.returncode, out.killed
    (0, None)
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import psutil

__all__ = ["RunOutcome", "run_limited", "tree_memory_bytes", "limited_command"]


@dataclass
class RunOutcome:
    """How a limited run ended.

    Attributes:
        returncode: the job's exit status (negative: killed by that signal).
        wall_s: seconds from start to end.
        killed: ``"timeout"`` or ``"memory"`` when the sandbox stopped the job, ``"stopped"``
            when the caller's ``stop`` event did, else None.
        peak_bytes: the largest PSS sum of the process tree that the watchdog saw, in bytes.
        leftovers_killed: processes still alive after the job ended, killed by the sandbox.
        ended_s: when the job ended (``time.time()``, seconds since the epoch); None if unknown.
        cpu_s: CPU seconds (user + system) of the job and of every descendant that was waited
            for (``wait4``'s resource usage); 0.0 if unknown.
    """

    returncode: int
    wall_s: float
    killed: str | None
    peak_bytes: int
    leftovers_killed: int
    ended_s: float | None = None
    cpu_s: float = 0.0




def _limit_memory(memory_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def limited_command(cmd: list[str], memory_bytes: int) -> tuple[list[str], object]:
    """``cmd`` with the memory limits and the parent-death signal set in front of it, where util-linux is.

    Returns:
        ``(command, preexec_fn)``: on Linux with ``setpriv`` and ``prlimit``,
        ``setpriv --pdeathsig KILL -- prlimit --data=N --core=0 -- cmd`` and None; elsewhere
        ``cmd`` and a ``preexec_fn`` that sets ``RLIMIT_DATA`` and ``RLIMIT_CORE``.
    """
    setpriv, prlimit = shutil.which("setpriv"), shutil.which("prlimit")
    if sys.platform.startswith("linux") and setpriv and prlimit:
        return [setpriv, "--pdeathsig", "KILL", "--", prlimit, f"--data={memory_bytes}", "--core=0", "--", *cmd], None
    return list(cmd), _limit_memory(memory_bytes)


def _reap(proc: subprocess.Popen, block: bool) -> float | None:
    """Reap ``proc`` with ``wait4``: set its return code and return its CPU seconds (None: still running)."""
    try:
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:  # reaped already
        if proc.returncode is None:
            proc.returncode = -1
        return 0.0
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


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
    stop: threading.Event | None = None,
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
        stop: when set (by another thread), the job is killed and the outcome says
            ``killed="stopped"``.

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
    cpu_s = None
    try:
        command, preexec = limited_command(cmd, memory_bytes)
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=preexec)
        root = psutil.Process(proc.pid)
        next_poll = start
        while (cpu_s := _reap(proc, block=False)) is None:
            now = time.monotonic()
            if now - start > timeout_s:
                killed = "timeout"
                break
            if stop is not None and stop.is_set():
                killed = "stopped"
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
            cpu_s = _reap(proc, block=True)  # before psutil's wait on the others, which would reap it too
            _kill([p for p in procs if p.pid != proc.pid])
        if cpu_s is None:
            cpu_s = _reap(proc, block=True)
        ended_s = time.time()
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): take the job's whole tree down with us
        if proc is not None and proc.returncode is None:
            try:
                procs = _tree(psutil.Process(proc.pid))
            except psutil.Error:
                procs = []
            seen.update({p.pid: p for p in procs})
            _kill(procs)
            _reap(proc, block=True)
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
    return RunOutcome(proc.returncode, time.monotonic() - start, killed, peak, n_left, ended_s, round(cpu_s or 0.0, 2))


def remove_tree(path: str | os.PathLike) -> None:
    """Remove the folder ``path`` and everything in it, whatever a kernel left there.

    ``shutil.rmtree`` recurses once per level, so a tree nested deeper than Python's recursion
    limit raises ``RecursionError`` (which ``ignore_errors`` does not cover); ``rm -rf`` (on
    this file system only) then removes what is left. A missing ``path`` is not an error.
    """
    if not os.path.lexists(path):
        return
    try:
        shutil.rmtree(path)
    except (OSError, RecursionError):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", os.fspath(path)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
