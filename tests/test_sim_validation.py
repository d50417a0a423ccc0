"""The simulator against the lab: predicted peak and throughput per variant, against the
measured lab run committed for the playground (``playground/lab/``, from ``make lab``).

Targets (the playground's issue): the peak within 15 % and the mid-run throughput within 20 %
for every pull and push variant, slow and fast. A variant the model is known to miss is
listed in ``KNOWN_MISSES`` with the mechanism it lacks; the test fails if such a variant
starts to meet its target (so the note can go) as well as when any other variant misses.
The quick lab's own run is compared in ``tests/test_lab.py`` (``test_quick_lab_reproduces_the_overage``).
"""

from pathlib import Path

import pytest

from raydata_course.lab.model_check import compare, format_comparison, ingest_config, trim_results

ROOT = Path(__file__).resolve().parents[1]
LAB_RESULTS = ROOT / "playground" / "lab" / "results.json"

#: (variant, setting, "peak" | "throughput") → the mechanism the model lacks, for each miss.
_PUSH_TRANSPORT = ("the model hands a pushed block over at once; the push split's transport (an actor call per "
                   "block, the consumer's consumption reports, the coordinator's lock) costs time per block, and in "
                   "the lab push ran at 0.34-0.70 of pull's mid-run rate")
KNOWN_MISSES: dict[tuple[str, str, str], str] = {
    ("driver-fast", "lazy free", "peak"): (
        "the model's producer is too fast: it runs the decode task at the time measured alone (0.11 s a block) and "
        "shares the cores only among Ray Data's tasks; in the lab the training loop, the consumer's ray.get and "
        "tensor conversion and another process's load slowed it to 1.5 batches/s, so fewer batches waited (the "
        "same cause as the throughput miss)"),
    ("driver-fast", "lazy free", "throughput"): "see its peak: the producer's share of the CPUs is not modelled",
    ("train-slow-push", "lazy free", "throughput"): _PUSH_TRANSPORT,
    ("train-fast-push", "lazy free", "throughput"): _PUSH_TRANSPORT,
    ("train-fast-push", "free 0 ms", "throughput"): _PUSH_TRANSPORT,
    ("train-slow-push", "free 0 ms", "peak"): (
        "the lab's push peak (372 MiB) went past the budget plus one block per consumer: Ray's plan has four "
        "operators (ListFiles, ReadFiles, StreamingRepartition, MapBatches), each allowed a task over the budget "
        "when idle, and the model has two"),
}


@pytest.fixture(scope="module")
def rows():
    if not LAB_RESULTS.is_file():
        pytest.fail(f"{LAB_RESULTS.relative_to(ROOT)} is missing: the committed lab run the playground shows")
    found = compare(LAB_RESULTS)
    print("\n" + format_comparison(found))
    return found


def test_the_committed_lab_run_covers_every_variant_pull_and_push_slow_and_fast(rows):
    names = {r["variant"] for r in rows}
    for name in ("driver-slow", "driver-fast", "train-slow", "train-fast", "train-slow-push", "train-fast-push"):
        assert name in names, f"{name} is missing from {LAB_RESULTS.relative_to(ROOT)}"


@pytest.mark.parametrize("measure", ["peak", "throughput"])
def test_the_model_meets_its_targets_or_the_miss_is_named(rows, measure):
    wrong = []
    for r in rows:
        key = (r["variant"], r["setting"], measure)
        met = r[f"{measure}_met"]
        error = r["peak_error" if measure == "peak" else "throughput_error"]
        if key in KNOWN_MISSES and met:
            wrong.append(f"{key} now meets its target ({error:+.0%}): drop it from KNOWN_MISSES")
        elif key not in KNOWN_MISSES and not met:
            wrong.append(f"{key}: {measure} off by {error:+.0%}")
    assert not wrong, "\n".join(wrong) + "\n\n" + format_comparison(rows)


def test_the_model_predicts_the_overage_of_the_slow_pull_variants_and_none_for_push(rows):
    for r in rows:
        if r["variant"].endswith("-slow"):
            assert r["predicted_peak_bytes"] > r["inputs"]["budget_bytes"], r["variant"]
            assert r["predicted_hidden_bytes"] > 0
        if r["split"] == "push":
            assert r["predicted_hidden_bytes"] == 0


def test_the_prediction_is_a_range_over_the_free_timer_and_the_producer_speed(rows):
    """Lazy free: the model runs at every phase of the raylet's free timer, so its range holds the
    phase-0 figure; lazy free off has no timer. A measurement inside the range has error 0."""
    from raydata_course.lab.model_check import _range_error

    for r in rows:
        assert r["predicted_peak_low_bytes"] <= r["predicted_peak_bytes"] <= r["predicted_peak_high_bytes"]
        if r["setting"] == "free 0 ms":
            assert r["predicted_peak_low_bytes"] == r["predicted_peak_high_bytes"], r["variant"]
    assert any(r["predicted_peak_low_bytes"] < r["predicted_peak_high_bytes"] for r in rows if r["setting"] == "lazy free")
    assert _range_error(100, 120, 110) == 0.0
    assert _range_error(100, 120, 80) == pytest.approx(0.25) and _range_error(100, 120, 150) == pytest.approx(-0.2)


