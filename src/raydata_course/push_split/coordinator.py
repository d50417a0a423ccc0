"""The coordinator actor of the push-based split: one execution per epoch, windows, pushes.

:class:`PushSplitCoordinator` runs as a Ray actor (created by
:func:`raydata_course.push_split.push_split`). It

* runs **one streaming execution per epoch**, behind a barrier that every split must reach
  (:meth:`~PushSplitCoordinator.start_epoch`; waiters sleep on a ``threading.Condition``);
* keeps one :class:`~raydata_course.push_split.flow.SplitFlow` per split, and a sender
  thread per split that takes the split's next block from the executor and pushes it while
  the split's window has credit; it waits for a block as a consumer, inside Ray Data's
  output call, only when its consumer has less than one batch left
  (:meth:`~PushSplitCoordinator._await_output`), so Ray Data's liveness rule for waiting
  consumers lets the executor over its budget only when a consumer really waits;
* **pushes by value**: it calls the actor that hosts the split (Ray's generic
  ``__ray_call__``, ``ray/actor.py:2841``) with the block's ``ObjectRef`` as a top-level
  argument, so Ray resolves it and the host receives the block, local to its node, before
  the training loop touches it (a consumer that is not an actor fetches instead,
  :meth:`~PushSplitCoordinator.fetch`);
* **keeps each pushed block's ref until the consumer reports it released**, so Ray Data's
  ``BlockRefCounter`` keeps charging it to the budget, and feeds pushed-but-unconsumed bytes
  to the executor's external-consumer hook ``StreamingExecutor.set_external_consumer_bytes``
  (``ray/data/_internal/execution/streaming_executor.py:480-483``);
* watches the hosts' liveness, so a consumer that dies fails the epoch for the others
  instead of hanging them;
* under ``window="adaptive"`` (the default), runs a control thread per epoch that sizes
  every split's window against the executor's budget and the consumers' pace
  (:class:`~raydata_course.push_split.window.WindowController`, whose docstring states the
  rule): about every ``control_interval_s`` it reads Ray Data's budget and believed usage
  (the resource manager's ``_global_limits`` and ``_global_usage``, read as attributes, as
  a thread outside the scheduling loop should, ``resource_manager.py:128-130``), each
  split's held bytes and its consumer's reported waiting, each operator's need, and, with
  ``steer_on_store``, the object store's measured usage, and applies the windows; it also
  runs the executor at the budget minus the headroom Ray Data takes over its limit (and, with
  ``steer_on_store``, minus how far the object store's measured usage went over the budget)
  (:attr:`~raydata_course.push_split.window.WindowController.executor_limit_bytes`), through
  the executor's own copy of its options.
* under ``window="adaptive"``, caps each operator's read-ahead at about what its downstream
  operator is working on (:class:`~raydata_course.push_split.readahead.ReadAheadPolicy`, a
  backpressure policy added to the executor's), so the cheap operators at the head of the
  plan cannot fill the executor's limit before the expensive one has outputs.

It copies the dataset's ``DataContext`` into its process, as Ray's ``SplitCoordinator`` does
(``stream_split_iterator.py:210-211``), so execution options, budgets and execution callbacks
apply to the executions it runs.
"""

from __future__ import annotations

import collections
import copy
import contextlib
import logging
import re
import threading
import time
from typing import Optional

import ray

from raydata_course._util import cause_chain
from raydata_course.push_split.flow import SplitFlow
from raydata_course.push_split.idle import IdleWait, install_idle_wait, wake
from raydata_course.push_split.inbox import deliver
from raydata_course.push_split.messages import Arrival, Delivery, Parcel, PushSplitError, RowRange
from raydata_course.push_split.readahead import install_read_ahead_cap
from raydata_course.push_split.window import Observation, SplitRequest, SplitState, WindowController, executor_limit

__all__ = ["PushSplitCoordinator", "FETCH_TIMEOUT_S", "WINDOW_POLICIES"]

logger = logging.getLogger(__name__)

#: a fetch call (non-actor consumers) returns empty after this many seconds, so a fetch
#: never pins a coordinator thread for ever.
FETCH_TIMEOUT_S = 10.0
#: how many (time, bytes) points of the pushed-but-unconsumed history debug_state keeps.
_HISTORY_LIMIT = 20_000
#: seconds between a sender's looks at its split's output queue while its consumer has a
#: whole batch to read (see ``PushSplitCoordinator._await_output``).
_OUTPUT_POLL_S = 0.01
#: the executor's limit changes only when the controller's differs by at least this (bytes),
#: or by a 64th of the budget when that is less.
_LIMIT_STEP_BYTES = 1 << 20
#: seconds between the controller's readings of the object store (``steer_on_store``). A
#: reading is a raylet ``GetNodeStats`` call, and the raylet answers it only after asking
#: every worker on its node for its core-worker stats (``NodeManager::HandleGetNodeStats``
#: in ``node_manager.cc``): at every 0.1 s tick that fan-out took CPU from the trainers. The
#: signal it is for, bytes freed but not yet deleted, changes once per raylet free batch
#: (``free_objects_period_milliseconds``, 1000 ms by default), so two readings a second
#: resolve it. Ticks in between see no store reading (``Observation.store_bytes`` is None).
STORE_SAMPLE_INTERVAL_S = 0.5
#: ``"adaptive"``: budget-aware windows that follow the consumers (:mod:`.window`);
#: ``"fixed"``: every window is what its consumer asked for, ``prefetch_batches * batch_size``.
WINDOW_POLICIES = ("adaptive", "fixed")


