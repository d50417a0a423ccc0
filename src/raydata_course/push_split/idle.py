"""A stuck executor waits for news instead of spinning: :class:`IdleWait`.

Ray Data's scheduling loop (``StreamingExecutor.run``, ``streaming_executor.py:435-461``)
sleeps in one place only: ``process_completed_tasks`` waits for its operators' running tasks
with ``ray.wait(..., num_returns=len(active_tasks), timeout=0.1)``
(``WAIT_FOR_TASK_COMPLETION_TIMEOUT_S``, ``streaming_executor_state.py:60`` and
``:748-754``), which returns at once when every task already has an output ready. An
executor held at its object-store limit is in exactly that state: its tasks' outputs wait,
unread, because the backpressure policies let it read none
(``max_task_output_bytes_to_read`` is 0), or it has no task at all. Nothing can change until
a consumer frees bytes, yet the loop runs again at once, as often as the CPU lets it, holding
the GIL of the process it runs in while doing so.

Under the push split the budget binds by design (the point of the split), so the executor
comes to that state whenever its outputs wait for the consumers, and has nothing to do until a
consumer reports a batch done, while the loop runs in the coordinator, on cores the trainers
need.
``benchmarks/idle_wait.py`` measures the loop's CPU time with and without the idle wait in
one run, and ``make lab``'s push table gives it per epoch under pull and push
(``RunResult.loop_cpu_s``).

:class:`IdleWait` is a Ray Data ``ExecutionCallback`` (``execution_callback.py``, an
internal interface; registered through the public
``DataContext.custom_execution_callback_classes``). At the end of each loop step,
``on_execution_step``, it calls the step *stuck* when it was quicker than Ray's wait timeout
(so ``ray.wait`` did not wait), it changed none of the operators' counters (inputs received,
task outputs generated, outputs taken, tasks submitted or finished) nor their output queues,
and no :func:`wake` came since the previous step. Then it waits until something that can
give the executor work happens (:func:`wake`) or the rest of ``IDLE_WAIT_S`` passes,
whichever is first. The coordinator calls :func:`wake` when a consumer's report changes the
bytes it holds, when a sender takes a block from the executor's output, and when the
controller changes the executor's limit. ``IDLE_WAIT_S`` is Ray's own wait timeout, so what
no wake covers (a limit Ray Data re-reads every second, an actor of a pool becoming ready, a
stall guard, a shutdown) is seen as soon as a loop with a running task would see it; a
step that made progress, or whose ``ray.wait`` waited, never waits here.

Examples:
    >>> import threading, time
    >>> waiter = IdleWait()
    >>> class Op:
    ...     _metrics = None
    ...     def has_completed(self):
    ...         return False
    >>> class Executor:
    ...     _topology = {Op(): None}
    ...     _shutdown = False
    >>> waiter.on_execution_step(Executor())  # a first step is never stuck: nothing to compare
    >>> t0 = time.monotonic(); waiter.on_execution_step(Executor()); round(time.monotonic() - t0, 1)
    0.1
    >>> threading.Timer(0.02, wake).start()
    >>> t0 = time.monotonic(); waiter.on_execution_step(Executor()); time.monotonic() - t0 < 0.09
    True
    >>> waiter.waits
    2
"""

from __future__ import annotations

import threading
import time
from typing import Optional

__all__ = ["IdleWait", "LoopMeter", "install_idle_wait", "wake", "IDLE_WAIT_S"]

#: the longest an idle executor waits for a :func:`wake` before it runs its loop again, in
#: seconds: Ray Data's own ``WAIT_FOR_TASK_COMPLETION_TIMEOUT_S`` (``streaming_executor_state.py:60``).
IDLE_WAIT_S = 0.1

_news = threading.Condition()
_generation = 0

try:  # Ray Data's internal interface; without it nothing is installed
    from ray.data._internal.execution.execution_callback import ExecutionCallback as _Base
except ImportError:  # pragma: no cover - Ray 2.60 has it
    _Base = object


