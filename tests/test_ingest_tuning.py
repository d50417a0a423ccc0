"""Chapter 07's helpers: the photo shards, the UDFs, the order metrics and ds.stats() as a table."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from raydata_course.chapters import ch07_ingest_tuning as tuning

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
    rows = tuning.operator_table(STATS)
    assert [(r["operator"], r["tasks"]) for r in rows] == [
        ("ListFiles", 1), ("ReadFilesParquetV2->RandomShuffleMap", 1),
        ("MapBatches(decode_and_augment)->Filter(<lambda>)", 1)]
    assert rows[0]["wall_s"] == 0.88 and rows[0]["cpu_s"] == 0.214 and rows[0]["output_rows"] == 32
    assert rows[1]["output_MiB"] == round(90949138 / 2**20, 1) and rows[1]["cpu_s"] == 2.49
    assert rows[2]["output_rows"] == 982 and rows[2]["output_MiB"] is None
    assert tuning.operator_table("") == []


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
