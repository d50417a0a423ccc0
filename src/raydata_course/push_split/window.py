"""Double-buffered windows and a budget in real bytes for the push split: the control rule.

A consumer that trains on a GPU wants its next batch *ready* when it finishes a step: a
window that counts only batches ahead of the one in use, at least one, is a double buffer,
and the next decode overlaps the current step. Each such window is bytes the budget must
hold, so :class:`WindowController` reserves them explicitly and gives the executor the rest.
It is pure Python (no Ray): the coordinator calls :meth:`~WindowController.tick` about every
``control_interval_s`` with an :class:`Observation` and applies what it returns
(:mod:`~raydata_course.push_split.control`).

**Windows.** A split's window is the rows it may hold *ready*, beyond the batch its loop
works on; the coordinator may push while ``window + batch - (pushed - consumed) > 0``
(:meth:`~raydata_course.push_split.flow.SplitFlow.rows_to_send`). Its floor is one batch
(a double buffer: one in use, one ready) and its ceiling what the consumer asked for,
``prefetch_batches * batch_size`` rows ahead, as Ray's ``prefetch_batches`` counts.

**The budget in real bytes.** With ``B`` the object-store budget the user set, the consumers'
reserve ``W = sum over splits of (window + one batch) x bytes per row`` (2 batches each at
the floor), and ``R`` one task's output per operator, summed (real bytes: what a task of each
operator yields, ``bytes_task_outputs_generated / num_tasks_finished`` in Ray Data's
``OpRuntimeMetrics``), the executor's *share* is

    ``E = max(B - max(W, held) - R - L, 0)``

where ``held`` is what the windows hold right now (a batch consumed but not yet garbage
collected can take them past ``W`` for a moment) and ``L``, with ``steer_on_store``, is how
far the object store's measured usage went over ``B`` (the bytes the raylet freed but has not
deleted yet, a decaying maximum): the lazy free is charged to the executor's share only, never
to the consumers' reserve, and only while some consumer keeps up. While every consumer is
starved (stalled, no batch ready), charging it would slow the very producer they all wait for;
the store then holds at most ``B - (W - held)`` plus those freed bytes, and ``held`` is under
one batch per split: the budget plus what the raylet frees lazily, a stock the consumers'
own rate sets (``make lab`` bounds it by the consumption rate, in the bytes each batch frees
with the blocks it was made from, times the free period). The
executor's operators may start a task while their real bytes plus that task's output fit ``E``; an operator with no task running may always start one
(liveness), so the executor goes over ``E`` by at most one task output per operator, which
``R`` holds (:class:`~raydata_course.push_split.readahead.ReadAheadPolicy`). Everything real,
``W + E + R``, fits ``B``. Ray Data's own limit stays the budget the user set: nothing
lowers it by an overshoot it believes.

**The rule, each tick, per split** (one *step* = one batch the consumer finished):

1. *Over the bound* — the windows must leave the executor room: ``W + R <= B``. When it does
   not hold (the bytes per row or ``R`` became known), the largest windows shrink one batch
   at a time; when even the floor does not fit, the split says so once, with the numbers, and
   stays at the floor: a double buffer per consumer, the executor running one task per
   operator.
2. *Stalled* — the consumer's stall fraction (seconds it waited ÷ seconds of its step cycles,
   over its last ``stall_window_steps`` steps) is above ``stall_threshold``, its window was
   full at some tick of those steps (the producer had a block for it and had to hold it back:
   a window its producer never fills would only take bytes from the executor, which is what
   the consumer waits for), and its window has kept its size for ``min_steps`` steps: it
   grows one batch when ``W + 2R <= B`` still holds after growing (the executor keeps room for
   one more task output per operator).
3. *Idle* — two or more whole batches have sat ready for ``idle_steps`` of the consumer's
   steps (seen ready at some tick of every one of them, so a tick right after a step, before
   the next push lands, does not break the run): it shrinks one batch (not below the floor). A shrink that the consumer stalls after
   within ``idle_steps`` steps was a mistake: that split's ``idle_steps`` doubles (up to
   ``max_idle_steps``), so a window that found its size stays there.

A steady consumer settles within a few steps and then changes its window rarely
(``tests/test_push_window.py`` drives the rule with scripted consumers). One batch ready is
the healthy double-buffered state, never a reason to shrink.

Examples:
    >>> c = WindowController([SplitRequest(batch_rows=100, requested_rows=400)] * 2)
    >>> full = SplitState(bytes_per_row=1.0, held_bytes=200, ready_rows=100, steps=2, stall_fraction=0.0)
    >>> stalled = SplitState(bytes_per_row=1.0, held_bytes=200, ready_rows=0, steps=3, stall_fraction=0.3)
    >>> c.tick(Observation(budget_bytes=2000, splits=[full] * 2, task_output_bytes=100))
    [100, 100]
    >>> c.tick(Observation(budget_bytes=2000, splits=[stalled] * 2, task_output_bytes=100))
    [200, 200]
    >>> c.reserve_bytes, c.executor_share_bytes
    (600.0, 1300.0)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["SplitRequest", "SplitState", "Observation", "WindowController", "WindowEvent", "ExecutorShare",
           "AHEAD_BLOCKS", "AHEAD_RATIO", "TRANSIENT_OUTPUTS", "read_ahead_cap_bytes", "believed_usage_admits"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SplitRequest:
    """What one consumer asked for.

    Attributes:
        batch_rows: rows per batch (``batch_size``): the window's floor and its step.
        requested_rows: ``prefetch_batches * batch_size``, rows ahead of the batch in use:
            the window's ceiling.
    """

    batch_rows: int
    requested_rows: int


@dataclass(frozen=True)
class SplitState:
    """One split as the coordinator sees it at a tick.

    Attributes:
        bytes_per_row: bytes per row of the blocks pushed to it so far (Ray Data's
            ``size_bytes``); None before its first block.
        held_bytes: bytes of blocks whose refs the coordinator holds for it.
        ready_rows: rows pushed and not yet consumed beyond the batch in use.
        steps: steps (batches) its consumer finished this epoch.
        stall_fraction: seconds its consumer waited ÷ seconds of its step cycles, over its
            last steps; None before its first step.
    """

    bytes_per_row: Optional[float]
    held_bytes: int
    ready_rows: int
    steps: int = 0
    stall_fraction: Optional[float] = None


@dataclass(frozen=True)
class Observation:
    """What the controller reads at a tick.

    Attributes:
        budget_bytes: the object-store budget the user set (Ray Data's limit); None when
            unknown or unlimited (then windows follow the consumers with no bound).
        splits: one :class:`SplitState` per split, in split order.
        task_output_bytes: one task's output per operator, summed, in real bytes; None before
            any task finished.
        store_bytes: the object store's measured usage, or None when not read this tick.
    """

    budget_bytes: Optional[int]
    splits: list[SplitState]
    task_output_bytes: Optional[int] = None
    store_bytes: Optional[int] = None


@dataclass
class ExecutorShare:
    """The executor's share of the budget, in real bytes: what the controller sets at each
    tick (``budget_bytes``, ``reserve_bytes`` ``W``, ``task_bytes`` ``R``, ``lazy_bytes`` ``L``)
    and the coordinator keeps current between ticks (``held_bytes``, at every push and report).
    The executor's backpressure policy reads it (:meth:`admits`).

    Examples:
        >>> share = ExecutorShare(budget_bytes=256, reserve_bytes=128, task_bytes=40, held_bytes=100)
        >>> share.executor_bytes(), share.admits(real_usage_bytes=150, task_bytes=32)
        (88.0, True)
        >>> share.held_bytes = 140  # a consumed batch not yet collected: past the reserve
        >>> share.executor_bytes(), share.admits(real_usage_bytes=200, task_bytes=32)
        (76.0, False)
    """

    budget_bytes: float
    reserve_bytes: float = 0.0
    task_bytes: float = 0.0
    lazy_bytes: float = 0.0
    held_bytes: float = 0.0

    def executor_bytes(self) -> float:
        """``E = max(B - max(W, held) - R - L, 0)`` (bytes)."""
        return max(self.budget_bytes - max(self.reserve_bytes, self.held_bytes) - self.task_bytes - self.lazy_bytes,
                   0.0)

    def admits(self, real_usage_bytes: float, task_bytes: float) -> bool:
        """Whether one more task whose output is ``task_bytes`` fits the executor's share, with
        the executor's blocks really holding ``real_usage_bytes`` (the windows' held bytes
        included: they are taken off here)."""
        return real_usage_bytes - self.held_bytes + task_bytes <= self.executor_bytes()


#: an operator may keep this many of its average output blocks ahead of its downstream ...
AHEAD_BLOCKS = 2
#: ... or this many times its downstream's running tasks' input bytes, when that is more.
AHEAD_RATIO = 2.0
#: the budget guard keeps room for this many task outputs counted twice for a moment (a task
#: that has yielded its output and not yet ended; see the module docstring)
TRANSIENT_OUTPUTS = 1


def read_ahead_cap_bytes(in_flight_input_bytes: float, average_block_bytes: Optional[float]) -> Optional[float]:
    """The most output bytes an operator may hold: ``max(AHEAD_RATIO × in_flight_input_bytes,
    AHEAD_BLOCKS × average_block_bytes)``; None (no cap) while its downstream has no input in
    flight or before it has an average block.

    Examples:
        >>> read_ahead_cap_bytes(7, 7), read_ahead_cap_bytes(21, 7)
        (14.0, 42.0)
        >>> read_ahead_cap_bytes(0, 7) is None, read_ahead_cap_bytes(5, None) is None
        (True, True)
    """
    if not average_block_bytes or not in_flight_input_bytes:
        return None
    return max(AHEAD_RATIO * in_flight_input_bytes, AHEAD_BLOCKS * average_block_bytes)


def believed_usage_admits(believed_bytes: float, per_task_bytes: float, budget_bytes: float) -> bool:
    """The budget guard before the controller publishes a share: Ray Data's believed usage
    plus the task's pending output, plus ``TRANSIENT_OUTPUTS`` more of them, within the
    budget the user set (bytes; see :mod:`~raydata_course.push_split.readahead`).

    Examples:
        >>> believed_usage_admits(100, 30, 160), believed_usage_admits(101, 30, 160)
        (True, False)
    """
    return believed_bytes + (1 + TRANSIENT_OUTPUTS) * per_task_bytes <= budget_bytes


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
        steer_on_store: charge how far the measured store went over the budget to the
            executor's share.
        stall_threshold: a stall fraction above this grows a window (0.02: 2 % of the steps'
            time spent waiting).
        stall_window_steps: how many of a consumer's last steps its stall fraction covers.
        min_steps: steps a window keeps its size before a stall may grow it again.
        idle_steps: steps with two or more batches ready before a window shrinks (the
            starting value of every split).
        max_idle_steps: the most a split's ``idle_steps`` grows to after shrinks that stalled it.
        lazy_decay: per-tick factor by which the remembered lazily freed bytes decay.

    Attributes:
        windows_rows: the current window of each split, rows ahead of the batch in use.
        reserve_bytes: the consumers' reserve ``W`` (bytes).
        task_bytes: one task output per operator, ``R`` (the largest seen, bytes).
        lazy_bytes: ``L``, with ``steer_on_store`` (bytes): remembered, decaying.
        lazy_charged_bytes: the part of ``L`` charged to the executor's share at the last
            tick: ``L``, or 0 while every consumer is starved (see the module docstring).
        executor_share_bytes: ``E``; None while the budget is unknown.
        events: every window change (:class:`WindowEvent`).
        warnings: the messages this controller logged.
        warned: kinds of warning already logged (one set for several controllers, one per
            epoch, logs each kind once per split group).
        log: log each warning (False: only keep it in ``warnings``, as the simulator does).

    Raises:
        ValueError: no splits, or a request with ``batch_rows < 1`` or
            ``requested_rows < batch_rows``.
    """

    requests: list[SplitRequest]
    steer_on_store: bool = False
    stall_threshold: float = 0.02
    stall_window_steps: int = 8
    min_steps: int = 3
    idle_steps: int = 4
    max_idle_steps: int = 64
    lazy_decay: float = 0.98
    windows_rows: list[int] = field(init=False)
    reserve_bytes: float = field(init=False, default=0.0)
    task_bytes: float = field(init=False, default=0.0)
    lazy_bytes: float = field(init=False, default=0.0)
    lazy_charged_bytes: float = field(init=False, default=0.0)
    executor_share_bytes: Optional[float] = field(init=False, default=None)
    events: list[WindowEvent] = field(init=False, default_factory=list)
    warned: set[str] = field(default_factory=set)
    log: bool = True
    warnings: list[str] = field(init=False, default_factory=list)
    _changed_at: list[int] = field(init=False)
    _idle_since: list[Optional[int]] = field(init=False)
    _idle_seen: list[int] = field(init=False)
    _full_seen: list[Optional[int]] = field(init=False)
    _idle_steps: list[int] = field(init=False)
    _shrunk_at: list[Optional[int]] = field(init=False)
    _ticks: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError("WindowController needs at least one split request.")
        for i, r in enumerate(self.requests):
            if r.batch_rows < 1 or r.requested_rows < r.batch_rows:
                raise ValueError(f"split {i}: a window needs batch_rows >= 1 and requested_rows >= batch_rows, "
                                 f"got {r!r}.")
        n = len(self.requests)
        self.windows_rows = [r.batch_rows for r in self.requests]  # the floor: a double buffer
        self._changed_at = [0] * n
        self._idle_since = [None] * n
        self._idle_seen = [0] * n
        self._full_seen = [None] * n
        self._idle_steps = [self.idle_steps] * n
        self._shrunk_at = [None] * n

    def tick(self, obs: Observation) -> list[int]:
        """Apply one step of the rule; returns every split's window in rows ahead.

        Raises:
            ValueError: ``obs.splits`` does not have one state per split.
        """
        if len(obs.splits) != len(self.requests):
            raise ValueError(f"expected {len(self.requests)} split states, got {len(obs.splits)}.")
        self._ticks += 1
        self.task_bytes = max(self.task_bytes, float(obs.task_output_bytes or 0))
        if self.steer_on_store and obs.store_bytes is not None and obs.budget_bytes is not None:
            self.lazy_bytes = max(float(max(obs.store_bytes - obs.budget_bytes, 0)), self.lazy_bytes * self.lazy_decay)
        else:
            self.lazy_bytes *= self.lazy_decay
        budget = obs.budget_bytes
        for i, (req, s) in enumerate(zip(self.requests, obs.splits)):
            if s.ready_rows >= self.windows_rows[i]:
                self._full_seen[i] = s.steps  # the window was full: the producer had to hold back
            stalled = s.stall_fraction is not None and s.stall_fraction > self.stall_threshold
            if stalled:
                self._idle_since[i] = None
                shrunk = self._shrunk_at[i]
                if shrunk is not None and s.steps - shrunk <= self._idle_steps[i]:  # the shrink starved it
                    self._idle_steps[i] = min(2 * self._idle_steps[i], self.max_idle_steps)
                    self._shrunk_at[i] = None
                grown = min(req.requested_rows, self.windows_rows[i] + req.batch_rows)
                was_full = self._full_seen[i] is not None and s.steps - self._full_seen[i] <= self.stall_window_steps
                if grown > self.windows_rows[i] and was_full and s.steps - self._changed_at[i] >= self.min_steps and \
                        self._room(obs, i, grown):
                    self._set(i, grown, s.steps, "stalled")
            elif s.ready_rows >= 2 * req.batch_rows:
                self._idle_seen[i] = s.steps
                if self._idle_since[i] is None:
                    self._idle_since[i] = s.steps
                elif s.steps - self._idle_since[i] >= self._idle_steps[i] and self.windows_rows[i] > req.batch_rows:
                    self._set(i, max(req.batch_rows, self.windows_rows[i] - req.batch_rows), s.steps, "idle")
                    self._shrunk_at[i] = s.steps
                    self._idle_since[i] = None
            elif self._idle_since[i] is not None and s.steps - self._idle_seen[i] > 1:
                # a whole step with fewer than two batches ready: the run is broken (a tick
                # right after a step, before the next push lands, does not break it)
                self._idle_since[i] = None
        if budget is not None:
            self._enforce(obs, budget)
        self.reserve_bytes = self._reserve(obs, self.windows_rows)
        self.lazy_charged_bytes = 0.0 if self._all_starved(obs) else self.lazy_bytes
        if budget is not None:
            held = float(sum(s.held_bytes for s in obs.splits))
            self.executor_share_bytes = max(
                budget - max(self.reserve_bytes, held) - self.task_bytes - self.lazy_charged_bytes, 0.0)
        return list(self.windows_rows)

    # ------------------------------------------------------------------ helpers

    def _all_starved(self, obs: Observation) -> bool:
        """Whether every consumer waits for the producer: its stall fraction is above
        ``stall_threshold`` and it has no whole batch ready beyond the one in use."""
        return all(s.stall_fraction is not None and s.stall_fraction > self.stall_threshold
                   and s.ready_rows < req.batch_rows for req, s in zip(self.requests, obs.splits))

    def _reserve(self, obs: Observation, windows: list[int]) -> float:
        """``W`` for these windows: each split's window plus its batch in use, at its bytes per
        row (a split with no block yet counts at the mean of the others, or 0)."""
        known = [s.bytes_per_row for s in obs.splits if s.bytes_per_row]
        default = sum(known) / len(known) if known else 0.0
        return sum((rows + req.batch_rows) * (s.bytes_per_row or default)
                   for rows, req, s in zip(windows, self.requests, obs.splits))

    def _room(self, obs: Observation, i: int, rows: int) -> bool:
        """Whether split ``i`` may grow to ``rows``: ``W + 2R <= B`` after it (no budget: yes)."""
        if obs.budget_bytes is None:
            return True
        trial = list(self.windows_rows)
        trial[i] = rows
        return self._reserve(obs, trial) + 2 * self.task_bytes <= obs.budget_bytes

    def _enforce(self, obs: Observation, budget: int) -> None:
        """Shrink the largest windows, one batch at a time, until ``W + R <= B``."""
        steps = [s.steps for s in obs.splits]
        while self._reserve(obs, self.windows_rows) + self.task_bytes > budget:
            room = [(self.windows_rows[i] - r.batch_rows, i) for i, r in enumerate(self.requests)
                    if self.windows_rows[i] > r.batch_rows]
            if not room:
                floor = self._reserve(obs, [r.batch_rows for r in self.requests])
                self._warn_once("floor", (
                    f"push split: the budget ({budget / 2**20:.0f} MiB) cannot hold the consumers' double buffers "
                    f"(one batch in use and one ready for each of {len(self.requests)} consumers, "
                    f"{floor / 2**20:.0f} MiB) plus one task output per operator ({self.task_bytes / 2**20:.0f} MiB): "
                    "the windows stay at one batch ahead and the executor runs one task per operator at a time, "
                    "so the store goes over the budget; raise the budget or lower batch_size."))
                return
            _, i = max(room)
            self._set(i, max(self.requests[i].batch_rows, self.windows_rows[i] - self.requests[i].batch_rows),
                      steps[i], "bound")
        asked = self._reserve(obs, [r.requested_rows for r in self.requests])
        if asked + self.task_bytes > budget and any(s.bytes_per_row for s in obs.splits):
            self._warn_once("asked", (
                f"push split: prefetch_batches x batch_size asks for {asked / 2**20:.0f} MiB ready or in use over "
                f"{len(self.requests)} consumers, but the budget leaves {(budget - self.task_bytes) / 2**20:.0f} MiB "
                "after one task output per operator: the windows are kept smaller than asked."))

    def _set(self, i: int, rows: int, step: int, why: str) -> None:
        if rows != self.windows_rows[i]:
            self.windows_rows[i] = rows
            self._changed_at[i] = step
            self.events.append(WindowEvent(self._ticks, i, rows, why))

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self.warned:
            self.warned.add(kind)
            self.warnings.append(message)
            if self.log:
                logger.warning(message)
