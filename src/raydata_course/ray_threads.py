"""Threads that may still call into Ray, and shutting Ray down after them.

Ray ends the whole process when any thread calls into Ray after ``ray.shutdown()``: the
core worker logs "The core worker has already been shutdown. This happens when the language
frontend accesses the Ray's worker after it is shutdown. The process will exit"
(``src/ray/core_worker/core_worker_process.cc``) and exits. In a notebook such threads are
easy to leave behind:

- a call that :func:`~raydata_course.chapters.ch05_split_checks.run_with_timeout` or
  ``run_split_readers`` gave up on, such as a ``streaming_split`` reader blocked at the epoch
  barrier, whose thread is still in a Ray call;
- a Ray Data execution that is still running: the ``StreamingExecutor`` is itself a thread
  (``ray/data/_internal/execution/streaming_executor.py``) whose scheduling loop calls Ray.

:func:`settle` stops the second kind (``StreamingExecutor.shutdown``) and waits for the
first; :func:`raydata_course.shutdown` calls it before Ray disconnects. (A graded kernel
that dies after its last grade cell keeps its grades all the same:
``raydata_grader.nbgrader_steps.TrackedExecute``.)
"""

from __future__ import annotations

import threading
import time
import weakref

__all__ = ["settle", "track", "tracked_alive"]

_TRACKED: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_LOCK = threading.Lock()


def track(thread: threading.Thread) -> threading.Thread:
    """Remember ``thread`` as one that may be in a Ray call; :func:`settle` waits for it.

    Returns:
        ``thread`` (for chaining). The record is weak: a finished thread drops out.
    """
    with _LOCK:
        _TRACKED.add(thread)
    return thread


def tracked_alive() -> list[threading.Thread]:
    """The tracked threads that are still running."""
    with _LOCK:
        return [t for t in _TRACKED if t.is_alive()]


def _running_executors() -> list[threading.Thread]:
    """Ray Data's streaming executors still running in this process (each is a thread)."""
    try:
        from ray.data._internal.execution.streaming_executor import StreamingExecutor
    except ImportError:  # Ray Data not installed: nothing of it runs
        return []
    return [t for t in threading.enumerate() if isinstance(t, StreamingExecutor) and t.is_alive()]


def settle(wait_s: float = 10.0) -> list[threading.Thread]:
    """Stop Ray Data's running executions and wait for tracked threads, before Ray disconnects.

    Every running ``StreamingExecutor`` is shut down (``shutdown(force=True)``: its operators
    stop, and it joins its own thread for up to 2 s); then the threads :func:`track` recorded
    get up to ``wait_s`` seconds, all together, to finish.

    Args:
        wait_s: the longest wait for the tracked threads, in seconds (>= 0).

    Returns:
        The threads still running after that (tracked threads and executors): each may still
        call Ray, so disconnecting now could end the process when it does.

    Raises:
        ValueError: if ``wait_s`` is negative.
    """
    if wait_s < 0:
        raise ValueError(f"wait_s must be >= 0, got {wait_s!r}.")
    for executor in _running_executors():
        executor.shutdown(force=True)
    deadline = time.monotonic() + wait_s
    for thread in tracked_alive():
        thread.join(max(deadline - time.monotonic(), 0.0))
    return tracked_alive() + _running_executors()