def _error_summary(exc: BaseException, max_chars: int = 600) -> str:
    """The execution's error in one line, with its root cause: a failed UDF reaches the
    coordinator as ``RayTaskError(UserCodeException)`` with a generic message, and the
    student's own exception (``ValueError: bad block``) is at the end of its cause chain.

    Examples:
        >>> try:
        ...     try:
        ...         raise ValueError("bad block 150")
        ...     except ValueError as inner:
        ...         raise RuntimeError("UDF failed to process a data block.") from inner
        ... except RuntimeError as outer:
        ...     print(_error_summary(outer))
        RuntimeError: UDF failed to process a data block. (caused by ValueError: bad block 150)
    """
    def one_line(e: BaseException) -> str:
        text = " ".join(str(e).split())
        return f"{type(e).__name__}: {text}" if text else type(e).__name__

    chain = cause_chain(exc)
    root = one_line(chain[-1]) if chain[-1] is not exc else None
    # A remote error carries the task's traceback as text, root cause first: its first
    # "SomeError: message" line that is not Ray's own wrapper is the user's exception.
    for e in chain:
        text = _ANSI.sub("", getattr(e, "traceback_str", None) or str(e))
        for line in text.splitlines():
            m = _ERROR_LINE.match(line)
            if m and not m.group(1).endswith(("UserCodeException", "RayTaskError")):
                root = f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"
                break
        else:
            continue
        break
    first = _ANSI.sub("", str(exc)).strip().splitlines()[0] if str(exc).strip() else ""
    said = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if root:
        said += f" (caused by {root})"
    return said[:max_chars]


