"""The discrete-event model of one epoch of streaming ingest (simpy).

What it models, one mechanism at a time:

**Operators and backpressure.** Each operator's task turns one input block into one output
block of ``output_bytes``, taking ``task_s`` CPU seconds; running tasks share ``task_slots``
logical CPUs and ``cores`` physical cores (:class:`~raydata_course.sim.cores.SharedCores`),
with the training steps too where ``step_on_cores`` (the consumers' CPU work), and with the
machine's other work per batch (``overhead_cpu_s``).
Ray Data *believes* it uses the bytes of every block some ``ObjectRef`` holds plus the
outputs its running tasks will write. The executor starts a task only while that belief
plus the new task's output fits the budget, trying the most downstream operator first.
It goes over the budget for one reason: an operator with no task running and nothing in
its output queue may always start one task, or the pipeline could stall for good (the
consumers' own windows can fill the budget). Such launches are counted in
``Timeline.events["over_budget_launches"]``.

**Pull consumers** (``iter_batches`` / ``iter_torch_batches``, alone or per
``streaming_split`` iterator), as :mod:`raydata_course.lab.buffer_model` derives them for
Ray 2.60: a prefetch window of ``prefetch_batches`` refs (counted); then, refs dropped but
blocks pinned by zero-copy batches (hidden), ``N = min(format_cap, prefetch_batches)`` format
workers (queued + in flight), the outer thread's output slot (1), and the batch the training
loop holds (1): ``N + 2`` hidden batches when the consumer is the slower side.

**Push consumers** (:mod:`raydata_course.push_split`, in :mod:`raydata_course.sim.push`): the
coordinator's own rules, imported, not re-written: each split's credit (one batch in use plus
a window of batches ready, at least one), the window controller that grows a stalled
consumer's window and shrinks an idle one, the executor's share of the budget in real bytes,
and the backpressure policy that holds the executor's operators to it. A sent block keeps its
ref, so it stays counted, until the loop is done with it.

**Waits.** Each consumer's wait for each batch (from asking to getting it) is recorded; the
stall fraction and the rate after the first batch are computed as the lab computes them
(:func:`raydata_course.sim.timeline.stall_fraction`).

**Lazy free.** A block nothing holds any more is *freed, not deleted* until the raylet's
next free, one every ``free_period_s`` seconds from ``free_phase_s`` (period 0: at once). A
block waits for the first free after its last ref is dropped: a pull consumer's hidden block,
whose ref went long before its batch, is deleted as soon as the batch goes, if a free ran in
between.

Examples:
    >>> from raydata_course.sim.config import IngestConfig, Operator
    >>> cfg = IngestConfig([Operator("decode", 0.2, 10)], budget_bytes=80, prefetch_batches=4,
    ...                    step_s=0.05, delay_s=0.25, batches_per_consumer=30, free_period_s=0)
    >>> t = simulate(cfg)
    >>> t.batches, max(t.hidden_bytes) // 10   # every batch delivered; N + 2 = 6 hidden
    (30, 6)
"""

from __future__ import annotations

import collections
import math

import simpy

from raydata_course.sim.config import IngestConfig
from raydata_course.sim.cores import SharedCores
from raydata_course.sim.push import PushSide
from raydata_course.sim.timeline import Timeline

__all__ = ["simulate"]


class _Consumer:
    """One consuming iterator's stages (counts of blocks; one block = one batch)."""

    def __init__(self, index: int):
        self.index = index
        self.assigned = 0            # blocks handed to this consumer
        self.window = 0              # pull: refs in the prefetch window (counted)
        self.formatting = 0          # pull: in the format workers, not yet formatted (hidden)
        self.formatted = 0           # pull: formatted, waiting in the format stage's buffer (hidden)
        self.dropped_s: collections.deque = collections.deque()  # pull: when each hidden block lost its ref
        self.outer = 0               # pull: the outer thread's output slot (hidden)
        self.loop_busy = False       # the training loop holds a batch
        self.done_s: list[float] = []
        self.wait_s: list[float] = []  # the wait for each batch, from asking to getting it
        self.asked_s = 0.0           # when the loop last asked for a batch
        self.flow = None             # push: the split's SplitFlow
        self.arrived = None          # push: sequence numbers of blocks in the consumer's process
        self.current = None          # push: the batch in use


