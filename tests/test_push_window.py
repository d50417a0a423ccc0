"""The push split's window controller, driven by scripted consumers (no Ray).

A small discrete-time model stands in for the executor and the consumers: every tick
(0.1 s) the producer makes up to ``produce_blocks_per_s * 0.1`` blocks, pushes them into
windows with credit, and each consumer works through its batches at its own pace, waiting
when it has nothing to read. The controller sees what the coordinator would: the budget,
Ray Data's believed usage (the operators' bytes plus the windows' held bytes), each split's
held bytes, its waiting and the rows that sit ready beyond the batch in use.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydata_course.push_split.window import Observation, SplitRequest, SplitState, WindowController
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

    def run(self, dt: float) -> float:
        """Consume for ``dt`` seconds; return the seconds spent waiting for data."""
        waited = 0.0
        left = dt
        while left > 1e-9:
            if self.inflight_rows < ROWS_PER_BLOCK:
                return waited + left  # nothing to read until the next push
            need = self.step_s - self.progress_s
            if need <= left:
                left -= need
                self.progress_s = 0.0
                self.inflight_rows -= ROWS_PER_BLOCK
                self.batches += 1
                if self.step_s == 0:  # an infinitely fast consumer takes all it has at once
                    continue
            else:
                self.progress_s += left
                left = 0
        return waited


def simulate(step_s: list[float], *, produce_blocks_per_s: float, budget_bytes: int, operator_bytes: int,
             requested_blocks: int = 4, ticks: int = 300, **controller_kw):
    """Run the model; returns the controller, the windows per tick (blocks) and the held bytes per tick."""
    splits = [ScriptedSplit(s) for s in step_s]
    requests = [SplitRequest(batch_rows=ROWS_PER_BLOCK, requested_rows=requested_blocks * ROWS_PER_BLOCK)] * len(splits)
    controller = WindowController(requests, **controller_kw)
    windows = list(controller.windows_rows)
    credit = 0.0
    history, held_history = [], []
    for _ in range(ticks):
        credit += produce_blocks_per_s * TICK_S
        pushed = True
        while credit >= 1 and pushed:  # one block at a time, to the open split given the fewest rows so
            pushed = False             # far (Ray's OutputSplitter routes by rows, output_splitter.py:286-289)
            open_ = [i for i, s in enumerate(splits) if windows[i] - s.inflight_rows > 0]
            if open_:
                i = min(open_, key=lambda j: splits[j].pushed_rows)
                splits[i].inflight_rows += ROWS_PER_BLOCK
                splits[i].pushed_rows += ROWS_PER_BLOCK
                credit -= 1
                pushed = True
        credit = min(credit, 1.0)  # a producer blocked by full windows does not bank work
        waited = [s.run(TICK_S) for s in splits]
        held = [s.inflight_rows * BLOCK_BYTES // ROWS_PER_BLOCK for s in splits]
        states = [SplitState(bytes_per_row=BLOCK_BYTES / ROWS_PER_BLOCK, held_bytes=h, waited_s=w,
                             ready_rows=max(0, splits[i].inflight_rows - ROWS_PER_BLOCK))
                  for i, (h, w) in enumerate(zip(held, waited))]
        windows = controller.tick(Observation(budget_bytes, operator_bytes + sum(held), states))
        history.append([w // ROWS_PER_BLOCK for w in windows])
        held_history.append(sum(held))
    return controller, history, held_history, splits


@pytest.mark.parametrize("steps, produce", [([0.25, 0.0], 8), ([0.05, 0.3], 12)], ids=["slow+instant", "fast+slow"])
def test_a_slow_consumer_settles_near_one_batch_and_a_fast_one_grows(steps, produce):
    controller, history, _, splits = simulate(steps, produce_blocks_per_s=produce, budget_bytes=256 * MiB,
                                              operator_bytes=64 * MiB)
    slow, fast = (0, 1) if steps[0] > steps[1] else (1, 0)
    late = history[-100:]
    assert {w[slow] for w in late} <= {1, 2}, f"the slow consumer's window did not settle: {late}"
    assert max(w[fast] for w in late) >= 3, f"the starved consumer's window never grew: {late}"
    # the bound: the windows never hold more than the budget minus the operators' bytes
    assert all((a + b) * BLOCK_BYTES <= 256 * MiB - 64 * MiB for a, b in history)
    ideal = 300 * TICK_S / steps[slow]
    assert splits[slow].batches >= 0.95 * ideal - 2, "the slow consumer was starved by its small window"
    if steps[fast] > 0:  # a consumer with a whole batch ready and no wait gave bytes back
        assert any(e.why == "slow" and e.split == slow for e in controller.events), controller.events


def test_windows_settle_under_constant_speeds():
    """After a transient, each window stays within a band of one batch for the last 10 s."""
    for steps in ([0.25, 0.25], [0.05, 0.3], [0.1]):
        _, history, _, _ = simulate(steps, produce_blocks_per_s=12, budget_bytes=256 * MiB, operator_bytes=32 * MiB)
        for split in range(len(steps)):
            band = [w[split] for w in history[-100:]]
            assert max(band) - min(band) <= 1, f"speeds {steps}: split {split} kept moving: {sorted(set(band))}"


def test_pressure_halves_every_window_and_the_floor_holds():
    c = WindowController([SplitRequest(10, 80)] * 2)
    c.windows_rows = [80, 30]
    state = SplitState(bytes_per_row=1.0, held_bytes=50, waited_s=0.5, ready_rows=0)
    assert c.tick(Observation(budget_bytes=100, usage_bytes=101, splits=[state, state])) == [40, 15]
    assert c.tick(Observation(budget_bytes=100, usage_bytes=101, splits=[state, state])) == [20, 10]
    assert c.tick(Observation(budget_bytes=100, usage_bytes=150, splits=[state, state])) == [10, 10]


def test_a_slow_shrink_after_a_halving_stops_at_one_batch():
    """Pressure halves 12 rows to 6; a slow consumer then shrinks by a batch of 4, which
    must stop at 4, not reach 2 (a CI run saw a window below one batch this way)."""
    c = WindowController([SplitRequest(4, 16)], patience_ticks=1)
    c.windows_rows = [12]
    calm = SplitState(bytes_per_row=1.0, held_bytes=8, waited_s=0.0, ready_rows=8)
    assert c.tick(Observation(budget_bytes=100, usage_bytes=101, splits=[calm])) == [6]
    assert c.tick(Observation(budget_bytes=100, usage_bytes=50, splits=[calm])) == [4]
    assert c.tick(Observation(budget_bytes=100, usage_bytes=50, splits=[calm])) == [4]


_split_states = st.sampled_from([  # starved, calm with a batch ready, idle; each at one of two sizes
    SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=0.5, ready_rows=0),
    SplitState(bytes_per_row=1.0, held_bytes=20, waited_s=0.0, ready_rows=20),
    SplitState(bytes_per_row=0.0, held_bytes=0, waited_s=0.0, ready_rows=0),
    SplitState(bytes_per_row=3.0, held_bytes=60, waited_s=0.001, ready_rows=3),
])


@settings(max_examples=400, deadline=None, derandomize=True)
@given(batches=st.lists(st.tuples(st.integers(1, 7), st.integers(1, 6)), min_size=1, max_size=3), data=st.data())
def test_every_window_stays_between_one_batch_and_what_was_asked(batches, data):
    """Whatever the observations (starved, calm or idle consumers, under or over the
    budget, the store measured or not), each window stays in [batch_rows, requested_rows]."""
    requests = [SplitRequest(b, b * k) for b, k in batches]
    c = WindowController(requests, patience_ticks=data.draw(st.integers(1, 3)),
                         steer_on_store=data.draw(st.booleans()))
    budget_bytes = data.draw(st.sampled_from([None, 30, 100, 1000]))
    for _ in range(data.draw(st.integers(1, 40))):
        limit = budget_bytes or 100
        usage_bytes = limit + 1 if data.draw(st.booleans()) else limit // 2  # over the budget, or under
        obs = Observation(budget_bytes=budget_bytes, usage_bytes=usage_bytes,
                          splits=data.draw(st.lists(_split_states, min_size=len(requests), max_size=len(requests))),
                          store_bytes=data.draw(st.one_of(st.none(), st.integers(0, 2000))))
        windows = c.tick(obs)
        assert all(r.batch_rows <= w <= r.requested_rows for r, w in zip(requests, windows)), (requests, windows)


def test_the_measured_store_is_pressure_only_when_asked():
    state = SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=0.0, ready_rows=0)
    for steer, expected in ((False, [40]), (True, [20])):
        c = WindowController([SplitRequest(10, 80)], steer_on_store=steer)
        c.windows_rows = [40]
        assert c.tick(Observation(budget_bytes=100, usage_bytes=50, splits=[state], store_bytes=130)) == expected


def test_the_operators_need_is_remembered_then_forgotten():
    c = WindowController([SplitRequest(10, 40)], reserve_decay=0.5)
    idle = SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=0.0, ready_rows=0)
    c.tick(Observation(budget_bytes=100, usage_bytes=64, splits=[idle]))
    assert c.reserve_bytes == 64
    c.tick(Observation(budget_bytes=100, usage_bytes=0, splits=[idle]))
    assert c.reserve_bytes == 32


def test_a_window_grows_only_while_the_bound_has_room():
    starved = SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=0.5, ready_rows=0)
    c = WindowController([SplitRequest(10, 100)])
    for _ in range(20):
        c.tick(Observation(budget_bytes=100, usage_bytes=45, splits=[starved]))
    assert c.windows_rows == [50]  # 100 - 45 of operators' bytes leaves room for 5 batches of 10


def test_what_does_not_fit_is_said_once_with_the_numbers(caplog):
    warned: set[str] = set()
    starved = SplitState(bytes_per_row=float(MiB), held_bytes=0, waited_s=0.5, ready_rows=0)
    with caplog.at_level(logging.WARNING, logger="raydata_course.push_split.window"):
        for _ in range(2):  # two epochs, two controllers, one shared set of warned kinds
            c = WindowController([SplitRequest(32, 128)] * 2, warned=warned)
            for _ in range(5):
                c.tick(Observation(budget_bytes=256 * MiB, usage_bytes=96 * MiB, splits=[starved, starved]))
    asked = [r.getMessage() for r in caplog.records if "asks for" in r.getMessage()]
    assert len(asked) == 1 and "256 MiB in flight" in asked[0] and "160 MiB" in asked[0], asked
    with caplog.at_level(logging.WARNING, logger="raydata_course.push_split.window"):
        c = WindowController([SplitRequest(32, 128)] * 2)
        c.tick(Observation(budget_bytes=64 * MiB, usage_bytes=40 * MiB, splits=[starved, starved]))
    assert c.windows_rows == [32, 32], "the floor of one batch gave way"
    assert any("does not fit" in r.getMessage() and "64 MiB" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("bad", [SplitRequest(0, 10), SplitRequest(10, 5)])
def test_a_bad_request_is_refused(bad):
    with pytest.raises(ValueError, match="batch_rows"):
        WindowController([bad])
    with pytest.raises(ValueError, match="at least one"):
        WindowController([])


def test_windows_fit_the_budget_minus_the_operators_need():
    """Ray Data's estimate of the operators' need, when it has one, sets the bound; it is
    remembered as a decaying maximum."""
    starved = SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=0.5, ready_rows=0)
    c = WindowController([SplitRequest(10, 1000)], reserve_decay=1.0)
    c.tick(Observation(budget_bytes=1000, usage_bytes=100, splits=[starved], operators_need_bytes=350))
    for _ in range(100):
        c.tick(Observation(budget_bytes=1000, usage_bytes=900, splits=[starved], operators_need_bytes=300))
    assert c.windows_rows == [650] and c.reserve_bytes == 350  # 1000 - 350, the largest need seen
    c = WindowController([SplitRequest(10, 1000)])
    for _ in range(100):  # believed usage over the budget every tick: pressure keeps the floor
        c.tick(Observation(budget_bytes=1000, usage_bytes=1050, splits=[starved], operators_need_bytes=300))
    assert c.windows_rows == [10]


def test_the_executor_limit_leaves_the_headroom_ray_data_takes_over_it():
    """Ray Data's believed usage runs over the limit it is given by about one task per
    operator; the controller measures that overshoot as the headroom and lowers the
    executor's limit by it (never below half the budget), keeps it through an idle spell and
    hands it to the next epoch's controller."""
    idle = SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=0.0, ready_rows=0)

    def tick(c, usage, limit, budget=256):
        c.tick(Observation(budget_bytes=budget, usage_bytes=usage, splits=[idle], operators_need_bytes=50,
                           limit_bytes=limit))
        return c.headroom_bytes, c.executor_limit_bytes

    c = WindowController([SplitRequest(10, 40)], headroom_decay=0.5)
    assert tick(c, 100, 256) == (50, 206)  # no overshoot yet: the operators' need
    assert tick(c, 268, 206) == (62, 194)  # 62 over the limit it ran under
    assert tick(c, 0, 194) == (62, 194)  # the executor holds nothing: no decay
    assert tick(c, 100, 194) == (50, 206)  # decays, not below the need
    assert tick(c, 500, 206) == (294, 128)  # a huge overshoot: the floor, half the budget
    assert WindowController([SplitRequest(10, 40)], headroom_bytes=62).limit_for(256) == 194
    unknown = WindowController([SplitRequest(10, 40)])
    unknown.tick(Observation(budget_bytes=None, usage_bytes=10, splits=[idle]))
    assert unknown.executor_limit_bytes is None


