"""Hidden tests for data02 (grader only; never copied into exercises/ or the student bundle).

Each ``check_*`` receives the student's function and raises ``AssertionError`` with a message
that names the kind of input that failed and what to fix, never the input or expected value.
"""

import time

import numpy as np
import pyarrow as pa
import ray

from raydata_course.data import load_wine_table


def _readonly_batch(table: pa.Table) -> dict:
    batch = {name: np.asarray(col) for name, col in zip(table.column_names, table.columns)}
    for array in batch.values():
        array.setflags(write=False)
    return batch


def _block_types(ds, column: str) -> set:
    """The Arrow type of ``column`` in each output block (one entry if all agree)."""
    tables = ray.get(ds.materialize().to_arrow_refs())
    return {t.schema.field(column).type for t in tables if t.num_rows}


def _in_blocks(table: pa.Table, num_blocks: int):
    """``table`` as a dataset of ``num_blocks`` blocks of contiguous rows, built without running a
    repartition (``from_arrow`` makes one block per table and runs nothing)."""
    step = -(-table.num_rows // num_blocks)
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, table.num_rows, step)])


def _best_time_s(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def check_phenol_ratio(phenol_ratio):
    wine = load_wine_table()
    expected = np.asarray(wine["flavanoids"]) / np.asarray(wine["total_phenols"])
    for num_blocks in (1, 7):
        out_ds = _in_blocks(wine, num_blocks).map_batches(phenol_ratio)
        assert _block_types(out_ds, "phenol_ratio") == {pa.float64()}, "phenol_ratio must be float64 in every batch."
        rows = out_ds.to_pandas()
        assert len(rows) == wine.num_rows, "Through Ray Data, the UDF changed the number of rows."
        got = np.sort(rows["phenol_ratio"].to_numpy(dtype=np.float64))
        assert np.allclose(got, np.sort(expected), rtol=0, atol=1e-12), (
            "Over the whole dataset, in batches of several sizes, some phenol_ratio values are wrong."
        )
    one = _readonly_batch(wine.slice(3, 1))
    assert len(phenol_ratio(one)["phenol_ratio"]) == 1, "A batch of one row must give one ratio."
    big_table = pa.concat_tables([wine] * 3000)  # 534,000 rows
    big = _readonly_batch(big_table)
    out = phenol_ratio(big)
    assert np.array_equal(out["flavanoids"], big["flavanoids"]), "Do not change the input columns."
    reference_s = _best_time_s(lambda: {**big, "phenol_ratio": big["flavanoids"] / big["total_phenols"]})
    yours_s = _best_time_s(lambda: phenol_ratio(big))
    assert yours_s <= 15 * max(reference_s, 1e-3), (
        f"On a batch of {big_table.num_rows:,} rows your UDF took {yours_s * 1e3:.0f} ms, more than 15x a "
        "vectorized version. Replace the Python loop or list comprehension with one NumPy operation on "
        "whole columns."
    )


def check_standardize(standardize):
    wine = load_wine_table()
    frame = wine.to_pandas()
    for columns, blocks in ((["alcohol", "proline", "hue"], 5), (["color_intensity"], 1)):
        ds = _in_blocks(wine, blocks)
        out_ds = standardize(ds, columns)
        for c in columns:
            assert _block_types(out_ds, c) == {pa.float64()}, "Every standardized column must be float64 in every batch."
        out = out_ds.to_pandas()
        assert len(out) == wine.num_rows, "Standardizing must keep every row."
        assert sorted(out.columns) == sorted(frame.columns), "Keep exactly the original columns."
        for c in columns:
            expected = (frame[c] - frame[c].mean()) / frame[c].std(ddof=1)
            assert np.allclose(np.sort(out[c].to_numpy()), np.sort(expected.to_numpy()), atol=1e-9), (
                "For another set of columns and blocks, the z-scores differ from the dataset-wide "
                "ones: compute mean and std over the whole dataset (ddof=1), not per batch."
            )
        for c in set(frame.columns) - set(columns):
            assert sorted(out[c].tolist()) == sorted(frame[c].tolist()), "Columns not listed must stay unchanged."
    # integer columns become float64 z-scores too
    ints = ray.data.from_items([{"k": i, "cultivar": i % 3} for i in range(10)], override_num_blocks=2)
    out_ds = standardize(ints, ["k"])
    assert _block_types(out_ds, "k") == {pa.float64()}, "An integer column must come out as float64 z-scores."
    out = out_ds.to_pandas()
    assert abs(out["k"].std(ddof=1) - 1) < 1e-9, "On an integer column, the standardized std is not 1."


def check_add_bands(add_bands):
    # Boundary values, and blocks that each hold a single band.
    alcohol = [12.5, 13.5, 12.499, 13.499, 11.0, 14.8] * 4
    items = [{"alcohol": a, "cultivar": i % 3} for i, a in enumerate(sorted(alcohol))]
    ds = ray.data.from_items(items, override_num_blocks=6)
    out = add_bands(ds)
    table = pa.concat_tables(ray.get(out.materialize().to_arrow_refs()), promote_options="none")
    assert table.schema.field("band").type == pa.string(), "band must have Arrow type string in every block."
    rows = table.to_pylist()
    for row in rows:
        a = row["alcohol"]
        expected = "light" if a < 12.5 else ("medium" if a < 13.5 else "strong")
        assert row["band"] == expected, (
            "At the band boundaries the labels are wrong: 12.5 is medium and 13.5 is strong."
        )
    assert len(rows) == len(items), "add_bands must keep every row."


def check_long_format(long_format):
    wine = load_wine_table()
    frame = wine.to_pandas()
    columns = ["malic_acid", "proline", "color_intensity"]
    out_ds = long_format(_in_blocks(wine, 4), columns)
    assert _block_types(out_ds, "value") == {pa.float64()}, "value must be a float64 column in every block."
    out = out_ds.to_pandas()
    assert len(out) == len(columns) * wine.num_rows, "Expected one row per input row and listed column."
    assert set(out.columns) == {"cultivar", "measure", "value"}, "Rows must have exactly cultivar, measure, value."
    for c in columns:
        for cultivar in (0, 1, 2):
            got = out[(out["measure"] == c) & (out["cultivar"] == cultivar)]["value"].sum()
            want = frame[frame["cultivar"] == cultivar][c].sum()
            assert abs(got - want) < 1e-6 * max(1.0, abs(want)), (
                "For other columns, the values per cultivar and measure do not add up: each output row "
                "must carry its own input row's cultivar and value."
            )
    empty = long_format(ray.data.from_arrow(wine), [])
    assert empty.count() == 0, "With no columns listed, the result must be empty."
