"""Every read of Ray Data's internals the push split makes, in one place.

The coordinator runs Ray Data's ``StreamingExecutor`` itself, as Ray's ``SplitCoordinator``
does, and looks inside it: the resource manager's limit and believed usage, each operator's
runtime metrics, the output node's queue, the executor's execution callbacks. None of these is
a public API, so each is read here, by attribute, tolerating a Ray whose internals differ
(the read then gives None or 0 and the split falls back to what it can do without it). The
line numbers are Ray 2.60.0's.
"""

from __future__ import annotations

import math
from typing import Optional

from raydata_course.push_split.idle import IdleWait

__all__ = ["start_execution", "budget_and_usage", "op_task_bytes", "task_output_bytes", "real_usage_bytes", "output_ready",
           "publish_share", "published_share", "idle_stats", "set_external_consumer_bytes"]

#: the attribute of a resource manager that carries the push split's :class:`ExecutorShare`
#: to its backpressure policy (both run in the coordinator's process)
_SHARE_ATTR = "_push_split_share"


def start_execution(split_dataset):
    """A new epoch's execution of ``split_dataset``: ``(executor, output_iterator)``, the calls
    ``SplitCoordinator._try_start_new_epoch`` makes (``Dataset._create_executor``,
    ``dataset.py:8518-8531``; ``Dataset._build_bundle_iterator``, ``dataset.py:8576-8589``,
    ``stream_split_iterator.py:305-341``), with the external consumers registered
    (``set_external_consumer_bytes(0)``). The executor gets its own copy of its options.

    Raises:
        Exception: whatever Ray Data raises while starting (an actor pool that cannot start,
            a bad plan); a half-built executor is shut down first.
    """
    import contextlib
    import copy

    executor = split_dataset._create_executor()
    try:
        if hasattr(executor, "_options"):
            executor._options = copy.copy(executor._options)
        output_iterator = split_dataset._build_bundle_iterator(executor)
        executor.set_external_consumer_bytes(0)
    except BaseException:
        with contextlib.suppress(Exception):  # it may lack what shutdown expects
            executor.shutdown(force=True)
        raise
    return executor, output_iterator


def budget_and_usage(executor) -> tuple[Optional[int], int]:
    """Ray Data's object-store limit (None when unknown or unlimited) and its believed usage,
    in bytes, read from the resource manager as attributes (``resource_manager.py:128-130``;
    the getters may refresh from another thread)."""
    rm = getattr(executor, "_resource_manager", None)
    if rm is None:
        return None, 0
    limit = getattr(getattr(rm, "_global_limits", None), "object_store_memory", None)
    usage = getattr(getattr(rm, "_global_usage", None), "object_store_memory", 0) or 0
    budget = int(limit) if limit is not None and math.isfinite(limit) and limit > 0 else None
    return budget, int(usage) if math.isfinite(usage) else 0


def op_task_bytes(op) -> float:
    """One task's output of ``op`` in real bytes: its outputs' bytes over its finished tasks
    (``OpRuntimeMetrics.bytes_task_outputs_generated`` and ``num_tasks_finished``), else its
    average output block; 0 for an operator that runs no tasks or has no output yet."""
    try:
        metrics = op.metrics
        produced = float(metrics.bytes_task_outputs_generated or 0)
        finished = int(metrics.num_tasks_finished or 0)
        if produced and finished:
            return produced / finished
        return float(metrics.average_bytes_per_output or 0)
    except Exception:  # noqa: BLE001 - an operator without these metrics runs no tasks
        return 0.0


def task_output_bytes(executor) -> Optional[int]:
    """``R``: one task's output per operator, summed over the executor's operators, in real
    bytes (:func:`op_task_bytes`); None before any operator has an output."""
    total = sum(op_task_bytes(op) for op in list((getattr(executor, "_topology", None) or {}).keys()))
    return int(total) if total else None


def real_usage_bytes(resource_manager) -> float:
    """What the executor's blocks really hold, in bytes: every operator's outputs still
    referenced (``ResourceManager.get_mem_op_outputs``, Ray Data's ``BlockRefCounter``, which
    also counts the blocks the push split's windows hold) plus one task output for each running
    task (:func:`op_task_bytes`; Ray Data's own estimate counts two per task, the streaming
    generator's buffer, ``op_runtime_metrics.py:836-880``)."""
    total = 0.0
    for op in list(getattr(resource_manager, "_topology", None) or {}):
        total += float(resource_manager.get_mem_op_outputs(op) or 0)
        total += op.num_active_tasks() * op_task_bytes(op)
    return total


def output_ready(executor, split_idx: int) -> Optional[bool]:
    """Whether the split's output queue has a block, or the execution ended or failed (a
    blocking get returns at once); None when this Ray's executor has no such queue
    (``executor._output_node``; ``OutputSplitter``'s queue, ``has_next(split)``)."""
    _, state = getattr(executor, "_output_node", (None, None))
    queue = getattr(state, "output_queue", None)
    if queue is None or not hasattr(queue, "has_next"):
        return None
    return bool(queue.has_next(split_idx) or getattr(state, "_finished", True)
                or getattr(state, "_exception", None) is not None)


def publish_share(executor, share) -> None:
    """Hand ``share`` (a :class:`~raydata_course.push_split.window.ExecutorShare`) to the
    executor's :class:`~raydata_course.push_split.readahead.ReadAheadPolicy`, which reads it
    from the resource manager (:func:`published_share`)."""
    rm = getattr(executor, "_resource_manager", None)
    if rm is not None:
        setattr(rm, _SHARE_ATTR, share)


def published_share(resource_manager):
    """The :class:`~raydata_course.push_split.window.ExecutorShare` published for this
    resource manager's executor, or None."""
    return getattr(resource_manager, _SHARE_ATTR, None)


def set_external_consumer_bytes(executor, num_bytes: int) -> None:
    """Feed the pushed-but-unconsumed bytes to the executor's external-consumer hook
    (``streaming_executor.py:480-483`` → ``ResourceManager.set_external_consumer_bytes``,
    ``resource_manager.py:177-183``); it replaces the previous value."""
    executor.set_external_consumer_bytes(num_bytes)


def idle_stats(executor) -> dict:
    """How many steps of ``executor``'s scheduling loop were stuck, how often it waited for
    news instead of spinning, and the CPU time of its thread
    (:class:`~raydata_course.push_split.idle.IdleWait`): ``{"stuck_steps": int, "waits": int,
    "waited_s": float, "loop_cpu_s": float}`` (seconds), zeros when it has no ``IdleWait``."""
    waiters = [c for c in getattr(executor, "_callbacks", None) or [] if isinstance(c, IdleWait)]
    return {"stuck_steps": sum(w.stuck_steps for w in waiters), "waits": sum(w.waits for w in waiters),
            "waited_s": round(sum(w.waited_s for w in waiters), 3),
            "loop_cpu_s": round(sum(w.loop_cpu_s for w in waiters), 3)}
