"""The judge's checks for data02 (grader only; never copied into exercises/ or the student bundle).

Each check runs in the grader's process (:mod:`raydata_grader.judge`): it sends the kernel its
inputs as Arrow tables, has the student's UDF or function run on them there, fetches the
output blocks as data, and compares them with values computed here. Messages name the kind of
input that failed, its shape (rows, blocks, columns, arguments: ``about_input``) and what to
fix, never the input's values or the expected result.

Trusted measurement: the speed check of Part A times the student's UDF and a one-operation
vectorized baseline in the kernel, on the same batch; the judge has to take both timings as
the kernel reports them (a kernel that lies about them gains one point of a speed check).
"""

import functools

import numpy as np
import pyarrow as pa

from raydata_course.data import load_wine_table as _load_wine_table
from raydata_grader.input_shapes import about_input, describe_tables
from raydata_grader.judge import judges


@functools.lru_cache(maxsize=1)
def load_wine_table() -> pa.Table:
    """The course's Wine table, loaded once per grading process (Arrow tables are immutable)."""
    return _load_wine_table()


def warm() -> None:
    """Load what the checks need before the first grade cell (while the kernel starts)."""
    load_wine_table()


def _in_blocks(table: pa.Table, num_blocks: int) -> list[pa.Table]:
    """``table`` as ``num_blocks`` tables of contiguous rows (one block each through from_arrow)."""
    step = -(-table.num_rows // num_blocks)
    return [table.slice(i, step) for i in range(0, table.num_rows, step)]


def _dataset(k, tables):
    return k.module("ray.data").from_arrow(list(tables))


def _block_types(data, column: str) -> set:
    """The Arrow type name of ``column`` in each non-empty output block."""
    return {b.type_of(column) if column in b.names else "(missing)" for b in data.blocks if b.num_rows}


def _rows(data) -> int:
    return sum(data.block_num_rows)


def _column(data, name: str) -> np.ndarray:
    return np.asarray(data.column(name), dtype=np.float64)


# ------------------------------------------------------------------------------ part A


def _wine_row_ratio(wine: pa.Table) -> dict:
    """``{(alcohol, malic_acid, ..., cultivar): ratio}`` of every wine, to recognise a row."""
    names = wine.column_names
    ratio = np.asarray(wine["flavanoids"]) / np.asarray(wine["total_phenols"])
    return {tuple(row[n] for n in names): r for row, r in zip(wine.to_pylist(), ratio)}


@judges("phenol_ratio_visible")
def visible_phenol_ratio(k):
    wine = load_wine_table()
    rows = k.value("out_a")
    assert isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows), "take(3) must give rows."
    assert "phenol_ratio" in rows[0], "the output rows need a 'phenol_ratio' column"
    assert set(rows[0]) == set(wine.column_names) | {"phenol_ratio"}, "keep every input column"
    ratios = _wine_row_ratio(wine)
    for row in rows:
        key = tuple(row.get(n) for n in wine.column_names)
        assert key in ratios and abs(row["phenol_ratio"] - ratios[key]) < 1e-12, "wrong ratio"
    direct = k.value("direct")
    assert isinstance(direct, dict) and isinstance(direct.get("phenol_ratio"), np.ndarray) and (
        direct["phenol_ratio"].dtype == np.float64), "phenol_ratio must be float64"
    assert not k.call(k.helper("same_object"), k.student("direct"), k.student("sample")), (
        "return a new dict, do not modify the input batch")


