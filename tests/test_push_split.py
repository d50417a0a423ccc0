"""The push-based split: window, exactly-once delivery, epochs, equal splits, failures.

Consumers run in threaded actors (the transport Ray Train workers get: blocks pushed into
the actor's process) unless a test says otherwise.
"""

import random
import threading
import time

import numpy as np
import pytest

from raydata_course.push_split import CONSUMER_DEATH_TIMEOUT_S, PushSplitError, push_split
from raydata_course.push_split.messages import Arrival, Delivery, RowRange

ray = pytest.importorskip("ray")


@ray.remote(max_concurrency=4)
class Consumer:
    """Hosts one split; ``consume`` runs in one of its threads while pushes arrive."""

    def consume(self, split, batch_size, prefetch_batches, delays_s=(), epochs=1, torch_batches=False):
        """Iterate ``epochs`` epochs; returns the ids per epoch and the window samples."""
        out = []
        for _ in range(epochs):
            ids = []
            if torch_batches:
                batches = split.iter_torch_batches(batch_size=batch_size, prefetch_batches=prefetch_batches,
                                                   dtypes={"id": __import__("torch").float64})
            else:
                batches = split.iter_batches(batch_size=batch_size, prefetch_batches=prefetch_batches)
            for i, batch in enumerate(batches):
                ids.extend(int(x) for x in batch["id"].tolist())
                if delays_s:
                    time.sleep(delays_s[i % len(delays_s)])
                del batch
            out.append(ids)
        return out

    def pid(self):
        import os

        return os.getpid()


def _run(splits, batch_size=10, prefetch_batches=2, delays=None, epochs=1, consumers=None, **kw):
    consumers = consumers[:len(splits)] if consumers else [Consumer.remote() for _ in splits]
    refs = [c.consume.remote(s, batch_size, prefetch_batches, (delays or {}).get(i, ()), epochs, **kw)
            for i, (c, s) in enumerate(zip(consumers, splits))]
    return ray.get(refs, timeout=120), consumers


def test_every_row_once_equal_counts_and_window(ray_cluster):
    """Every row exactly once, equal row counts, the window held to one block of overshoot,
    and the coordinator releasing every block once consumed."""
    ds = ray.data.range(600, override_num_blocks=12)  # 50-row blocks
    splits = push_split(ds, 3, equal=True)
    (out, _) = _run(splits, batch_size=16, prefetch_batches=2, delays={0: (0.01,)})
    ids = [i for per_split in out for i in per_split[0]]
    assert sorted(ids) == list(range(600))
    assert [len(s[0]) for s in out] == [200, 200, 200]
    state = splits[0].debug_state()
    final = state["finished_epochs"][-1]["splits"] if state["finished_epochs"] else state["splits"]
    for flow in final.values():
        # the window counts rows ahead of the batch in use: in flight, at most window + batch + a block - 1
        assert flow["max_inflight_rows"] <= flow["max_window_rows"] + 16 + flow["max_block_rows"] - 1, flow
        # 13 batches, 12 step cycles; the last reports may arrive after the split finished
        assert flow["steps"] >= 6 and flow["waited_s"] >= 0, flow
        assert flow["rows_pushed"] == 200
    time.sleep(0.5)
    state = splits[0].debug_state()
    assert state["external_consumer_bytes"] == 0
    assert all(f["unconsumed_blocks"] == 0 for f in state["splits"].values())


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_equal_true_trims_uneven_rows(ray_cluster):
    ds = ray.data.range(103, override_num_blocks=5)
    (out, _) = _run(push_split(ds, 2, equal=True), batch_size=7)
    assert [len(s[0]) for s in out] == [51, 51]
    assert len(set(out[0][0]) | set(out[1][0])) == 102


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_several_epochs_and_torch_batches(ray_cluster):
    torch = pytest.importorskip("torch")  # noqa: F841
    ds = ray.data.range(240, override_num_blocks=8)
    splits = push_split(ds, 2)
    (out, _) = _run(splits, batch_size=12, prefetch_batches=1, epochs=3, torch_batches=True)
    for epoch in range(3):
        got = sorted(out[0][epoch] + out[1][epoch])
        assert got == list(range(240)), epoch
    state = splits[0].debug_state()
    assert state["epoch"] == 2 and len(state["finished_epochs"]) == 2


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_drop_last_and_batch_shapes_in_the_driver(ray_cluster):
    """Consumed in the driver (not an actor): the fetch transport, same semantics."""
    ds = ray.data.range(100, override_num_blocks=4)
    splits = push_split(ds, 2)
    sizes = {}

    def run(i):
        sizes[i] = [len(b["id"]) for b in splits[i].iter_batches(batch_size=15, drop_last=True, prefetch_batches=2)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join(timeout=120) for t in threads]
    assert sizes == {0: [15, 15, 15], 1: [15, 15, 15]}


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_window_bound_with_blocks_larger_than_the_window(ray_cluster):
    """A 100-row window and 64-row blocks: at most one block beyond the window is in flight,
    and a slow consumer still gets every row."""
    ds = ray.data.range_tensor(1024, shape=(256,), override_num_blocks=16)
    ds = ds.map_batches(lambda b: {"id": np.arange(len(b["data"])), "data": b["data"]})
    splits = push_split(ds, 2)
    stop = threading.Event()
    seen = []

    def sample():
        while not stop.wait(0.05):
            seen.append(splits[0].debug_state()["splits"])

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        (out, _) = _run(splits, batch_size=25, prefetch_batches=4, delays={0: (0.02,), 1: (0.01,)})
    finally:
        stop.set()
        sampler.join()
    assert [len(s[0]) for s in out] == [512, 512]
    for flows in seen:
        for flow in flows.values():
            inflight = flow["rows_pushed"] - flow["rows_consumed"]
            assert inflight <= flow["max_window_rows"] + 25 + max(flow["max_block_rows"], 1) - 1, flow


