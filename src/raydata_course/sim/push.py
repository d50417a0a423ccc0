"""The push split in the simulator: the real coordinator's rules, around a model of its transport.

The rules are not re-written here; they are imported from :mod:`raydata_course.push_split`,
whose modules below are pure Python (no Ray) and ship to the browser with the simulator:

- :class:`~raydata_course.push_split.flow.SplitFlow`: each consumer's credit (a sender may
  push while ``window + batch - (pushed - consumed) > 0``: one batch in use, the window
  ready ahead), its stall fraction over its last steps, and which blocks it still holds;
- :class:`~raydata_course.push_split.window.WindowController`: every ``control_interval_s``
  the windows grow on stall, shrink when idle or over the bound, and the controller sets the
  executor's share ``E = B - max(W, held) - R - L``
  (:class:`~raydata_course.push_split.window.ExecutorShare`);
- the executor's backpressure policy
  (:class:`~raydata_course.push_split.readahead.ReadAheadPolicy`): an operator with a task
  running starts another only if :meth:`ExecutorShare.admits` the executor's real bytes plus
  that task's output (before the first share, :func:`believed_usage_admits`), and an operator
  whose outputs reach :func:`read_ahead_cap_bytes` of its busy downstream takes no input.

What the coordinator adds around them is modelled from measured figures, in
:class:`~raydata_course.sim.config.IngestConfig`: ``send_s``, the seconds from the sender
taking a block to its arrival in the consumer's process (an actor call that resolves the
block's ref); the controller's tick, ``control_interval_s``; and, with ``steer_on_store``, a
reading of the object store every ``store_sample_period_s``
(:data:`raydata_course.push_split.control.STORE_SAMPLE_INTERVAL_S`). Ray Data's own limit
stays the budget. One block is one batch and one row here, so rows count batches and bytes
per row are the block's bytes. Left out: the splitter's ``equal=True`` hold-back, the output
backpressure Ray Data relaxes for a sender waiting as a consumer, and the sender's 10 ms poll.
"""

from __future__ import annotations

import collections

from raydata_course.push_split.flow import SplitFlow
from raydata_course.push_split.messages import RowRange
from raydata_course.push_split.window import (
    ExecutorShare,
    Observation,
    SplitRequest,
    SplitState,
    WindowController,
    believed_usage_admits,
    read_ahead_cap_bytes,
)

__all__ = ["PushSide"]


class PushSide:
    """The push split's side of one simulated epoch (see the module docstring).

    Args:
        model: the engine's ``_Model`` (its clock, queues, counters and consumers).
    """

    def __init__(self, model):
        self.m = model
        cfg = model.cfg
        self.requests = [SplitRequest(batch_rows=1, requested_rows=max(cfg.prefetch_batches, 1))
                         for _ in model.consumers]
        self.controller = WindowController(self.requests, steer_on_store=cfg.steer_on_store, log=False)
        self.share: ExecutorShare | None = None
        self.finished_ops = [0] * len(cfg.operators)   # tasks finished per operator (R is known after one)
        for c in model.consumers:
            c.flow = SplitFlow(window_rows=self.controller.windows_rows[c.index], batch_rows=1)
            c.arrived = collections.deque()             # seqs arrived in the consumer's process

    # ------------------------------------------------------------------ the executor's policy
    def admits(self, i: int) -> bool:
        """Whether the read-ahead policy lets operator ``i`` take one more input now."""
        m, ops = self.m, self.m.cfg.operators
        if m.running[i]:
            if self.share is not None:
                if not self.share.admits(m.counted + m.pending, ops[i].output_bytes):
                    return False
            elif not believed_usage_admits(m._believed(), ops[i].output_bytes, m.cfg.budget_bytes):
                return False
        if m.cfg.read_ahead_cap and i + 1 < len(ops) and m.running[i + 1]:
            in_flight = m.running[i + 1] * ops[i].output_bytes
            cap = read_ahead_cap_bytes(in_flight, ops[i].output_bytes)
            if cap is not None and sum(m.queues[i]) + in_flight >= cap:
                return False
        return True

    def task_done(self, i: int) -> None:
        """Operator ``i`` finished a task (its output size is now known to the controller)."""
        self.finished_ops[i] += 1

    # ------------------------------------------------------------------ senders and consumers
    def move(self) -> None:
        """Senders push while their split has credit; consumers start a step on an arrived batch."""
        m = self.m
        while m.queues[-1]:
            open_ = [c for c in m.consumers if m._quota_left(c) and c.flow.rows_to_send() > 0]
            if not open_:
                break
            c = min(open_, key=lambda c: (-c.flow.rows_to_send(), c.assigned, c.index))
            block = m._take_output(c)                                 # stays counted until released
            seq = c.flow.push(object(), rows=1, size_bytes=block)
            self._sync_held()
            if m.cfg.send_s:
                m.env.process(self._send(c, seq))
            else:
                c.arrived.append(seq)
        for c in m.consumers:
            if not c.loop_busy and c.arrived:
                c.current = c.arrived.popleft()
                m._start_step(c)

    def _send(self, c, seq: int):
        yield self.m.env.timeout(self.m.cfg.send_s)
        c.arrived.append(seq)
        self.m._step()

    def step_done(self, c, wait_s: float, cycle_s: float, first: bool) -> None:
        """The loop is done with its batch: consumed and released (its ref dropped), and its
        step cycle reported (after the first batch, as the iterator reports)."""
        c.flow.apply([RowRange(c.current, 0, 1)], released=False)
        c.flow.apply([RowRange(c.current, 0, 1)], released=True)
        if not first:
            c.flow.note_steps(1, wait_s, cycle_s)
        self._sync_held()

    def _sync_held(self) -> None:
        if self.share is not None:
            self.share.held_bytes = sum(c.flow.held_bytes() for c in self.m.consumers)

    # ------------------------------------------------------------------ the control tick
    def control(self):
        """The control thread: every ``control_interval_s``, tick the controller with what the
        coordinator would see, apply the windows and publish the executor's share."""
        m, cfg = self.m, self.m.cfg
        next_store_s = 0.0
        while not m.finished.triggered:
            yield m.env.timeout(cfg.control_interval_s)
            states = [SplitState(bytes_per_row=c.flow.bytes_per_row(), held_bytes=c.flow.held_bytes(),
                                 ready_rows=c.flow.ready_rows(), steps=c.flow.steps,
                                 stall_fraction=c.flow.stall_fraction()) for c in m.consumers]
            task_bytes = sum(op.output_bytes for op, n in zip(cfg.operators, self.finished_ops) if n) or None
            store_bytes = None
            if cfg.steer_on_store and m.env.now >= next_store_s:
                store_bytes = m.counted + m.hidden + m.freed
                next_store_s = m.env.now + cfg.store_sample_period_s
            windows = self.controller.tick(Observation(cfg.budget_bytes, states, task_bytes, store_bytes))
            for c, rows in zip(m.consumers, windows):
                c.flow.set_window_rows(rows)
            if self.share is None:
                self.share = ExecutorShare(cfg.budget_bytes)
            self.share.reserve_bytes = self.controller.reserve_bytes
            self.share.task_bytes = self.controller.task_bytes
            self.share.lazy_bytes = self.controller.lazy_charged_bytes
            self._sync_held()
            m.timeline.warnings = list(self.controller.warnings)
            m.timeline.windows_t_s.append(m.env.now)
            m.timeline.windows_batches.append(list(windows))
            m._step()