def test_the_headroom_gives_way_fast_only_where_the_limit_starves_a_consumer_and_the_budget_has_room():
    """The overshoot grows as the limit falls (the windows and a decode task stay whatever the
    limit), so the headroom's slow decay alone ratchets the limit to its floor. It decays by
    ``room_decay`` instead while a consumer waited, Ray Data's usage is at its limit (the
    limit is what holds the executor back) and that usage leaves two more tasks per operator
    under the budget; a consumer that did not wait, an executor below its limit, or a usage
    near the budget keep the slow decay."""
    def run(waited_s, usages, budget=256):
        c = WindowController([SplitRequest(10, 40)], headroom_bytes=128, room_decay=0.9, headroom_decay=1.0)
        for usage in usages:
            c.tick(Observation(budget_bytes=budget, usage_bytes=usage, operators_need_bytes=20,
                               limit_bytes=c.executor_limit_bytes or c.limit_for(budget),
                               splits=[SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=waited_s, ready_rows=0)]))
        return c.headroom_bytes, c.executor_limit_bytes

    assert run(0.1, [140])[0] == pytest.approx(128 * 0.9)
    # starved and held back: the limit climbs until usage is under it (two ticks), then stays
    assert run(0.1, [140] * 20) == (pytest.approx(128 * 0.9 ** 2), 256 - int(128 * 0.9 ** 2 + 1))
    assert run(0.0, [140] * 20) == (128, 128)  # nobody waited: the limit stays
    assert run(0.1, [100] * 20) == (128, 128)  # the executor is under its limit: more would not help
    # two more tasks per operator (20 bytes each) must fit the budget
    assert run(0.1, [216])[0] == pytest.approx(128 * 0.9) and run(0.1, [217] * 20) == (128, 128)