def wake() -> None:
    """Something changed that may give an idle executor work (bytes freed, a limit raised):
    every :class:`IdleWait` of this process that waits runs its loop now. Cheap; any thread."""
    global _generation
    with _news:
        _generation += 1
        _news.notify_all()


_COUNTERS = ("num_inputs_received", "num_task_outputs_generated", "num_outputs_taken",
             "num_tasks_submitted", "num_tasks_finished")


def _progress(topology) -> tuple:
    """What changes whenever the executor does anything: each operator's counters
    (``OpRuntimeMetrics``, ``op_runtime_metrics.py``) and output queue length."""
    marks = []
    for op, state in topology.items():
        metrics = getattr(op, "_metrics", None)
        marks.extend(getattr(metrics, name, 0) for name in _COUNTERS)
        queued = getattr(getattr(state, "output_queue", None), "num_blocks", 0)  # a method or a count
        marks.append(queued() if callable(queued) else queued)
    return tuple(marks)


class IdleWait(_Base):
    """``ExecutionCallback`` that makes a stuck scheduling loop wait for :func:`wake`.

    Attributes:
        stuck_steps: how many steps were stuck (see the module).
        waits: how many steps ended in a wait (every stuck one that had not completed).
        waited_s: seconds spent waiting, over all of them.
        loop_cpu_s: CPU seconds the scheduling loop's thread used from its first step to its
            latest (``time.thread_time``, read in that thread).
    """

    #: False in :class:`LoopMeter`: count and time, never wait.
    wait_for_news = True

    def __init__(self) -> None:
        self.stuck_steps = 0
        self.waits = 0
        self.waited_s = 0.0
        self.loop_cpu_s = 0.0
        self._cpu_start_s: Optional[float] = None
        self._marks: Optional[tuple] = None
        self._last_end = time.monotonic()
        with _news:
            self._seen = _generation

    def on_execution_step(self, executor) -> None:
        """Wait for :func:`wake`, at most until ``IDLE_WAIT_S`` after the previous step
        ended, when this step of ``executor`` was stuck (see the module); return at once
        otherwise."""
        step_s = time.monotonic() - self._last_end
        cpu_s = time.thread_time()
        if self._cpu_start_s is None:
            self._cpu_start_s = cpu_s
        self.loop_cpu_s = cpu_s - self._cpu_start_s
        topology = getattr(executor, "_topology", None) or {}
        try:
            marks, self._marks = self._marks, _progress(topology)
            finished = all(op.has_completed() for op in topology)
        except Exception:  # noqa: BLE001 - another Ray's internals: never stuck, never fail the run
            marks, self._marks, finished = None, None, True
        with _news:
            stuck = marks is not None and marks == self._marks and _generation == self._seen \
                and step_s < IDLE_WAIT_S and bool(topology) and not getattr(executor, "_shutdown", False)
            self.stuck_steps += stuck
            if stuck and self.wait_for_news and not finished:
                start = time.monotonic()
                seen = self._seen
                _news.wait_for(lambda: _generation != seen, timeout=IDLE_WAIT_S - step_s)
                self.waits += 1
                self.waited_s += time.monotonic() - start
            self._seen = _generation
        self._last_end = time.monotonic()


class LoopMeter(IdleWait):
    """An :class:`IdleWait` that never waits: it only counts stuck steps and the loop's CPU
    time, to measure what Ray Data's own loop spends (``push_split(..., idle_wait=False)``)."""

    wait_for_news = False


def install_idle_wait(ctx, wait: bool = True) -> bool:
    """Add :class:`IdleWait` (``wait``) or :class:`LoopMeter` (not ``wait``) to the execution
    callbacks of ``ctx`` (a ``DataContext`` the caller owns; executors built from it get one).
    Returns False, changing nothing, when this Ray has no execution-callback interface."""
    if _Base is object:
        return False
    cls = IdleWait if wait else LoopMeter
    classes = [c for c in ctx.custom_execution_callback_classes if c not in (IdleWait, LoopMeter)]
    ctx.custom_execution_callback_classes = [*classes, cls]  # a new list: a copied context may share the old one
    return True