@judges("phenol_ratio_hidden")
def check_phenol_ratio(k):
    """Every row in batches of several sizes, a one-row batch, inputs unchanged, and speed.

    Trusts a measurement made in the kernel: the UDF's time and the vectorized baseline's,
    on the same batch (:func:`raydata_course.judging.helpers.best_time_s`). Cross-checked:
    nothing (a kernel that lies about the two timings wins this one assertion).
    """
    wine = load_wine_table()
    expected = np.asarray(wine["flavanoids"]) / np.asarray(wine["total_phenols"])
    udf = k.student("phenol_ratio")
    for num_blocks in (1, 7):
        tables = _in_blocks(wine, num_blocks)
        with about_input(describe_tables(tables) + ", through map_batches"):
            out = _dataset(k, tables).map_batches(udf).get("dataset")
            assert _block_types(out, "phenol_ratio") == {"double"}, "phenol_ratio must be float64 in every batch."
            assert _rows(out) == wine.num_rows, "Through Ray Data, the UDF changed the number of rows."
            got = np.sort(_column(out, "phenol_ratio"))
            assert np.allclose(got, np.sort(expected), rtol=0, atol=1e-12), (
                "Over the whole dataset, in batches of several sizes, some phenol_ratio values are wrong."
            )
    one = k.call(udf, k.helper("readonly_batch")(wine.slice(3, 1)))
    assert isinstance(one, dict) and len(one.get("phenol_ratio", [])) == 1, "A batch of one row must give one ratio."
    ten = pa.concat_tables([wine] * 10)
    out = k.call(udf, k.helper("readonly_batch")(ten))
    assert isinstance(out, dict) and np.array_equal(out.get("flavanoids"), np.asarray(ten["flavanoids"])), (
        "Do not change the input columns.")
    big = k.helper("readonly_batch")(k.helper("repeat_table")(wine, 3000))  # 534,000 rows, built in the kernel
    reference_s = k.call(k.helper("vectorized_baseline_s"), big)
    yours_s = k.call(k.helper("best_time_s"), udf, big)
    assert yours_s <= 15 * max(reference_s, 1e-3), (
        f"On a batch of {3000 * wine.num_rows:,} rows your UDF took {yours_s * 1e3:.0f} ms, more than 15x a "
        "vectorized version. Replace the Python loop or list comprehension with one NumPy operation on "
        "whole columns."
    )


# ------------------------------------------------------------------------------ part B


@judges("standardize_visible")
def visible_standardize(k):
    wine = load_wine_table()
    frame = k.value("std_b")
    assert frame.num_rows == wine.num_rows, f"expected {wine.num_rows} rows, got {frame.num_rows}"
    for c in ("alcohol", "magnesium"):
        values = np.asarray(frame.column(c), dtype=np.float64)
        assert abs(values.mean()) < 1e-9, f"{c}: mean after standardizing should be 0"
        assert abs(values.std(ddof=1) - 1) < 1e-9, f"{c}: std after standardizing should be 1"
    assert sorted(np.asarray(frame.column("hue")).tolist()) == sorted(wine["hue"].to_pylist()), (
        "columns you were not asked to change must stay unchanged")


@judges("standardize_hidden")
def check_standardize(k):
    wine = load_wine_table()
    frame = wine.to_pandas()
    for columns, blocks in ((["alcohol", "proline", "hue"], 5), (["color_intensity"], 1)):
        tables = _in_blocks(wine, blocks)
        with about_input(describe_tables(tables) + f", standardizing {columns}"):
            out = k.remote_call("standardize", _dataset(k, tables), columns).get("dataset")
            for c in columns:
                assert _block_types(out, c) == {"double"}, "Every standardized column must be float64 in every batch."
            assert _rows(out) == wine.num_rows, "Standardizing must keep every row."
            names = {b.names for b in out.blocks if b.num_rows}
            assert len(names) == 1 and sorted(next(iter(names))) == sorted(frame.columns), "Keep exactly the original columns."
            for c in columns:
                expected = (frame[c] - frame[c].mean()) / frame[c].std(ddof=1)
                assert np.allclose(np.sort(_column(out, c)), np.sort(expected.to_numpy()), atol=1e-9), (
                    "For another set of columns and blocks, the z-scores differ from the dataset-wide "
                    "ones: compute mean and std over the whole dataset (ddof=1), not per batch."
                )
            for c in set(frame.columns) - set(columns):
                assert sorted(out.column(c)) == sorted(frame[c].tolist()), "Columns not listed must stay unchanged."
    ints = k.module("ray.data").from_items([{"k": i, "cultivar": i % 3} for i in range(10)], override_num_blocks=2)
    out = k.remote_call("standardize", ints, ["k"]).get("dataset")
    assert _block_types(out, "k") == {"double"}, "An integer column must come out as float64 z-scores."
    assert abs(_column(out, "k").std(ddof=1) - 1) < 1e-9, "On an integer column, the standardized std is not 1."


