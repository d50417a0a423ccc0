"""The coordinator's shared epoch state, under one lock.

Every thread of a :class:`~raydata_course.push_split.coordinator.PushSplitCoordinator` (the
barrier's callers, one sender per split, the control thread, the liveness watchdog, the
consumers' reports) reads and writes the fields of :class:`EpochState` only while holding
``EpochState.cond``, and waits on that condition for every change. Calls into Ray (a push,
an executor's teardown, a blocking get) are made with the lock released.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from raydata_course.push_split.flow import SplitFlow
from raydata_course.push_split.idle import wake
from raydata_course.push_split.messages import Arrival
from raydata_course.push_split.ray_internals import set_external_consumer_bytes
from raydata_course.push_split.window import ExecutorShare, WindowController

__all__ = ["EpochState", "HISTORY_LIMIT"]

#: how many (time, bytes) points of the pushed-but-unconsumed history debug_state keeps.
HISTORY_LIMIT = 20_000


class EpochState:
    """Everything the coordinator's threads share (guarded by ``cond``).

    Attributes:
        cond: the one lock (re-entrant) and the condition every waiter sleeps on.
        n: number of splits.
        epoch: the current epoch (-1 before the first).
        arrivals: split -> :class:`~raydata_course.push_split.messages.Arrival` at the barrier.
        error: why the current epoch failed, or None.
        flows: split -> :class:`~raydata_course.push_split.flow.SplitFlow` of the current epoch.
        executor, output_iterator: the current epoch's execution (None before, or after a
            failed start).
        delivery_calls: pending push calls -> split (the watchdog checks their outcome).
        controller: the current epoch's window controller (adaptive windows), or None.
        share: the executor's share the controller published, kept current in held bytes.
        external_bytes: pushed-but-unconsumed bytes last fed to the executor.
        history: ``(time.time(), external_bytes)`` points, at most ``HISTORY_LIMIT``.
        window_history: the control thread's samples (dicts, see ``debug_state``).
        finished_epochs: each ended epoch's final flow snapshots and idle stats.
        late_reports: reports for another epoch or an unknown split, ignored.
        teardown_thread, teardown_error: the early shutdown when every split finished.
    """

    def __init__(self, n: int):
        self.cond = threading.Condition(threading.RLock())
        self.n = n
        self.epoch = -1
        self.arrivals: dict[int, Arrival] = {}
        self.error: Optional[BaseException] = None
        self.flows: dict[int, SplitFlow] = {}
        self.executor = None
        self.output_iterator = None
        self.delivery_calls: dict = {}
        self.controller: Optional[WindowController] = None
        self.share: Optional[ExecutorShare] = None
        self.external_bytes = 0
        self.history: list[tuple[float, int]] = []
        self.window_history: list[dict] = []
        self.finished_epochs: list[dict] = []
        self.late_reports = 0
        self.teardown_thread: Optional[threading.Thread] = None
        self.teardown_error: Optional[BaseException] = None

    def healthy(self, epoch: int) -> bool:
        """``epoch`` is the current one and has not failed (call under ``cond``)."""
        return self.epoch == epoch and self.error is None

    def held_bytes(self) -> int:
        """Bytes of pushed blocks whose refs the coordinator holds, over splits (under ``cond``)."""
        return sum(f.held_bytes() for f in self.flows.values())

    def account_locked(self) -> None:
        """After any push or report (call under ``cond``): feed the pushed-but-unconsumed
        bytes of every split to the executor's external-consumer hook (the value replaces the
        previous one, so it is the sum over splits), bring the executor's share up to date
        with what the windows hold, and wake an idle executor."""
        total = sum(f.unconsumed_bytes() for f in self.flows.values())
        self.external_bytes = total
        if len(self.history) < HISTORY_LIMIT:
            self.history.append((time.time(), total))
        if self.share is not None:
            self.share.held_bytes = self.held_bytes()
        if self.executor is not None:
            set_external_consumer_bytes(self.executor, total)
            wake()
