"""The coordinator actor of the push-based split: one execution per epoch, windows, pushes.

:class:`PushSplitCoordinator` runs as a Ray actor (created by
:func:`raydata_course.push_split.push_split`). It is assembled from rooms, one concern each,
sharing one :class:`~raydata_course.push_split.state.EpochState` under one lock:

* **the epoch barrier and the consumers' reports** (this module): it runs one streaming
  execution per epoch behind a barrier that every split must reach
  (:meth:`~PushSplitCoordinator.start_epoch`), keeps one
  :class:`~raydata_course.push_split.flow.SplitFlow` per split, and applies what the consumers
  report: rows consumed (the loop asked for the next batch), rows released (no batch views
  them), their waits and step cycles;
* **the senders** (:mod:`.sender`): a thread per split takes the split's next block from the
  executor and **pushes it by value** into the consumer's process while the window has credit,
  and **keeps each pushed block's ref until the consumer reports it released**, so Ray Data's
  ``BlockRefCounter`` keeps charging it;
* **the control** (:mod:`.control`, ``window="adaptive"``): double-buffered windows and the
  executor's share of the budget in real bytes (:mod:`.window` states the rule);
* **the liveness** (:mod:`.liveness`): a consumer that dies, or an execution that fails,
  fails the epoch for every split instead of hanging them;
* **every read of Ray Data's internals** (:mod:`.ray_internals`), and the executor's
  backpressure policy and idle wait (:mod:`.readahead`, :mod:`.idle`).

It copies the dataset's ``DataContext`` into its process, as Ray's ``SplitCoordinator`` does
(``stream_split_iterator.py:210-211``), so execution options, budgets and execution callbacks
apply to the executions it runs.
"""

from __future__ import annotations

import threading
from typing import Optional

import ray

from raydata_course.push_split.control import Control
from raydata_course.push_split.errors import error_summary
from raydata_course.push_split.flow import SplitFlow
from raydata_course.push_split.idle import install_idle_wait
from raydata_course.push_split.liveness import Liveness
from raydata_course.push_split.messages import Arrival, PushSplitError, RowRange
from raydata_course.push_split.ray_internals import idle_stats, start_execution
from raydata_course.push_split.readahead import install_read_ahead_cap
from raydata_course.push_split.sender import Sender
from raydata_course.push_split.state import EpochState

__all__ = ["PushSplitCoordinator", "FETCH_TIMEOUT_S", "WINDOW_POLICIES"]

#: a fetch call (non-actor consumers) returns empty after this many seconds, so a fetch
#: never pins a coordinator thread for ever.
FETCH_TIMEOUT_S = 10.0
#: ``"adaptive"``: double-buffered windows and a budget in real bytes (:mod:`.window`);
#: ``"fixed"``: every window is what its consumer asked for, ``prefetch_batches * batch_size``.
WINDOW_POLICIES = ("adaptive", "fixed")


