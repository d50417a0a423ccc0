"""Chapter 07's helpers: the photo shards, the UDFs, the order metrics, Ray's stats text as numbers and the
rule that keeps a step."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from raydata_course.chapters import ch07_ingest_tuning as tuning
from raydata_course.chapters import ch07_stats as ray_stats
from raydata_course.chapters.ch07_decide import StepTimes, decide, measure_repeats

STATS = """Operator 0 ReadFiles: 

Operator 1 ListFiles: 1 tasks executed, 1 blocks produced in 0.88s
* Remote wall time: 880.22ms min, 880.22ms max, 880.22ms mean, 880.22ms total
* Remote cpu time: 213.6ms min, 213.6ms max, 213.6ms mean, 213.6ms total
* Output num rows per block: 32 min, 32 max, 32 mean, 32 total
* Output size bytes per block: 2660 min, 2660 max, 2660 mean, 2660 total

Operator 2 ReadFilesParquetV2->RandomShuffle: executed in 8.6s

\tSuboperator 0 ReadFilesParquetV2->RandomShuffleMap: 1 tasks executed, 1 blocks produced
\t* Remote wall time: 1.51s min, 1.51s max, 1.51s mean, 1.51s total
\t* Remote cpu time: 2.49s min, 2.49s max, 2.49s mean, 2.49s total
\t* Output num rows per block: 2048 min, 2048 max, 2048 mean, 2048 total
\t* Output size bytes per block: 90949138 min, 90949138 max, 90949138 mean, 90949138 total

Operator 3 MapBatches(decode_and_augment)->Filter(<lambda>): 1 tasks executed, 2 blocks produced in 2.28s
* Remote wall time: 14.37ms min, 2.19s max, 1.1s mean, 2.2s total
* Remote cpu time: 381.3us min, 2.19s max, 1.1s mean, 2.2s total
* Output num rows per block: 91 min, 891 max, 491 mean, 982 total
"""


def test_operator_table_reads_operators_and_suboperators_from_ray_2_60_stats():
    rows = ray_stats.operator_table(STATS)
    assert [(r["operator"], r["tasks"]) for r in rows] == [
        ("ListFiles", 1), ("ReadFilesParquetV2->RandomShuffleMap", 1),
        ("MapBatches(decode_and_augment)->Filter(<lambda>)", 1)]
    assert rows[0]["wall_s"] == 0.88 and rows[0]["cpu_s"] == 0.214 and rows[0]["output_rows"] == 32
    assert rows[1]["output_MiB"] == round(90949138 / 2**20, 1) and rows[1]["cpu_s"] == 2.49
    assert rows[2]["output_rows"] == 982 and rows[2]["output_MiB"] is None
    assert ray_stats.operator_table("") == []


def test_order_metrics_tell_stored_from_shuffled_order():
    kept = np.flatnonzero(np.random.default_rng(0).random(2000) < 0.5)  # a filter dropped rows in between
    assert tuning.order_metrics(kept) == {"in_order_pairs": 1.0, "mean_displacement": 0.0}
    shuffled = tuning.order_metrics(np.random.default_rng(1).permutation(kept))
    assert shuffled["in_order_pairs"] < 0.01 and 0.28 < shuffled["mean_displacement"] < 0.38
    blocks = np.concatenate([kept[i:i + 64] for i in range(0, len(kept), 64)][::-1])  # whole blocks moved
    moved = tuning.order_metrics(blocks)
    assert moved["in_order_pairs"] > 0.95 and moved["mean_displacement"] > 0.3
    with pytest.raises(ValueError, match="at least 2 rows"):
        tuning.order_metrics([3])


def test_photo_shards_and_the_udfs(tmp_path):
    from raydata_course.lab.photos import build_image_parquet

    jpeg = build_image_parquet(tmp_path / "jpeg", 10, encoded_side=tuning.DECODED_SIDE, rows_per_file=10)
    out = tuning.write_photo_shards(jpeg, tmp_path / "shards", rows_per_file=4)
    files = sorted(out.glob("shard-*.parquet"))
    assert [pq.read_metadata(f).num_rows for f in files] == [4, 4, 2]
    table = pq.read_table(out)
    assert table.column_names == ["id", "label", "image", "preview"]
    assert table.column("id").to_pylist() == list(range(10))
    assert {len(p) for p in table.column("preview").to_pylist()} == {tuning.PREVIEW_SIDE ** 2 * 3}
    batch = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    decoded = tuning.decode_jpeg(batch)
    assert set(decoded) == {"id", "label", "pixels"} and decoded["pixels"].shape == (10, 240, 240, 3)
    a, b = tuning.random_crop_flip(decoded, seed=3), tuning.random_crop_flip(decoded, seed=3)
    assert a["image"].shape == (10, 3, 224, 224) and np.array_equal(a["image"], b["image"])
    assert np.array_equal(a["id"], batch["id"])
    assert tuning.decode_and_augment(batch)["image"].dtype == np.uint8
    with pytest.raises(FileNotFoundError, match="build_image_parquet"):
        tuning.write_photo_shards(tmp_path / "empty", tmp_path / "x")
    with pytest.raises(ValueError, match="rows_per_file"):
        tuning.write_photo_shards(jpeg, tmp_path / "x", rows_per_file=0)


ITERATOR_STATS = """Dataset iterator time breakdown:
* Total time overall: 10.86s
Streaming split coordinator overhead time: 8.25s