def _two_mib_blocks(rows: int, budget_bytes: int):
    """A dataset of ``rows`` rows with an ``id`` column, 4 rows (2 MiB) a block, under an
    object-store budget of ``budget_bytes``."""
    ds = ray.data.range_tensor(rows, shape=(64, 1024), override_num_blocks=rows // 4)
    ds = ds.map_batches(lambda b: {"id": b["data"][:, 0, 0], "data": b["data"]}, batch_size=None)
    ds.context.execution_options.resource_limits = ray.data.ExecutionResources(object_store_memory=budget_bytes)
    return ds


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_adaptive_windows_follow_each_consumer_within_the_budget(ray_cluster):
    """A slow and a fast consumer under a small budget: every row once, every window between
    one batch and what was asked for, and the controller reading the budget it was given.
    (Where the windows settle depends on the machine's speed: tests/test_push_window.py
    drives the controller with scripted speeds instead.)"""
    from raydata_course.units import MiB

    batch_rows, prefetch = 4, 4
    splits = push_split(_two_mib_blocks(240, 24 * MiB), 2, equal=True)
    (out, _) = _run(splits, batch_size=batch_rows, prefetch_batches=prefetch, delays={0: (0.15,)})
    ids = [i for per_split in out for i in per_split[0]]
    assert sorted(ids) == list(range(240))
    state = splits[0].debug_state()
    assert state["window"] == "adaptive" and state["window_history"], state["window_events"]
    history = state["window_history"]
    assert {h["budget_bytes"] for h in history} - {None} == {24 * MiB}  # None: before its first update
    # Ray Data's limit stays the budget; the executor's share, in real bytes, is what is left
    # after the windows' reserve and one task output per operator
    assert {h["limit_bytes"] for h in history} - {None} == {24 * MiB}
    shares = [h for h in history if h["share_bytes"] is not None]
    assert shares and all(h["share_bytes"] <= 24 * MiB - h["reserve_bytes"] - h["task_bytes"] for h in shares)
    # the reserve: at least a double buffer (one batch in use, one ready) per consumer, 0.5 MiB a row
    assert all(h["reserve_bytes"] >= 2 * (2 * batch_rows) * MiB // 2 for h in shares if h["held_bytes"])
    outside = [h["windows_rows"] for h in history if not all(batch_rows <= w <= batch_rows * prefetch
                                                              for w in h["windows_rows"])]
    assert not outside, (outside[:5], state["window_events"][-20:])
    # whether the controller moves a window here depends on the machine's speed (under load the
    # producer may never fill a window nor leave two batches idle); each move it makes keeps the
    # bounds and gives one of the rule's reasons (tests/test_push_window.py drives the moves)
    for event in state["window_events"]:
        assert batch_rows <= event["rows"] <= batch_rows * prefetch and event["why"] in {"stalled", "idle", "bound"}, \
            event
    final = state["finished_epochs"][-1]["splits"] if state["finished_epochs"] else state["splits"]
    assert all(f["max_inflight_rows"] <= f["max_window_rows"] + batch_rows + f["max_block_rows"] - 1
               for f in final.values())


@pytest.mark.slow  # a Ray Data pipeline that runs for seconds; the controller's rules are in test-fast
def test_steering_on_the_store_reads_it_twice_a_second_not_at_every_tick(ray_cluster):
    """With ``steer_on_store`` the controller reads the object store (a raylet call that asks
    every worker on the node for its stats) every ``STORE_SAMPLE_INTERVAL_S`` seconds; the
    ticks in between steer on Ray Data's usage alone."""
    from raydata_course.push_split.control import STORE_SAMPLE_INTERVAL_S
    from raydata_course.units import MiB

    splits = push_split(_two_mib_blocks(120, 24 * MiB), 2, equal=True, steer_on_store=True)
    (out, _) = _run(splits, batch_size=4, prefetch_batches=2, delays={0: (0.1,), 1: (0.1,)})
    assert sorted(i for per_split in out for i in per_split[0]) == list(range(120))
    history = splits[0].debug_state()["window_history"]
    read_t = [h["t"] for h in history if h["store_bytes"] is not None]
    assert 2 <= len(read_t) < len(history), (len(read_t), len(history))
    gaps_s = [b - a for a, b in zip(read_t, read_t[1:])]
    assert min(gaps_s) >= STORE_SAMPLE_INTERVAL_S - 0.1, gaps_s


@pytest.mark.slow  # a Ray Data pipeline per case; IdleWait's rule is tests/test_push_window.py's, in test-fast
@pytest.mark.parametrize("idle_wait", [True, False])
def test_the_idle_wait_is_installed_reports_and_loses_no_row(ray_cluster, idle_wait):
    """Two slow consumers under a budget that holds a third of the dataset, two epochs: every
    row arrives once per epoch with the executor's loop waiting for news when stuck, and each
    epoch's executor reports its loop (an ``IdleWait``, or with ``idle_wait=False`` a
    ``LoopMeter`` that never waits). How much the spin costs is ``make lab``'s to measure."""
    from raydata_course.units import MiB

    splits = push_split(_two_mib_blocks(120, 24 * MiB), 2, equal=True, idle_wait=idle_wait)
    (out, _) = _run(splits, batch_size=4, prefetch_batches=2, delays={0: (0.1,), 1: (0.1,)}, epochs=2)
    for epoch in range(2):
        assert sorted(i for per_split in out for i in per_split[epoch]) == list(range(120))
    state = splits[0].debug_state()
    for idle in (state["finished_epochs"][-1]["idle"], state["idle"]):  # epoch 0's and epoch 1's executor
        assert idle["loop_cpu_s"] > 0, idle  # the callback ran in the loop's thread
        if idle_wait:
            assert idle["waits"] <= idle["stuck_steps"] and idle["waited_s"] <= 0.15 * idle["waits"] + 0.1, idle
        else:
            assert idle["waits"] == 0 and idle["waited_s"] == 0.0, idle


@pytest.mark.slow  # a Ray Data pipeline per case; the rule itself is tests/test_push_window.py's, in test-fast
@pytest.mark.parametrize("cap", [True, False])
def test_the_read_ahead_cap_keeps_the_head_operator_near_its_downstream(ray_cluster, cap):
    """A cheap head operator (a read fused with a map) ahead of a slow one that runs one task
    at a time, under a budget that holds the whole dataset: with adaptive windows the read-ahead
    cap holds the head's outputs to about two of its 2 MiB blocks (the slow operator's one
    input in flight is less), plus a block per head task still running when the cap was
    reached; with the cap off, all else the same, the head reads far ahead (that half shows
    the test can fail)."""
    from raydata_course.measure.raydata import RayDataProbe, start_recorder
    from raydata_course.units import MiB

    def _head(batch):  # defined here: Ray ships it by value (the test module is not importable there)
        return {"id": batch["data"][:, 0, 0], "data": batch["data"]}

    def _slow_tail(batch):
        time.sleep(0.05)
        return batch

    recorder = start_recorder()
    ray.get(recorder.drain.remote())
    ds = ray.data.range_tensor(240, shape=(64, 1024), override_num_blocks=60)  # 4 rows = 2 MiB a block
    ds = ds.map_batches(_head, batch_size=None).map_batches(_slow_tail, batch_size=None, num_cpus=0.5, concurrency=1)
    ds.context.execution_options.resource_limits = ray.data.ExecutionResources(object_store_memory=256 * MiB)
    ds.context.custom_execution_callback_classes.append(RayDataProbe)
    (out, _) = _run(push_split(ds, 2, equal=True, read_ahead_cap=cap), batch_size=4, prefetch_batches=2)
    assert sorted(i for per_split in out for i in per_split[0]) == list(range(240))
    samples, _ = ray.get(recorder.drain.remote())
    # the head's outputs: its usage less its running tasks' estimated pending outputs
    head = [s["op_bytes"][i] - s["op_pending_bytes"][i] for s in samples for i, name in enumerate(s["operators"])
            if "_head" in name and "_slow_tail" not in name]
    assert head, {tuple(s["operators"]) for s in samples}
    held = sorted(head)[int(0.9 * (len(head) - 1))] / MiB  # the 90th percentile: the cap lifts
    # between two of the slow operator's tasks, when it has no input in flight
    tasks = max(s["op_tasks"][i] for s in samples for i, name in enumerate(s["operators"])
                if "_head" in name and "_slow_tail" not in name)
    if cap:
        # the cap is two 2 MiB blocks; it refuses new inputs only, so each head task still
        # running when the cap was reached adds its block past it (the policy reads every
        # running task's outputs), and a sample may fall between a read and the next check
        bound = 4 + 2 * tasks + 2.5
        assert held <= bound, f"the head held {held:.1f} MiB of outputs (90th percentile), over {bound} MiB"
    else:
        assert held >= 16, f"without the cap the head held only {held:.1f} MiB: the test no longer shows the cap"


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_a_fixed_window_is_what_the_consumer_asked_for(ray_cluster):
    splits = push_split(ray.data.range(300, override_num_blocks=10), 2, window="fixed")
    (out, _) = _run(splits, batch_size=10, prefetch_batches=3, delays={0: (0.01,)})
    assert sorted(i for per_split in out for i in per_split[0]) == list(range(300))
    state = splits[0].debug_state()
    final = state["finished_epochs"][-1]["splits"] if state["finished_epochs"] else state["splits"]
    assert {f["window_rows"] for f in final.values()} == {30} and not state["window_history"]
    with pytest.raises(ValueError, match="window must be one of"):
        push_split(ray.data.range(10), 2, window="elastic")


@pytest.mark.slow
def test_every_row_exactly_once_under_random_delays(ray_cluster):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    pool = [Consumer.remote() for _ in range(3)]  # reused: actor start-up dominates otherwise

    @hypothesis.settings(max_examples=8, deadline=None, derandomize=True)
    @hypothesis.given(n=st.integers(1, 3), num_blocks=st.integers(1, 9), batch_size=st.integers(1, 40),
                      prefetch=st.integers(1, 3), seed=st.integers(0, 2**16))
    def check(n, num_blocks, batch_size, prefetch, seed):
        rng = random.Random(seed)
        rows = 60 * n + rng.randrange(0, 30)
        ds = ray.data.range(rows, override_num_blocks=num_blocks)
        delays = {i: tuple(rng.choice((0.0, 0.0, 0.002, 0.01)) for _ in range(5)) for i in range(n)}
        (out, _) = _run(push_split(ds, n, equal=True), batch_size=batch_size, prefetch_batches=prefetch,
                        delays=delays, consumers=pool)
        ids = [i for per_split in out for i in per_split[0]]
        assert len(ids) == len(set(ids)), "a row was delivered twice"
        assert {len(s[0]) for s in out} == {rows // n}

    try:
        check()
    finally:
        for c in pool:
            ray.kill(c)


def test_out_of_range_split_index_is_rejected(ray_cluster):
    from raydata_course.push_split import PushSplitIterator

    splits = push_split(ray.data.range(10), 2)
    with pytest.raises(ValueError, match="split_idx must be between 0 and 1, got 2"):
        ray.get(splits[0]._coord.start_epoch.remote(2, Arrival(10, 10)))
    with pytest.raises(ValueError, match="Arrival with batch_rows >= 1"):
        ray.get(splits[0]._coord.start_epoch.remote(0, Arrival(0, 0)))
    with pytest.raises(ValueError, match="split_idx must be between 0 and 1, got -1"):
        PushSplitIterator(splits[0]._coord, -1, 2, "k")
    with pytest.raises(ValueError, match="positive integer batch_size"):
        next(iter(splits[0].iter_batches(batch_size=None)))


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_teardown_failure_fails_the_next_epoch_for_every_split(ray_cluster):
    ds = ray.data.range(40, override_num_blocks=2)
    splits = push_split(ds, 2)
    (out, consumers) = _run(splits, batch_size=10)
    assert sorted(out[0][0] + out[1][0]) == list(range(40))

    def break_teardown(coord):
        def boom(force):
            raise OSError("disk gone")

        coord._state.executor.shutdown = boom
        coord._state.teardown_thread = None

    ray.get(splits[0]._coord.__ray_call__.remote(break_teardown))
    refs = [c.consume.remote(s, 10, 1) for c, s in zip(consumers, splits)]
    for ref in refs:
        with pytest.raises(PushSplitError, match="tearing down epoch 0 failed.*disk gone"):
            ray.get(ref, timeout=60)
    # the barrier was released: a later epoch starts normally
    (out, _) = _run(splits, batch_size=10)
    assert sorted(out[0][0] + out[1][0]) == list(range(40))


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_a_dead_consumer_fails_the_others_quickly(ray_cluster):
    ds = ray.data.range(2000, override_num_blocks=40)
    splits = push_split(ds, 2, liveness_interval_s=0.5)
    consumers = [Consumer.remote() for _ in splits]
    slow = (0.05,)
    refs = [c.consume.remote(s, 10, 2, slow) for c, s in zip(consumers, splits)]
    deadline = time.monotonic() + 60
    while splits[0].debug_state()["splits"].get(0, {}).get("rows_consumed", 0) < 20:
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.2)
    ray.kill(consumers[1])
    t0 = time.monotonic()
    with pytest.raises(PushSplitError, match="consumer of split 1 died"):
        ray.get(refs[0], timeout=CONSUMER_DEATH_TIMEOUT_S + 10)
    assert time.monotonic() - t0 < CONSUMER_DEATH_TIMEOUT_S


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
@pytest.mark.parametrize("failure", ["actor pool cannot start", "a UDF raises midway"])
def test_an_execution_error_reaches_every_split_promptly(ray_cluster, failure):
    """Every push consumer raises the execution's own error, as every pull split does: when the
    epoch's execution cannot start (an actor pool waits for a GPU that is not there) and when
    it fails midway (a UDF raises on one block)."""
    class NeedsAGpu:  # defined here so that it travels by value (workers cannot import tests/)
        def __call__(self, batch):
            return batch

    def fail_on_block_3(batch):
        if int(batch["id"][0]) == 150:
            raise ValueError("bad block 150")
        return batch

    ctx = ray.data.DataContext.get_current()
    saved = ctx.wait_for_min_actors_s
    ctx.wait_for_min_actors_s = 3
    try:
        ds = ray.data.range(400, override_num_blocks=8)  # 50-row blocks
        if failure == "actor pool cannot start":
            ds = ds.map_batches(NeedsAGpu, batch_size=10, num_gpus=1, compute=ray.data.ActorPoolStrategy(size=1))
            expected = "Timed out while starting actors"
        else:
            ds = ds.map_batches(fail_on_block_3)
            expected = "bad block 150"
        splits = push_split(ds, 3)
        consumers = [Consumer.remote() for _ in splits]
        t0 = time.monotonic()
        refs = [c.consume.remote(s, 10, 1) for c, s in zip(consumers, splits)]
        for ref in refs:
            with pytest.raises(ray.exceptions.RayTaskError) as raised:
                ray.get(ref, timeout=90)
            assert isinstance(raised.value.as_instanceof_cause(), PushSplitError), raised.value
            assert expected in str(raised.value), str(raised.value)[-800:]
        assert time.monotonic() - t0 < 60
    finally:
        ctx.wait_for_min_actors_s = saved


def _settled_after_killing(coord, consumers, quiet_s=1.0, timeout_s=30.0):
    """Kill ``consumers``, wait until each is dead, then return the coordinator's
    ``debug_state()`` once its report counters have not moved for ``quiet_s`` seconds (reports
    a dead consumer sent before it died may still be on their way).

    Raises:
        AssertionError: a killed consumer still answered, or the counters still moved, after
            ``timeout_s`` seconds (each wait has its own ``timeout_s``).
    """
    for consumer in consumers:
        ray.kill(consumer, no_restart=True)
    deadline = time.monotonic() + timeout_s
    for consumer in consumers:  # ray.kill is asynchronous: a call may still run before the kill lands
        while True:
            try:
                ray.get(consumer.pid.remote(), timeout=5)
            except ray.exceptions.RayActorError:
                break
            except ray.exceptions.GetTimeoutError:
                pass
            assert time.monotonic() < deadline, f"a killed consumer still answered after {timeout_s} s"
            time.sleep(0.1)

    def counters(state):
        return (state["late_reports"], [(f["ignored_reports"], f["rows_consumed"]) for f in state["splits"].values()])

    state = ray.get(coord.debug_state.remote())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        again = ray.get(coord.debug_state.remote())
        if counters(again) == counters(state):
            return again
        state = again
    raise AssertionError(f"the coordinator's report counters still moved after {timeout_s} s: {counters(state)}")


@pytest.mark.slow  # Ray-backed, 10-35 s on two cores: make test runs it, make test-fast keeps one pipeline
def test_reports_late_duplicate_and_reordered(ray_cluster):
    """Direct protocol checks against the coordinator: deliveries reordered on arrival,
    duplicates and late reports ignored."""
    from raydata_course.push_split.inbox import Inbox

    inbox = Inbox()
    for seq in (2, 0, 2, 1, 0, 3):
        inbox.put(Delivery(seq, "block", rows=1, size_bytes=1), block=seq)
    assert [d.seq for d, block in inbox.ready] == [0, 1, 2, 3] == [block for _, block in inbox.ready]
    assert inbox.duplicates == 2 and inbox.max_reorder == 2

    ds = ray.data.range(40, override_num_blocks=4)
    splits = push_split(ds, 1)
    coord = splits[0]._coord
    (out, consumers) = _run(splits, batch_size=10)
    assert sorted(out[0][0]) == list(range(40))
    # The consumer's reporter thread may still send release reports after the split finished
    # (its last batch is freed when the consumer's loop lets it go), and each is ignored too.
    # So stop the only sender of the split's reports, then wait for the counters to settle.
    before = _settled_after_killing(coord, consumers)
    ray.get(coord.consumed.remote(0, 0, [RowRange(0, 0, 10)]))  # after the split finished
    ray.get(coord.consumed.remote(-1, 0, [RowRange(0, 0, 10)]))  # another epoch
    after = ray.get(coord.debug_state.remote())
    assert after["splits"][0]["rows_consumed"] == before["splits"][0]["rows_consumed"]
    assert after["splits"][0]["ignored_reports"] == before["splits"][0]["ignored_reports"] + 1
    assert after["late_reports"] == before["late_reports"] + 1


@pytest.mark.slow
def test_torch_trainer_workers_get_push_shards(ray_cluster, tmp_path):
    """Ray Train V2: the same training loop, shards from PushDataConfig, every row once
    per epoch across the workers."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from raydata_course.push_split.train import PushDataConfig

    @ray.remote(num_cpus=0)
    class Sink:
        def __init__(self):
            self.ids = []

        def add(self, kind, ids):
            self.ids.append((kind, ids))

        def get(self):
            return self.ids

    sink = Sink.options(name="push-split-sink", namespace="push-split-test").remote()

    def loop(config):
        import ray.train

        shard = ray.train.get_dataset_shard("train")
        out = ray.get_actor("push-split-sink", namespace="push-split-test")
        for epoch in range(2):
            ids = []
            for batch in shard.iter_torch_batches(batch_size=16, prefetch_batches=2):
                ids.extend(int(x) for x in batch["id"])
            ray.get(out.add.remote(type(shard).__name__, (epoch, ids)))

    trainer = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                           datasets={"train": ray.data.range(200, override_num_blocks=8)},
                           dataset_config=PushDataConfig(),
                           run_config=RunConfig(storage_path=str(tmp_path), name="push"))
    trainer.fit()
    got = ray.get(sink.get.remote())
    assert {kind for kind, _ in got} == {"PushSplitIterator"}
    for epoch in range(2):
        ids = [i for _, (e, part) in got if e == epoch for i in part]
        assert sorted(ids) == list(range(200))
    ray.kill(sink)


def test_a_sender_waits_as_a_consumer_only_when_its_consumer_has_no_batch_ready():
    """Ray Data relaxes its terminal operator's output backpressure while a consumer waits in
    ``get_output_blocking``; a sender whose consumer has a whole batch ready beyond the one in
    use polls instead (``Sender._await_output``), and blocks as soon as the consumer has none
    ready (the next decode then overlaps its step), a block is ready, or the execution ended."""
    from raydata_course.push_split.coordinator import PushSplitCoordinator
    from raydata_course.push_split.flow import SplitFlow
    from raydata_course.push_split.state import EpochState

    class Queue:
        ready = False

        def has_next(self, split_idx):
            return self.ready

    class State:
        def __init__(self):
            self.output_queue, self._finished, self._exception = Queue(), False, None

    class Executor:
        def __init__(self):
            self._output_node = (None, State())

    coordinator = object.__new__(PushSplitCoordinator)  # the method under test needs no actor
    coordinator._state = st = EpochState(1)
    st.epoch = 0
    flow = SplitFlow(window_rows=40, batch_rows=10, host=None)
    st.flows = {0: flow}
    executor = Executor()

    def waits(timeout_s=0.3):
        done = []
        t = threading.Thread(target=lambda: done.append(coordinator._await_output(0, 0, executor)), daemon=True)
        t.start()
        t.join(timeout_s)
        return t, done

    # the consumer has nothing: wait in Ray Data's call at once, as a starving consumer
    assert waits()[1] == [True]
    # one batch in use and none ready: still short, the next decode must overlap this step
    first = flow.push(object(), 10, 100)
    assert waits()[1] == [True]
    # a whole batch ready beyond the one in use and no block ready: poll, do not count as waiting
    flow.push(object(), 10, 100)
    t, done = waits()
    assert t.is_alive() and done == []
    # it asks for its next batch (the first is consumed): nothing is ready any more, it waits
    with st.cond:
        flow.apply([RowRange(first, 0, 10)], released=False)
        st.cond.notify_all()
    t.join(2.0)
    assert done == [True]
    # a block ready, or the execution ended or failed: take it at once
    flow.push(object(), 10, 100)
    executor._output_node[1].output_queue.ready = True
    assert waits()[1] == [True]
    executor._output_node[1].output_queue.ready = False
    executor._output_node[1]._finished = True
    assert waits()[1] == [True]
    executor._output_node[1]._finished = False
    t, done = waits()
    assert t.is_alive()
    with st.cond:  # the epoch moves on meanwhile: the sender stops
        st.epoch = 1
        st.cond.notify_all()
    t.join(2.0)
    assert done == [False]
    # another Ray release without these internals: block at once, as before
    assert coordinator._await_output(1, 0, object()) is True


def test_the_train_hook_passes_every_push_option_through():
    """``PushDataConfig`` hands ``push_split`` every option it takes, and refuses a bad one
    before Ray Train starts its workers."""
    import inspect

    from raydata_course.push_split.train import PushDataConfig

    options = {"liveness_interval_s": 2.0, "window": "fixed", "steer_on_store": True, "read_ahead_cap": False,
               "idle_wait": False, "control_interval_s": 0.25}
    assert PushDataConfig(**options).push_options == options
    taken = set(inspect.signature(push_split).parameters) - {"ds", "n", "equal", "locality_hints"}
    assert taken == set(options), taken
    with pytest.raises(ValueError, match="window must be one of"):
        PushDataConfig(window="elastic")
    with pytest.raises(ValueError, match="must be above 0 seconds"):
        PushDataConfig(control_interval_s=0)