class PushSplitCoordinator(Sender, Control, Liveness):
    """The coordinator actor behind :func:`~raydata_course.push_split.push_split` (created as a Ray actor there).

    Args:
        split_dataset: the dataset whose plan ends in a ``StreamingSplit`` operator.
        n: number of splits.
        key: the split group's id, which names the receivers in the consumers' processes.
        liveness_interval_s: seconds between liveness checks of the actors hosting splits.
        window: one of :data:`WINDOW_POLICIES`.
        steer_on_store: (adaptive only) charge how far the object store's measured usage went
            over the budget (bytes freed but not yet deleted) to the executor's share; one
            raylet gRPC call every ``control.STORE_SAMPLE_INTERVAL_S`` seconds.
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
        self._warned: set[str] = set()  # the controllers' warnings, each logged once per split group
        self._store_sampler = None
        self._budget_bytes: Optional[int] = None  # the budget the user set (Ray Data's limit)
        self._ctx = split_dataset.context.copy()
        ray.data.DataContext._set_current(self._ctx)
        if window == "adaptive" and read_ahead_cap:
            # Each epoch's executor is built from the dataset's own context
            # (Dataset._create_executor, dataset.py:8531): this process's copy of it, so the
            # caller's dataset is untouched.
            install_read_ahead_cap(split_dataset.context)
        # An executor that can do nothing until a consumer frees bytes waits for the
        # coordinator's news instead of spinning (.idle); without idle_wait, a LoopMeter
        # only measures the spin.
        install_idle_wait(split_dataset.context, wait=idle_wait)
        self._ds = split_dataset
        self._liveness_interval_s = liveness_interval_s
        self._state = EpochState(n)
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="push-split-watchdog", daemon=True)
        self._watchdog.start()

    # ---------------------------------------------------------------- epoch barrier

    def start_epoch(self, split_idx: int, arrival: Arrival) -> int:
        """Arrive at the barrier for the next epoch and block until it starts.

        The last split to arrive tears down the previous epoch's executor and starts a new
        execution (:func:`~raydata_course.push_split.ray_internals.start_execution`). The others
        sleep on the condition until it has done so.

        Args:
            split_idx: the caller's split, ``0 <= split_idx < n``.
            arrival: the caller's batch size and window (rows ahead of the batch in use) and,
                when it is an actor, its handle (blocks are pushed to it; else it fetches them).

        Returns:
            The epoch id (0, 1, ...).

        Raises:
            ValueError: ``split_idx`` out of range, or an arrival with ``batch_rows < 1``.
            PushSplitError: tearing down the previous epoch (or starting this one) failed;
                every split of this epoch gets the same error and none hangs. Also raised
                when the split is already waiting at this barrier, or a peer died.
        """
        self._check_split(split_idx)
        if not isinstance(arrival, Arrival) or int(arrival.batch_rows) < 1 or int(arrival.window_rows) < 0:
            raise ValueError(f"start_epoch needs an Arrival with batch_rows >= 1 and window_rows >= 0, "
                             f"got {arrival!r}.")
        st = self._state
        with st.cond:
            starting = st.epoch
            if split_idx in st.arrivals:
                raise PushSplitError(
                    f"split {split_idx} is already waiting for epoch {starting + 1}: iterate each split "
                    "from one consumer at a time.")
            st.arrivals[split_idx] = arrival
            if len(st.arrivals) < st.n:
                st.cond.wait_for(lambda: st.epoch != starting)
            else:
                self._start_next_epoch_locked(starting)
            if st.epoch != starting + 1:
                raise PushSplitError(f"split {split_idx} expected epoch {starting + 1}, the coordinator is at "
                                     f"{st.epoch}: a split was iterated by two consumers at once.")
            if st.error is not None:
                raise st.error
            return st.epoch

    def _start_next_epoch_locked(self, starting: int) -> None:
        """Last arrival: tear down, start the next execution, release the barrier."""
        st = self._state
        arrivals, st.arrivals = st.arrivals, {}
        old_executor, old_flows = st.executor, st.flows
        error: Optional[BaseException] = None
        # Teardown and executor creation run with the lock released, so that late reports
        # and debug_state never wait behind them; the barrier stays closed meanwhile,
        # because st.epoch only moves below.
        st.cond.release()
        try:
            try:
                self._teardown(old_executor)
            except Exception as exc:  # noqa: BLE001 - any teardown failure fails the epoch
                error = PushSplitError(f"tearing down epoch {starting} failed: {exc!r}")
                error.__cause__ = exc
            executor = output_iterator = None
            if error is None:
                try:
                    executor, output_iterator = start_execution(self._ds)
                except Exception as exc:  # noqa: BLE001
                    # e.g. an actor pool that cannot start within DataContext.wait_for_min_actors_s;
                    # every split of the epoch gets this error.
                    error = PushSplitError(f"starting epoch {starting + 1} failed: {error_summary(exc)}")
                    error.__cause__ = exc
        finally:
            st.cond.acquire()
        if old_flows:
            st.finished_epochs.append({"epoch": starting, "splits": {i: f.snapshot() for i, f in old_flows.items()},
                                       "idle": idle_stats(old_executor)})
            for flow in old_flows.values():
                flow.inflight.clear()
        st.epoch = starting + 1
        st.error = error
        st.executor, st.output_iterator = executor, output_iterator
        st.flows = {i: SplitFlow(window_rows=int(a.window_rows), batch_rows=int(a.batch_rows), host=a.host)
                    for i, a in arrivals.items()}
        st.delivery_calls = {}
        st.controller = None
        st.share = None
        try:
            if error is None:
                self._start_controller_locked()
                st.account_locked()
                for i in range(st.n):
                    threading.Thread(target=self._send_loop, args=(st.epoch, i), daemon=True,
                                     name=f"push-split-send-{st.epoch}-{i}").start()
        finally:
            st.cond.notify_all()  # whatever happened, no split may sleep at the barrier

    def _teardown(self, executor) -> None:
        """Shut the previous epoch's executor down (idempotent), re-raising any failure
        of the early shutdown that ran when every split had finished."""
        st = self._state
        thread = st.teardown_thread
        if thread is not None:
            thread.join()
            st.teardown_thread = None
        if st.teardown_error is not None:
            err, st.teardown_error = st.teardown_error, None
            raise err
        if executor is not None:
            executor.shutdown(force=True)  # streaming_executor.py:310

    # ---------------------------------------------------------------- consumer reports

    def consumed(self, epoch: int, split_idx: int, ranges: list[RowRange], waited_s: float = 0.0,
                 steps: int = 0, cycle_s: float = 0.0) -> None:
        """The training loop of ``split_idx`` is done with these rows (ranges of delivered
        blocks), reported when the loop asks for the batch after theirs.

        Consumed rows leave the batch in use and open the window's credit (``rows_consumed``,
        ``bytes_consumed``). The block's ref is kept until :meth:`released` says no batch views
        its rows any more. Reports for another epoch, for a finished split, for an unknown
        block, or for a range already reported (duplicates) are ignored. ``waited_s`` is how
        long the loop waited for data, ``steps`` how many batches it handed out and ``cycle_s``
        the seconds of those step cycles, all since its previous report: the controller's
        stall signal (:meth:`SplitFlow.stall_fraction`)."""
        self._report(epoch, split_idx, ranges, released=False, steps=(steps, waited_s, cycle_s))

    def released(self, epoch: int, split_idx: int, ranges: list[RowRange]) -> None:
        """No batch views these rows any more (every array of their batches was garbage
        collected). When all rows of a block are released, its ref is dropped, so Ray
        Data's ``BlockRefCounter`` uncharges it. Same filtering as :meth:`consumed`."""
        self._report(epoch, split_idx, ranges, released=True)

    def _report(self, epoch: int, split_idx: int, ranges: list[RowRange], released: bool,
                steps: tuple[int, float, float] = (0, 0.0, 0.0)) -> None:
        self._check_split(split_idx)
        st = self._state
        with st.cond:
            flow = st.flows.get(split_idx)
            if epoch != st.epoch or flow is None:
                st.late_reports += 1
                return
            if flow.finished:
                flow.ignored_reports += 1
                return
            flow.apply(ranges, released=released)
            flow.note_steps(int(steps[0]), float(steps[1]), float(steps[2]))
            st.account_locked()
            st.cond.notify_all()

    def finish(self, epoch: int, split_idx: int) -> None:
        """The consumer of ``split_idx`` stopped iterating epoch ``epoch`` (end, ``break``
        or error). Drops its remaining refs; when every split has finished, the executor
        is shut down in the background (as ``SplitCoordinator.notify_split_finished``
        does, ``stream_split_iterator.py:522-563``)."""
        self._check_split(split_idx)
        st = self._state
        with st.cond:
            flow = st.flows.get(split_idx)
            if epoch != st.epoch or flow is None or flow.finished:
                return
            flow.finished = True
            flow.inflight.clear()
            flow.outbox.clear()
            st.account_locked()
            st.cond.notify_all()
            if all(f.finished for f in st.flows.values()) and st.executor is not None:
                st.teardown_thread = threading.Thread(target=self._shutdown_quietly, args=(st.executor,),
                                                      daemon=True, name="push-split-teardown")
                st.teardown_thread.start()

    def fetch(self, epoch: int, split_idx: int) -> list:
        """Deliveries for a split consumed outside an actor (the fetch transport).

        Blocks until a delivery is ready (at most ``FETCH_TIMEOUT_S``). Each item is
        a :class:`~raydata_course.push_split.messages.Parcel`.

        Raises:
            PushSplitError: the epoch failed, or ``epoch`` is over.
        """
        self._check_split(split_idx)
        st = self._state
        with st.cond:
            flow = st.flows.get(split_idx)
            if epoch != st.epoch or flow is None:
                raise PushSplitError(f"epoch {epoch} is over; the coordinator is at epoch {st.epoch}.")
            st.cond.wait_for(lambda: not st.healthy(epoch) or bool(flow.outbox) or flow.finished,
                             timeout=FETCH_TIMEOUT_S)
            if st.epoch == epoch and st.error is not None:
                raise st.error
            out = list(flow.outbox)
            flow.outbox.clear()
            return out

    def epoch_status(self, epoch: int) -> Optional[str]:
        """None while ``epoch`` is healthy, else why it failed (consumers' stall check)."""
        st = self._state
        with st.cond:
            if epoch == st.epoch and st.error is not None:
                return str(st.error)
            return None

    # ---------------------------------------------------------------- introspection

    def debug_state(self) -> dict:
        """A snapshot for tests and plots: the epoch, its error, each split's flow state
        (:meth:`SplitFlow.snapshot`), the external-consumer bytes last reported, the
        finished epochs' final flow states (each with its executor's ``idle`` waits, see
        :func:`~raydata_course.push_split.ray_internals.idle_stats`), the history of
        pushed-but-unconsumed bytes as ``(time.time(), bytes)`` pairs, the window samples
        (:meth:`_window_records`), the window changes and the executor's share."""
        st = self._state
        with st.cond:
            controller = st.controller
            return {
                "epoch": st.epoch,
                "n": st.n,
                "epoch_error": None if st.error is None else str(st.error),
                "splits": {i: f.snapshot() for i, f in st.flows.items()},
                "waiting_at_barrier": sorted(st.arrivals),
                "external_consumer_bytes": st.external_bytes,
                "late_reports": st.late_reports,
                "finished_epochs": list(st.finished_epochs),
                "unconsumed_history": list(st.history),
                "window": self._window,
                "window_history": self._window_records(0),
                "window_events": [] if controller is None else
                [{"tick": ev.tick, "split": ev.split, "rows": ev.rows, "why": ev.why} for ev in controller.events],
                "window_warnings": sorted(self._warned),
                "share": None if st.share is None else dict(vars(st.share), executor_bytes=st.share.executor_bytes()),
                "idle": idle_stats(st.executor),
            }

    def ping(self) -> bool:
        return True

    def _check_split(self, split_idx: int) -> None:
        if not isinstance(split_idx, int) or not 0 <= split_idx < self._state.n:
            raise ValueError(f"split_idx must be between 0 and {self._state.n - 1}, got {split_idx!r}.")
