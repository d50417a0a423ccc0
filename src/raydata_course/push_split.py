"""A push-based ``streaming_split`` built on released Ray 2.60.0.

``ds.streaming_split(n, equal=True)`` in Ray 2.60 is *pull*-based: each consumer asks a
``SplitCoordinator`` actor for the next block and receives an ``ObjectRef``
(``ray/data/_internal/iterator/stream_split_iterator.py:351-454``). The consumer's own
pipeline then keeps zero-copy batches in thread-pool queues after it dropped their refs,
so the object store holds blocks that Ray Data's budget cannot see.

:func:`push_split` turns the flow around:

* a :class:`PushSplitCoordinator` actor runs **one streaming execution per epoch** behind
  a barrier that every split must reach (waiters sleep on a ``threading.Condition``);
* each consumer declares a **row window**, ``target_rows = prefetch_batches * batch_size``;
  per split the coordinator keeps ``rows_pushed``, ``rows_consumed`` (rows of batches the
  training loop is done with: it asked for the next one), ``bytes_pushed`` and ``bytes_consumed``, and sends one more block while
  ``target_rows - (rows_pushed - rows_consumed) > 0``. A block is never cut, so the rows in
  flight exceed the window by less than one block;
* blocks are **pushed by value**: the coordinator calls the actor that hosts the split
  (Ray's generic ``__ray_call__``, ``ray/actor.py:2841``) with the block's ``ObjectRef`` as
  a top-level argument, so Ray resolves it and the host receives the block, local to its
  node, before the training loop touches it;
* the coordinator **keeps each pushed block's ref until the consumer reports it
  released**, so Ray Data's ``BlockRefCounter`` keeps charging it to the budget; the
  consumer releases rows only once every batch that views them has been garbage-collected
  (a zero-copy batch pins its whole block). Rows leave the window when the loop is done
  with their batch, but their block stays charged until it is released;
* pushed-but-unconsumed bytes go to the executor's external-consumer hook
  ``StreamingExecutor.set_external_consumer_bytes``
  (``ray/data/_internal/execution/streaming_executor.py:480-483``);
* deliveries carry per-split sequence numbers and are **reordered on arrival**; duplicates
  and reports that arrive after a split finished (or for an old epoch) are ignored.

Blocks come from the same ``StreamingSplit`` logical operator that
``Dataset.streaming_split`` builds (``ray/data/dataset.py:2761-2771``), so ``equal=True``
gets Ray's own ``OutputSplitter`` equalisation, including the cut of the final blocks
(``ray/data/_internal/execution/operators/output_splitter.py:177-220``): every split
receives the same number of rows.

Where the split is consumed decides how blocks arrive:

* inside a Ray actor (a Ray Train worker, or any actor that accepts concurrent calls),
  blocks are **pushed** into the actor's process;
* in a process that is not an actor (the driver, a task), nothing can call into it, so a
  background thread fetches each delivery from the coordinator. The window, the refs
  held until consumed, the sequencing and the accounting are the same; only the
  transport differs.

.. warning::
    All ``n`` splits must be iterated at the same time: an epoch starts only when every
    split has reached the barrier. An actor that hosts a split must accept concurrent
    calls while its training loop runs (a Ray Train V2 worker does: it runs the loop in a
    thread, ``ray/train/v2/_internal/execution/worker_group/worker.py:139-175``; a plain
    actor needs ``max_concurrency >= 2``).

Examples:
    >>> import raydata_course as rc, ray                                # doctest: +SKIP
    >>> splits = push_split(ray.data.range(1000), 2)                    # doctest: +SKIP
    >>> [sum(len(b["id"]) for b in s.iter_batches(batch_size=100))      # doctest: +SKIP
    ...  for s in splits]  # iterate concurrently in real use
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import ray

__all__ = [
    "push_split",
    "PushSplitIterator",
    "PushSplitCoordinator",
    "PushSplitError",
    "SplitFlow",
    "DEFAULT_LIVENESS_INTERVAL_S",
    "CONSUMER_DEATH_TIMEOUT_S",
]

logger = logging.getLogger(__name__)

#: seconds between the coordinator's liveness checks of the actors hosting splits.
DEFAULT_LIVENESS_INTERVAL_S = 1.0
#: the longest a consumer may wait for a failed peer to be noticed, in seconds.
CONSUMER_DEATH_TIMEOUT_S = 30.0
#: a consumer that waited this long with nothing delivered asks the coordinator whether
#: its epoch failed (covers a coordinator that died, or a lost error notice), in seconds.
_CONSUMER_STALL_CHECK_S = 5.0
#: a fetch call (non-actor consumers) returns empty after this many seconds, so a fetch
#: never pins a coordinator thread for ever.
_FETCH_TIMEOUT_S = 10.0
#: how many (time, bytes) points of the pushed-but-unconsumed history debug_state keeps.
_HISTORY_LIMIT = 20_000


class PushSplitError(RuntimeError):
    """An epoch of a push-based split failed: a teardown error, a dead consumer, an
    executor error, or a misuse (a split iterated twice at once)."""


# --------------------------------------------------------------------------- coordinator


@dataclass
class SplitFlow:
    """Flow state of one split in one epoch (recreated every epoch).

    Attributes:
        target_rows: the consumer's window, ``prefetch_batches * batch_size`` rows.
        rows_pushed / rows_consumed: rows sent to / reported consumed by the consumer.
        bytes_pushed / bytes_consumed: the same in bytes (Ray Data's ``size_bytes``).
        inflight: ``seq -> [ObjectRef, rows, bytes, consumed range starts, rows consumed,
            released range starts, rows released]`` of pushed blocks not yet wholly consumed
            and released (the ref becomes None once released). Holding
            the ref here is what keeps the block charged to Ray Data's budget.
        next_seq: sequence number of the next delivery.
        finished: the consumer stopped (exhausted, ``break`` or error); later reports are
            ignored.
        host: actor handle of the process hosting the split, or None (fetch transport).
        outbox: deliveries waiting for a fetch (fetch transport only).
        max_inflight_rows: largest ``rows_pushed - rows_consumed`` seen.
        max_block_rows: largest block pushed, in rows.
    """

    target_rows: int
    host: Any = None
    rows_pushed: int = 0
    rows_consumed: int = 0
    bytes_pushed: int = 0
    bytes_consumed: int = 0
    blocks_pushed: int = 0
    next_seq: int = 0
    finished: bool = False
    ended: bool = False
    inflight: dict = field(default_factory=dict)
    outbox: collections.deque = field(default_factory=collections.deque)
    max_inflight_rows: int = 0
    max_block_rows: int = 0
    ignored_reports: int = 0
    blocks_released: int = 0

    def rows_to_send(self) -> int:
        """Credit left in the window: the coordinator may send while this is > 0."""
        return self.target_rows - (self.rows_pushed - self.rows_consumed)

    def snapshot(self) -> dict:
        return {
            "target_rows": self.target_rows, "rows_pushed": self.rows_pushed,
            "rows_consumed": self.rows_consumed, "bytes_pushed": self.bytes_pushed,
            "bytes_consumed": self.bytes_consumed, "blocks_pushed": self.blocks_pushed,
            "unconsumed_blocks": len(self.inflight), "blocks_released": self.blocks_released,
            "held_blocks": sum(1 for item in self.inflight.values() if item[0] is not None), "finished": self.finished, "ended": self.ended,
            "max_inflight_rows": self.max_inflight_rows, "max_block_rows": self.max_block_rows,
            "ignored_reports": self.ignored_reports, "transport": "push" if self.host is not None else "fetch",
        }


def _ping(_host_self) -> bool:
    return True


class PushSplitCoordinator:
    """The coordinator actor behind :func:`push_split` (created as a Ray actor there).

    It copies the dataset's ``DataContext`` into its process, as ``SplitCoordinator`` does
    (``stream_split_iterator.py:210-211``), so execution options, budgets and execution
    callbacks apply to the executions it runs.

    Args:
        split_dataset: the dataset whose plan ends in a ``StreamingSplit`` operator.
        n: number of splits.
        key: the split group's id, which names the receivers in the consumers' processes.
        liveness_interval_s: seconds between liveness checks of the actors hosting splits.
    """

    def __init__(self, split_dataset, n: int, key: str, liveness_interval_s: float = DEFAULT_LIVENESS_INTERVAL_S):
        import ray.data

        self._key = key

        self._ctx = split_dataset.context.copy()
        ray.data.DataContext._set_current(self._ctx)
        self._ds = split_dataset
        self._n = n
        self._liveness_interval_s = liveness_interval_s
        self._cond = threading.Condition(threading.RLock())
        self._epoch = -1
        self._arrivals: dict[int, tuple[int, Any]] = {}
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

    def start_epoch(self, split_idx: int, target_rows: int, host=None) -> int:
        """Arrive at the barrier for the next epoch and block until it starts.

        The last split to arrive tears down the previous epoch's executor and starts a new
        execution (``Dataset._create_executor``, ``dataset.py:8518-8531``, and
        ``Dataset._build_bundle_iterator``, ``dataset.py:8576-8589``, the calls
        ``SplitCoordinator._try_start_new_epoch`` makes, ``stream_split_iterator.py:305-341``).
        The others sleep on a condition until it has done so.

        Args:
            split_idx: the caller's split, ``0 <= split_idx < n``.
            target_rows: the caller's window in rows, at least 1.
            host: handle of the actor hosting the split (blocks are pushed to it), or None
                to fetch deliveries instead.

        Returns:
            The epoch id (0, 1, ...).

        Raises:
            ValueError: ``split_idx`` out of range, or ``target_rows < 1``.
            PushSplitError: tearing down the previous epoch (or starting this one) failed;
                every split of this epoch gets the same error and none hangs. Also raised
                when the split is already waiting at this barrier, or a peer died.
        """
        self._check_split(split_idx)
        if int(target_rows) < 1:
            raise ValueError(f"target_rows must be at least 1, got {target_rows}.")
        with self._cond:
            starting = self._epoch
            if split_idx in self._arrivals:
                raise PushSplitError(
                    f"split {split_idx} is already waiting for epoch {starting + 1}: iterate each split "
                    "from one consumer at a time.")
            self._arrivals[split_idx] = (int(target_rows), host)
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
                    output_iterator = self._ds._build_bundle_iterator(executor)
                    executor.set_external_consumer_bytes(0)  # registers the external consumers
                except Exception as exc:  # noqa: BLE001
                    error = PushSplitError(f"starting epoch {starting + 1} failed: {exc!r}")
                    error.__cause__ = exc
        finally:
            self._cond.acquire()
        if old_flows:
            self._epochs.append({"epoch": starting, "splits": {i: f.snapshot() for i, f in old_flows.items()}})
            for flow in old_flows.values():
                flow.inflight.clear()
        self._epoch = starting + 1
        self._epoch_error = error
        self._executor, self._output_iterator = executor, output_iterator
        self._flows = {i: SplitFlow(target_rows=t, host=h) for i, (t, h) in arrivals.items()}
        self._delivery_calls = {}
        self._set_external_bytes_locked()
        if error is None:
            for i in range(self._n):
                threading.Thread(target=self._send_loop, args=(self._epoch, i), daemon=True,
                                 name=f"push-split-send-{self._epoch}-{i}").start()
        self._cond.notify_all()

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
            if not pending:
                try:
                    bundle = output_iterator.get_next(split_idx)
                except StopIteration:
                    self._end_split(epoch, split_idx)
                    return
                except Exception as exc:  # noqa: BLE001 - the executor failed
                    if draining:  # every consumer may be gone and the executor shut down
                        return
                    self._fail_epoch(epoch, PushSplitError(f"execution of epoch {epoch} failed: {exc!r}"))
                    return
                pending.extend(zip(bundle.blocks, bundle.slices))
                del bundle
            if draining:  # the consumer stopped early: keep the splitter flowing, drop blocks
                pending.clear()
                continue
            entry, block_slice = pending.popleft()
            self._push_block(epoch, split_idx, entry, block_slice)
            del entry

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
            seq = flow.next_seq
            flow.next_seq += 1
            flow.inflight[seq] = [entry.ref, rows, size, set(), 0, set(), 0]
            flow.rows_pushed += rows
            flow.bytes_pushed += size
            flow.blocks_pushed += 1
            flow.max_inflight_rows = max(flow.max_inflight_rows, flow.rows_pushed - flow.rows_consumed)
            flow.max_block_rows = max(flow.max_block_rows, rows)
            self._set_external_bytes_locked()
            host = flow.host
            if host is None:
                flow.outbox.append(("block", seq, [entry.ref], rows, size, bounds))
                self._cond.notify_all()
                return
        # The ref is a top-level argument: Ray resolves it, and the host gets the block
        # itself, already in its node's object store.
        call = host.__ray_call__.remote(_deliver, self._key, epoch, split_idx, seq, "block", entry.ref, rows,
                                        size, bounds)
        with self._cond:
            if self._epoch == epoch:
                self._delivery_calls[call] = split_idx

    def _end_split(self, epoch: int, split_idx: int) -> None:
        with self._cond:
            flow = self._flows.get(split_idx)
            if self._epoch != epoch or self._epoch_error is not None:
                return
            seq = flow.next_seq
            flow.next_seq += 1
            flow.ended = True
            host = flow.host
            if host is None:
                flow.outbox.append(("end", seq, None, 0, 0, None))
                self._cond.notify_all()
                return
        host.__ray_call__.remote(_deliver, self._key, epoch, split_idx, seq, "end", None, 0, 0, None)

    def _set_external_bytes_locked(self) -> None:
        """Feed pushed-but-unconsumed bytes of every split to the executor's
        external-consumer hook (``streaming_executor.py:480-483`` →
        ``ResourceManager.set_external_consumer_bytes``, ``resource_manager.py:177-183``).
        The value replaces the previous one, so it is the sum over splits."""
        total = sum(f.bytes_pushed - f.bytes_consumed for f in self._flows.values() if not f.finished)
        self._external_bytes = total
        if len(self._history) < _HISTORY_LIMIT:
            self._history.append((time.time(), total))
        if self._executor is not None:
            self._executor.set_external_consumer_bytes(total)

    # ---------------------------------------------------------------- consumer reports

    def consumed(self, epoch: int, split_idx: int, ranges: list[tuple[int, int, int]]) -> None:
        """The training loop of ``split_idx`` is done with these rows: ``(seq, start, end)``
        row ranges of delivered blocks, reported when the loop asks for the batch after
        theirs.

        Consumed rows open the window (``rows_consumed``, ``bytes_consumed``): the window is
        everything pushed and not yet done with, the batch in use included. The block's ref is
        kept until :meth:`released` says no batch views its rows any more. Reports for
        another epoch, for a finished split, for an unknown block, or for a range already
        reported (duplicates) are ignored."""
        self._report(epoch, split_idx, ranges, kind=0)

    def released(self, epoch: int, split_idx: int, ranges: list[tuple[int, int, int]]) -> None:
        """No batch views these rows any more (every array of their batches was garbage
        collected). When all rows of a block are released, its ref is dropped, so Ray
        Data's ``BlockRefCounter`` uncharges it. Same filtering as :meth:`consumed`."""
        self._report(epoch, split_idx, ranges, kind=1)

    def _report(self, epoch: int, split_idx: int, ranges, kind: int) -> None:
        self._check_split(split_idx)
        with self._cond:
            flow = self._flows.get(split_idx)
            if epoch != self._epoch or flow is None:
                self._late_reports += 1
                return
            if flow.finished:
                flow.ignored_reports += 1
                return
            for seq, start, end in ranges:
                item = flow.inflight.get(seq)
                if item is None or start in item[3 + 2 * kind] or end < start:
                    flow.ignored_reports += 1
                    continue
                rows, size = item[1], item[2]
                item[3 + 2 * kind].add(start)
                before = item[4 + 2 * kind]
                item[4 + 2 * kind] = before + (end - start)
                if kind == 0:
                    flow.rows_consumed += end - start
                    after = min(item[4], rows)
                    flow.bytes_consumed += (size * after // rows - size * before // rows) if rows else 0
                elif item[6] >= rows:
                    item[0] = None  # every view is gone: drop the ref, Ray Data uncharges the block
                    flow.blocks_released += 1
                if item[4] >= rows and item[6] >= rows:
                    del flow.inflight[seq]
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

        Blocks until a delivery is ready (at most ``_FETCH_TIMEOUT_S``). Each item is
        ``(kind, seq, [ObjectRef] or None, rows, bytes, slice bounds)``.

        Raises:
            PushSplitError: the epoch failed.
        """
        self._check_split(split_idx)
        with self._cond:
            flow = self._flows.get(split_idx)
            if epoch != self._epoch or flow is None:
                raise PushSplitError(f"epoch {epoch} is over; the coordinator is at epoch {self._epoch}.")
            self._cond.wait_for(lambda: self._epoch != epoch or self._epoch_error is not None
                                or bool(flow.outbox) or flow.finished, timeout=_FETCH_TIMEOUT_S)
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
            host.__ray_call__.remote(_deliver, self._key, epoch, i, -1, "error", str(error), 0, 0, None)
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
                waiting = {i for i, (_, h) in self._arrivals.items() if h is not None}
                barrier_hosts = {i: h for i, (_, h) in self._arrivals.items() if h is not None}
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
        finished epochs' final flow states, and the history of pushed-but-unconsumed
        bytes as ``(time.time(), bytes)`` pairs."""
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
            }

    def ping(self) -> bool:
        return True

    def _check_split(self, split_idx: int) -> None:
        if not isinstance(split_idx, int) or not 0 <= split_idx < self._n:
            raise ValueError(f"split_idx must be between 0 and {self._n - 1}, got {split_idx!r}.")


# --------------------------------------------------------------------------- consumer side


class _Inbox:
    """One epoch's deliveries for one split, in the consumer's process: reorders by
    sequence number, ignores duplicates, and records the end or an error."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.expected = 0
        self.reorder: dict[int, tuple] = {}
        self.ready: collections.deque = collections.deque()
        self.error: Optional[str] = None
        self.duplicates = 0
        self.max_reorder = 0

    def put(self, seq: int, item: tuple) -> None:
        with self.cond:
            if item[0] == "error":
                self.error = item[1]
            elif seq < self.expected or seq in self.reorder:
                self.duplicates += 1
                return
            else:
                self.reorder[seq] = (seq, *item)
                self.max_reorder = max(self.max_reorder, len(self.reorder))
                while self.expected in self.reorder:
                    self.ready.append(self.reorder.pop(self.expected))
                    self.expected += 1
            self.cond.notify_all()


class _Receiver:
    """Per split and process: the inboxes of the epochs this process consumes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inboxes: dict[int, _Inbox] = {}
        self.min_epoch = 0
        self.stale = 0

    def inbox(self, epoch: int) -> Optional[_Inbox]:
        with self.lock:
            if epoch < self.min_epoch:
                self.stale += 1
                return None
            return self.inboxes.setdefault(epoch, _Inbox())

    def close_epoch(self, epoch: int) -> None:
        with self.lock:
            self.min_epoch = max(self.min_epoch, epoch + 1)
            for e in [e for e in self.inboxes if e <= epoch]:
                del self.inboxes[e]


_RECEIVERS: dict[tuple[str, int], _Receiver] = {}
_RECEIVERS_LOCK = threading.Lock()


def _receiver(key: str, split_idx: int) -> _Receiver:
    with _RECEIVERS_LOCK:
        return _RECEIVERS.setdefault((key, split_idx), _Receiver())


def _deliver(_host_self, key: str, epoch: int, split_idx: int, seq: int, kind: str, payload, rows: int,
             size: int, bounds) -> None:
    """Runs in the process hosting the split (via ``__ray_call__``); ``payload`` is the
    block itself (Ray resolved the top-level ref), an error text, or None at the end."""
    inbox = _receiver(key, split_idx).inbox(epoch)
    if inbox is not None:
        inbox.put(seq, (kind, payload, rows, size, bounds))


class _ConsumptionReporter:
    """Collects row ranges the training loop is done with (it asked for the next batch) and row ranges no
    batch views any more (from weakref finalizers, on any thread), and reports both to
    the coordinator from one thread."""

    def __init__(self, coord, epoch: int, split_idx: int):
        self._coord, self._epoch, self._split = coord, epoch, split_idx
        self._cond = threading.Condition(threading.RLock())
        self._seqs: list[tuple[int, int, int]] = []
        self._taken: list[tuple[int, int, int]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"push-split-report-{split_idx}")
        self._thread.start()

    def take(self, ranges) -> None:
        """Queue ``(seq, start, end)`` ranges the training loop is done with."""
        with self._cond:
            self._taken.extend(ranges)
            self._cond.notify()

    def add(self, ranges) -> None:
        """Queue ``(seq, start, end)`` ranges no batch views any more; any thread."""
        with self._cond:
            self._seqs.extend(ranges)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._seqs or self._taken or self._closed)
                seqs, self._seqs = self._seqs, []
                taken, self._taken = self._taken, []
                closed = self._closed
            if seqs or taken:
                try:
                    if taken:
                        self._coord.consumed.remote(self._epoch, self._split, taken)
                    if seqs:
                        self._coord.released.remote(self._epoch, self._split, seqs)
                except Exception:  # noqa: BLE001 - the coordinator is gone; nothing to report to
                    return
            if closed:
                return

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)


