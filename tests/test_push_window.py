"""The push split's window controller, driven by scripted consumers (no Ray).

A small discrete-time model stands in for the executor and the consumers: every tick
(0.1 s) the producer makes up to ``produce_blocks_per_s * 0.1`` blocks and pushes them into
windows with credit (a window counts rows *ahead of* the batch in use), and each consumer
works through its batches at its own pace, waiting when it has nothing to read. The
controller sees what the coordinator would: the budget, one task output per operator, each
split's held bytes, the rows ready beyond the batch in use, its steps and its stall fraction.
"""

from __future__ import annotations

import collections
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydata_course.push_split.window import ExecutorShare, Observation, SplitRequest, SplitState, WindowController
from raydata_course.units import MiB

TICK_S = 0.1
BLOCK_BYTES = 32 * MiB
ROWS_PER_BLOCK = 100


class ScriptedSplit:
    """One consumer: ``step_s`` seconds per batch of one block; rows in flight, waiting."""

    def __init__(self, step_s: float):
        self.step_s = step_s
        self.inflight_rows = 0  # pushed and not yet done with (the batch in use included)
        self.pushed_rows = 0
        self.progress_s = 0.0  # work done on the batch in use
        self.batches = 0
        self.recent = collections.deque(maxlen=8)  # (waited, cycle) per step

    def run(self, dt: float) -> float:
        """Consume for ``dt`` seconds; return the seconds spent waiting for data."""
        waited = 0.0
        left = dt
        while left > 1e-9:
            if self.inflight_rows < ROWS_PER_BLOCK:
                waited += left  # nothing to read until the next push
                if self.batches:  # the wait for the first batch is the start, not a stall
                    self.wait_acc = getattr(self, "wait_acc", 0.0) + left
                return waited
            need = self.step_s - self.progress_s
            if need <= left:
                left -= need
                self.progress_s = 0.0
                self.inflight_rows -= ROWS_PER_BLOCK
                self.batches += 1
                wait = getattr(self, "wait_acc", 0.0)
                self.recent.append((wait, self.step_s + wait))
                self.wait_acc = 0.0
                if self.step_s == 0:
                    continue
            else:
                self.progress_s += left
                left = 0
        return waited

    def stall_fraction(self):
        cycle = sum(c for _, c in self.recent)
        return None if cycle <= 0 else sum(w for w, _ in self.recent) / cycle