class _Model:
    def __init__(self, cfg: IngestConfig):
        self.cfg = cfg
        self.env = simpy.Environment()
        self.cores = SharedCores(self.env, cfg.cores)
        self.counted = self.hidden = self.freed = self.pending = 0
        self.uncharged = 0   # pull: window bytes with a live ref that Ray Data does not charge
        self.taken = 0
        self.queues = [collections.deque() for _ in cfg.operators]   # output blocks (bytes), counted
        self.running = [0] * len(cfg.operators)
        self.slots_used = 0
        self.source_left = cfg.total_batches
        self.started = False
        self.consumers = [_Consumer(i) for i in range(cfg.consumers)]
        self.finished = self.env.event()
        self.timeline = Timeline(cfg.budget_bytes, cfg.block_bytes, cfg.consumers,
                                 batch_done_s=[c.done_s for c in self.consumers],
                                 batch_wait_s=[c.wait_s for c in self.consumers],
                                 events=collections.Counter())
        self.push = PushSide(self) if cfg.split == "push" else None

    # ------------------------------------------------------------------ bookkeeping
    def _free(self, nbytes: int, ref_dropped_s: float | None = None) -> None:
        """A block nothing holds: deleted now, or at the raylet's next lazy free.

        The block waits for the first free after its last ref was dropped (``ref_dropped_s``,
        default now): a block whose ref was dropped while a view still pinned it is deleted as
        soon as the view goes, if the free after the drop has already run.
        """
        period, phase = self.cfg.free_period_s, self.cfg.free_phase_s
        dropped = self.env.now if ref_dropped_s is None else ref_dropped_s
        if period > 0 and self.env.now < phase + (math.floor((dropped - phase) / period) + 1) * period:
            self.freed += nbytes
        self.timeline.events["blocks_freed"] += 1

    def _record(self) -> None:
        self.timeline.record(self.env.now, counted_bytes=self.counted, hidden_bytes=self.hidden,
                             freed_bytes=self.freed, believed_bytes=self._believed(),
                             delivered_batches=self.taken)

    def _believed(self) -> int:
        """Ray Data's usage figure: the bytes it charges plus its running tasks' outputs."""
        return self.counted - self.uncharged + self.pending

    def _step(self) -> None:
        """Move what can move, start what may start, record the state."""
        if self.cfg.split == "pull":
            self._move_pull()
        else:
            self._move_push()
        self._launch()
        self._record()

    # ------------------------------------------------------------------ executor
    def _has_input(self, i: int) -> bool:
        return self.source_left > 0 if i == 0 else bool(self.queues[i - 1])

    def _launch(self) -> None:
        if not self.started:
            return
        ops = self.cfg.operators
        launched = True
        while launched:
            launched = False
            for i in reversed(range(len(ops))):
                if self.slots_used >= self.cfg.task_slots or not self._has_input(i):
                    continue
                fits = self._believed() + ops[i].output_bytes <= self.cfg.budget_bytes
                idle = self.running[i] == 0 and not self.queues[i]
                if (fits or idle) and (self.push is None or self.push.admits(i)):
                    if not fits:
                        self.timeline.events["over_budget_launches"] += 1
                    self._start_task(i)
                    launched = True
                    break

    def _start_task(self, i: int) -> None:
        op = self.cfg.operators[i]
        if i == 0:
            self.source_left -= 1
            input_bytes = 0
        else:
            input_bytes = self.queues[i - 1].popleft()   # still counted: the task holds its ref
        self.running[i] += 1
        self.slots_used += 1
        self.pending += op.output_bytes
        self.timeline.events["tasks"] += 1
        self.env.process(self._task(i, input_bytes))

    def _task(self, i: int, input_bytes: int):
        op = self.cfg.operators[i]
        yield self.cores.run(op.task_s)
        self.running[i] -= 1
        self.slots_used -= 1
        self.pending -= op.output_bytes
        if self.push is not None:
            self.push.task_done(i)
        if input_bytes:
            self.counted -= input_bytes
            self._free(input_bytes)
        self.queues[i].append(op.output_bytes)
        self.counted += op.output_bytes
        self._step()

    # ------------------------------------------------------------------ consumers
    def _quota_left(self, c: _Consumer) -> bool:
        return c.assigned < self.cfg.batches_per_consumer

    def _take_output(self, c: _Consumer) -> int:
        c.assigned += 1
        return self.queues[-1].popleft()

    def _move_pull(self) -> None:
        cfg, block = self.cfg, self.cfg.block_bytes
        n = cfg.format_workers
        for c in self.consumers:
            moved = True
            while moved:
                moved = False
                if not c.loop_busy and c.outer:                       # the loop asks for the next batch
                    c.outer -= 1
                    self._start_step(c)
                    moved = True
                if c.formatted and c.outer < 1:                       # outer thread yields a batch
                    c.formatted -= 1
                    c.outer += 1
                    moved = True
                src_ready = c.window > 0 if cfg.prefetch_batches else (self.queues[-1] and self._quota_left(c))
                if src_ready and c.formatting + c.formatted < max(n, 1) and (n or c.outer < 1):
                    if cfg.prefetch_batches:                          # ray.get: the ref is dropped
                        c.window -= 1
                        self.counted -= block
                        if not cfg.window_counted:
                            self.uncharged -= block
                    else:
                        self.counted -= self._take_output(c)
                    self.hidden += block
                    c.dropped_s.append(self.env.now)
                    c.formatting += 1
                    self.env.process(self._format(c))
                    moved = True
                while c.window < cfg.prefetch_batches and self.queues[-1] and self._quota_left(c):
                    self._take_output(c)                              # a live ref
                    c.window += 1
                    if not cfg.window_counted:
                        self.uncharged += block
                    moved = True
            # fairness between splits: next time, the consumer with the fewest blocks goes first
        self.consumers.sort(key=lambda c: (c.assigned, c.index))

    def _format(self, c: _Consumer):
        if self.cfg.format_s:
            yield self.env.timeout(self.cfg.format_s)
        else:
            yield self.env.timeout(0)
        c.formatting -= 1
        c.formatted += 1
        self._step()

    def _move_push(self) -> None:
        self.push.move()

    def _start_step(self, c: _Consumer) -> None:
        c.loop_busy = True
        c.wait_s.append(self.env.now - c.asked_s)
        self.taken += 1
        if self.cfg.overhead_cpu_s:  # the machine's other CPU work for this batch, on the same cores
            self.cores.run(self.cfg.overhead_cpu_s)
        self.env.process(self._train_step(c))

    def _train_step(self, c: _Consumer):
        cfg = self.cfg
        if cfg.step_on_cores and cfg.step_s:   # the step's CPU work shares the cores with the tasks
            yield self.cores.run(cfg.step_s * cfg.step_width, width=cfg.step_width)
            if cfg.delay_s:
                yield self.env.timeout(cfg.delay_s)
        else:
            yield self.env.timeout(cfg.step_s + cfg.delay_s)
        block = self.cfg.block_bytes
        c.loop_busy = False
        if self.cfg.split == "pull":
            self.hidden -= block
            self._free(block, ref_dropped_s=c.dropped_s.popleft())   # blocks leave in the order they came
        else:
            self.counted -= block
            self._free(block)
            self.push.step_done(c, wait_s=c.wait_s[-1], cycle_s=self.env.now - c.asked_s, first=len(c.done_s) == 0)
        c.done_s.append(self.env.now)
        c.asked_s = self.env.now
        if all(len(x.done_s) >= self.cfg.batches_per_consumer for x in self.consumers):
            self._record()
            self.finished.succeed()
            return
        self._step()

    # ------------------------------------------------------------------ clocks
    def _start(self):
        if self.cfg.startup_s:
            yield self.env.timeout(self.cfg.startup_s)
        self.started = True
        self._step()

    def _lazy_free(self):
        if self.cfg.free_phase_s:
            yield self.env.timeout(self.cfg.free_phase_s)
            self._flush_freed()
        while True:
            yield self.env.timeout(self.cfg.free_period_s)
            self._flush_freed()

    def _flush_freed(self) -> None:
        if self.freed:
            self.freed = 0
            self._record()

    def run(self) -> Timeline:
        self._record()
        self.env.process(self._start())
        if self.cfg.free_period_s > 0:
            self.env.process(self._lazy_free())
        if self.push is not None:
            self.env.process(self.push.control())
        self.env.run(until=self.finished)
        self.timeline.events = dict(self.timeline.events)
        return self.timeline


def simulate(config: IngestConfig) -> Timeline:
    """Simulate one epoch of ``config`` and return its :class:`~raydata_course.sim.timeline.Timeline`.

    Args:
        config: the pipeline, the budget and the consumers.

    Returns:
        A timeline from the epoch's start to the last training step's end: the store's
        counted, hidden and freed-not-deleted bytes, Ray Data's belief, batches delivered,
        and each consumer's step end times (seconds).
    """
    return _Model(config).run()