def test_ingest_config_says_when_the_results_predate_task_timing():
    config = {"mode": "driver", "num_cpus": 4, "consumers": 1, "cpus_per_worker": 0.5, "batch_bytes": 1 << 25,
              "batches_per_consumer": 3, "prefetch_batches": 4, "step_delay_s": 0.25}
    with pytest.raises(KeyError, match="predates the lab's task timing"):
        ingest_config(config, {}, step_s=0.1, budget_bytes=1 << 28, cores=2)
    cfg = ingest_config({**config, "mode": "train", "consumers": 2},
                        {"read_block_s": 0.05, "decode_block_s": 0.5, "read_block_bytes": 1 << 22},
                        step_s=0.1, budget_bytes=1 << 28, cores=2)
    assert cfg.task_slots == 3 and cfg.consumers == 2 and cfg.block_bytes == 1 << 25
    with pytest.raises(KeyError, match="lacks the tasks' CPU times"):
        ingest_config(config, {"read_block_s": 0.05, "decode_block_s": 0.5, "read_block_bytes": 1 << 22},
                      step_s=0.1, budget_bytes=1 << 28, cores=2, cpu_time=True)
    fast = ingest_config(config, {"read_block_s": 0.05, "decode_block_s": 0.5, "read_block_cpu_s": 0.01,
                                  "decode_block_cpu_s": 0.1, "read_block_bytes": 1 << 22},
                         step_s=0.1, budget_bytes=1 << 28, cores=2, cpu_time=True)
    assert [op.task_s for op in fast.operators] == [0.01, 0.1]


def test_trim_results_keeps_what_the_comparison_needs(tmp_path, rows):
    written = trim_results(LAB_RESULTS.parent, tmp_path)
    assert written and written[0].stat().st_size <= LAB_RESULTS.stat().st_size
    again = compare(tmp_path / "results.json")
    assert [(r["variant"], r["predicted_peak_bytes"]) for r in again] == [
        (r["variant"], r["predicted_peak_bytes"]) for r in rows]


def test_in_run_task_s_is_each_operator_s_seconds_per_block_during_the_run():
    """The run's own producer speed: generation seconds per row times the batch's rows, the
    median over repeats; none where an operator is missing or the read and decode are fused."""
    from raydata_course.lab.model_check import in_run_task_s

    def run(read_s, decode_s, read_name="ReadFilesParquetV2"):
        return {"operator_generation": {"ListFiles": {"generation_s": 3.0, "rows": 12},
                                        read_name: {"generation_s": read_s, "rows": 1000},
                                        "MapBatches(decode_and_augment)": {"generation_s": decode_s, "rows": 1000}}}

    got = in_run_task_s([run(2.0, 10.0), run(4.0, 30.0), run(3.0, 20.0)], batch_rows=100)
    assert got == pytest.approx({"read_block_s": 0.3, "decode_block_s": 2.0})
    assert in_run_task_s([run(2.0, 10.0), {}], batch_rows=100) is None
    fused = {"operator_generation": {"ReadFiles->MapBatches(decode_and_augment)": {"generation_s": 5.0, "rows": 10}}}
    assert in_run_task_s([fused], batch_rows=10) is None
    assert in_run_task_s([], batch_rows=10) is None


def test_compare_runs_the_model_at_the_run_s_own_producer_speed_and_mid_run_step(tmp_path, rows):
    """A run that recorded its operators' generation times gets a third producer speed, at which
    the tasks share no cores (the times hold the sharing); a slow in-run producer pulls the low
    end of the predicted throughput down. The step is the mid-run window's median."""
    import json

    trim_results(LAB_RESULTS.parent, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    data["runs"] = [r for r in data["runs"] if r["variant"] == "driver-fast"]
    rows_per_batch = data["runs"][0]["config"]["batch_rows"]
    for r in data["runs"]:
        r["operator_generation"] = {"ReadFilesParquetV2": {"generation_s": 0.5, "rows": rows_per_batch},
                                    "MapBatches(decode_and_augment)": {"generation_s": 12.0, "rows": rows_per_batch}}
        r["midrun_step_s_median"] = 0.2
    (tmp_path / "results.json").write_text(json.dumps(data))
    (tmp_path / "free0").mkdir(exist_ok=True)
    (tmp_path / "free0" / "results.json").unlink(missing_ok=True)
    [row] = compare(tmp_path / "results.json")
    before = next(r for r in rows if r["variant"] == "driver-fast" and r["setting"] == "lazy free")
    assert row["producer_speeds"][-1] == "in-run" and row["in_run_task_s"] == pytest.approx(
        {"read_block_s": 0.5, "decode_block_s": 12.0})
    assert row["inputs"]["step_s"] == 0.2
    # the driver's four task slots at 12 s a block: at most 1/3 batch/s, far below the timed speeds
    assert row["predicted_batches_per_s_low"] <= 1 / 3 + 1e-9 < 0.5 * before["predicted_batches_per_s_low"]
