"""Hidden tests for data01 (grader only; never copied into exercises/ or the student bundle).

Each ``check_*`` function receives the student's function, runs it on inputs the student
has not seen, and raises ``AssertionError`` with a message that names the *kind* of input
that failed and what to fix, but not the input itself or the expected value.
"""

import random
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd

import pyarrow as pa
import pyarrow.parquet as pq
import ray

from raydata_course.data import load_wine_table


def _true_block_rows(ds):
    return sorted(ray.get(ref).num_rows for ref in ds.to_arrow_refs())


def check_block_row_counts(block_row_counts):
    cases = [
        ("a dataset whose row count does not divide evenly into blocks",
         ray.data.range(103, override_num_blocks=4).materialize()),
        ("a dataset with blocks of more than 4,096 rows",
         ray.data.range(20_000, override_num_blocks=2).materialize()),
        ("a dataset without an 'id' column (the Wine table, repartitioned)",
         ray.data.from_arrow(load_wine_table()).repartition(3).materialize()),
        ("a single-block dataset", ray.data.range(7, override_num_blocks=1).materialize()),
    ]
    for what, ds in cases:
        got = block_row_counts(ds)
        assert isinstance(got, list), f"block_row_counts must return a list (failed on {what})."
        assert all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in got), (
            f"On {what}, the counts must be integers (Python int or NumPy integer), not floats or strings."
        )
        got = [int(x) for x in got]
        expected = _true_block_rows(ds)
        assert sum(got) == sum(expected), (
            f"On {what}, your counts do not add up to the dataset's row count: count every row "
            "exactly once, one count per block."
        )
        assert len(got) == len(expected), (
            f"On {what}, you returned a different number of counts than the dataset has blocks. "
            "Make sure each batch is a whole block (what is map_batches' default batch_size?)."
        )
        assert got == expected, f"On {what}, the per-block counts are wrong or not sorted ascending."


def check_make_blocks(make_blocks):
    for num_rows, num_blocks, what in [
        (103, 4, "a row count that does not divide evenly"),
        (10, 3, "a small uneven split"),
        (7, 7, "one row per block"),
        (1_000, 1, "a single block"),
    ]:
        ds = make_blocks(num_rows, num_blocks)
        assert hasattr(ds, "num_blocks"), f"make_blocks must return a materialized dataset (failed on {what})."
        assert ds.num_blocks() == num_blocks, (
            f"On {what}, the dataset does not have exactly the requested number of blocks. "
            "override_num_blocks is a hint; repartition gives an exact count."
        )
        assert ds.schema().names == ["id"], f"On {what}, the only column must be 'id'."
        types = {t.schema.field("id").type for t in ray.get(ds.to_arrow_refs())}
        assert all(pa.types.is_integer(t) for t in types), f"On {what}, 'id' must be an integer column."
        ids = sorted(r["id"] for r in ds.take_all())
        assert ids == list(range(num_rows)), f"On {what}, the ids must be exactly 0..num_rows-1, each once."
        rows = _true_block_rows(ds)
        assert max(rows) - min(rows) <= 1, f"On {what}, block row counts differ by more than one."


def _no_driver_side_parquet_writes():
    """Make pyarrow/pandas Parquet writers fail in this (the driver's) process.

    Ray Data writes in its worker processes, so an answer that writes with Ray Data is
    unaffected; one that writes the files itself with pyarrow or pandas is caught.
    """
    def refuse(*args, **kwargs):
        raise RuntimeError("write the files with Ray Data (Dataset.write_parquet), not with pyarrow or pandas")

    stack = ExitStack()
    stack.enter_context(mock.patch.object(pq, "write_table", refuse))
    stack.enter_context(mock.patch.object(pq, "ParquetWriter", refuse))
    stack.enter_context(mock.patch.object(pd.DataFrame, "to_parquet", refuse))
    return stack


def check_write_files(write_files):
    wine = load_wine_table()
    for num_files in (1, 5, 8):
        with tempfile.TemporaryDirectory(prefix="data01-hidden-") as scratch:
            _check_files_written(write_files, wine, Path(scratch), num_files)


def _check_files_written(write_files, wine, folder, num_files):
    with _no_driver_side_parquet_writes():
        got = write_files(wine, folder, num_files)
    on_disk = sorted(str(p) for p in folder.glob("*.parquet"))
    assert len(on_disk) == num_files, (
        "For another file count, the folder does not hold exactly that many Parquet files. "
        "Ray Data writes one file per block: control the number of blocks first."
    )
    assert [str(p) for p in got] == on_disk, "Return the sorted paths of exactly the files written."
    for p in on_disk:
        assert pq.read_schema(p).remove_metadata().equals(wine.schema.remove_metadata()), (
            "Each file must hold exactly the table's columns, with their original types."
        )
    written = pa.concat_tables([pq.read_table(p) for p in on_disk]).select(wine.column_names)
    assert written.num_rows == wine.num_rows and _sorted_rows(written) == _sorted_rows(wine), (
        "The files do not hold every row of the table exactly once, with its values unchanged."
    )


def _sorted_rows(table):
    return sorted(tuple(row.values()) for row in table.to_pylist())


def _jitter(batch):
    time.sleep(random.random() * 0.05)
    return batch


def check_first_rows_by(first_rows_by):
    rng = random.Random(7)
    scores = [rng.randint(0, 50) for _ in range(60)]
    rows = [{"name": f"s{i}", "score": s} for i, s in enumerate(scores)]
    ds = ray.data.from_items(rows, override_num_blocks=3)
    got = first_rows_by(ds, "score", 5)
    assert isinstance(got, list) and all(isinstance(r, dict) for r in got), (
        "first_rows_by must return a list of dict rows, as take() does."
    )
    got_scores = [r["score"] for r in got]
    assert got_scores == sorted(scores)[:5], (
        "On a dataset with another column name and repeated values, the rows are not the k "
        "smallest in ascending order."
    )
    assert all(set(r) == {"name", "score"} for r in got), "Return whole rows, with every column."
    assert all(r["score"] == scores[int(r["name"][1:])] for r in got), (
        "Return the dataset's own rows: each row's values must stay together."
    )

    descending = ray.data.range(20_000, override_num_blocks=4).map_batches(lambda b: {"id": 19_999 - b["id"]})
    got = first_rows_by(descending, "id", 3)
    assert [r["id"] for r in got] == [0, 1, 2], (
        "On a large dataset whose smallest values come last, the rows are not the smallest. "
        "Sort the whole dataset, not just the rows you happened to take."
    )

    reordering = ray.data.range(400, override_num_blocks=8).map_batches(_jitter)
    got = first_rows_by(reordering, "id", 10)
    assert [r["id"] for r in got] == list(range(10)), (
        "On a pipeline whose blocks finish out of order, the rows are not the smallest ids in "
        "ascending order. Do not rely on the order rows happen to come out in."
    )