Per-stage training-thread blocked time breakdown:
    * production wait: 8.46s
    * data transfer (ray.get): 667.16us
    * collate: 1.54ms
Total batches consumed: 16
"""


def test_blocked_breakdown_reads_ray_2_60_iterator_stats():
    assert ray_stats.blocked_breakdown(ITERATOR_STATS) == {
        "production wait": 8.46, "data transfer (ray.get)": 0.000667, "collate": 0.00154}
    assert ray_stats.blocked_breakdown(STATS) == {}


def test_max_uss_bytes_reads_the_verbose_extra_metrics():
    verbose = STATS + ("* Extra metrics: {'average_num_outputs_per_task': 1.0, 'max_uss_bytes': {'num_samples': 2, "
                       "'mean': 382849024.0, 'variance': 1.2e11, 'min': 382599168, 'max': 383098880, 'p25': None}, "
                       "'ray_remote_args': {'num_cpus': 1}}\n")
    assert ray_stats.max_uss_bytes(verbose) == 383098880
    assert ray_stats.max_uss_bytes(STATS) is None


def test_most_at_once_counts_overlapping_tasks():
    rows = [{"start": np.array([0.0]), "end": np.array([1.0])}, {"start": 0.5, "end": 1.5}, {"start": 1.0, "end": 2.0}]
    assert tuning.most_at_once(rows) == 2
    assert tuning.most_at_once([]) == 0


def _epoch(name, seconds):
    return tuning.EpochResult(name, 10, seconds, 10 / seconds, 0, 0, 0.5, 0.1, np.arange(10))


def test_a_step_is_kept_only_when_its_median_beats_the_spread():
    kept = StepTimes("kept", [_epoch("kept", s) for s in (3.0, 3.4, 3.2)])
    assert (kept.median_s, round(kept.spread_s, 2), kept.median_epoch.seconds) == (3.2, 0.4, 3.2)
    faster = StepTimes("faster", [_epoch("faster", s) for s in (2.0, 2.1, 2.5)])
    assert decide(faster, kept).keep and "keep 'faster'" in str(decide(faster, kept))
    # 1.1 s faster in the median, but its own spread is 1.6 s: within the noise
    noisy = StepTimes("noisy", [_epoch("noisy", s) for s in (2.0, 2.1, 3.6)])
    assert not decide(noisy, kept).keep and "within the larger spread (1.60 s)" in str(decide(noisy, kept))
    slower = StepTimes("slower", [_epoch("slower", s) for s in (4.0, 4.1, 4.2)])
    verdict = decide(slower, kept)
    assert not verdict.keep and verdict.gain_s < 0 and str(verdict) == (
        "reject 'slower': its median epoch is 0.90 s slower than 'kept''s")
    with pytest.raises(ValueError, match="at least one epoch"):
        decide(StepTimes("empty"), kept)


def test_measure_repeats_counts_epochs_measured_before(monkeypatch):
    calls = []
    monkeypatch.setattr("raydata_course.chapters.ch07_decide.measure_epoch",
                        lambda name, build, **kw: calls.append(kw) or _epoch(name, 1.0 + len(calls)))
    times = measure_repeats("step", lambda: None, repeats=3, already=[_epoch("step", 5.0)], step_s=0.1)
    assert times.seconds == [5.0, 2.0, 3.0] and calls == [{"step_s": 0.1}] * 2
    with pytest.raises(ValueError, match="repeats"):
        measure_repeats("step", lambda: None, repeats=0)