_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): (.+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _ping(_host_self) -> bool:
    return True


def _ship_windows(records: list[dict]) -> None:
    """Send window samples to the recorder actor (``raydata_course.measure.raydata``) if
    one runs; nothing otherwise."""
    if not records:
        return
    from raydata_course.measure.raydata import RECORDER_NAME, RECORDER_NAMESPACE

    try:
        ray.get_actor(RECORDER_NAME, namespace=RECORDER_NAMESPACE).add_windows.remote(records)
    except ValueError:  # no recorder: nobody outside this process listens
        pass


def _configured_limit(options) -> Optional[int]:
    """The object-store limit an ``ExecutionOptions`` sets, when the headroom may lower it:
    a finite ``resource_limits.object_store_memory`` and no object-store exclusion (Ray
    subtracts ``exclude_resources`` from the limit, ``resource_manager.py:296-307``, and
    refuses both set at once); None otherwise, for example when Ray picks the limit itself
    from the cluster's store, which it re-detects as the cluster grows."""
    import math

    limit = getattr(getattr(options, "resource_limits", None), "object_store_memory", None)
    exclude = getattr(getattr(options, "exclude_resources", None), "object_store_memory", None) or 0
    if limit is None or not math.isfinite(limit) or limit <= 0 or exclude:
        return None
    return int(limit)


def _set_executor_limit(executor, limit_bytes: int) -> None:
    """Run ``executor`` under an object-store limit of ``limit_bytes`` from now on: its own
    options' ``resource_limits`` (a copy the coordinator gave it), re-read at the resource
    manager's next refresh, forced now when the executor already runs
    (``resource_manager.py:280-310`` re-reads the options once a second). Nothing happens
    when its options set no limit the headroom may lower (:func:`_configured_limit`)."""
    options = getattr(executor, "_options", None)
    if options is None or _configured_limit(options) is None:
        return
    options.resource_limits = options.resource_limits.copy(object_store_memory=limit_bytes)
    rm = getattr(executor, "_resource_manager", None)
    if rm is not None:
        rm._global_limits_last_update_time = 0
    wake()


def _idle_stats(executor) -> dict:
    """How many steps of ``executor``'s scheduling loop were stuck, how often it waited for
    news instead of spinning, and the CPU time of its thread
    (:class:`~raydata_course.push_split.idle.IdleWait`): ``{"stuck_steps": int, "waits": int,
    "waited_s": float, "loop_cpu_s": float}`` (seconds), zeros when it has no ``IdleWait``."""
    waiters = [c for c in getattr(executor, "_callbacks", None) or [] if isinstance(c, IdleWait)]
    return {"stuck_steps": sum(w.stuck_steps for w in waiters), "waits": sum(w.waits for w in waiters), "waited_s": round(sum(w.waited_s for w in waiters), 3),
            "loop_cpu_s": round(sum(w.loop_cpu_s for w in waiters), 3)}


def _budget_and_usage(executor) -> tuple[Optional[int], int, Optional[int]]:
    """Ray Data's object-store limit (None when unknown or unlimited), its believed usage and
    its operators' need (one task's pending output per operator, summed; None before Ray Data
    has an estimate), in bytes. The limit and usage are read from the executor's resource
    manager as attributes (``resource_manager.py:128-130``; the getters may refresh from
    another thread), the need from each operator's runtime metrics
    (``obj_store_mem_max_pending_output_per_task``, ``op_runtime_metrics.py:861-880``)."""
    import math

    rm = getattr(executor, "_resource_manager", None)
    if rm is None:
        return None, 0, None
    limit = getattr(getattr(rm, "_global_limits", None), "object_store_memory", None)
    usage = getattr(getattr(rm, "_global_usage", None), "object_store_memory", 0) or 0
    budget = int(limit) if limit is not None and math.isfinite(limit) and limit > 0 else None
    need = None
    for op in list((getattr(executor, "_topology", None) or {}).keys()):
        try:
            per_task = op.metrics.obj_store_mem_max_pending_output_per_task
        except Exception:  # noqa: BLE001 - an operator without metrics needs nothing here
            per_task = None
        if per_task:
            need = (need or 0) + int(per_task)
    return budget, int(usage) if math.isfinite(usage) else 0, need


class PushSplitCoordinator:
    """The coordinator actor behind :func:`~raydata_course.push_split.push_split` (created as a Ray actor there).

    It copies the dataset's ``DataContext`` into its process, as ``SplitCoordinator`` does
    (``stream_split_iterator.py:210-211``), so execution options, budgets and execution
    callbacks apply to the executions it runs.

    Args:
        split_dataset: the dataset whose plan ends in a ``StreamingSplit`` operator.
        n: number of splits.
        key: the split group's id, which names the receivers in the consumers' processes.
        liveness_interval_s: seconds between liveness checks of the actors hosting splits.
        window: one of :data:`WINDOW_POLICIES`.
        steer_on_store: (adaptive only) count the object store's measured usage over the
            budget as pressure, and lower the executor's limit by how far it went over; it is
            the only signal that sees freed-but-not-yet-deleted bytes (one raylet gRPC call
            every :data:`STORE_SAMPLE_INTERVAL_S` seconds).
        control_interval_s: seconds between the window controller's ticks.
        read_ahead_cap: (adaptive only) install
            :class:`~raydata_course.push_split.readahead.ReadAheadPolicy` on the executor.
        idle_wait: install :class:`~raydata_course.push_split.idle.IdleWait` on the executor
            (off: :class:`~raydata_course.push_split.idle.LoopMeter`, which only measures).

    Raises:
        ValueError: an unknown ``window`` or a ``control_interval_s`` not above 0.
    """

    def __init__(self, split_dataset, n: int, key: str, liveness_interval_s: float, window: str = "adaptive",
                 steer_on_store: bool = False, control_interval_s: float = 0.1, read_ahead_cap: bool = True,
                 idle_wait: bool = True):
        import ray.data

        if window not in WINDOW_POLICIES:
            raise ValueError(f"window must be one of {WINDOW_POLICIES}, got {window!r}.")
        if not control_interval_s > 0:
            raise ValueError(f"control_interval_s must be above 0 seconds, got {control_interval_s!r}.")
        self._key = key
        self._window = window
        self._steer_on_store = steer_on_store
        self._control_interval_s = control_interval_s
        self._controller: Optional[WindowController] = None
        self._warned: set[str] = set()  # the controllers' warnings, each logged once per split group
        self._window_history: list[dict] = []  # the window samples (see _window_records)
        self._store_sampler = None
        self._headroom_bytes = 0.0  # WindowController.headroom_bytes, carried across epochs
        self._budget_bytes: Optional[int] = None  # the budget the executor was given (B)

        self._ctx = split_dataset.context.copy()
        ray.data.DataContext._set_current(self._ctx)
        if window == "adaptive" and read_ahead_cap:
            # Each epoch's executor is built from the dataset's own context
            # (Dataset._create_executor, dataset.py:8531): this process's copy of it, so the
            # caller's dataset is untouched (self._ctx, copied above, does not need it).
            install_read_ahead_cap(split_dataset.context)
        # An executor that can do nothing until a consumer frees bytes waits for the
        # coordinator's news (a report, a block taken, a limit changed) instead of spinning
        # (.idle); without idle_wait, a LoopMeter only measures the spin.
        install_idle_wait(split_dataset.context, wait=idle_wait)
        self._ds = split_dataset
        self._n = n
        self._liveness_interval_s = liveness_interval_s
        self._cond = threading.Condition(threading.RLock())
        self._epoch = -1
        self._arrivals: dict[int, Arrival] = {}
        self._starting = False
        self._epoch_error: Optional[BaseException] = None
        self._flows: dict[int, SplitFlow] = {}
        self._executor = None
        self._output_iterator = None
        self._teardown_thread: Optional[threading.Thread] = None
        self._teardown_error: Optional[BaseException] = None
        self._delivery_calls: dict = {}
        self._external_bytes = 0
        self._history: list[tuple[float, int]] = []
        self._epochs: list[dict] = []
        self._late_reports = 0
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="push-split-watchdog", daemon=True)
        self._watchdog.start()

    # ---------------------------------------------------------------- epoch barrier

    def start_epoch(self, split_idx: int, arrival: Arrival) -> int:
        """Arrive at the barrier for the next epoch and block until it starts.

        The last split to arrive tears down the previous epoch's executor and starts a new
        execution (``Dataset._create_executor``, ``dataset.py:8518-8531``, and
        ``Dataset._build_bundle_iterator``, ``dataset.py:8576-8589``, the calls
        ``SplitCoordinator._try_start_new_epoch`` makes, ``stream_split_iterator.py:305-341``).
        The others sleep on a condition until it has done so.

        Args:
            split_idx: the caller's split, ``0 <= split_idx < n``.
            arrival: the caller's window (at least 1 row) and, when it is an actor, its
                handle (blocks are pushed to it; else it fetches them).

        Returns:
            The epoch id (0, 1, ...).

        Raises:
            ValueError: ``split_idx`` out of range, or ``target_rows < 1``.
            PushSplitError: tearing down the previous epoch (or starting this one) failed;
                every split of this epoch gets the same error and none hangs. Also raised
                when the split is already waiting at this barrier, or a peer died.
        """
        self._check_split(split_idx)
        if not isinstance(arrival, Arrival) or int(arrival.target_rows) < 1:
            raise ValueError(f"start_epoch needs an Arrival with target_rows >= 1, got {arrival!r}.")
        with self._cond:
            starting = self._epoch
            if split_idx in self._arrivals:
                raise PushSplitError(
                    f"split {split_idx} is already waiting for epoch {starting + 1}: iterate each split "
                    "from one consumer at a time.")
            self._arrivals[split_idx] = arrival
            if len(self._arrivals) < self._n:
                self._cond.wait_for(lambda: self._epoch != starting)
            else:
                self._start_next_epoch_locked(starting)
            if self._epoch != starting + 1:
                raise PushSplitError(f"split {split_idx} expected epoch {starting + 1}, the coordinator is at "
                                     f"{self._epoch}: a split was iterated by two consumers at once.")
            if self._epoch_error is not None:
                raise self._epoch_error
            return self._epoch

    def _start_next_epoch_locked(self, starting: int) -> None:
        """Last arrival: tear down, start the next execution, release the barrier."""
        arrivals, self._arrivals = self._arrivals, {}
        old_executor, old_flows = self._executor, self._flows
        error: Optional[BaseException] = None
        # Teardown and executor creation run with the lock released, so that late reports
        # and debug_state never wait behind them; the barrier stays closed meanwhile,
        # because self._epoch only moves below.
        self._cond.release()
        try:
            try:
                self._teardown(old_executor)
            except Exception as exc:  # noqa: BLE001 - any teardown failure fails the epoch
                error = PushSplitError(f"tearing down epoch {starting} failed: {exc!r}")
                error.__cause__ = exc
            executor = output_iterator = None
            if error is None:
                try:
                    executor = self._ds._create_executor()
                    # Its own options: the control thread lowers its limit (the headroom)
                    # without touching the dataset's context, which the next epoch reads.
                    if hasattr(executor, "_options"):
                        executor._options = copy.copy(executor._options)
                        self._apply_headroom(executor)
                    output_iterator = self._ds._build_bundle_iterator(executor)
                    executor.set_external_consumer_bytes(0)  # registers the external consumers
                except Exception as exc:  # noqa: BLE001
                    # e.g. an actor pool that cannot start within DataContext.wait_for_min_actors_s:
                    # the executor is half-built (no resource manager yet), so it is shut down
                    # here and never used; every split of the epoch gets this error.
                    error = PushSplitError(f"starting epoch {starting + 1} failed: {_error_summary(exc)}")
                    error.__cause__ = exc
                    if executor is not None:
                        with contextlib.suppress(Exception):  # it may lack what shutdown expects
                            executor.shutdown(force=True)
                    executor = output_iterator = None
        finally:
            self._cond.acquire()
        if old_flows:
            self._epochs.append({"epoch": starting, "splits": {i: f.snapshot() for i, f in old_flows.items()},
                                 "idle": _idle_stats(old_executor)})
            for flow in old_flows.values():
                flow.inflight.clear()
        self._epoch = starting + 1
        self._epoch_error = error
        self._executor, self._output_iterator = executor, output_iterator
        self._flows = {i: SplitFlow(target_rows=int(a.target_rows), host=a.host, batch_rows=int(a.batch_rows))
                       for i, a in arrivals.items()}
        self._delivery_calls = {}
        self._controller = None
        try:
            if error is None:
                self._start_controller_locked()
                self._set_external_bytes_locked()
                for i in range(self._n):
                    threading.Thread(target=self._send_loop, args=(self._epoch, i), daemon=True,
                                     name=f"push-split-send-{self._epoch}-{i}").start()
        finally:
            self._cond.notify_all()  # whatever happened, no split may sleep at the barrier

    # ---------------------------------------------------------------- windows

    def _start_controller_locked(self) -> None:
        """Adaptive windows: every split with a known batch size starts at one batch, and a
        control thread adjusts the windows for this epoch."""
        flows = [self._flows[i] for i in range(self._n)]
        if self._window != "adaptive" or any(f.batch_rows < 1 for f in flows):
            return
        self._controller = WindowController(
            [SplitRequest(batch_rows=min(f.batch_rows, f.target_rows), requested_rows=f.target_rows) for f in flows],
            steer_on_store=self._steer_on_store, warned=self._warned, headroom_bytes=self._headroom_bytes)
        for flow, rows in zip(flows, self._controller.windows_rows):
            flow.set_target_rows(rows)
        threading.Thread(target=self._control_loop, args=(self._epoch, self._controller), daemon=True,
                         name=f"push-split-control-{self._epoch}").start()

    def _control_loop(self, epoch: int, controller: WindowController) -> None:
        """One epoch's control thread: observe, tick, apply, until the epoch ends; then the
        epoch's window samples go to the course's recorder actor, when one runs (the lab)."""
        start = len(self._window_history)
        try:
            self._control(epoch, controller)
        finally:
            _ship_windows(self._window_records(start))

    def _control(self, epoch: int, controller: WindowController) -> None:
        next_store_s = 0.0  # the store is read at the first tick, then every STORE_SAMPLE_INTERVAL_S
        while not self._stop.wait(self._control_interval_s):
            with self._cond:
                if self._epoch != epoch or self._epoch_error is not None or \
                        all(f.finished for f in self._flows.values()):
                    return
                executor = self._executor
                flows = [self._flows[i] for i in range(self._n)]
                states = [SplitState(bytes_per_row=f.bytes_per_row(), held_bytes=f.held_bytes(),
                                     waited_s=f.take_waited_s(),
                                     ready_rows=max(0, f.rows_pushed - f.rows_consumed - f.batch_rows))
                          for f in flows]
            limit_bytes, usage_bytes, need_bytes = _budget_and_usage(executor)
            if self._budget_bytes is None:  # the first limit read: epoch 0 starts at the budget
                self._budget_bytes = limit_bytes
            budget_bytes = self._budget_bytes
            store_bytes = None
            if self._steer_on_store and time.monotonic() >= next_store_s:
                store_bytes = self._store_used_bytes()
                next_store_s = time.monotonic() + STORE_SAMPLE_INTERVAL_S  # from the reading's end
            windows = controller.tick(Observation(budget_bytes, usage_bytes, states, store_bytes,
                                                  operators_need_bytes=need_bytes, limit_bytes=limit_bytes))
            with self._cond:
                if self._epoch != epoch:
                    return
                self._headroom_bytes = controller.headroom_bytes
                if controller.executor_limit_bytes is not None and limit_bytes is not None and \
                        abs(controller.executor_limit_bytes - limit_bytes) >= min(_LIMIT_STEP_BYTES, budget_bytes / 64):
                    _set_executor_limit(executor, controller.executor_limit_bytes)
                for flow, rows in zip(flows, windows):
                    flow.set_target_rows(rows)
                if len(self._window_history) < _HISTORY_LIMIT:
                    self._window_history.append({
                        "t": time.time(), "epoch": epoch, "windows_rows": windows, "budget_bytes": budget_bytes,
                        "usage_bytes": usage_bytes, "held_bytes": sum(s.held_bytes for s in states),
                        "store_bytes": store_bytes, "operators_need_bytes": need_bytes,
                        "reserve_bytes": int(controller.reserve_bytes), "limit_bytes": limit_bytes,
                        "headroom_bytes": int(controller.headroom_bytes),
                        "lazy_bytes": int(controller.lazy_bytes), "key": self._key})
                self._cond.notify_all()

    def _apply_headroom(self, executor) -> None:
        """Start a new epoch's executor at the limit the previous epochs' headroom calls for
        (adaptive windows, once the budget is known; epoch 0 starts at the budget)."""
        if self._window != "adaptive" or self._budget_bytes is None or self._headroom_bytes <= 0:
            return
        _set_executor_limit(executor, executor_limit(self._budget_bytes, self._headroom_bytes))

    def _store_used_bytes(self) -> Optional[int]:
        """The object store's measured usage, summed over nodes (None if a reading fails)."""
        from raydata_course.measure.store import PlasmaSampler

        try:
            if self._store_sampler is None:
                self._store_sampler = PlasmaSampler(classify_every=0)
            return self._store_sampler.sample(False).used_bytes
        except Exception:  # noqa: BLE001 - a busy raylet: steer on Ray Data's usage this tick
            return None

    def _teardown(self, executor) -> None:
        """Shut the previous epoch's executor down (idempotent), re-raising any failure
        of the early shutdown that ran when every split had finished."""
        thread = self._teardown_thread
        if thread is not None:
            thread.join()
            self._teardown_thread = None
        if self._teardown_error is not None:
            err, self._teardown_error = self._teardown_error, None
            raise err
        if executor is not None:
            executor.shutdown(force=True)  # streaming_executor.py:310

    # ---------------------------------------------------------------- sending

    def _send_loop(self, epoch: int, split_idx: int) -> None:
        """One thread per split and epoch: wait for credit, take the split's next block
        from the executor (``OutputIterator.get_next(split_idx)``,
        ``streaming_executor.py:785-807``) and push it."""
        pending: collections.deque = collections.deque()
        while True:
            with self._cond:
                flow = self._flows.get(split_idx)
                self._cond.wait_for(lambda: self._epoch != epoch or self._epoch_error is not None
                                    or flow.finished or flow.rows_to_send() > 0)
                if self._epoch != epoch or self._epoch_error is not None:
                    return
                draining = flow.finished
                output_iterator = self._output_iterator
                executor = self._executor
            if not pending:
                if not draining and not self._await_output(epoch, split_idx, executor):
                    return
                try:
                    bundle = output_iterator.get_next(split_idx)
                except StopIteration:
                    self._end_split(epoch, split_idx)
                    return
                except Exception as exc:  # noqa: BLE001 - the executor failed
                    if draining:  # every consumer may be gone and the executor shut down
                        return
                    self._fail_epoch(epoch, PushSplitError(f"execution of epoch {epoch} failed: {_error_summary(exc)}"))
                    return
                pending.extend(zip(bundle.blocks, bundle.slices))
                del bundle
                wake()  # the output queue shrank: the executor may have room again
            if draining:  # the consumer stopped early: keep the splitter flowing, drop blocks
                pending.clear()
                continue
            entry, block_slice = pending.popleft()
            self._push_block(epoch, split_idx, entry, block_slice)
            del entry

    def _await_output(self, epoch: int, split_idx: int, executor) -> bool:
        """Wait for the split's next block without counting as a waiting consumer, until its
        consumer runs short; False when the epoch ended or failed meanwhile.

        Ray Data relaxes the terminal operator's output backpressure while any consumer is
        blocked in ``get_output_blocking`` (``streaming_executor_state.py:196-211``: with an
        external consumer, it unblocks when ``num_waiting_consumers > 0``, counted at
        ``:562-566``), so that operator goes on producing over the budget. A sender with
        credit is not a starving consumer: its consumer may still be working through a whole
        batch (rows are reported consumed when the loop asks for the batch after theirs). So the sender
        polls the split's output queue (``output_queue.has_next``) and enters the blocking
        call only when a block is there, the execution has ended, or its consumer has less
        than one batch pushed and not yet consumed: then the consumer does wait, and Ray
        Data's liveness rule is what it is for. Without the executor's internals (another
        Ray release), it blocks at once, as before.
        """
        _, state = getattr(executor, "_output_node", (None, None))
        queue = getattr(state, "output_queue", None)
        if queue is None or not hasattr(queue, "has_next"):
            return True
        while True:
            if queue.has_next(split_idx) or getattr(state, "_finished", True) or \
                    getattr(state, "_exception", None) is not None:
                return True
            with self._cond:
                if self._epoch != epoch or self._epoch_error is not None:
                    return False
                flow = self._flows[split_idx]
                if flow.finished or flow.rows_pushed - flow.rows_consumed < max(flow.batch_rows, 1):
                    return True
                self._cond.wait(_OUTPUT_POLL_S)

    def _push_block(self, epoch: int, split_idx: int, entry, block_slice) -> None:
        meta = entry.metadata
        rows = int(meta.num_rows or 0)
        size = int(meta.size_bytes or 0)
        bounds = None
        if block_slice is not None:
            bounds = (int(block_slice.start_offset), int(block_slice.end_offset))
            full_rows = rows
            rows = bounds[1] - bounds[0]
            size = size * rows // full_rows if full_rows else 0
        with self._cond:
            flow = self._flows.get(split_idx)
            if self._epoch != epoch or self._epoch_error is not None or flow.finished:
                return
            seq = flow.push(entry.ref, rows, size)
            self._set_external_bytes_locked()
            delivery = Delivery(seq, "block", rows, size, bounds)
            host = flow.host
            if host is None:
                flow.outbox.append(Parcel(delivery, entry.ref))
                self._cond.notify_all()
                return
        # The ref is a top-level argument: Ray resolves it, and the host gets the block
        # itself, already in its node's object store.
        call = host.__ray_call__.remote(deliver, self._key, epoch, split_idx, delivery, entry.ref)
        with self._cond:
            if self._epoch == epoch:
                self._delivery_calls[call] = split_idx

    def _end_split(self, epoch: int, split_idx: int) -> None:
        with self._cond:
            flow = self._flows.get(split_idx)
            if self._epoch != epoch or self._epoch_error is not None:
                return
            delivery = Delivery(flow.take_seq(), "end")
            flow.ended = True
            host = flow.host
            if host is None:
                flow.outbox.append(Parcel(delivery))
                self._cond.notify_all()
                return
        host.__ray_call__.remote(deliver, self._key, epoch, split_idx, delivery, None)

    def _set_external_bytes_locked(self) -> None:
        """Feed pushed-but-unconsumed bytes of every split to the executor's
        external-consumer hook (``streaming_executor.py:480-483`` →
        ``ResourceManager.set_external_consumer_bytes``, ``resource_manager.py:177-183``).
        The value replaces the previous one, so it is the sum over splits."""
        total = sum(f.unconsumed_bytes() for f in self._flows.values())
        self._external_bytes = total
        if len(self._history) < _HISTORY_LIMIT:
            self._history.append((time.time(), total))
        if self._executor is not None:
            self._executor.set_external_consumer_bytes(total)
            wake()

    # ---------------------------------------------------------------- consumer reports

    def consumed(self, epoch: int, split_idx: int, ranges: list[RowRange], waited_s: float = 0.0) -> None:
        """The training loop of ``split_idx`` is done with these rows (ranges of delivered
        blocks), reported when the loop asks for the batch after theirs.

        Consumed rows open the window (``rows_consumed``, ``bytes_consumed``): the window is
        everything pushed and not yet done with, the batch in use included. The block's ref is
        kept until :meth:`released` says no batch views its rows any more. Reports for
        another epoch, for a finished split, for an unknown block, or for a range already
        reported (duplicates) are ignored. ``waited_s`` is how long the consumer waited for
        data since its previous report (seconds), the adaptive window's starvation signal."""
        self._report(epoch, split_idx, ranges, released=False, waited_s=waited_s)

    def released(self, epoch: int, split_idx: int, ranges: list[RowRange]) -> None:
        """No batch views these rows any more (every array of their batches was garbage
        collected). When all rows of a block are released, its ref is dropped, so Ray
        Data's ``BlockRefCounter`` uncharges it. Same filtering as :meth:`consumed`."""
        self._report(epoch, split_idx, ranges, released=True)

    def _report(self, epoch: int, split_idx: int, ranges: list[RowRange], released: bool,
                waited_s: float = 0.0) -> None:
        self._check_split(split_idx)
        with self._cond:
            flow = self._flows.get(split_idx)
            if epoch != self._epoch or flow is None:
                self._late_reports += 1
                return
            if flow.finished:
                flow.ignored_reports += 1
                return
            flow.apply(ranges, released=released)
            flow.waited_s += max(0.0, float(waited_s))
            self._set_external_bytes_locked()
            self._cond.notify_all()

    def finish(self, epoch: int, split_idx: int) -> None:
        """The consumer of ``split_idx`` stopped iterating epoch ``epoch`` (end, ``break``
        or error). Drops its remaining refs; when every split has finished, the executor
        is shut down in the background (as ``SplitCoordinator.notify_split_finished``
        does, ``stream_split_iterator.py:522-563``)."""
        self._check_split(split_idx)
        with self._cond:
            flow = self._flows.get(split_idx)
            if epoch != self._epoch or flow is None or flow.finished:
                return
            flow.finished = True
            flow.inflight.clear()
            flow.outbox.clear()
            self._set_external_bytes_locked()
            self._cond.notify_all()
            if all(f.finished for f in self._flows.values()) and self._executor is not None:
                executor = self._executor
                self._teardown_thread = threading.Thread(target=self._shutdown_quietly, args=(executor,),
                                                         daemon=True, name="push-split-teardown")
                self._teardown_thread.start()

    def _shutdown_quietly(self, executor) -> None:
        try:
            executor.shutdown(force=True)
        except Exception as exc:  # noqa: BLE001 - surfaced at the next barrier
            self._teardown_error = exc

    def fetch(self, epoch: int, split_idx: int) -> list:
        """Deliveries for a split consumed outside an actor (the fetch transport).

        Blocks until a delivery is ready (at most ``FETCH_TIMEOUT_S``). Each item is
        a :class:`~raydata_course.push_split.messages.Parcel`.

        Raises:
            PushSplitError: the epoch failed.
        """
        self._check_split(split_idx)
        with self._cond:
            flow = self._flows.get(split_idx)
            if epoch != self._epoch or flow is None:
                raise PushSplitError(f"epoch {epoch} is over; the coordinator is at epoch {self._epoch}.")
            self._cond.wait_for(lambda: self._epoch != epoch or self._epoch_error is not None
                                or bool(flow.outbox) or flow.finished, timeout=FETCH_TIMEOUT_S)
            if self._epoch == epoch and self._epoch_error is not None:
                raise self._epoch_error
            out = list(flow.outbox)
            flow.outbox.clear()
            return out

    def epoch_status(self, epoch: int) -> Optional[str]:
        """None while ``epoch`` is healthy, else why it failed (consumers' stall check)."""
        with self._cond:
            if epoch == self._epoch and self._epoch_error is not None:
                return str(self._epoch_error)
            return None

    # ---------------------------------------------------------------- failures

    def _fail_epoch(self, epoch: int, error: PushSplitError, dead_split: Optional[int] = None) -> None:
        with self._cond:
            if epoch != self._epoch or self._epoch_error is not None:
                return
            self._epoch_error = error
            hosts = []
            for i, flow in self._flows.items():
                flow.inflight.clear()
                if flow.host is not None and i != dead_split and not flow.finished:
                    hosts.append((i, flow.host))
            executor = self._executor
            self._set_external_bytes_locked()
            self._cond.notify_all()
        logger.warning("push split: %s", error)
        for i, host in hosts:
            host.__ray_call__.remote(deliver, self._key, epoch, i, Delivery(-1, "error", error=str(error)), None)
        if executor is not None:
            threading.Thread(target=self._shutdown_quietly, args=(executor,), daemon=True).start()

    def _watch(self) -> None:
        """Liveness: surface failed deliveries and ping the hosts of unfinished splits, so
        a consumer that dies makes the epoch fail (and the others with it) within a few
        intervals. Runs for the coordinator's lifetime."""
        from ray.exceptions import RayActorError

        while not self._stop.wait(self._liveness_interval_s):
            with self._cond:
                epoch = self._epoch
                calls = dict(self._delivery_calls)
                hosts = {i: f.host for i, f in self._flows.items() if f.host is not None and not f.finished}
                healthy = self._epoch_error is None
                barrier_hosts = {i: a.host for i, a in self._arrivals.items() if a.host is not None}
                waiting = set(barrier_hosts)
            if not healthy and not waiting:
                continue
            if calls:
                done, _ = ray.wait(list(calls), num_returns=len(calls), timeout=0)
                with self._cond:
                    for ref in done:
                        self._delivery_calls.pop(ref, None)
                for ref in done:
                    try:
                        ray.get(ref)
                    except RayActorError:
                        self._fail_epoch(epoch, PushSplitError(
                            f"the consumer of split {calls[ref]} died during epoch {epoch}."), dead_split=calls[ref])
                    except Exception as exc:  # noqa: BLE001
                        self._fail_epoch(epoch, PushSplitError(
                            f"delivering to split {calls[ref]} failed: {exc!r}"))
            targets = {**(hosts if healthy else {}), **barrier_hosts}
            if not targets:
                continue
            pings = {i: h.__ray_call__.remote(_ping) for i, h in targets.items()}
            ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=self._liveness_interval_s)
            for i, ref in pings.items():
                if ref not in ready:
                    continue  # busy, not dead
                try:
                    ray.get(ref)
                except RayActorError:
                    if i in waiting:
                        self._fail_barrier(i)
                    else:
                        self._fail_epoch(epoch, PushSplitError(
                            f"the consumer of split {i} died during epoch {epoch}."), dead_split=i)

    def _fail_barrier(self, dead_split: int) -> None:
        """A split that waits at the barrier died: fail the waiters instead of hanging."""
        with self._cond:
            if dead_split not in self._arrivals:
                return
            starting = self._epoch
            self._arrivals = {}
            for flow in self._flows.values():
                flow.inflight.clear()
            self._epoch = starting + 1
            self._epoch_error = PushSplitError(f"the consumer of split {dead_split} died at the barrier "
                                               f"of epoch {starting + 1}.")
            self._flows = {}
            self._cond.notify_all()

    # ---------------------------------------------------------------- introspection

    def debug_state(self) -> dict:
        """A snapshot for tests and plots: the epoch, its error, each split's flow state
        (:meth:`SplitFlow.snapshot`), the external-consumer bytes last reported, the
        finished epochs' final flow states (each with its executor's ``idle`` waits, see
        :func:`_idle_stats`), and the history of pushed-but-unconsumed bytes as
        ``(time.time(), bytes)`` pairs."""
        with self._cond:
            return {
                "epoch": self._epoch,
                "n": self._n,
                "epoch_error": None if self._epoch_error is None else str(self._epoch_error),
                "splits": {i: f.snapshot() for i, f in self._flows.items()},
                "waiting_at_barrier": sorted(self._arrivals),
                "external_consumer_bytes": self._external_bytes,
                "late_reports": self._late_reports,
                "finished_epochs": list(self._epochs),
                "unconsumed_history": list(self._history),
                "window": self._window,
                "window_history": self._window_records(0),
                "window_events": [] if self._controller is None else
                [{"tick": ev.tick, "split": ev.split, "rows": ev.rows, "why": ev.why} for ev in self._controller.events],
                "window_warnings": sorted(self._warned),
                "idle": _idle_stats(self._executor),
            }

    def ping(self) -> bool:
        return True

    def _window_records(self, start: int) -> list[dict]:
        """The window samples from index ``start`` on, as dicts: ``t`` (``time.time()``),
        ``epoch``, ``windows_rows``, ``budget_bytes``, ``usage_bytes`` (Ray Data's belief),
        ``held_bytes`` (the windows' held refs), ``store_bytes`` (measured, or None on a tick
        that did not read the store, see :data:`STORE_SAMPLE_INTERVAL_S`),
        ``operators_need_bytes`` (Ray Data's estimate), ``reserve_bytes`` (the controller's
        remembered need) and ``key`` (the split group)."""
        with self._cond:
            return self._window_history[start:]

    def _check_split(self, split_idx: int) -> None:
        if not isinstance(split_idx, int) or not 0 <= split_idx < self._n:
            raise ValueError(f"split_idx must be between 0 and {self._n - 1}, got {split_idx!r}.")