def test_steering_on_the_store_also_lowers_the_executor_limit_by_the_store_s_excess():
    """With ``steer_on_store``, how far the store's measured usage went over the budget (bytes
    freed, not yet deleted by the raylet) lowers the executor's limit as well, as a maximum that
    decays with the reserve; a store within the budget lowers nothing; without steering, or with
    no store reading, the limit ignores the store; the floor holds."""
    idle = SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=0.0, ready_rows=0)

    def tick(c, usage, store):
        c.tick(Observation(budget_bytes=256, usage_bytes=usage, splits=[idle], operators_need_bytes=50,
                           limit_bytes=206, store_bytes=store))
        return c.lazy_bytes, c.executor_limit_bytes

    c = WindowController([SplitRequest(10, 40)], steer_on_store=True, reserve_decay=0.5)
    assert tick(c, 100, 250) == (0, 206)  # more than Ray Data believes, within the budget: nothing
    assert tick(c, 100, 286) == (30, 176)  # 30 bytes over the budget (freed and not yet deleted)
    assert tick(c, 100, 100) == (15, 191)  # deleted: the term decays
    assert tick(c, 100, 556) == (300, 128)  # never below half the budget
    assert tick(c, 100, None) == (150, 128)  # a failed reading: decay only
    blind = WindowController([SplitRequest(10, 40)], steer_on_store=False)
    assert tick(blind, 100, 556) == (0, 206)


