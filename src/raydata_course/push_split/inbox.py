"""The consumer's side of the wire: where deliveries land, and how consumption is reported.

In the process that consumes a split:

- :class:`Inbox` holds one epoch's deliveries for one split: it **reorders them by sequence
  number** on arrival, ignores duplicates, and records the end or an error;
- :class:`Receiver` keeps a split's inboxes per epoch in this process (deliveries of an
  epoch that already ended are dropped); :func:`deliver` is what the coordinator calls in
  the host actor (through ``__ray_call__``) to put a delivery in it;
- :class:`Fetcher` is the transport for a consumer that is not an actor (nothing can call
  into it): a thread fetches parcels from the coordinator into the inbox;
- :class:`ConsumptionReporter` sends the coordinator, from one thread, the row ranges the
  loop is done with and the row ranges no batch views any more (:func:`track` notices when a
  batch's arrays have been garbage-collected).

Examples:
    >>> inbox = Inbox()
    >>> for seq in (2, 0, 2, 1):
    ...     inbox.put(Delivery(seq, "block", rows=1), block=f"block {seq}")
    >>> [d.seq for d, _ in inbox.ready], inbox.duplicates, inbox.max_reorder
    ([0, 1, 2], 1, 2)
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Any, Callable, Optional

import ray

from raydata_course.push_split.messages import Delivery, Parcel, RowRange

__all__ = ["Inbox", "Receiver", "receiver", "deliver", "Fetcher", "ConsumptionReporter", "track"]


class Inbox:
    """One epoch's deliveries for one split, in the consumer's process.

    Attributes:
        cond: guards everything below; notified on every change.
        expected: the next sequence number to hand out.
        ready: ``(Delivery, block)`` pairs in sequence order, waiting for the consumer.
        error: the epoch's error message, once one arrived.
        duplicates: deliveries ignored because their number was seen before.
        max_reorder: most deliveries held back at once, waiting for an earlier number.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.expected = 0
        self._held: dict[int, tuple[Delivery, Any]] = {}
        self.ready: collections.deque[tuple[Delivery, Any]] = collections.deque()
        self.error: Optional[str] = None
        self.duplicates = 0
        self.max_reorder = 0

    def put(self, delivery: Delivery, block: Any = None) -> None:
        """Take one delivery (and its block, for a ``"block"`` delivery), any thread."""
        with self.cond:
            if delivery.kind == "error":
                self.error = delivery.error
            elif delivery.seq < self.expected or delivery.seq in self._held:
                self.duplicates += 1
                return
            else:
                self._held[delivery.seq] = (delivery, block)
                self.max_reorder = max(self.max_reorder, len(self._held))
                while self.expected in self._held:
                    self.ready.append(self._held.pop(self.expected))
                    self.expected += 1
            self.cond.notify_all()


class Receiver:
    """Per split and process: the inboxes of the epochs this process consumes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inboxes: dict[int, Inbox] = {}
        self.min_epoch = 0
        self.stale = 0

    def inbox(self, epoch: int) -> Optional[Inbox]:
        """The inbox of ``epoch``; None (counted as stale) for an epoch already closed."""
        with self.lock:
            if epoch < self.min_epoch:
                self.stale += 1
                return None
            return self.inboxes.setdefault(epoch, Inbox())

    def close_epoch(self, epoch: int) -> None:
        """Forget the inboxes of ``epoch`` and earlier; later deliveries for them are dropped."""
        with self.lock:
            self.min_epoch = max(self.min_epoch, epoch + 1)
            for e in [e for e in self.inboxes if e <= epoch]:
                del self.inboxes[e]


_RECEIVERS: dict[tuple[str, int], Receiver] = {}
_RECEIVERS_LOCK = threading.Lock()


def receiver(key: str, split_idx: int) -> Receiver:
    """This process's :class:`Receiver` of split ``split_idx`` of the split group ``key``."""
    with _RECEIVERS_LOCK:
        return _RECEIVERS.setdefault((key, split_idx), Receiver())


