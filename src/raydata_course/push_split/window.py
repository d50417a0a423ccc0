"""Budget-aware, adaptive windows for the push-based split: the control rule.

A consumer asks for ``prefetch_batches * batch_size`` rows in flight. With a fixed window,
``n`` consumers hold ``n`` windows of blocks that Ray Data charges to its budget (the
coordinator keeps their refs), so windows of 4 × 32 MiB for 2 consumers fill a 256 MiB
budget by themselves: Ray Data then believes it is over budget all the time, its
backpressure runs in liveness mode (``streaming_executor_state.py:197-211``: a task may
start while a consumer waits) and every upstream operator keeps a task's output on top.

:class:`WindowController` sizes every split's window against the budget and adapts it to
the consumer. It is pure Python (no Ray): the coordinator calls :meth:`~WindowController.tick`
about every ``interval_s`` with an :class:`Observation` and applies the windows it returns.

**The bound.** Let ``B`` be the object-store budget (Ray Data's global limit) and ``R``
what the executor's operators need to keep running. ``R`` is measured: Ray Data's own
estimate of the bytes one task of each operator leaves in its output buffer
(``obj_store_mem_max_pending_output_per_task``, ``op_runtime_metrics.py:861-880``: the
headroom an operator's budget must have before it may start a task,
``resource_manager.py:823-862``), summed over operators, as a maximum that decays by
``reserve_decay`` per tick; before Ray Data has an estimate, its believed usage minus the
windows' bytes stands in. The windows' bytes must fit ``B - R``: the operators keep room for
one task each, so Ray Data need not go over its budget to make progress. A window never
drops below one batch (``batch_size`` rows): a consumer cannot finish a batch, and so cannot
free anything, before it holds a whole one. When even one batch per consumer does not fit,
the floor wins and the split logs it once.

**The executor's limit.** Ray Data itself goes over its limit by design: its allocator
reserves every operator at least one task's pending output, and "object_store_memory can be
oversubscribed" (``resource_manager.py:760-771``), so its believed usage runs up to about one
task per operator over the limit it was given. The controller measures that overshoot
(believed usage minus the executor's current limit, as a maximum that decays by
``headroom_decay`` per tick while the executor holds anything, never below ``R``) as the
*headroom* ``H``, and gives the executor
``max(B - H, B * min_limit_fraction)`` as its limit (:attr:`WindowController.executor_limit_bytes`;
the coordinator applies it only to a budget the user set, not to the limit Ray Data picks
itself from the cluster's store), so that Ray Data's believed usage, overshoot included,
stays near ``B``. The overshoot is not a constant, though: the windows and a running
decode task stay whatever the limit, so the lower the limit, the larger the overshoot over
it, and a headroom that only decays slowly ratchets the limit down to its floor, where the
executor runs one task at a time and a fast consumer starves. So ``H`` decays by
``room_decay`` per tick (fast) instead while all three hold: a consumer waited since the
last tick, Ray Data's believed usage is at or over the executor's limit (the limit is what
holds the executor back, so more limit buys output), and the believed usage plus
``room_reserves`` (2) times ``R`` fits ``B`` (two more tasks per operator would not take Ray
Data over the budget: one for the task the higher limit lets start, one for the overshoot
that comes with it). A consumer that does not wait, or an executor near ``B``, keeps the
slow decay, so the limit rises only where it buys throughput and the budget has room for
it. The headroom carries
over from one epoch's controller to the next (``headroom_bytes``). With ``steer_on_store``
the limit also comes down by how far the object store's measured usage went over the budget
(``store_bytes - B``; under push, with nothing else using the store, that excess is mostly
blocks freed but not yet deleted by the raylet, which deletes in batches every
``free_objects_period_milliseconds``, and Ray Data's accounting never sees them), measured as
a maximum that decays by ``reserve_decay`` per tick (``lazy_bytes``, not carried to the next
epoch): the limit is then ``max(B - H - L, B * min_limit_fraction)``, so that what the store
really holds, not only what Ray Data counts, stays near ``B``; a store within the budget
lowers nothing. The overshoot that makes ``H`` is measured against the limit without ``L``
(Ray Data's usage lags a lowered limit; that lag is not its overshoot). This works only because
the coordinator waits for the executor as a consumer only when its consumer runs short
(``PushSplitCoordinator._await_output``): a sender that sat in Ray Data's output call
whenever its window had credit kept the executor's liveness rule for waiting consumers on,
and a lower limit then only starved the consumers.

**The rule, each tick, per split** (windows in rows, one *step* = one batch):

1. *Pressure* — Ray Data's believed usage is over ``B``, or (``steer_on_store``) the
   object store's measured usage is: every window is halved (not below its floor). Halving
   reacts within one tick to a pressure that costs memory now; the measured store is the
   only signal that sees freed-but-not-yet-deleted bytes (the raylet frees in batches,
   ``free_objects_period_milliseconds``), so steering on it makes the window pay for the
   lazy free too.
2. *Starved* — the consumer waited for data since the last tick (``waited_s >
   wait_threshold_s``) and the bound has room for one more step: the window grows by one
   step, up to what the consumer asked for. Growth is additive: it probes, and it happens
   only where more buffering would have helped.
3. *Slow* — for ``patience`` ticks the consumer has not waited and a whole batch sat ready
   beyond the one in use (its blocks sit unconsumed): the window shrinks by one step, not
   below its floor (after a halving it need not be a whole number of steps). Those blocks were buffered
   for nothing; giving the bytes back lets a starved peer grow. A shrink is a probe: when
   the consumer starves within ``patience`` ticks of it, the shrink was a mistake, and that
   split's patience doubles (up to ``max_patience_ticks``), so a window that found its
   size stays there and probes below it less and less often.
4. *Over the bound* — when the windows' sum exceeds ``B - R`` (the need grew), the
   largest windows shrink one step at a time until the sum fits or every window is at its
   floor.

Additive increase, multiplicative decrease is the rule TCP uses to share a link
(Chiu & Jain, 1989): from any start, windows that grow by a constant and shrink by a
factor converge to a fair share of the bound. Here growth is also gated on evidence (a
wait), so a window settles at about the smallest size that keeps its consumer fed: a slow
consumer oscillates between its floor and one step above it, a fast one grows until it
stops waiting or meets the bound.

Examples:
    >>> c = WindowController([SplitRequest(batch_rows=100, requested_rows=400)] * 2)
    >>> c.windows_rows
    [100, 100]
    >>> starved = Observation(budget_bytes=1000, usage_bytes=300, operators_need_bytes=200, splits=[
    ...     SplitState(bytes_per_row=1.0, held_bytes=100, waited_s=0.2, ready_rows=0)] * 2)
    >>> c.tick(starved), c.tick(starved), c.tick(starved)
    ([200, 200], [300, 300], [400, 400])
    >>> over = Observation(budget_bytes=1000, usage_bytes=1100, operators_need_bytes=200, splits=[
    ...     SplitState(bytes_per_row=1.0, held_bytes=400, waited_s=0.0, ready_rows=300)] * 2)
    >>> c.tick(over), c.reserve_bytes, c.headroom_bytes, c.executor_limit_bytes
    ([200, 200], 200.0, 200.0, 800)
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["SplitRequest", "SplitState", "Observation", "WindowController", "WindowEvent", "executor_limit"]

logger = logging.getLogger(__name__)


def executor_limit(budget_bytes: int, headroom_bytes: float, min_limit_fraction: float = 0.5) -> int:
    """The object-store limit to give the executor so that its believed usage, with the
    overshoot Ray Data allows itself (``headroom_bytes``), fits ``budget_bytes``:
    ``max(B - H, B * min_limit_fraction)``, in bytes.

    Examples:
        >>> executor_limit(256, 62), executor_limit(256, 200), executor_limit(1, 5)
        (194, 128, 1)
    """
    return int(max(budget_bytes - headroom_bytes, math.ceil(budget_bytes * min_limit_fraction)))


@dataclass(frozen=True)
class SplitRequest:
    """What one consumer asked for.

    Attributes:
        batch_rows: rows per batch (``batch_size``), the window's floor and its step.
        requested_rows: ``prefetch_batches * batch_size``, the window's ceiling.
    """

    batch_rows: int
    requested_rows: int


@dataclass(frozen=True)
class SplitState:
    """One split as the coordinator sees it at a tick.

    Attributes:
        bytes_per_row: bytes per row of the blocks pushed to it so far (Ray Data's
            ``size_bytes``); None before its first block.
        held_bytes: bytes of blocks whose refs the coordinator holds for it (charged to
            Ray Data's budget through ``BlockRefCounter``).
        waited_s: seconds its consumer waited with nothing to read since the last tick.
        ready_rows: rows pushed to it and not yet consumed, beyond the batch in use (0 when
            it holds one batch or less).
    """

    bytes_per_row: Optional[float]
    held_bytes: int
    waited_s: float
    ready_rows: int


@dataclass(frozen=True)
class Observation:
    """What the controller reads at a tick.

    Attributes:
        budget_bytes: the executor's object-store budget (Ray Data's global limit); None when
            unknown or unlimited (then only adaptation applies, no bound).
        usage_bytes: Ray Data's believed object-store usage (global usage), windows included.
        splits: one :class:`SplitState` per split, in split order.
        store_bytes: the object store's measured usage (``ObjectStoreStats.
            object_store_bytes_used``), or None when not sampled.
        operators_need_bytes: Ray Data's estimate of one task's pending output, summed over
            the executor's operators; None before it has one.
        limit_bytes: the object-store limit the executor runs under now (what
            :attr:`WindowController.executor_limit_bytes` set, or ``budget_bytes``); None when
            not known.
    """

    budget_bytes: Optional[int]
    usage_bytes: int
    splits: list[SplitState]
    store_bytes: Optional[int] = None
    operators_need_bytes: Optional[int] = None
    limit_bytes: Optional[int] = None


@dataclass(frozen=True)
class WindowEvent:
    """One change of one window, for plots and tests: ``(tick, split, rows, why)``."""

    tick: int
    split: int
    rows: int
    why: str


@dataclass
class WindowController:
    """The control rule of the module docstring, for ``len(requests)`` splits.

    Args:
        requests: one :class:`SplitRequest` per split.
        steer_on_store: treat a measured object-store usage over the budget as pressure,
            and lower the executor's limit by how far it went over.
        wait_threshold_s: a consumer that waited longer than this since the last tick
            counts as starved (seconds).
        patience_ticks: ticks without a wait, a batch ready, before a window shrinks (the
            starting patience of every split).
        max_patience_ticks: the most a split's patience grows to after shrinks that
            starved it.
        reserve_decay: per-tick factor by which the remembered operator need, and the
            remembered lazily freed bytes, decay (0.98 at 10 Hz forgets half in about 3.5 s).
        headroom_decay: per-tick factor by which the headroom decays while the executor holds
            anything and the fast ``room_decay`` does not apply (0.9998 at 10 Hz forgets half
            in about 6 minutes: the overshoot is Ray Data's structure, about one task per
            operator, and comes back in short spikes that a 10 Hz tick catches only now and
            then).
        room_decay: per-tick factor by which the headroom decays while a consumer starves,
            the executor is at its limit and the budget has room (0.98 at 10 Hz: half in about
            3.5 s; see the module docstring).
        room_reserves: how many times the operators' need ``R`` Ray Data's believed usage
            must leave free under ``B`` for the fast decay.
        headroom_bytes: the headroom ``H`` to start from (the previous epoch's
            :attr:`headroom_bytes`), in bytes.
        min_limit_fraction: the executor's limit never goes below this fraction of the budget.

    Attributes:
        windows_rows: the current window of each split, in rows.
        reserve_bytes: the operators' measured need ``R`` (decaying maximum), in bytes.
        lazy_bytes: with ``steer_on_store``, how far the store's measured usage went over the
            budget, ``L`` (decaying maximum; a tick without a reading only decays it), in bytes.
        headroom_bytes: how far Ray Data's believed usage went over the executor's limit without
            the lazy term (decaying maximum, at least ``R``), in bytes.
        executor_limit_bytes: the object-store limit the executor should run under,
            ``max(B - H - L, B * min_limit_fraction)``; None while the budget is unknown.
        events: every window change (:class:`WindowEvent`).
        warnings: the messages this controller logged.
        warned: kinds of warning already logged (pass one set to several controllers, one
            per epoch, to log each kind once per split group).

    Raises:
        ValueError: no splits, or a request with ``batch_rows < 1`` or
            ``requested_rows < batch_rows``.
    """

    requests: list[SplitRequest]
    steer_on_store: bool = False
    wait_threshold_s: float = 0.002
    patience_ticks: int = 5
    max_patience_ticks: int = 80
    reserve_decay: float = 0.98
    headroom_decay: float = 0.9998
    room_decay: float = 0.98
    room_reserves: float = 2.0
    headroom_bytes: float = 0.0
    min_limit_fraction: float = 0.5
    windows_rows: list[int] = field(init=False)
    executor_limit_bytes: Optional[int] = field(init=False, default=None)
    reserve_bytes: float = field(init=False, default=0.0)
    lazy_bytes: float = field(init=False, default=0.0)
    events: list[WindowEvent] = field(init=False, default_factory=list)
    warned: set[str] = field(default_factory=set)
    warnings: list[str] = field(init=False, default_factory=list)
    _calm: list[int] = field(init=False)
    _patience: list[int] = field(init=False)
    _since_shrink: list[Optional[int]] = field(init=False)
    _ticks: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError("WindowController needs at least one split request.")
        for i, r in enumerate(self.requests):
            if r.batch_rows < 1 or r.requested_rows < r.batch_rows:
                raise ValueError(f"split {i}: a window needs batch_rows >= 1 and requested_rows >= batch_rows, "
                                 f"got {r!r}.")
        # Start at the floor: the first waits grow each window within a few ticks.
        self.windows_rows = [r.batch_rows for r in self.requests]
        self._calm = [0] * len(self.requests)
        self._patience = [self.patience_ticks] * len(self.requests)
        self._since_shrink = [None] * len(self.requests)

    def tick(self, obs: Observation) -> list[int]:
        """Apply one step of the rule; returns every split's window in rows.

        Raises:
            ValueError: ``obs.splits`` does not have one state per split.
        """
        if len(obs.splits) != len(self.requests):
            raise ValueError(f"expected {len(self.requests)} split states, got {len(obs.splits)}.")
        self._ticks += 1
        held = sum(s.held_bytes for s in obs.splits)
        need = obs.operators_need_bytes if obs.operators_need_bytes is not None else max(obs.usage_bytes - held, 0)
        self.reserve_bytes = max(float(need), self.reserve_bytes * self.reserve_decay)
        limit = obs.limit_bytes if obs.limit_bytes is not None else obs.budget_bytes
        if limit is not None and obs.budget_bytes is not None:
            # Measured against the limit the headroom alone sets: a limit lowered for the lazy
            # free is one Ray Data's usage lags behind, and that lag is not its overshoot.
            limit = max(limit, executor_limit(obs.budget_bytes, self.headroom_bytes, self.min_limit_fraction))
        overshoot = 0.0 if limit is None else float(obs.usage_bytes - limit)
        starved = any(s.waited_s > self.wait_threshold_s for s in obs.splits)
        held_back = limit is not None and obs.usage_bytes >= limit
        room = obs.budget_bytes is not None and \
            obs.usage_bytes + self.room_reserves * self.reserve_bytes <= obs.budget_bytes
        if obs.usage_bytes <= 0:
            decay = 1.0
        elif starved and held_back and room:
            decay = self.room_decay  # the limit is what starves a consumer, and the budget has room
        else:
            decay = self.headroom_decay
        kept = self.headroom_bytes * decay
        self.headroom_bytes = max(overshoot, kept, self.reserve_bytes)
        lazy = 0.0
        if self.steer_on_store and obs.store_bytes is not None and obs.budget_bytes is not None:
            lazy = float(max(obs.store_bytes - obs.budget_bytes, 0))
        self.lazy_bytes = max(lazy, self.lazy_bytes * self.reserve_decay)
        if obs.budget_bytes is not None:
            self.executor_limit_bytes = self.limit_for(obs.budget_bytes)
        bound = None if obs.budget_bytes is None else obs.budget_bytes - self.reserve_bytes
        pressure = obs.budget_bytes is not None and (
            obs.usage_bytes > obs.budget_bytes
            or (self.steer_on_store and obs.store_bytes is not None and obs.store_bytes > obs.budget_bytes))
        for i, (req, s) in enumerate(zip(self.requests, obs.splits)):
            if self._since_shrink[i] is not None:
                self._since_shrink[i] += 1
                if self._since_shrink[i] > self._patience[i]:
                    self._since_shrink[i] = None  # the probe held: the smaller window suffices
            if pressure:
                self._set(i, max(req.batch_rows, self.windows_rows[i] // 2), "pressure")
                self._calm[i] = 0
            elif s.waited_s > self.wait_threshold_s:
                self._calm[i] = 0
                if self._since_shrink[i] is not None:  # the last shrink starved it: back off
                    self._patience[i] = min(2 * self._patience[i], self.max_patience_ticks)
                    self._since_shrink[i] = None
                grown = min(req.requested_rows, self.windows_rows[i] + req.batch_rows)
                if grown > self.windows_rows[i] and self._fits(obs, bound, i, grown):
                    self._set(i, grown, "starved")
            elif s.ready_rows >= req.batch_rows:
                self._calm[i] += 1
                if self._calm[i] >= self._patience[i] and self.windows_rows[i] > req.batch_rows:
                    self._calm[i] = 0
                    self._since_shrink[i] = 0
                    self._set(i, max(req.batch_rows, self.windows_rows[i] - req.batch_rows), "slow")
        if bound is not None:
            self._enforce(obs, bound)
        return list(self.windows_rows)

    def limit_for(self, budget_bytes: int) -> int:
        """The executor's object-store limit for a budget of ``budget_bytes`` at the current
        headroom and lazily freed bytes (:func:`executor_limit` of ``H + L``), in bytes."""
        return executor_limit(budget_bytes, self.headroom_bytes + self.lazy_bytes, self.min_limit_fraction)

    # ------------------------------------------------------------------ helpers

    def _bytes(self, obs: Observation, windows: list[int]) -> float:
        """The windows' bytes, at each split's bytes per row (a split with no block yet
        counts at the mean of the others, or 0)."""
        known = [s.bytes_per_row for s in obs.splits if s.bytes_per_row]
        default = sum(known) / len(known) if known else 0.0
        return sum(rows * (s.bytes_per_row or default) for rows, s in zip(windows, obs.splits))

    def _fits(self, obs: Observation, bound: Optional[float], i: int, rows: int) -> bool:
        if bound is None:
            return True
        trial = list(self.windows_rows)
        trial[i] = rows
        return self._bytes(obs, trial) <= bound

    def _enforce(self, obs: Observation, bound: float) -> None:
        """Shrink the largest windows, one step at a time, until their bytes fit ``bound``."""
        while self._bytes(obs, self.windows_rows) > bound:
            room = [(self.windows_rows[i] - r.batch_rows, i) for i, r in enumerate(self.requests)
                    if self.windows_rows[i] > r.batch_rows]
            if not room:
                self._warn_once("floor", (
                    f"push split: one batch per consumer ({self._bytes(obs, [r.batch_rows for r in self.requests]) / 2**20:.0f} "
                    f"MiB for {len(self.requests)} consumers) does not fit the object-store budget minus what the "
                    f"executor's operators need ({bound / 2**20:.0f} MiB): the windows stay at one batch and the "
                    "store will go over the budget; raise the budget or lower batch_size."))
                return
            _, i = max(room)
            self._set(i, max(self.requests[i].batch_rows, self.windows_rows[i] - self.requests[i].batch_rows), "bound")
        asked = self._bytes(obs, [r.requested_rows for r in self.requests])
        if asked > bound and any(s.bytes_per_row for s in obs.splits):
            self._warn_once("asked", (
                f"push split: prefetch_batches x batch_size asks for {asked / 2**20:.0f} MiB in flight over "
                f"{len(self.requests)} consumers, but the budget leaves {bound / 2**20:.0f} MiB after what the "
                "executor's operators need: the windows are kept smaller than asked."))

    def _set(self, i: int, rows: int, why: str) -> None:
        if rows != self.windows_rows[i]:
            self.windows_rows[i] = rows
            self.events.append(WindowEvent(self._ticks, i, rows, why))

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self.warned:
            self.warned.add(kind)
            self.warnings.append(message)
            logger.warning(message)
