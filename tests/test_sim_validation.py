"""The simulator against the lab: predicted peak and rate per variant, against the measured lab
run committed for the playground (``playground/lab/``, written by ``make lab`` into
``build/lab/playground/`` beside the tables that go to ``docs/lab/``).

Targets (the playground's issue): the peak within 15 % and the consumers' rate after their
first batch within 20 % for every pull and push variant, slow and fast. A variant the model
is known to miss is listed in ``KNOWN_MISSES`` with the mechanism it leaves out and its
measured size; the test fails if such a variant starts to meet its target (so the note can
go) as well as when any other variant misses. The committed run and ``docs/lab/`` must be one
run (their run ids). The quick lab's own run is compared in ``tests/test_lab.py``
(``test_quick_lab_reproduces_the_overage``).
"""

import json
import re
from pathlib import Path

import pytest

from raydata_course.lab.model_check import compare, format_comparison, ingest_config
from raydata_course.lab.playground_data import trim_results

ROOT = Path(__file__).resolve().parents[1]
LAB_RESULTS = ROOT / "playground" / "lab" / "results.json"
DOCS_LAB = ROOT / "docs" / "lab"

#: (variant, setting, "peak" | "throughput") → the mechanism the model leaves out, with its
#: measured size in the committed run, for each miss.
KNOWN_MISSES: dict[tuple[str, str, str], str] = {
    ("driver-fast", "lazy free", "peak"): (
        "the fast driver consumer's hidden batches: pinned without a ref at the peak, lab 96 MiB, model 191 MiB; "
        "the lab's consumer waited 0.117 s per batch (stall fraction 0.42) and its format stage ran part empty, "
        "while the model's producer keeps ahead of it and fills the N + 2 = 6 hidden slots"),
    ("driver-fast", "lazy free", "throughput"): (
        "the decode beside a consumer that trains on whole batches: after the first batch the lab's producer ran "
        "0.93-0.97 decode tasks on average and made 3.86-3.92 batches/s beside the consumer's 0.13-0.14 s step; "
        "the model's made 4.88 (4.01 taken in the lab against 4.88)"),
    ("train-fast", "lazy free", "peak"): (
        "pull's start-up stock: its consumers got their first batch 3.9-9.2 s into the epoch, by when pull had "
        "read every file and decoded ahead, Ray Data believing up to 485 MiB against its 256 MiB budget (over it, "
        "Ray Data still starts a task whenever no task runs at all, the topology's liveness rule); the model's "
        "consumers ask from the start and its executor stops at the budget: referenced by a ref at the peak, lab "
        "428 MiB, model 11 MiB"),
    ("train-fast", "free 0 ms", "peak"): (
        "pull's start-up stock, as with the lazy free: the first batch 3.3-5.1 s into the epoch, every file read "
        "by then; referenced by a ref at the peak, lab 403 MiB, model 11 MiB"),
    ("train-fast", "lazy free", "throughput"): (
        "the decode's concurrency: over its budget, the lab's pull executor ran one decode at a time after the "
        "first batch (0.75-0.96 tasks on average, 6.0-7.4 blocks/s), the model's two at once on two full cores "
        "(10.79 batches/s)"),
    ("train-fast", "free 0 ms", "throughput"): (
        "the decode's concurrency, as with the lazy free: the lab's pull ran 0.89-0.96 decode tasks on average "
        "after the first batch (7.0-7.7 blocks/s), the model two at once (11.37 batches/s)"),
    ("train-fast-push", "lazy free", "throughput"): (
        "two decodes on this machine's two CPUs, beside the reads: push ran 0.97-1.33 decode tasks on average "
        "after the first batch (6.3-7.3 blocks/s) while it read the files pull had read before its first batch; "
        "beside the two consumers, the coordinator and Ray's own processes, a second decode added few blocks; "
        "the model runs them on two full cores (11.55 batches/s)"),
    ("train-fast-push", "free 0 ms", "throughput"): (
        "two decodes on two CPUs beside the reads, as with the lazy free: 0.95-1.29 decode tasks on average, "
        "6.0-7.3 blocks/s; the model 11.56 batches/s"),
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
        if not r[f"{measure}_met"]:
            assert r[f"{measure}_miss"], f"{r['variant']} ({r['setting']}) misses its {measure} and says nowhere why"
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


def test_compare_shares_the_cores_with_the_steps_and_the_machine_s_other_work(tmp_path, rows):
    """The producer runs at its tasks' CPU time on the machine's cores, shared with the steps
    (their CPU seconds, on as many cores as the run's step used) and with the machine's other
    CPU per batch as the run measured it: more of either slows the producer the model predicts."""
    trim_results(LAB_RESULTS.parent, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    data["runs"] = [r for r in data["runs"] if r["variant"] == "driver-fast"]
    for r in data["runs"]:
        r["step_s_median"], r["step_cpu_s_median"] = 0.1, 0.2
        r["cpu_after_first_batch"] = {"window_s": 10.0, "machine_cpu_s": 18.0, "steps_cpu_s": 4.0, "batches": 20,
                                      "decoded_batches": 20}
    (tmp_path / "results.json").write_text(json.dumps(data))
    (tmp_path / "free0" / "results.json").unlink(missing_ok=True)
    [row] = compare(tmp_path / "results.json")
    task_s = data["meta"]["task_s"]
    inputs = row["inputs"]
    assert row["producer_speed"] == "cpu" and inputs["operators"][-1]["task_s"] == task_s["decode_block_cpu_s"]
    assert inputs["step_on_cores"] and inputs["step_width"] == 2.0 and inputs["step_s"] == pytest.approx(0.1)
    per_block = task_s["read_block_cpu_s"] + task_s["decode_block_cpu_s"]
    assert inputs["overhead_cpu_s"] == pytest.approx((18.0 - 4.0 - 20 * per_block) / 20, abs=1e-4)
    busier = json.loads((tmp_path / "results.json").read_text())
    for r in busier["runs"]:
        r["cpu_after_first_batch"]["machine_cpu_s"] = 60.0
    (tmp_path / "results.json").write_text(json.dumps(busier))
    [loaded] = compare(tmp_path / "results.json")
    assert loaded["inputs"]["overhead_cpu_s"] > inputs["overhead_cpu_s"]
    assert loaded["predicted_batches_per_s"] < 0.8 * row["predicted_batches_per_s"]


def test_a_results_file_without_the_rate_after_the_first_batch_says_to_rerun_the_lab(tmp_path):
    trim_results(LAB_RESULTS.parent, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    for r in data["runs"]:
        r.pop("consumption_batches_per_s", None)
    (tmp_path / "results.json").write_text(json.dumps(data))
    (tmp_path / "free0" / "results.json").unlink(missing_ok=True)
    with pytest.raises(KeyError, match="predates it: run `make lab` again"):
        compare(tmp_path / "results.json")


def test_the_playground_shows_the_run_docs_lab_holds():
    """One lab run behind both: ``playground/lab/`` (what the playground's build and notebooks
    read) and ``docs/lab/`` (the tables and the model-against-lab table) carry one run id."""
    run_id = json.loads(LAB_RESULTS.read_text())["meta"].get("run_id")
    assert run_id, f"{LAB_RESULTS.relative_to(ROOT)} has no run id: copy a fresh `make lab` run's build/lab/playground/"
    free0 = LAB_RESULTS.parent / "free0" / "results.json"
    assert json.loads(free0.read_text())["meta"].get("run_id") == run_id
    for name in ("table.md", "table-push.md", "table-model.md"):
        first = (DOCS_LAB / name).read_text().splitlines()[0]
        found = re.match(r"Lab run (\S+?):?(\s|$)", first)
        assert found and found.group(1) == run_id, (
            f"docs/lab/{name} is from run {found.group(1) if found else '(none)'}, the playground's data from {run_id}: "
            "copy build/lab/*.md, *.png to docs/lab/ and build/lab/playground/ to playground/lab/ from one `make lab`")


def test_every_row_sets_the_model_beside_the_lab_for_belief_hidden_bytes_and_waits(rows):
    for r in rows:
        for key in ("believed_bytes", "hidden_bytes", "wait_s", "stall_fraction"):
            assert r[f"measured_{key}"] is not None and r[f"predicted_{key}"] is not None, (r["variant"], key)
    table = format_comparison(rows)
    assert "wait s: lab" in table and "stall D: lab" in table and "believed MiB: lab" in table