def _track(batch, on_free: Callable[[], None]) -> bool:
    """Call ``on_free`` once every array of ``batch`` has been garbage-collected.

    Returns False when the batch's objects do not support weak references (then the
    caller releases the batch when the next one is requested)."""
    values = list(batch.values()) if isinstance(batch, dict) else [batch]
    try:
        refs = [weakref.ref(v) for v in values]
    except TypeError:
        return False
    remaining = [len(values)]
    lock = threading.Lock()

    def one_gone(_ref=None):
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            on_free()

    for v in values:
        weakref.finalize(v, one_gone)
    del refs
    return True


class PushSplitIterator:
    """One split of :func:`push_split`: iterate it with :meth:`iter_batches` or
    :meth:`iter_torch_batches`, once per epoch, in the process that trains.

    Picklable: pass it to the actor or task that consumes it.
    """

    def __init__(self, coord, split_idx: int, n: int, key: str):
        if not isinstance(split_idx, int) or not 0 <= split_idx < n:
            raise ValueError(f"split_idx must be between 0 and {n - 1}, got {split_idx!r}.")
        self._coord = coord
        self._split_idx = split_idx
        self._n = n
        self._key = key

    def world_size(self) -> int:
        """The number of splits."""
        return self._n

    @property
    def split_idx(self) -> int:
        return self._split_idx

    def debug_state(self) -> dict:
        """The coordinator's :meth:`PushSplitCoordinator.debug_state` snapshot."""
        return ray.get(self._coord.debug_state.remote())

    def iter_batches(self, *, prefetch_batches: int = 1, batch_size: Optional[int] = 256,
                     batch_format: Optional[str] = "default", drop_last: bool = False,
                     local_shuffle_buffer_size: Optional[int] = None, local_shuffle_seed: Optional[int] = None,
                     _collate_fn: Optional[Callable] = None) -> Iterator:
        """Batches of this split for one epoch, like ``DataIterator.iter_batches``.

        Args:
            prefetch_batches: the window is ``max(1, prefetch_batches) * batch_size`` rows
                pushed to this consumer and not yet done with, the batch in use included:
                ``prefetch_batches - 1`` batches wait ready while the loop works on one.
                (Ray's ``prefetch_batches`` counts only batches ahead; here the window
                bounds everything the consumer holds, so the budget can account for it.)
            batch_size: rows per batch (the last may be smaller unless ``drop_last``).
            batch_format: ``"default"``/``"numpy"``, ``"pandas"`` or ``"pyarrow"``.
            drop_last: drop a final batch smaller than ``batch_size``.
            local_shuffle_buffer_size, local_shuffle_seed: not supported (must be None).

        Raises:
            ValueError: ``batch_size`` is not a positive int, or shuffling was asked for.
            PushSplitError: the epoch failed (see :class:`PushSplitCoordinator`).
        """
        if local_shuffle_buffer_size is not None or local_shuffle_seed is not None:
            raise ValueError("push_split iterators do not support local shuffling; shuffle the Dataset instead "
                             "(random_shuffle or randomize_block_order).")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError("push_split needs a positive integer batch_size: the row window is "
                             f"prefetch_batches x batch_size; got batch_size={batch_size!r}.")
        fmt = "numpy" if batch_format in ("default", None) else batch_format
        return self._iter(batch_size, max(1, int(prefetch_batches)), drop_last, fmt, _collate_fn)

    def iter_torch_batches(self, *, prefetch_batches: int = 1, batch_size: Optional[int] = 256,
                           dtypes=None, device: str = "auto", collate_fn=None, drop_last: bool = False,
                           local_shuffle_buffer_size: Optional[int] = None,
                           local_shuffle_seed: Optional[int] = None, pin_memory: bool = False) -> Iterator:
        """Batches as dicts of torch tensors, like ``DataIterator.iter_torch_batches``.

        ``device="auto"`` resolves to Ray Train's device inside a Train worker and to the
        CPU elsewhere, as Ray does (``ray/data/iterator.py:536-539``). Tensors are built
        with ``convert_ndarray_batch_to_torch_tensor_batch``
        (``ray/data/util/torch_utils.py:160``): zero-copy on the CPU when no dtype change
        is needed, so a batch keeps its block in use until the tensors are dropped.

        Raises:
            ValueError: ``collate_fn`` given (not supported), or bad ``batch_size``.
        """
        if collate_fn is not None:
            raise ValueError("push_split iterators do not take a collate_fn; use dtypes and device.")
        import torch

        from ray.data.util.torch_utils import convert_ndarray_batch_to_torch_tensor_batch

        if device == "auto":
            from ray.train.torch import get_device
            from ray.train.utils import _in_ray_train_worker

            device = get_device() if _in_ray_train_worker() else "cpu"
        device = torch.device(device)

        def to_torch(batch):
            return convert_ndarray_batch_to_torch_tensor_batch(batch, dtypes=dtypes, device=device,
                                                               pin_memory=pin_memory)

        return self.iter_batches(prefetch_batches=prefetch_batches, batch_size=batch_size, batch_format="numpy",
                                 drop_last=drop_last, local_shuffle_buffer_size=local_shuffle_buffer_size,
                                 local_shuffle_seed=local_shuffle_seed, _collate_fn=to_torch)

    def iter_rows(self, *, prefetch_batches: int = 1) -> Iterator[dict]:
        """Rows as dicts (batches of 256 under the hood)."""
        for batch in self.iter_batches(prefetch_batches=prefetch_batches, batch_size=256, batch_format="pandas"):
            yield from batch.to_dict("records")

    # -------------------------------------------------------------- the epoch loop

    def _iter(self, batch_size: int, prefetch_batches: int, drop_last: bool, fmt: str,
              collate: Optional[Callable]) -> Iterator:
        from ray.data._internal.delegating_block_builder import DelegatingBlockBuilder
        from ray.data.block import BlockAccessor

        ctx = ray.get_runtime_context()
        host = ctx.current_actor if ctx.get_actor_id() is not None else None
        receiver = _receiver(self._key, self._split_idx)
        epoch = ray.get(self._coord.start_epoch.remote(self._split_idx, prefetch_batches * batch_size, host))
        inbox = receiver.inbox(epoch)
        reporter = _ConsumptionReporter(self._coord, epoch, self._split_idx)
        fetcher = None if host is not None else _Fetcher(self._coord, epoch, self._split_idx, inbox)
        pending: collections.deque = collections.deque()  # [seq, accessor, offset]
        pending_rows = 0
        untracked: list = []  # seq lists of batches that cannot be weak-referenced
        ended = False
        try:
            while True:
                if untracked:  # the loop asked for the next batch: the previous one is done
                    for ranges in untracked:
                        reporter.add(ranges)
                    untracked = []
                while not ended and pending_rows < batch_size:
                    item = self._next_delivery(inbox, epoch)
                    if item is None:
                        ended = True
                        break
                    seq, block, bounds = item
                    del item  # no frame variable may keep a block alive past its report
                    acc = BlockAccessor.for_block(block)
                    if bounds is not None:
                        block = acc.slice(bounds[0], bounds[1], copy=False)
                        acc = BlockAccessor.for_block(block)
                    del block
                    if acc.num_rows() == 0:
                        reporter.take([(seq, 0, 0)])
                        reporter.add([(seq, 0, 0)])
                        continue
                    pending.append([seq, acc, 0])
                    pending_rows += acc.num_rows()
                if pending_rows == 0 or (ended and pending_rows < batch_size and drop_last):
                    return
                want = min(batch_size, pending_rows)
                parts, ranges = [], []
                while want > 0:
                    seq, acc, offset = pending[0]
                    take = min(want, acc.num_rows() - offset)
                    parts.append(acc.slice(offset, offset + take, copy=False))
                    ranges.append((seq, offset, offset + take))
                    want -= take
                    pending_rows -= take
                    if offset + take == acc.num_rows():
                        pending.popleft()
                    else:
                        pending[0][2] = offset + take
                    del acc
                if len(parts) == 1:
                    block = parts[0]
                else:
                    builder = DelegatingBlockBuilder()
                    for part in parts:
                        builder.add_block(part)
                    block = builder.build()
                del parts
                batch = BlockAccessor.for_block(block).to_batch_format(fmt)
                del block
                # The rows count as released once every array of the batch is gone
                # (zero-copy views keep the block in use until then).
                if not _track(batch, lambda r=tuple(ranges): reporter.add(r)):
                    untracked.append(tuple(ranges))
                if collate is not None:
                    batch = collate(batch)
                yield batch
                del batch
                # The loop asked for the next batch, so it is done with this one: its rows
                # leave the window now. The batch in use counts in the window until then,
                # so the rows pushed and not yet done with never pass the window by more
                # than one block. (``for b in it`` rebinds ``b`` only after ``next``
                # returns, so waiting for the release here would stall a window of one
                # batch; the block's ref stays held until the release anyway.)
                reporter.take(ranges)
        finally:
            pending.clear()
            if fetcher is not None:
                fetcher.stop()
            reporter.close()
            try:
                self._coord.finish.remote(epoch, self._split_idx)
            except Exception:  # noqa: BLE001 - the coordinator is gone
                pass
            receiver.close_epoch(epoch)

    def _next_delivery(self, inbox: _Inbox, epoch: int):
        """The next block in sequence order, as ``(seq, block, slice bounds)``; None at
        the end of the epoch. Sleeps on the inbox's condition; after a long silence it
        asks the coordinator whether the epoch failed."""
        with inbox.cond:
            while True:
                if inbox.error is not None:
                    raise PushSplitError(inbox.error)
                if inbox.ready:
                    seq, kind, payload, _rows, _size, bounds = inbox.ready.popleft()
                    if kind == "end":
                        return None
                    return seq, payload, bounds
                if not inbox.cond.wait(timeout=_CONSUMER_STALL_CHECK_S):
                    inbox.cond.release()
                    try:
                        status = ray.get(self._coord.epoch_status.remote(epoch), timeout=CONSUMER_DEATH_TIMEOUT_S)
                    except Exception as exc:  # noqa: BLE001 - the coordinator died
                        raise PushSplitError(f"the push-split coordinator is unreachable: {exc!r}") from exc
                    finally:
                        inbox.cond.acquire()
                    if status is not None:
                        raise PushSplitError(status)


