"""The simulator of streaming ingest (raydata_course.sim): its mechanisms, one at a time."""

import ast
from pathlib import Path

import pytest
import simpy

from raydata_course.lab.buffer_model import hidden_batches
from raydata_course.sim import IngestConfig, Operator, simulate
from raydata_course.sim.cores import SharedCores
from raydata_course.units import MiB

SIM = Path(__file__).resolve().parents[1] / "src" / "raydata_course" / "sim"
BLOCK = 32 * MiB


def _config(**changes):
    base = dict(operators=[Operator("read", 0.02, 2 * MiB), Operator("decode", 0.2, BLOCK)],
                budget_bytes=256 * MiB, prefetch_batches=4, step_s=0.05, delay_s=0.25,
                batches_per_consumer=30, task_slots=4, free_period_s=0.0)
    return IngestConfig(**{**base, **changes})


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        yield from ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module] if isinstance(node, ast.ImportFrom) else [])


def test_the_simulator_imports_nothing_that_pyodide_lacks():
    """It must run in the browser: only the standard library, simpy, itself and the push
    split's pure rules, which the browser wheel ships beside it (``PUSH_RULES``); those rules
    import only the standard library and each other."""
    from raydata_course.playground.site import PUSH_RULES

    rules = {f"raydata_course.push_split.{name[:-3]}" for name in PUSH_RULES}
    allowed_roots = {"simpy", "raydata_course", "__future__", "collections", "dataclasses", "typing", "math", "html",
                     "statistics"}
    for path in SIM.glob("*.py"):
        for name in _imports(path):
            root = name.split(".")[0]
            assert root in allowed_roots, f"{path.name} imports {name}"
            if root == "raydata_course":
                assert name.startswith("raydata_course.sim") or name in rules, \
                    f"{path.name} imports {name}: sim depends on nothing of ours but the push split's pure rules"
    for name in PUSH_RULES:
        path = SIM.parent / "push_split" / name
        for imported in _imports(path):
            root = imported.split(".")[0]
            assert root in allowed_roots | {"logging"} and (root != "raydata_course" or imported in rules), \
                f"push_split/{name} imports {imported}: the browser has only the pure rules"


@pytest.mark.parametrize("consumers", [1, 2])
@pytest.mark.parametrize("pf", [0, 1, 2, 4, 8])
def test_a_slow_pull_consumer_hides_the_batches_the_buffer_model_derives(pf, consumers):
    t = simulate(_config(prefetch_batches=pf, consumers=consumers, delay_s=0.5))
    expected = hidden_batches(pf, format_cap=4, design="iter_threaded").nominal
    assert t.hidden_peak_bytes == expected * consumers * BLOCK


def test_hidden_batches_follow_the_format_cap():
    t = simulate(_config(prefetch_batches=8, format_cap=2, delay_s=0.5))
    assert t.hidden_peak_bytes == hidden_batches(8, format_cap=2, design="iter_threaded").nominal * BLOCK


@pytest.mark.parametrize("split", ["pull", "push"])
def test_backpressure_holds_what_ray_data_counts_near_the_budget(split):
    """A fast producer and a slow consumer: the executor stops at the budget; the counted bytes
    go over it by at most one block (the task that an idle operator may always start)."""
    cfg = _config(split=split, delay_s=0.5, operators=[Operator("decode", 0.01, BLOCK)], task_slots=8)
    t = simulate(cfg)
    assert max(t.counted_bytes) <= cfg.budget_bytes + BLOCK
    assert max(t.believed_bytes) >= cfg.budget_bytes - BLOCK  # the budget is used, not left idle
    if split == "pull":
        assert t.peak_bytes > cfg.budget_bytes + 4 * BLOCK  # the hidden batches come on top
    else:
        assert t.hidden_peak_bytes == 0 and t.peak_bytes <= cfg.budget_bytes + BLOCK


