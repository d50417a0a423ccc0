"""Actor pools, observed: a cluster-wide log of set-up calls, and the strategy a plan chose.

Chapter 03, exercise data03 and its grader share this module:

- :func:`record_setup` notes that an expensive set-up step (loading a model) ran, in which
  process and actor. :func:`start_setup_log` starts a named Ray actor that collects those
  events from every process of the job, so a driver can count how often the set-up ran, and
  in which actors, while a ``map_batches`` actor pool runs; :func:`setup_events` reads them.
- :func:`compute_strategies` reads the compute strategy (task pool or actor pool, and its
  sizes) that each map operator of a lazy plan settled on, without executing anything.

Importing this module imports neither Ray nor PyTorch; the functions import them when called.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SETUP_LOG_NAMESPACE",
    "SetupEvent",
    "record_setup",
    "local_setup_events",
    "start_setup_log",
    "setup_log_running",
    "setup_events",
    "stop_setup_log",
    "compute_strategies",
]

#: Ray namespace of the set-up log actor (its name carries the job id, see :func:`start_setup_log`).
SETUP_LOG_NAMESPACE = "raydata_course"


@dataclass(frozen=True)
class SetupEvent:
    """One run of an expensive set-up step.

    Attributes:
        what: which step ran, e.g. ``"load_classifier"``.
        pid: the process that ran it.
        actor_id: the Ray actor it ran in (hex), or None outside an actor (a driver or a task).
        duration_s: how long the step took, in seconds.
        wall_time_s: when it finished, as ``time.time()`` (seconds since the epoch).
        detail: what the step worked on, e.g. the model file ``load_classifier`` read
            (absolute path); lets a check count only its own pipeline's loads when actors
            of an earlier pipeline are still starting.
    """

    what: str
    pid: int
    actor_id: str | None
    duration_s: float
    wall_time_s: float
    detail: str = ""


_local_events: list[SetupEvent] = []
_local_lock = threading.Lock()
# The driver's handles to its set-up logs, by job id. Ray ends a non-detached actor, named or
# not, when its creator drops the handle it got at creation (a handle found by name later does
# not keep it alive), so start_setup_log keeps that first handle here.
_log_handles: dict[str, Any] = {}


def _current_actor_id() -> str | None:
    import ray

    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_actor_id()


def _setup_log_name() -> str:
    import ray

    return f"setup-log-{ray.get_runtime_context().get_job_id()}"


def _setup_log_handle():
    """The running set-up log of this job, or None (Ray not running, or no log started)."""
    import ray

    if not ray.is_initialized():
        return None
    try:
        return ray.get_actor(_setup_log_name(), namespace=SETUP_LOG_NAMESPACE)
    except ValueError:  # no actor of that name
        return None


def record_setup(what: str, duration_s: float = 0.0, detail: str = "") -> SetupEvent:
    """Record that an expensive set-up step ran in this process.

    The event is kept in this process (see :func:`local_setup_events`) and, when this job has
    a set-up log running (:func:`start_setup_log`), also sent to it and waited for, so the
    driver sees it as soon as the step returns.

    Args:
        what: a short name for the step.
        duration_s: how long it took, in seconds.
        detail: what it worked on (see :class:`SetupEvent`).

    Returns:
        The :class:`SetupEvent` recorded.
    """
    event = SetupEvent(what, os.getpid(), _current_actor_id(), float(duration_s), time.time(), detail)
    with _local_lock:
        _local_events.append(event)
    log = _setup_log_handle()
    if log is not None:
        import ray

        ray.get(log.record.remote(event))
    return event


def local_setup_events(what: str | None = None) -> list[SetupEvent]:
    """The set-up events recorded in *this* process, oldest first (``what`` filters by step)."""
    with _local_lock:
        return [e for e in _local_events if what is None or e.what == what]


class _SetupLog:
    """Body of the set-up log actor: an append-only list of :class:`SetupEvent`."""

    def __init__(self) -> None:
        self._events: list[SetupEvent] = []

    def record(self, event: SetupEvent) -> int:
        self._events.append(event)
        return len(self._events)

    def events(self) -> list[SetupEvent]:
        return list(self._events)

    def clear(self) -> None:
        self._events.clear()


def start_setup_log() -> Any:
    """Start (or reuse, and empty) this job's set-up log actor.

    The actor is named ``setup-log-<job id>`` in namespace :data:`SETUP_LOG_NAMESPACE`, uses
    no CPU (``num_cpus=0``, so it never takes a slot an actor pool needs), and belongs to the
    driver: it ends when the driver disconnects, or with :func:`stop_setup_log`. This module
    keeps the handle it got at creation: Ray ends a non-detached actor, named or not, when its
    creator drops that handle.

    Returns:
        The actor handle.

    Raises:
        RuntimeError: if Ray is not running (call ``raydata_course.setup()`` first).
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running: call raydata_course.setup() before start_setup_log().")
    name = _setup_log_name()
    log = _log_handles.get(name)
    if log is None:
        actor_cls = ray.remote(num_cpus=0)(_SetupLog)
        log = actor_cls.options(name=name, namespace=SETUP_LOG_NAMESPACE, get_if_exists=True).remote()
        _log_handles[name] = log
    ray.get(log.clear.remote())
    return log


def setup_log_running() -> bool:
    """Whether this job has a set-up log actor running."""
    return _setup_log_handle() is not None


def setup_events(what: str | None = None) -> list[SetupEvent]:
    """Every set-up event this job's log has collected, in arrival order.

    Args:
        what: keep only events of this step, e.g. ``"load_classifier"``.

    Raises:
        RuntimeError: if no set-up log is running (call :func:`start_setup_log` first).
    """
    import ray

    log = _setup_log_handle()
    if log is None:
        raise RuntimeError("no set-up log is running in this job: call start_setup_log() first.")
    return [e for e in ray.get(log.events.remote()) if what is None or e.what == what]


def stop_setup_log() -> None:
    """End this job's set-up log actor, if one is running."""
    import ray

    if not ray.is_initialized():
        return
    log = _log_handles.pop(_setup_log_name(), None) or _setup_log_handle()
    if log is not None:
        ray.kill(log)


# ------------------------------------------------------------------- reading a plan


def compute_strategies(ds: Any) -> list[tuple[str, Any]]:
    """The compute strategy of every map-like operator in a dataset's (lazy) plan.

    Nothing is executed. The strategy is the one ``map_batches``/``map``/``filter`` settled
    on when it was called: what ``compute=`` asked for, what a deprecated ``concurrency=``
    was translated into, or the default (``TaskPoolStrategy()`` for a function,
    ``ActorPoolStrategy(min_size=1, max_size=None)`` for a class; Ray 2.60,
    ``ray/data/_internal/util.py``, ``get_compute_strategy``).

    This reads Ray Data's logical plan (``Dataset._logical_plan.dag`` and each operator's
    ``compute`` attribute, ``ray/data/_internal/logical/operators/map_operator.py``), which is
    internal API, checked against Ray 2.60.0.

    Args:
        ds: a ``ray.data.Dataset``.

    Returns:
        ``[(operator name, strategy), ...]`` from the source towards the output.

    Raises:
        TypeError: if ``ds`` has no logical plan (not a Dataset).
    """
    plan = getattr(ds, "_logical_plan", None)
    if plan is None:
        raise TypeError(f"expected a ray.data.Dataset, got {type(ds).__name__}.")
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def visit(op: Any) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for parent in op.input_dependencies:
            visit(parent)
        if getattr(op, "compute", None) is not None:
            found.append((op.name, op.compute))

    visit(plan.dag)
    return found
