"""The judge's checks for data02 (grader only; never copied into exercises/ or the student bundle).

Each check runs in the grader's process (:mod:`raydata_grader.judge`): it sends the kernel its
inputs as Arrow tables, has the student's UDF or function run on them there, fetches the
output blocks as data, and compares them with values computed here. Messages name the kind of
input that failed, its shape (rows, blocks, columns, arguments: ``about_input``) and what to
fix, never the input's values or the expected result.

The speed check of Part A is observed from outside the kernel: the judge times each call of
the student's UDF on a large batch with its own clock, against a one-operation vectorized
baseline timed the same way in the kernel and once more in the judge's own process (the
faster of the two is the yardstick, so a kernel that slows its baseline gains nothing), and
checks the timed call's output value by value. The inventory of every check's facts is
``docs/grader/inventory.md``.
"""

import functools

import numpy as np
import pyarrow as pa

from raydata_course.data import load_wine_table as _load_wine_table
from raydata_grader.facts import observed, recomputed
from raydata_grader.input_shapes import about_input, describe_tables
from raydata_grader.judge import judges, measured

#: Copies of the Wine table in the speed check's batch (534,000 rows), and how many times each
#: side is timed (the fastest counts).
SPEED_COPIES = 3000
SPEED_REPEATS = 5
#: How many times slower than the vectorized baseline a UDF may be.
SPEED_FACTOR = 15


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


@judges("phenol_ratio_visible", facts=[
    recomputed("the visible rows' phenol_ratio, and every input column kept"),
    recomputed("a new dict returned, the input batch untouched", "the judge asks the kernel whether two of its objects are one"),
])
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


def _host_baseline_s(wine: pa.Table) -> float:
    """The vectorized baseline in the judge's own process: the first two float columns of the
    speed check's batch divided, added to a copy of the batch (fastest of SPEED_REPEATS), in seconds."""
    import time

    big = pa.concat_tables([wine] * SPEED_COPIES)
    batch = {name: np.asarray(col.to_numpy()) for name, col in zip(big.column_names, big.columns)}
    a, b = [n for n, v in batch.items() if v.dtype.kind == "f"][:2]
    best = float("inf")
    for _ in range(SPEED_REPEATS):
        start = time.perf_counter()
        {**batch, "baseline": batch[a] / batch[b]}
        best = min(best, time.perf_counter() - start)
    return best


@judges("phenol_ratio_hidden", facts=[
    recomputed("phenol_ratio of every row, through map_batches in blocks of several sizes; float64 in every block"),
    recomputed("a one-row batch gives one ratio; the input columns are unchanged"),
    observed("the UDF's time on 534,000 rows, at most 15x a vectorized baseline",
             "each call timed by the judge's own clock; the baseline timed the same way in the kernel and in the "
             "judge's process, the faster counting"),
    recomputed("the timed call's output, value by value"),
])
def check_phenol_ratio(k):
    """Every row in batches of several sizes, a one-row batch, inputs unchanged, and speed.

    The speed is observed from outside the kernel: each call is timed by the judge's clock
    (:meth:`raydata_grader.remote.Kernel.timed_call`), the UDF's against a vectorized
    baseline's on the same batch; the baseline is also timed in the judge's own process, and
    the faster one counts. The timed call's output is checked too, so an answer cannot be fast
    by being wrong on the large batch.
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
    rows = SPEED_COPIES * wine.num_rows
    big = k.helper("readonly_batch")(k.helper("repeat_table")(wine, SPEED_COPIES))  # built in the kernel
    baseline = k.helper("vectorized_baseline")
    kernel_reference_s = min(k.timed_call(baseline, big)[1] for _ in range(SPEED_REPEATS))
    reference_s = min(kernel_reference_s, _host_baseline_s(wine))
    yours_s, timed = float("inf"), None
    for _ in range(SPEED_REPEATS):
        timed, seconds = k.timed_call(udf, big)
        yours_s = min(yours_s, seconds)
    got = k.call(k.helper("getitem"), timed, "phenol_ratio")
    assert isinstance(got, np.ndarray) and got.shape == (rows,) and np.allclose(
        got, np.tile(expected, SPEED_COPIES), rtol=0, atol=1e-12), (
        f"On a batch of {rows:,} rows (the Wine table repeated), some phenol_ratio values are wrong.")
    assert yours_s <= SPEED_FACTOR * max(reference_s, 1e-3), (
        f"On a batch of {rows:,} rows your UDF took {yours_s * 1e3:.0f} ms (timed by the grader), more than "
        f"{SPEED_FACTOR}x a vectorized version. Replace the Python loop or list comprehension with one NumPy "
        "operation on whole columns."
    )
    return measured(f"on a batch of {rows:,} rows your UDF took {yours_s * 1e3:.1f} ms, a one-operation vectorized "
                    f"version {reference_s * 1e3:.1f} ms.")


# ------------------------------------------------------------------------------ part B


@judges("standardize_visible", facts=[
    recomputed("the visible result's z-scores (mean 0, std 1) and the unchanged columns")])
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


@judges("standardize_hidden", facts=[
    recomputed("dataset-wide z-scores of other columns in other blocks, float64 in every block, every row and column kept"),
    recomputed("an integer column standardized to float64")])
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


@judges("add_bands_visible", facts=[recomputed("every visible row's band, and the dataset's rows kept")])
def visible_add_bands(k):
    wine = load_wine_table()
    rows = k.value("rows_c")
    assert isinstance(rows, list) and len(rows) == wine.num_rows, f"expected {wine.num_rows} rows"
    for row in rows:
        assert isinstance(row, dict) and row.get("band") == _band(row.get("alcohol")), (
            f"alcohol {row.get('alcohol')} should be {_band(row.get('alcohol'))!r}")
    assert sorted(r["alcohol"] for r in rows) == sorted(wine["alcohol"].to_pylist()), "keep the dataset's rows"


@judges("add_bands_hidden", facts=[
    recomputed("the bands at their boundaries, one Arrow type for band in every block, every row kept")])
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


@judges("long_format_visible", facts=[recomputed("the visible long table's rows, columns and hue values")])
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


@judges("long_format_hidden", facts=[
    recomputed("per cultivar and measure, the values of other columns add up; float64 values; exactly three columns"),
    recomputed("no columns listed gives no rows")])
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