class _Fetcher:
    """Fetch transport for a split consumed outside an actor: a thread moves deliveries
    from the coordinator into the local inbox. ``ray.get`` of each ref copies nothing on
    the same node; the local ref is dropped at once, the coordinator keeps its own."""

    def __init__(self, coord, epoch: int, split_idx: int, inbox: _Inbox):
        self._coord, self._epoch, self._split, self._inbox = coord, epoch, split_idx, inbox
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"push-split-fetch-{split_idx}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                items = ray.get(self._coord.fetch.remote(self._epoch, self._split))
            except Exception as exc:  # noqa: BLE001 - report through the inbox
                if not self._stopped.is_set():
                    self._inbox.put(-1, ("error", str(getattr(exc, "cause", None) or exc), 0, 0, None))
                return
            for kind, seq, refs, rows, size, bounds in items:
                if self._stopped.is_set():
                    return
                payload = ray.get(refs[0]) if refs else None
                del refs
                self._inbox.put(seq, (kind, payload, rows, size, bounds))
                del payload
                if kind == "end":
                    return

    def stop(self) -> None:
        self._stopped.set()


# --------------------------------------------------------------------------- entry point


def push_split(ds, n: int, *, equal: bool = True, locality_hints: Optional[list] = None,
               liveness_interval_s: float = DEFAULT_LIVENESS_INTERVAL_S) -> list[PushSplitIterator]:
    """Split ``ds`` into ``n`` push-fed iterators, a drop-in for ``ds.streaming_split(n, equal=...)``.

    Args:
        ds: a ``ray.data.Dataset``.
        n: number of splits, at least 1.
        equal: every split gets the same number of rows (the remainder is dropped), as in
            ``streaming_split``.
        locality_hints: node ids, one per split, passed to Ray's ``OutputSplitter``.
        liveness_interval_s: seconds between the coordinator's liveness checks; a consumer
            that dies makes the others fail within a few intervals (well under
            ``CONSUMER_DEATH_TIMEOUT_S``).

    Returns:
        ``n`` :class:`PushSplitIterator`; split ``i`` is ``result[i]``.

    Raises:
        ValueError: ``n < 1`` or ``locality_hints`` of the wrong length.
    """
    import ray.data
    from ray.data._internal.logical.interfaces import LogicalPlan
    from ray.data._internal.logical.operators import StreamingSplit
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}.")
    if locality_hints is not None and len(locality_hints) != n:
        raise ValueError(f"locality_hints must name one node per split ({n}), got {len(locality_hints)}.")
    if liveness_interval_s <= 0 or liveness_interval_s * 4 > CONSUMER_DEATH_TIMEOUT_S:
        raise ValueError(f"liveness_interval_s must be in (0, {CONSUMER_DEATH_TIMEOUT_S / 4}], "
                         f"got {liveness_interval_s}.")
    # The same split plan as Dataset.streaming_split (ray/data/dataset.py:2761-2771).
    op = StreamingSplit(num_splits=n, equal=equal, input_dependencies=[ds._logical_plan.dag],
                        locality_hints=locality_hints)
    split_ds = ray.data.Dataset._from_parent(ds, LogicalPlan(op, ds.context))
    split_ds._set_uuid(ds._uuid)
    key = uuid.uuid4().hex
    # Like SplitCoordinator (stream_split_iterator.py:44-49): no CPU, on this node, and
    # enough threads for n barrier waiters, n fetches, the reports and the snapshots.
    actor_cls = ray.remote(num_cpus=0)(PushSplitCoordinator)
    coord = actor_cls.options(
        max_concurrency=2 * n + 8,
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False),
    ).remote(split_ds, n, key, liveness_interval_s)
    return [PushSplitIterator(coord, i, n, key) for i in range(n)]
