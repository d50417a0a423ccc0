"""The consumer's iterator of a push-based split: batches out of pushed blocks.

:class:`PushSplitIterator` is what each consumer (a Ray Train worker, an actor, the driver)
holds: a drop-in for the ``DataIterator`` that ``streaming_split`` returns, with
``iter_batches``, ``iter_torch_batches`` and ``iter_rows``. Each epoch it arrives at the
coordinator's barrier with its window, then cuts batches out of the blocks that land in its
inbox (:mod:`raydata_course.push_split.inbox`), in sequence order, and reports the rows it is
done with and the rows no batch views any more.
"""

from __future__ import annotations

import collections
import time
from typing import Callable, Iterator, Optional

import ray

from raydata_course.push_split.inbox import ConsumptionReporter, Fetcher, Inbox, receiver, track
from raydata_course.push_split.messages import Arrival, PushSplitError, RowRange

__all__ = ["PushSplitIterator", "CONSUMER_DEATH_TIMEOUT_S"]

#: the longest a consumer may wait for a failed peer to be noticed, in seconds.
CONSUMER_DEATH_TIMEOUT_S = 30.0
#: a consumer that waited this long with nothing delivered asks the coordinator whether
#: its epoch failed (covers a coordinator that died, or a lost error notice), in seconds.
_CONSUMER_STALL_CHECK_S = 5.0


class PushSplitIterator:
    """One split of :func:`~raydata_course.push_split.push_split`: iterate it with :meth:`iter_batches` or
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
        """The coordinator's :meth:`~raydata_course.push_split.coordinator.PushSplitCoordinator.debug_state` snapshot."""
        return ray.get(self._coord.debug_state.remote())

    def iter_batches(self, *, prefetch_batches: int = 1, batch_size: Optional[int] = 256,
                     batch_format: Optional[str] = "default", drop_last: bool = False,
                     local_shuffle_buffer_size: Optional[int] = None, local_shuffle_seed: Optional[int] = None,
                     _collate_fn: Optional[Callable] = None) -> Iterator:
        """Batches of this split for one epoch, like ``DataIterator.iter_batches``.

        Args:
            prefetch_batches: the most batches that may wait ready beyond the one the loop
                works on, as in Ray (at least 1: a double buffer, so the next batch arrives
                while the loop trains on this one). An adaptive window starts at one batch
                ahead and grows toward this only while the loop stalls
                (:mod:`~raydata_course.push_split.window`).
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
        split_receiver = receiver(self._key, self._split_idx)
        epoch = ray.get(self._coord.start_epoch.remote(
            self._split_idx, Arrival(prefetch_batches * batch_size, batch_size, host)))
        inbox = split_receiver.inbox(epoch)
        reporter = ConsumptionReporter(self._coord, epoch, self._split_idx)
        fetcher = None if host is not None else Fetcher(self._coord, epoch, self._split_idx, inbox)
        pending: collections.deque = collections.deque()  # [seq, accessor, offset]
        pending_rows = 0
        untracked: list = []  # seq lists of batches that cannot be weak-referenced
        ended = False
        last_yield: Optional[float] = None
        try:
            while True:
                if untracked:  # the loop asked for the next batch: the previous one is done
                    for ranges in untracked:
                        reporter.add(ranges)
                    untracked = []
                while not ended and pending_rows < batch_size:
                    # The wait for the first batch is the execution's start, not a stall.
                    item = self._next_delivery(inbox, epoch, reporter if last_yield is not None else None)
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
                        reporter.take([RowRange(seq, 0, 0)])
                        reporter.add([RowRange(seq, 0, 0)])
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
                    ranges.append(RowRange(seq, offset, offset + take))
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
                if not track(batch, lambda r=tuple(ranges): reporter.add(r)):
                    untracked.append(tuple(ranges))
                if collate is not None:
                    batch = collate(batch)
                now = time.monotonic()
                if last_yield is not None:  # one step cycle: the loop's step and the wait after it
                    reporter.step(now - last_yield)
                last_yield = now
                yield batch
                del batch
                # The loop asked for the next batch, so it is done with this one: its rows
                # leave the batch in use now, and the window's credit opens by a batch.
                # (``for b in it`` rebinds ``b`` only after ``next`` returns, so waiting for
                # the release here would hold the credit for the whole cut of the next
                # batch; the block's ref stays held until the release anyway, and the
                # executor's share counts what the windows hold past their reserve.)
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
            split_receiver.close_epoch(epoch)

    def _next_delivery(self, inbox: Inbox, epoch: int, reporter: Optional[ConsumptionReporter] = None):
        """The next block in sequence order, as ``(seq, block, slice bounds)``; None at
        the end of the epoch. Sleeps on the inbox's condition, and reports the seconds it
        slept (the adaptive window's starvation signal); after a long silence it asks the
        coordinator whether the epoch failed."""
        with inbox.cond:
            start = None
            while True:
                if start is not None and (inbox.ready or inbox.error is not None) and reporter is not None:
                    reporter.waited(time.monotonic() - start)
                    start = None
                if inbox.error is not None:
                    raise PushSplitError(inbox.error)
                if inbox.ready:
                    delivery, block = inbox.ready.popleft()
                    if delivery.kind == "end":
                        return None
                    return delivery.seq, block, delivery.bounds
                if start is None:
                    start = time.monotonic()
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