def deliver(_host_self, key: str, epoch: int, split_idx: int, delivery: Delivery, block) -> None:
    """Runs in the process hosting the split (the coordinator calls it via ``__ray_call__``).

    ``block`` is the block itself (Ray resolved the top-level ref before the call), or None
    for an ``"end"`` or ``"error"`` delivery.
    """
    inbox = receiver(key, split_idx).inbox(epoch)
    if inbox is not None:
        inbox.put(delivery, block)


class Fetcher:
    """Fetch transport for a split consumed outside an actor: a thread moves parcels from
    the coordinator into the local inbox. ``ray.get`` of each ref copies nothing on the same
    node; the local ref is dropped at once, the coordinator keeps its own."""

    def __init__(self, coord, epoch: int, split_idx: int, inbox: Inbox):
        self._coord, self._epoch, self._split, self._inbox = coord, epoch, split_idx, inbox
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"push-split-fetch-{split_idx}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                parcels: list[Parcel] = ray.get(self._coord.fetch.remote(self._epoch, self._split))
            except Exception as exc:  # noqa: BLE001 - report through the inbox
                if not self._stopped.is_set():
                    why = str(getattr(exc, "cause", None) or exc)
                    self._inbox.put(Delivery(-1, "error", error=why))
                return
            for parcel in parcels:
                if self._stopped.is_set():
                    return
                block = ray.get(parcel.ref) if parcel.ref is not None else None
                delivery = parcel.delivery
                del parcel
                self._inbox.put(delivery, block)
                del block
                if delivery.kind == "end":
                    return

    def stop(self) -> None:
        """Stop fetching (the consumer ended)."""
        self._stopped.set()


class ConsumptionReporter:
    """Collects row ranges the training loop is done with (it asked for the next batch), row
    ranges no batch views any more (from weakref finalizers, on any thread), the seconds
    the loop waited for data and its step cycles, and reports them to the coordinator from
    one thread."""

    def __init__(self, coord, epoch: int, split_idx: int):
        self._coord, self._epoch, self._split = coord, epoch, split_idx
        self._cond = threading.Condition(threading.RLock())
        self._released: list[RowRange] = []
        self._taken: list[RowRange] = []
        self._waited_s = 0.0
        self._steps = 0
        self._cycle_s = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"push-split-report-{split_idx}")
        self._thread.start()

    def take(self, ranges) -> None:
        """Queue row ranges the training loop is done with."""
        with self._cond:
            self._taken.extend(ranges)
            self._cond.notify()

    def waited(self, seconds: float) -> None:
        """Queue seconds the loop waited with nothing to read (sent with the next report)."""
        with self._cond:
            self._waited_s += seconds
            self._cond.notify()

    def step(self, cycle_s: float) -> None:
        """Count one step cycle of the loop, ``cycle_s`` seconds from one batch handed out to
        the next (its wait included); sent with the next report (the stall signal)."""
        with self._cond:
            self._steps += 1
            self._cycle_s += cycle_s
            self._cond.notify()

    def add(self, ranges) -> None:
        """Queue row ranges no batch views any more; any thread."""
        with self._cond:
            self._released.extend(ranges)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._released or self._taken or self._waited_s or self._steps
                                    or self._closed)
                released, self._released = self._released, []
                taken, self._taken = self._taken, []
                waited_s, self._waited_s = self._waited_s, 0.0
                steps, self._steps = self._steps, 0
                cycle_s, self._cycle_s = self._cycle_s, 0.0
                closed = self._closed
            if released or taken or waited_s or steps:
                try:
                    if taken or waited_s or steps:
                        self._coord.consumed.remote(self._epoch, self._split, taken, waited_s, steps, cycle_s)
                    if released:
                        self._coord.released.remote(self._epoch, self._split, released)
                except Exception:  # noqa: BLE001 - the coordinator is gone; nothing to report to
                    return
            if closed:
                return

    def close(self) -> None:
        """Send what is queued, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5)


def track(batch, on_free: Callable[[], None]) -> bool:
    """Call ``on_free`` once every array of ``batch`` has been garbage-collected.

    Returns:
        False when the batch's objects do not support weak references (then the caller
        releases the batch when the next one is requested).
    """
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