# ------------------------------------------------------------------------------ part C


def _band(alcohol: float) -> str:
    return "light" if alcohol < 12.5 else ("medium" if alcohol < 13.5 else "strong")


@judges("add_bands_visible")
def visible_add_bands(k):
    wine = load_wine_table()
    rows = k.value("rows_c")
    assert isinstance(rows, list) and len(rows) == wine.num_rows, f"expected {wine.num_rows} rows"
    for row in rows:
        assert isinstance(row, dict) and row.get("band") == _band(row.get("alcohol")), (
            f"alcohol {row.get('alcohol')} should be {_band(row.get('alcohol'))!r}")
    assert sorted(r["alcohol"] for r in rows) == sorted(wine["alcohol"].to_pylist()), "keep the dataset's rows"


@judges("add_bands_hidden")
def check_add_bands(k):
    # Boundary values, and blocks that each hold a single band.
    alcohol = [12.5, 13.5, 12.499, 13.499, 11.0, 14.8] * 4
    items = [{"alcohol": a, "cultivar": i % 3} for i, a in enumerate(sorted(alcohol))]
    out = k.remote_call("add_bands", k.module("ray.data").from_items(items, override_num_blocks=6)).get("dataset")
    schemas = {(b.names, b.types) for b in out.blocks if b.num_rows}
    assert _block_types(out, "band") == {"string"} and len(schemas) == 1, (
        "band must have Arrow type string in every block.")
    rows = [row for b in out.blocks for row in b.rows()]
    for row in rows:
        assert row["band"] == _band(row["alcohol"]), (
            "At the band boundaries the labels are wrong: 12.5 is medium and 13.5 is strong."
        )
    assert len(rows) == len(items), "add_bands must keep every row."


# ------------------------------------------------------------------------------ part D


@judges("long_format_visible")
def visible_long_format(k):
    wine = load_wine_table()
    frame = k.value("long_d")
    assert frame.num_rows == 2 * wine.num_rows, f"expected {2 * wine.num_rows} rows, got {frame.num_rows}"
    assert set(frame.names) == {"cultivar", "measure", "value"}, "columns must be cultivar, measure, value"
    measure = list(frame.column("measure"))
    assert set(measure) == {"alcohol", "hue"}
    values = np.asarray(frame.column("value"), dtype=np.float64)
    hue = sum(v for v, m in zip(values, measure) if m == "hue")
    assert abs(hue - sum(wine["hue"].to_pylist())) < 1e-6, "values of 'hue' do not add up"


@judges("long_format_hidden")
def check_long_format(k):
    wine = load_wine_table()
    frame = wine.to_pandas()
    columns = ["malic_acid", "proline", "color_intensity"]
    out = k.remote_call("long_format", _dataset(k, _in_blocks(wine, 4)), columns).get("dataset")
    assert _block_types(out, "value") == {"double"}, "value must be a float64 column in every block."
    assert _rows(out) == len(columns) * wine.num_rows, "Expected one row per input row and listed column."
    assert all(set(b.names) == {"cultivar", "measure", "value"} for b in out.blocks if b.num_rows), (
        "Rows must have exactly cultivar, measure, value.")
    cultivar, measure, value = (out.column(n) for n in ("cultivar", "measure", "value"))
    for c in columns:
        for which in (0, 1, 2):
            got = sum(v for v, m, cv in zip(value, measure, cultivar) if m == c and cv == which)
            want = frame[frame["cultivar"] == which][c].sum()
            assert abs(got - want) < 1e-6 * max(1.0, abs(want)), (
                "For other columns, the values per cultivar and measure do not add up: each output row "
                "must carry its own input row's cultivar and value."
            )
    empty = k.remote_call("long_format", _dataset(k, [wine]), []).get("dataset")
    assert _rows(empty) == 0, "With no columns listed, the result must be empty."