def simulate(step_s: list[float], *, produce_blocks_per_s: float, budget_bytes: int, task_bytes: int,
             requested_blocks: int = 4, ticks: int = 600, start_blocks=None, burst_ticks: int = 1,
             stock_blocks: float = 1.0, **controller_kw):
    """Run the model; returns the controller, the windows per tick (blocks ahead), the held
    bytes per tick and the splits."""
    splits = [ScriptedSplit(s) for s in step_s]
    requests = [SplitRequest(batch_rows=ROWS_PER_BLOCK, requested_rows=requested_blocks * ROWS_PER_BLOCK)] * len(splits)
    controller = WindowController(requests, **controller_kw)
    if start_blocks:
        controller.windows_rows = [b * ROWS_PER_BLOCK for b in start_blocks]
    windows = list(controller.windows_rows)
    credit = 0.0
    history, held_history = [], []
    for tick in range(ticks):
        if tick % burst_ticks == 0:  # a producer that delivers in bursts of burst_ticks ticks' output
            credit += produce_blocks_per_s * TICK_S * burst_ticks
        pushed = True
        while credit >= 1 and pushed:  # one block at a time, to the open split given the fewest rows so
            pushed = False             # far (Ray's OutputSplitter routes by rows, output_splitter.py:286-289)
            open_ = [i for i, s in enumerate(splits) if windows[i] + ROWS_PER_BLOCK - s.inflight_rows > 0]
            if open_:
                i = min(open_, key=lambda j: splits[j].pushed_rows)
                splits[i].inflight_rows += ROWS_PER_BLOCK
                splits[i].pushed_rows += ROWS_PER_BLOCK
                credit -= 1
                pushed = True
        credit = min(credit, stock_blocks)  # a producer blocked by full windows keeps at most this stock
        for s in splits:
            s.run(TICK_S)
        held = [s.inflight_rows * BLOCK_BYTES // ROWS_PER_BLOCK for s in splits]
        states = [SplitState(bytes_per_row=BLOCK_BYTES / ROWS_PER_BLOCK, held_bytes=h,
                             ready_rows=max(0, s.inflight_rows - ROWS_PER_BLOCK), steps=s.batches,
                             stall_fraction=s.stall_fraction())
                  for s, h in zip(splits, held)]
        windows = controller.tick(Observation(budget_bytes, states, task_output_bytes=task_bytes))
        history.append([w // ROWS_PER_BLOCK for w in windows])
        held_history.append(sum(held))
    return controller, history, held_history, splits


def _changes_per_100_steps(controller, splits, skip_ticks=100):
    late = [e for e in controller.events if e.tick > skip_ticks]
    return [100 * sum(1 for e in late if e.split == i) / max(s.batches, 1) for i, s in enumerate(splits)]


@pytest.mark.parametrize("steps", [[0.25, 0.25], [0.3, 0.5], [0.4]], ids=["two-equal", "two-unequal", "one"])
def test_a_producer_that_outruns_its_consumers_keeps_them_double_buffered_and_fed(steps):
    """A GPU job: the producer makes blocks faster than the consumers train on them. One batch
    ready is the healthy state: the windows stay at one batch ahead, nobody waits after the
    start, and the controller leaves the windows alone (at most 2 changes per 100 steps)."""
    controller, history, held, splits = simulate(steps, produce_blocks_per_s=2.5 * sum(1 / s for s in steps),
                                                 budget_bytes=256 * MiB, task_bytes=40 * MiB)
    assert {w for ws in history[50:] for w in ws} == {1}, controller.events
    for s in splits:
        assert s.stall_fraction() == 0.0, s.recent
    assert all(c <= 2 for c in _changes_per_100_steps(controller, splits)), controller.events
    # everything the windows hold fits the reserve: one batch in use and one ready each
    assert max(held[50:]) <= len(steps) * 2 * BLOCK_BYTES


def test_a_stalled_consumer_grows_its_window_while_the_budget_has_room():
    """A producer faster than its consumers on average that delivers in bursts: a double
    buffer fills, the producer holds back, and the consumers stall between bursts; the windows
    grow one batch at a time, no further than ``W + 2R <= B`` allows."""
    controller, history, _, splits = simulate([0.25, 0.25], produce_blocks_per_s=10, burst_ticks=8,
                                              stock_blocks=2, budget_bytes=512 * MiB, task_bytes=40 * MiB)
    assert any(e.why == "stalled" for e in controller.events), controller.events
    assert max(max(ws) for ws in history) >= 2
    for ws in history:  # W + 2R <= B for every window the controller chose to grow to
        assert sum(w + 1 for w in ws) * BLOCK_BYTES + 2 * 40 * MiB <= 512 * MiB or max(ws) == 1, ws


def test_a_window_its_producer_never_fills_does_not_grow():
    """A producer-bound job: the consumers stall because the producer is slow, their windows
    never fill, and a bigger window would only take bytes from the executor: they stay at the
    double buffer, and the executor keeps its share."""
    controller, history, _, splits = simulate([0.1, 0.1], produce_blocks_per_s=12, budget_bytes=512 * MiB,
                                              task_bytes=40 * MiB)
    assert all(s.stall_fraction() > 0.1 for s in splits)
    assert {w for ws in history for w in ws} == {1}, controller.events
    assert controller.executor_share_bytes == 512 * MiB - 4 * BLOCK_BYTES - 40 * MiB


def test_batches_that_sit_idle_for_several_steps_give_their_bytes_back():
    """A window of three batches ahead, fed faster than its consumer: two or more batches sit
    ready for several of the consumer's steps, so it shrinks, one batch at a time, to the
    double buffer, and stays there."""
    controller, history, _, splits = simulate([0.3], produce_blocks_per_s=10, budget_bytes=512 * MiB,
                                              task_bytes=40 * MiB, start_blocks=[3])
    assert [e.why for e in controller.events] == ["idle", "idle"], controller.events
    assert history[-1] == [1]
    shrink_ticks = [e.tick for e in controller.events]
    # the idle count is in the consumer's steps (0.3 s each), not in ticks (0.1 s)
    assert shrink_ticks[1] - shrink_ticks[0] >= 3 * controller.idle_steps


def test_a_shrink_the_consumer_stalls_after_makes_the_next_one_wait_longer():
    c = WindowController([SplitRequest(10, 40)], idle_steps=2)
    c.windows_rows = [30]
    idle = lambda steps: SplitState(bytes_per_row=1.0, held_bytes=30, ready_rows=20, steps=steps, stall_fraction=0.0)
    stalled = lambda steps: SplitState(bytes_per_row=1.0, held_bytes=10, ready_rows=0, steps=steps, stall_fraction=0.5)
    for steps in range(0, 3):
        c.tick(Observation(10_000, [idle(steps)]))
    assert c.windows_rows == [20]
    c.tick(Observation(10_000, [stalled(3)]))  # stalled within idle_steps of the shrink
    assert c._idle_steps == [4]


_split_states = st.sampled_from([  # stalled, idle with batches ready, no step yet; at two sizes
    SplitState(bytes_per_row=1.0, held_bytes=0, ready_rows=0, steps=5, stall_fraction=0.5),
    SplitState(bytes_per_row=1.0, held_bytes=20, ready_rows=20, steps=9, stall_fraction=0.0),
    SplitState(bytes_per_row=None, held_bytes=0, ready_rows=0),
    SplitState(bytes_per_row=3.0, held_bytes=60, ready_rows=3, steps=40, stall_fraction=0.01),
])


@settings(max_examples=400, deadline=None, derandomize=True)
@given(batches=st.lists(st.tuples(st.integers(1, 7), st.integers(1, 6)), min_size=1, max_size=3), data=st.data())
def test_every_window_stays_between_one_batch_and_what_was_asked(batches, data):
    """Whatever the observations (stalled, idle or new consumers, a budget that holds them or
    not, the store measured or not), each window stays in [batch_rows, requested_rows], and
    the executor's share is never negative and never more than the budget less the reserve."""
    requests = [SplitRequest(b, b * k) for b, k in batches]
    c = WindowController(requests, idle_steps=data.draw(st.integers(1, 3)), steer_on_store=data.draw(st.booleans()))
    budget_bytes = data.draw(st.sampled_from([None, 30, 100, 1000]))
    for _ in range(data.draw(st.integers(1, 40))):
        obs = Observation(budget_bytes=budget_bytes,
                          splits=data.draw(st.lists(_split_states, min_size=len(requests), max_size=len(requests))),
                          task_output_bytes=data.draw(st.sampled_from([None, 0, 5, 50])),
                          store_bytes=data.draw(st.one_of(st.none(), st.integers(0, 2000))))
        windows = c.tick(obs)
        assert all(r.batch_rows <= w <= r.requested_rows for r, w in zip(requests, windows)), (requests, windows)
        if budget_bytes is not None:
            assert 0 <= c.executor_share_bytes <= max(budget_bytes - c.reserve_bytes, 0)


def test_the_executor_gets_the_budget_less_the_reserve_one_task_per_operator_and_the_lazy_free():
    """``E = B - max(W, held) - R - L``; the lazily freed bytes come off the executor's share
    only, never off the consumers' windows."""
    state = SplitState(bytes_per_row=1.0, held_bytes=40, ready_rows=0, steps=1, stall_fraction=0.0)
    plain = WindowController([SplitRequest(20, 80)] * 2)
    plain.tick(Observation(1000, [state, state], task_output_bytes=100))
    assert plain.reserve_bytes == 80 and plain.executor_share_bytes == 1000 - 80 - 100
    lazy = WindowController([SplitRequest(20, 80)] * 2, steer_on_store=True)
    lazy.tick(Observation(1000, [state, state], task_output_bytes=100, store_bytes=1300))
    assert lazy.windows_rows == plain.windows_rows == [20, 20]
    assert lazy.lazy_bytes == 300 and lazy.executor_share_bytes == 1000 - 80 - 100 - 300
    lazy.tick(Observation(1000, [state, state], task_output_bytes=100, store_bytes=None))
    assert lazy.lazy_bytes == 300 * lazy.lazy_decay  # remembered, decaying, between readings
    off = WindowController([SplitRequest(20, 80)] * 2)  # the store is read only when asked
    off.tick(Observation(1000, [state, state], task_output_bytes=100, store_bytes=1300))
    assert off.lazy_bytes == 0
    # every consumer starved (stalled, no batch ready): the lazy free is not charged, so the
    # producer they all wait for keeps its share; one consumer with a batch ready: charged again
    starved = SplitState(bytes_per_row=1.0, held_bytes=0, ready_rows=0, steps=9, stall_fraction=0.5)
    ready = SplitState(bytes_per_row=1.0, held_bytes=40, ready_rows=20, steps=9, stall_fraction=0.5)
    lazy.tick(Observation(1000, [starved, starved], task_output_bytes=100, store_bytes=1300))
    assert lazy.lazy_bytes == 300 and lazy.lazy_charged_bytes == 0
    assert lazy.executor_share_bytes == 1000 - 80 - 100
    lazy.tick(Observation(1000, [starved, ready], task_output_bytes=100, store_bytes=1300))
    assert lazy.lazy_charged_bytes == 300 and lazy.executor_share_bytes == 1000 - lazy.reserve_bytes - 100 - 300
    waiting_not_stalled = SplitState(bytes_per_row=1.0, held_bytes=0, ready_rows=0, steps=9, stall_fraction=0.0)
    lazy.tick(Observation(1000, [starved, waiting_not_stalled], task_output_bytes=100, store_bytes=1300))
    assert lazy.lazy_charged_bytes == 300
    # windows holding more than their reserve for a moment (a batch not yet collected)
    heavy = SplitState(bytes_per_row=1.0, held_bytes=90, ready_rows=0, steps=1, stall_fraction=0.0)
    plain.tick(Observation(1000, [heavy, heavy], task_output_bytes=100))
    assert plain.executor_share_bytes == 1000 - 180 - 100


def test_the_share_admits_a_task_only_within_the_executor_s_real_bytes():
    share = ExecutorShare(budget_bytes=256 * MiB, reserve_bytes=128 * MiB, task_bytes=40 * MiB, held_bytes=96 * MiB)
    assert share.executor_bytes() == 88 * MiB
    # the executor's blocks: 96 MiB of windows + 50 of its own; one more 32 MiB output fits 88
    assert share.admits(real_usage_bytes=146 * MiB, task_bytes=32 * MiB)
    assert not share.admits(real_usage_bytes=147 * MiB, task_bytes=42 * MiB)


def test_what_does_not_fit_is_said_once_with_the_numbers(caplog):
    """Two consumers' double buffers of 32 MiB batches (128 MiB) and 40 MiB of task outputs do
    not fit a 150 MiB budget: the windows stay at the floor, the executor's share is 0 (it
    runs one task per operator), and the warning says so once, with the numbers."""
    state = SplitState(bytes_per_row=BLOCK_BYTES / 100, held_bytes=0, ready_rows=0, steps=9, stall_fraction=0.5)
    c = WindowController([SplitRequest(100, 400)] * 2)
    with caplog.at_level(logging.WARNING, logger="raydata_course.push_split.window"):
        for _ in range(5):
            windows = c.tick(Observation(150 * MiB, [state, state], task_output_bytes=40 * MiB))
    assert windows == [100, 100] and c.executor_share_bytes == 0
    floor = [r.getMessage() for r in caplog.records if "double buffers" in r.getMessage()]
    assert len(floor) == 1 and "150 MiB" in floor[0] and "128 MiB" in floor[0] and "40 MiB" in floor[0], floor


@pytest.mark.parametrize("bad", [SplitRequest(0, 10), SplitRequest(10, 5)])
def test_a_bad_request_is_refused(bad):
    with pytest.raises(ValueError, match="batch_rows >= 1 and requested_rows >= batch_rows"):
        WindowController([bad])
    with pytest.raises(ValueError, match="at least one split request"):
        WindowController([])


# ------------------------------------------------------------------ the read-ahead cap


class _Metrics:
    def __init__(self, out_block=None, in_flight=0):
        self.average_bytes_per_output = out_block
        self.obj_store_mem_pending_task_inputs = in_flight


class _Op:
    def __init__(self, name, out_block=None, in_flight=0, downstream=()):
        self.name, self.metrics, self.output_dependencies = name, _Metrics(out_block, in_flight), list(downstream)
        self.active = 0

    def num_active_tasks(self):
        return self.active


class _RM:
    def __init__(self, outputs, ineligible=()):
        self.outputs, self.ineligible = outputs, set(ineligible)

    def is_op_eligible(self, op):
        return op.name not in self.ineligible

    def get_downstream_eligible_ops(self, op):  # as Ray Data's: looks through ineligible operators
        for d in op.output_dependencies:
            if self.is_op_eligible(d):
                yield d
            else:
                yield from self.get_downstream_eligible_ops(d)

    def get_mem_op_outputs(self, op, include_ineligible_downstream=False):
        assert include_ineligible_downstream
        return self.outputs[op.name]

    def get_global_usage(self):
        from types import SimpleNamespace

        return SimpleNamespace(object_store_memory=getattr(self, "usage", 0))


def _policy(rm):
    from raydata_course.push_split.readahead import ReadAheadPolicy

    p = ReadAheadPolicy.__new__(ReadAheadPolicy)  # Ray Data's constructor only stores these
    p._resource_manager = rm
    return p


def test_the_read_ahead_cap_stops_a_head_operator_at_what_its_downstream_needs(monkeypatch):
    from raydata_course.push_split.readahead import CAP_OUTPUTS_ENV

    monkeypatch.setenv(CAP_OUTPUTS_ENV, "1")  # outputs capped too, as the policy first did
    split = _Op("split")
    decode = _Op("decode", out_block=32 * MiB, in_flight=7 * MiB, downstream=[split])
    read = _Op("read", out_block=7 * MiB, downstream=[decode])
    # the cap: max(2 x 7 MiB in flight downstream, 2 x 7 MiB blocks) = 14 MiB
    under = _policy(_RM({"read": 10 * MiB, "decode": 500 * MiB}, ineligible={"split"}))
    assert under.can_add_input(read) and under.max_task_output_bytes_to_read(read) == 4 * MiB
    at = _policy(_RM({"read": 14 * MiB, "decode": 0}, ineligible={"split"}))
    assert not at.can_add_input(read) and at.max_task_output_bytes_to_read(read) == 0
    decode.metrics.obj_store_mem_pending_task_inputs = 3 * 7 * MiB  # three decode tasks: 42 MiB
    assert at.can_add_input(read) and at.max_task_output_bytes_to_read(read) == 28 * MiB
    # the last eligible operator is the windows' and the limit's to bound, however much it holds
    assert at.can_add_input(decode) and under.can_add_input(decode)
    assert under.max_task_output_bytes_to_read(decode) is None


def test_the_read_ahead_cap_reads_running_tasks_outputs_unless_told_otherwise(monkeypatch):
    """By default the policy refuses new inputs at the cap but reads every running task's
    outputs, so it holds no task running (and holding a CPU); the environment switch at 1
    caps those reads too."""
    from raydata_course.push_split.readahead import CAP_OUTPUTS_ENV

    decode = _Op("decode", out_block=32 * MiB, in_flight=7 * MiB, downstream=[_Op("split")])
    read = _Op("read", out_block=7 * MiB, downstream=[decode])
    at = _policy(_RM({"read": 14 * MiB, "decode": 0}, ineligible={"split"}))
    monkeypatch.delenv(CAP_OUTPUTS_ENV, raising=False)
    assert not at.can_add_input(read) and at.max_task_output_bytes_to_read(read) is None
    monkeypatch.setenv(CAP_OUTPUTS_ENV, "0")
    assert at.max_task_output_bytes_to_read(read) is None
    monkeypatch.setenv(CAP_OUTPUTS_ENV, "1")
    assert at.max_task_output_bytes_to_read(read) == 0


def test_a_second_task_starts_only_within_the_budget_the_user_set():
    """Ray Data's believed usage plus one more task's pending output, and room for one output
    counted twice, must fit the context's budget (not the executor's lowered limit) while the
    operator runs a task; an idle
    operator may always start one, and without a finite budget there is no guard."""
    from types import SimpleNamespace

    decode = _Op("decode", out_block=32 * MiB, in_flight=7 * MiB, downstream=[_Op("split")])
    decode.metrics.obj_store_mem_max_pending_output_per_task = 32 * MiB
    rm = _RM({"decode": 0}, ineligible={"split"})
    policy = _policy(rm)
    policy._data_context = SimpleNamespace(execution_options=SimpleNamespace(
        resource_limits=SimpleNamespace(object_store_memory=256 * MiB)))
    # 32 MiB for the new task's output, 32 more for an output counted twice as its task ends
    for running, usage_mib, fits in ((1, 192, True), (1, 193, False), (2, 170, True), (0, 300, True)):
        decode.active = running
        rm.usage = usage_mib * MiB
        assert policy.can_add_input(decode) is fits, (running, usage_mib)
    policy._data_context.execution_options.resource_limits.object_store_memory = float("inf")
    decode.active, rm.usage = 1, 300 * MiB
    assert policy.can_add_input(decode)


def test_the_read_ahead_cap_never_stops_an_operator_it_cannot_measure(monkeypatch):
    from raydata_course.push_split.readahead import CAP_OUTPUTS_ENV

    monkeypatch.setenv(CAP_OUTPUTS_ENV, "1")  # the output reads checked too
    decode = _Op("decode", out_block=32 * MiB, in_flight=7 * MiB)
    fresh = _Op("read", out_block=None, downstream=[decode])  # no output yet: no average block
    policy = _policy(_RM({"read": 10**12}))
    assert policy.can_add_input(fresh) and policy.max_task_output_bytes_to_read(fresh) is None
    broken = _Op("read", out_block=7 * MiB, downstream=[decode])
    broken.metrics = None  # an estimate Ray Data lacks
    assert policy.can_add_input(broken) and policy.max_task_output_bytes_to_read(broken) is None


def test_the_read_ahead_cap_is_added_once_to_ray_data_s_own_policies():
    ray_data = pytest.importorskip("ray.data")
    from ray.data._internal.execution.backpressure_policy import (
        ENABLED_BACKPRESSURE_POLICIES,
        ENABLED_BACKPRESSURE_POLICIES_CONFIG_KEY,
    )

    from raydata_course.push_split.readahead import ReadAheadPolicy, install_read_ahead_cap

    ctx = ray_data.DataContext.get_current().copy()
    assert install_read_ahead_cap(ctx) and install_read_ahead_cap(ctx)
    assert ctx.get_config(ENABLED_BACKPRESSURE_POLICIES_CONFIG_KEY) == [*ENABLED_BACKPRESSURE_POLICIES, ReadAheadPolicy]
    assert ray_data.DataContext.get_current().get_config(ENABLED_BACKPRESSURE_POLICIES_CONFIG_KEY, None) is None


def test_the_read_ahead_cap_lifts_while_the_downstream_has_nothing_in_flight_and_looks_through_a_limit(monkeypatch):
    from raydata_course.push_split.readahead import CAP_OUTPUTS_ENV

    monkeypatch.setenv(CAP_OUTPUTS_ENV, "1")  # the output reads checked too
    # a map whose batch spans several read blocks must get them before it can start a task
    idle = _Op("map", out_block=32 * MiB, in_flight=0)
    read = _Op("read", out_block=1 * MiB, downstream=[idle])
    policy = _policy(_RM({"read": 40 * MiB}))
    assert policy.can_add_input(read) and policy.max_task_output_bytes_to_read(read) is None
    # read -> limit -> decode: the limit is not eligible, the decode behind it is what counts
    decode = _Op("decode", out_block=32 * MiB, in_flight=7 * MiB)
    limited = _Op("read", out_block=7 * MiB, downstream=[_Op("limit", downstream=[decode])])
    policy = _policy(_RM({"read": 14 * MiB}, ineligible={"limit"}))
    assert not policy.can_add_input(limited) and policy.max_task_output_bytes_to_read(limited) == 0


# ---------------------------------------------------------------- the idle wait (.idle)


class _LoopMetrics:
    def __init__(self):
        self.num_inputs_received = self.num_task_outputs_generated = self.num_outputs_taken = 0
        self.num_tasks_submitted = self.num_tasks_finished = 0


class _LoopOp:
    def __init__(self):
        self._metrics = _LoopMetrics()
        self.completed = False

    def has_completed(self):
        return self.completed


class _LoopQueue:
    num_blocks = 0  # a property in Ray's OpBufferQueue, a method in its bundle queues


class _LoopState:
    def __init__(self):
        self.output_queue = _LoopQueue()


class _LoopExecutor:
    def __init__(self):
        self.op = _LoopOp()
        self._topology = {self.op: _LoopState()}
        self._shutdown = False


def _step_s(waiter, executor) -> float:
    import time

    start = time.monotonic()
    waiter.on_execution_step(executor)
    return time.monotonic() - start


def test_the_idle_wait_waits_only_on_a_quick_step_that_changed_nothing():
    from raydata_course.push_split.idle import IDLE_WAIT_S, IdleWait, LoopMeter, wake

    executor, waiter = _LoopExecutor(), IdleWait()
    assert _step_s(waiter, executor) < IDLE_WAIT_S / 2  # the first step has nothing to compare with
    assert _step_s(waiter, executor) >= IDLE_WAIT_S * 0.8  # stuck: it waits out Ray's timeout
    executor.op._metrics.num_outputs_taken += 1  # progress: an output was taken
    assert _step_s(waiter, executor) < IDLE_WAIT_S / 2
    queue = executor._topology[executor.op].output_queue
    queue.num_blocks = 3  # progress: the output queue changed
    assert _step_s(waiter, executor) < IDLE_WAIT_S / 2
    queue.num_blocks = 0
    assert _step_s(waiter, executor) < IDLE_WAIT_S / 2  # the queue changed back: progress again
    wake()  # news since the previous step: the loop looks again at once
    assert _step_s(waiter, executor) < IDLE_WAIT_S / 2
    import time

    time.sleep(IDLE_WAIT_S)  # a step as long as Ray's own wait did not spin
    assert _step_s(waiter, executor) < IDLE_WAIT_S / 2
    executor.op.completed = True  # the last step of an execution does not delay its end
    assert _step_s(waiter, executor) < IDLE_WAIT_S / 2
    executor.op.completed, executor._shutdown = False, True
    assert _step_s(waiter, executor) < IDLE_WAIT_S / 2
    assert waiter.waits == 1 and waiter.stuck_steps == 2, (waiter.waits, waiter.stuck_steps)  # the wait, the last step

    meter, executor = LoopMeter(), _LoopExecutor()
    assert max(_step_s(meter, executor) for _ in range(5)) < IDLE_WAIT_S / 2
    assert meter.stuck_steps == 4 and meter.waits == 0


def test_a_wake_ends_the_wait_and_a_broken_executor_never_waits():
    import threading

    from raydata_course.push_split.idle import IDLE_WAIT_S, IdleWait, wake

    executor, waiter = _LoopExecutor(), IdleWait()
    waiter.on_execution_step(executor)
    timer = threading.Timer(IDLE_WAIT_S / 5, wake)
    timer.start()
    assert _step_s(waiter, executor) < IDLE_WAIT_S * 0.8
    timer.join()

    class Broken(_LoopExecutor):
        @property
        def _topology(self):
            return {object(): None}  # an operator without what the rule reads

        @_topology.setter
        def _topology(self, value):
            pass

    broken, waiter = Broken(), IdleWait()
    assert max(_step_s(waiter, broken) for _ in range(3)) < IDLE_WAIT_S / 2


def test_with_a_published_share_a_second_task_must_fit_the_executor_s_real_bytes():
    """The coordinator publishes the executor's share; the policy then counts real bytes: every
    operator's referenced outputs (the windows' held blocks taken off) and one output per
    running task, plus the new task's output, within the share. An idle operator may always
    start one task: the executor passes its share by at most one output per operator."""
    from types import SimpleNamespace

    from raydata_course.push_split.ray_internals import publish_share, real_usage_bytes

    class Metrics:
        def __init__(self, produced, finished):
            self.bytes_task_outputs_generated, self.num_tasks_finished = produced, finished
            self.average_bytes_per_output = produced / max(finished, 1)
            self.obj_store_mem_pending_task_inputs = 0

    read, decode = _Op("read"), _Op("decode")
    read.metrics, decode.metrics = Metrics(8 * MiB * 10, 10), Metrics(32 * MiB * 5, 5)
    read.output_dependencies, decode.output_dependencies = [decode], []

    class RM:
        _topology = {read: None, decode: None}
        outputs = {"read": 16 * MiB, "decode": 96 * MiB + 32 * MiB}  # 96 MiB held by the windows

        def get_mem_op_outputs(self, op, include_ineligible_downstream=False):
            return self.outputs[op.name]

        def get_downstream_eligible_ops(self, op):
            return iter(op.output_dependencies)

    rm = RM()
    policy = _policy(rm)
    policy._data_context = SimpleNamespace(execution_options=SimpleNamespace(
        resource_limits=SimpleNamespace(object_store_memory=256 * MiB)))
    share = ExecutorShare(budget_bytes=256 * MiB, reserve_bytes=128 * MiB, task_bytes=40 * MiB, held_bytes=96 * MiB)
    publish_share(SimpleNamespace(_resource_manager=rm), share)
    decode.active = 1
    # real: 16 + 128 outputs + one 32 MiB decode running = 176 MiB; less 96 held = 80 MiB of the
    # executor's own; a second decode's 32 MiB makes 112 > E = 256 - 128 - 40 = 88
    assert real_usage_bytes(rm) == 176 * MiB
    assert not policy.can_add_input(decode)
    rm.outputs["decode"] = 96 * MiB  # the decoded block was pushed: 48 MiB of its own, 80 with one more
    assert policy.can_add_input(decode)
    decode.active = 0  # an idle operator always starts one task (liveness)
    rm.outputs["decode"] = 250 * MiB
    assert policy.can_add_input(decode)