def test_an_operator_may_go_over_the_budget_only_to_keep_the_pipeline_moving():
    """A budget smaller than one block: no task fits, so without the idle operator's one
    task the pipeline would stall; with it, every batch arrives, one block at a time."""
    cfg = _config(consumers=2, budget_bytes=BLOCK // 2, prefetch_batches=4, delay_s=0.1)
    t = simulate(cfg)
    assert t.batches == 60
    assert t.events["over_budget_launches"] > 0
    assert max(t.believed_bytes) <= 2 * (BLOCK + 2 * MiB)  # one task per operator, at most
    small = simulate(_config(budget_bytes=64 * MiB, prefetch_batches=1))
    assert small.batches == 30 and max(small.counted_bytes) <= 64 * MiB + BLOCK


@pytest.mark.parametrize("split", ["pull", "push"])
@pytest.mark.parametrize("consumers", [1, 3])
def test_every_batch_is_delivered_once(split, consumers):
    cfg = _config(split=split, consumers=consumers, batches_per_consumer=17, delay_s=0.0)
    t = simulate(cfg)
    assert [len(times) for times in t.batch_done_s] == [17] * consumers
    assert t.delivered_batches[-1] == 17 * consumers == t.batches
    assert all(b >= a for a, b in zip(t.delivered_batches, t.delivered_batches[1:]))
    assert t.events["tasks"] == 2 * 17 * consumers  # one read and one decode per batch
    assert all(sorted(times) == times for times in t.batch_done_s)


def test_lazy_free_shows_up_as_freed_not_deleted_bytes():
    lazy = simulate(_config(free_period_s=1.0))
    eager = simulate(_config(free_period_s=0.0))
    assert max(eager.freed_bytes) == 0
    assert max(lazy.freed_bytes) >= BLOCK
    assert lazy.peak_bytes > eager.peak_bytes
    # deletion happens on the raylet's clock: freed bytes fall only at whole periods
    for i in range(1, len(lazy.t_s)):
        if lazy.freed_bytes[i] < lazy.freed_bytes[i - 1]:
            assert lazy.freed_bytes[i] == 0 and abs(lazy.t_s[i] - round(lazy.t_s[i])) < 1e-6


def test_the_free_timer_phase_moves_when_freed_blocks_leave():
    """The raylet's free timer meets the epoch at some phase: frees run at phase + k * period."""
    for phase in (0.25, 0.6):
        t = simulate(_config(free_period_s=1.0, free_phase_s=phase))
        drops = [t.t_s[i] for i in range(1, len(t.t_s)) if t.freed_bytes[i] < t.freed_bytes[i - 1]]
        assert drops, "some freed blocks must have waited for a free"
        assert all(t.freed_bytes[t.t_s.index(d)] == 0 and abs((d - phase) - round(d - phase)) < 1e-6
                   for d in drops), (phase, drops)
    peaks = {simulate(_config(free_period_s=1.0, free_phase_s=k / 4)).peak_bytes for k in range(4)}
    assert all(p >= simulate(_config(free_period_s=0.0)).peak_bytes for p in peaks)


def test_a_slow_consumer_sets_the_rate_and_a_fast_one_leaves_it_to_the_producer():
    slow = simulate(_config(delay_s=0.25, consumers=2, batches_per_consumer=40))
    assert slow.midrun_batches_per_s == pytest.approx(2 / 0.30, rel=0.02)
    # 2 cores for 4 decode tasks of 0.2 s: at most 10 blocks/s, reads take their share
    fast = simulate(_config(delay_s=0.0, step_s=0.0, cores=2, batches_per_consumer=60))
    assert 8.0 < fast.midrun_batches_per_s <= 10.0


def test_shared_cores_slow_every_running_task_down():
    env = simpy.Environment()
    cores = SharedCores(env, cores=2)
    ends = []

    def job(work_s):
        yield cores.run(work_s)
        ends.append(round(env.now, 6))

    for work_s in (1.0, 1.0, 1.0, 1.0):
        env.process(job(work_s))
    env.run()
    assert ends == [2.0] * 4
    with pytest.raises(ValueError, match="cores must be positive"):
        SharedCores(env, cores=0)


def test_the_timeline_splits_the_store_and_reads_like_the_lab_sampler():
    t = simulate(_config(free_period_s=1.0))
    assert all(u == c + h + f for u, c, h, f in zip(t.used_bytes, t.counted_bytes, t.hidden_bytes, t.freed_bytes))
    sampled = t.sampled(0.1)
    assert sampled["t_s"][:3] == [0.0, 0.1, 0.2]
    assert max(sampled["counted_bytes"]) <= max(t.counted_bytes)
    with pytest.raises(ValueError, match="period_s must be positive, got 0"):
        t.sampled(0)


@pytest.mark.parametrize("changes,message", [
    ({"split": "broadcast"}, "split must be 'pull' or 'push', got 'broadcast'"),
    ({"consumers": 0}, "consumers must be at least 1, got 0"),
    ({"prefetch_batches": -1}, "prefetch_batches must be >= 0, got -1"),
    ({"split": "push", "send_s": -0.1}, "send_s must be >= 0 seconds, got -0.1"),
    ({"split": "push", "control_interval_s": 0}, "control_interval_s must be positive seconds, got 0"),
    ({"budget_bytes": 0}, "budget_bytes must be positive, got 0"),
    ({"delay_s": -1.0}, "delay_s must be >= 0 seconds, got -1.0"),
    ({"free_period_s": 1.0, "free_phase_s": 1.0}, "free_phase_s must be below free_period_s (1.0 s), got 1.0"),
])
def test_bad_configurations_say_what_was_wrong(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _config(**changes)
    with pytest.raises(ValueError, match="task_s must be >= 0 seconds, got -0.5"):
        Operator("decode", -0.5, BLOCK)


def test_a_window_ray_data_does_not_charge_lets_the_executor_run_ahead_by_it():
    """A ``streaming_split`` iterator's refs live in another process: the budget does not
    charge them, so what Ray Data believes stays at the budget while more bytes are referenced."""
    fast_source = [Operator("decode", 0.01, BLOCK)]
    charged = simulate(_config(operators=fast_source, consumers=2, delay_s=0.5))
    uncharged = simulate(_config(operators=fast_source, consumers=2, delay_s=0.5, window_counted=False))
    budget = 256 * MiB
    assert max(charged.counted_bytes) <= budget + BLOCK
    assert max(uncharged.believed_bytes) <= budget + BLOCK
    assert max(uncharged.counted_bytes) >= budget + 2 * 4 * BLOCK - BLOCK  # two windows of 4 on top
    assert uncharged.peak_bytes > charged.peak_bytes


def test_the_push_split_runs_the_coordinators_own_rules():
    """One control rule, two users: the simulator's push side imports the coordinator's
    window controller, flow and share; it does not copy them."""
    from raydata_course.push_split import flow, window
    from raydata_course.sim import push

    assert push.WindowController is window.WindowController and push.SplitFlow is flow.SplitFlow
    assert push.ExecutorShare is window.ExecutorShare and push.read_ahead_cap_bytes is window.read_ahead_cap_bytes


def test_push_double_buffers_a_slow_consumer_within_the_budget():
    """A producer that outruns its consumers: each window stays at its floor (one batch ready
    beside the one in use), nobody waits after the first batch, and the store holds the
    budget with the lazy free off."""
    cfg = _config(split="push", consumers=2, delay_s=0.5, operators=[Operator("decode", 0.05, BLOCK)])
    t = simulate(cfg)
    assert t.batches == 60 and t.hidden_peak_bytes == 0
    assert {w for ws in t.windows_batches for w in ws} == {1}
    assert t.stall_fraction == 0.0 and t.wait_s_median == 0.0
    assert t.peak_bytes <= cfg.budget_bytes + BLOCK


def test_push_grows_the_window_of_a_stalled_consumer_the_producer_fills():
    """A bursty producer (four decode slots, slow tasks) and a consumer that needs a batch
    faster than one task makes one: the consumer stalls while its window fills between
    bursts, so the controller grows it, never past what the budget leaves (W + 2R <= B)."""
    cfg = _config(split="push", consumers=1, delay_s=0.0, step_s=0.1, batches_per_consumer=60,
                  operators=[Operator("decode", 0.6, BLOCK)], task_slots=8, prefetch_batches=6)
    t = simulate(cfg)
    grown = max(max(ws) for ws in t.windows_batches)
    assert grown > 1
    assert (grown + 1) * BLOCK + 2 * BLOCK <= cfg.budget_bytes
    assert t.batches == 60


def test_push_warns_when_the_budget_cannot_hold_the_double_buffers():
    """The controller's own warning, with the numbers, reaches the timeline (not the log)."""
    t = simulate(_config(split="push", consumers=4, budget_bytes=4 * BLOCK, prefetch_batches=2, delay_s=0.1))
    assert t.batches == 120
    assert any("cannot hold the consumers' double buffers" in w for w in t.warnings)