def test_a_limit_lowered_for_the_lazy_free_does_not_feed_the_headroom():
    """The coordinator applies each tick's limit; Ray Data's usage lags a lowered limit, and
    that lag is not its overshoot: the headroom stays what Ray Data takes over the limit the
    headroom alone sets, so the lazy term is counted once and does not carry to the next
    epoch through the headroom."""
    idle = SplitState(bytes_per_row=1.0, held_bytes=0, waited_s=0.0, ready_rows=0)
    c = WindowController([SplitRequest(10, 40)], steer_on_store=True)
    limit = 256
    for usage, store in [(256, 256), (256, 316), (256, 316), (256, 316), (250, 316)]:
        c.tick(Observation(budget_bytes=256, usage_bytes=usage, splits=[idle], operators_need_bytes=50,
                           limit_bytes=limit, store_bytes=store))
        limit = c.executor_limit_bytes  # what the coordinator applies
    assert c.headroom_bytes == 50  # the operators' need: usage never passed B - H
    assert c.lazy_bytes == 60 and limit == 256 - 50 - 60
    # a failed reading above the floor: the lazy term decays, the limit rises with it
    c.tick(Observation(budget_bytes=256, usage_bytes=140, splits=[idle], operators_need_bytes=50,
                       limit_bytes=limit, store_bytes=None))
    assert c.lazy_bytes == 60 * c.reserve_decay and c.executor_limit_bytes == int(256 - 50 - 60 * c.reserve_decay)


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
