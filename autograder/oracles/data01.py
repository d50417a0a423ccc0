"""The judge's checks for data01 (grader only; never copied into exercises/ or the student bundle).

Every grade cell has a check here (:func:`raydata_grader.judge.judges`). A check runs in the
grader's process, outside the student's kernel: it builds the inputs (datasets are sent to the
kernel as Arrow tables, so their blocks are known here), has the kernel call the student's
function on them (:class:`raydata_grader.remote.Kernel`), gets the results back as data, and
raises ``AssertionError`` with a message that names the *kind* of input that failed, its shape
(rows, blocks, columns: ``about_input``) and what to fix, never its values or the expected value.

The visible tests' twins check the values the visible test computed in the notebook against
what this process expects for the visible inputs. Where the kernel runs in a sandbox, the
judge reads Part C's Parquet files itself, from the host, and sees which processes wrote them
(fanotify, as root): only Ray's workers may. What each check rests on, and where the judge gets
it, is in ``docs/grader/inventory.md``.
"""

import functools
import random
from pathlib import Path

import numpy as np
import pyarrow as pa

from raydata_course.data import load_wine_table as _load_wine_table
from raydata_grader.facts import observed, recomputed, reported
from raydata_grader.file_events import WriterWatch
from raydata_grader.input_shapes import about_input, describe_tables
from raydata_grader.judge import judges

_MATERIALIZED = "ray.data.dataset.MaterializedDataset"
_IS_MATERIALIZED = reported("the dataset is a MaterializedDataset",
                            "the kernel looks the class up in the object's type's MRO, by identity")


@functools.lru_cache(maxsize=1)
def load_wine_table() -> pa.Table:
    """The course's Wine table, loaded once per grading process (Arrow tables are immutable)."""
    return _load_wine_table()


def warm() -> None:
    """Load what the checks need before the first grade cell (while the kernel starts)."""
    load_wine_table()


def _ids(start: int, stop: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, stop, dtype=np.int64))})


def _blocks_of_ids(sizes: list[int]) -> list[pa.Table]:
    """Tables of consecutive ids, one per block, of ``sizes`` rows."""
    bounds = np.cumsum([0, *sizes])
    return [_ids(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def _slices(table: pa.Table, sizes: list[int]) -> list[pa.Table]:
    bounds = np.cumsum([0, *sizes])
    return [table.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:])]


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _dataset(k, tables):
    """A ``MaterializedDataset`` in the kernel with exactly one block per table (from_arrow)."""
    return k.module("ray.data").from_arrow(list(tables))


# ------------------------------------------------------------------------------ part A


@judges("block_row_counts_visible", facts=[recomputed("the visible counts")])
def visible_block_row_counts(k):
    counts = k.value("counts")
    assert isinstance(counts, list) and all(_is_int(c) for c in counts), "block_row_counts must return a list of ints."
    assert [int(c) for c in counts] == [25, 25, 25, 25], (
        "range(100, override_num_blocks=4) has four blocks of 25 rows: count rows per block.")


@judges("block_row_counts_hidden", facts=[
    recomputed("per-block row counts of datasets whose blocks the judge built")])
def check_block_row_counts(k):
    wine = load_wine_table()
    cases = [
        ("a dataset whose row count does not divide evenly into blocks", _blocks_of_ids([26, 26, 26, 25])),
        ("a dataset with blocks of more than 4,096 rows", _blocks_of_ids([10_000, 10_000])),
        ("a dataset without an 'id' column (the Wine table, in several blocks)", _slices(wine, [60, 59, 59])),
        ("a single-block dataset", _blocks_of_ids([7])),
        ("a dataset with an empty block (as repartition makes with fewer rows than blocks)",
         _blocks_of_ids([5, 0, 4])),
    ]
    for what, tables in cases:
        with about_input(describe_tables(tables, sizes=False)):
            _check_counts(k, what, tables)


def _check_counts(k, what: str, tables) -> None:
    """Part A on one hidden input; the message names the input's blocks, not their sizes (the answer)."""
    got = k.call("block_row_counts", _dataset(k, tables))
    assert isinstance(got, list), f"block_row_counts must return a list (failed on {what})."
    assert all(_is_int(x) for x in got), (
        f"On {what}, the counts must be integers (Python int or NumPy integer), not floats or strings."
    )
    got = [int(x) for x in got]
    expected = sorted(t.num_rows for t in tables)
    # An empty block may be counted as 0 or left out (map_batches never sees it): both are right.
    accepted = (expected, [n for n in expected if n])
    assert sum(got) == sum(expected), (
        f"On {what}, your counts do not add up to the dataset's row count: count every row "
        "exactly once, one count per block."
    )
    assert len(got) in {len(a) for a in accepted}, (
        f"On {what}, you returned a different number of counts than the dataset has blocks. "
        "Make sure each batch is a whole block (what is map_batches' default batch_size?)."
    )
    assert got in accepted, f"On {what}, the per-block counts are wrong or not sorted ascending."


# ------------------------------------------------------------------------------ part B


def _check_block_count(data, what: str) -> None:
    """``num_blocks()`` as the kernel reported it must be the number of blocks it sent (the
    count is a claim; the blocks are the dataset's own ``to_arrow_refs()``)."""
    assert data.num_blocks == len(data.blocks), (
        f"On {what}, the dataset's num_blocks() says {data.num_blocks} but it holds {len(data.blocks)} blocks: "
        "return the dataset Ray built, unchanged."
    )


def _check_blocks(k, ds, num_rows: int, num_blocks: int, what: str) -> None:
    assert k.is_instance(ds, _MATERIALIZED), (
        f"make_blocks must return a materialized dataset (call .materialize()); it returned a "
        f"{ds.type.qualname} (failed on {what})."
    )
    data = ds.get("dataset")
    _check_block_count(data, what)
    assert len(data.blocks) == num_blocks, (
        f"On {what}, the dataset does not have exactly the requested number of blocks. "
        "override_num_blocks is a hint; repartition gives an exact count."
    )
    names = {b.names for b in data.blocks if b.num_rows}
    assert names == {("id",)}, f"On {what}, the only column must be 'id'."
    types = {b.type_of("id") for b in data.blocks if b.num_rows}
    assert all(t.startswith(("int", "uint")) for t in types), f"On {what}, 'id' must be an integer column."
    assert sorted(data.column("id")) == list(range(num_rows)), (
        f"On {what}, the ids must be exactly 0..num_rows-1, each once.")
    rows = data.block_num_rows
    assert max(rows) - min(rows) <= 1, f"On {what}, block row counts differ by more than one."


@judges("make_blocks_visible", facts=[
    _IS_MATERIALIZED, recomputed("the blocks' count, rows and columns, from the blocks themselves")])
def visible_make_blocks(k):
    assert k.is_instance(k.student("ds_b"), _MATERIALIZED), "make_blocks must return a materialized dataset (call .materialize())"
    data = k.value("ds_b", "dataset")
    _check_block_count(data, "the visible test's dataset")
    assert len(data.blocks) == 4, "asked for 4 blocks"
    assert sum(data.block_num_rows) == 100, "asked for 100 rows"
    assert {b.names for b in data.blocks if b.num_rows} == {("id",)}, "the only column must be 'id'"


@judges("make_blocks_hidden", facts=[
    _IS_MATERIALIZED,
    recomputed("exactly num_blocks blocks of ids 0..num_rows-1, balanced, from the blocks themselves")])
def check_make_blocks(k):
    for num_rows, num_blocks, what in [
        (103, 4, "a row count that does not divide evenly"),
        (10, 3, "a small uneven split"),
        (7, 7, "one row per block"),
        (1_000, 1, "a single block"),
    ]:
        with about_input(f"make_blocks({num_rows}, {num_blocks})"):
            _check_blocks(k, k.remote_call("make_blocks", num_rows, num_blocks), num_rows, num_blocks, what)


# ------------------------------------------------------------------------------ part C


def _sorted_rows(table) -> list[tuple]:
    return sorted(tuple(row.values()) for row in table.rows())


def _wine_schema(wine: pa.Table) -> tuple:
    schema = wine.schema.remove_metadata()
    return tuple(schema.names), tuple(str(t) for t in schema.types)


def _check_files(got, listing: dict, wine: pa.Table, num_files: int, what: str) -> None:
    on_disk = listing["paths"]
    assert len(on_disk) == num_files, (
        f"{what}, the folder does not hold exactly that many Parquet files. "
        "Ray Data writes one file per block: control the number of blocks first."
    )
    assert isinstance(got, list) and [str(p) for p in got] == on_disk, "Return the sorted paths of exactly the files written."
    for schema in listing["schemas"]:
        assert tuple(schema) == _wine_schema(wine), "Each file must hold exactly the table's columns, with their original types."
    written = listing["table"]
    expected = _sorted_rows_of(wine)
    assert written is not None and written.num_rows == wine.num_rows and _sorted_rows(
        _select(written, wine.column_names)) == expected, (
        "The files do not hold every row of the table exactly once, with its values unchanged.")


def _select(table, names):
    from raydata_course.judging.wire import TableData

    return TableData(tuple(names), tuple(table.type_of(n) for n in names), tuple(table.column(n) for n in names))


def _sorted_rows_of(table: pa.Table) -> list[tuple]:
    return sorted(tuple(row.values()) for row in table.to_pylist())


def _listing(k, folder: str) -> dict:
    """What a folder of Parquet files holds (``parquet_folder``'s shape): read by the judge itself
    from the host where the kernel has a sandbox, else by the kernel (a reported fact)."""
    if k.observable():
        import pyarrow.parquet as pq

        from raydata_course.judging.kernel import to_data

        host = k.outside.host_path(folder)
        files = sorted(host.glob("*.parquet")) if host is not None and host.is_dir() else []
        tables = [pq.read_table(f) for f in files]
        return {"paths": [str(Path(folder) / f.name) for f in files],
                "schemas": [(tuple(t.schema.names), tuple(str(x) for x in t.schema.types)) for t in tables],
                "table": to_data(pa.concat_tables(tables, promote_options="permissive")) if tables else None}
    return k.call(k.helper("parquet_folder"), folder)


_FILES = recomputed("the files' count, columns, types and rows",
                    "read by the judge from the sandbox's disk (by the kernel where there is no sandbox)")


@judges("write_files_visible", facts=[_FILES, recomputed("the paths returned")])
def visible_write_files(k):
    wine = load_wine_table()
    _check_files(k.value("paths_c"), _listing(k, str(k.value("out_c"))), wine, 3, "Asked for 3 files")


def _writes(k, folder: str):
    """A :class:`~raydata_grader.file_events.WriterWatch` of ``folder`` in the sandbox, or None
    where the judge cannot see writers (no sandbox, or not root)."""
    if not k.observable():
        return None
    host = k.outside.host_path(folder)
    watch = WriterWatch(host).start() if host is not None else None
    if watch is None:
        k.took_reported = True
    return watch


def _ray_data_writer(title: str) -> bool:
    """A process title of Ray Data's write tasks: ``ray::Write`` or a fused ``ray::ReadRange->Write``
    (Ray names a task's worker after the task, and Ray Data's write operator is ``Write``), or a
    worker just back to ``ray::IDLE`` when the judge read the title."""
    if title == "ray::IDLE":
        return True
    return title.startswith("ray::") and title.rsplit("->", 1)[-1].startswith(("Write", "ray::Write"))


def _check_writers(watch: WriterWatch, paths: list[str], what: str) -> None:
    """Every file must have been written, and only by Ray's workers."""
    written = watch.stop()
    by_file: dict[str, set[str]] = {}
    for w in written:
        by_file.setdefault(Path(w.path).name, set()).add(w.title)
    for path in paths:
        titles = by_file.get(Path(path).name, set())
        assert titles and all(_ray_data_writer(t) for t in titles), (
            f"{what}, the files were not written by Ray Data's workers (the grader saw who wrote each one): "
            "write them with Dataset.write_parquet, not with pyarrow, pandas or another process."
        )


@judges("write_files_hidden", facts=[
    _FILES, recomputed("the paths returned: exactly the files written, sorted"),
    observed("only Ray Data's write tasks wrote the files",
             "fanotify on the folder, read by the host: each writer's pid and title, ray::...Write (as root; elsewhere "
             "the kernel's guard that makes the driver's Parquet writers fail, a reported fact)",
             forged_by=("impostor-name",)),
])
def check_write_files(k):
    """Other file counts: the paths returned, the files' contents and count, and their writers.

    The judge reads the files from the host and watches which processes write them
    (:class:`raydata_grader.file_events.WriterWatch`): every file must come from one of Ray
    Data's write tasks (title ``ray::...Write``), not from the driver, a task of the notebook's
    own or another process. Where it cannot watch (no
    sandbox, or not root), it relies on a guard in the kernel instead
    (``call_without_driver_parquet_writes`` makes pyarrow's and pandas' writers fail in the
    kernel's own process, which code there could undo): a reported fact.
    """
    wine = load_wine_table()
    for num_files in (1, 5, 8):
        folder = k.remote_call(k.helper("scratch_folder"), "data01-hidden-")
        inside = str(folder.get())
        try:
            with about_input(f"write_files on the Wine table ({wine.num_rows} rows) with num_files={num_files}"):
                watch = _writes(k, inside)
                if watch is None:
                    got = k.call(k.helper("call_without_driver_parquet_writes"), k.student("write_files"), wine,
                                 folder, num_files)
                else:
                    try:
                        got = k.call("write_files", wine, folder, num_files)
                    except BaseException:
                        watch.stop()
                        raise
                listing = _listing(k, inside)
                if watch is not None:
                    _check_writers(watch, listing["paths"], "For another file count")
                _check_files(got, listing, wine, num_files, "For another file count")
        finally:
            k.call(k.helper("remove_folder"), folder)


# ------------------------------------------------------------------------------ part D


@judges("first_rows_by_visible", facts=[recomputed("the visible rows")])
def visible_first_rows_by(k):
    got = k.value("got_d")
    assert got == [{"id": 0}, {"id": 2}], "Expected the two smallest ids in ascending order."


def _rows_of(got, what: str) -> list[dict]:
    assert isinstance(got, list) and all(isinstance(r, dict) for r in got), (
        f"first_rows_by must return a list of dict rows, as take() does (failed on {what}).")
    return got


@judges("first_rows_by_hidden", facts=[
    recomputed("the k smallest rows, whole and in order, on other columns, a large dataset and out-of-order blocks")])
def check_first_rows_by(k):
    rng = random.Random(7)
    scores = [rng.randint(0, 50) for _ in range(60)]
    rows = [{"name": f"s{i}", "score": s} for i, s in enumerate(scores)]
    ds = k.module("ray.data").from_items(rows, override_num_blocks=3)
    got = _rows_of(k.call("first_rows_by", ds, "score", 5), "a dataset with another column name")
    assert [r.get("score") for r in got] == sorted(scores)[:5], (
        "On a dataset with another column name and repeated values, the rows are not the k "
        "smallest in ascending order."
    )
    assert all(set(r) == {"name", "score"} for r in got), "Return whole rows, with every column."
    assert all(r["score"] == scores[int(str(r["name"])[1:])] for r in got), (
        "Return the dataset's own rows: each row's values must stay together."
    )

    descending = _dataset(k, [pa.table({"id": np.arange(19_999 - 5_000 * i, 14_999 - 5_000 * i, -1)}) for i in range(4)])
    got = _rows_of(k.call("first_rows_by", descending, "id", 3), "a large dataset")
    assert [r.get("id") for r in got] == [0, 1, 2], (
        "On a large dataset whose smallest values come last, the rows are not the smallest. "
        "Sort the whole dataset, not just the rows you happened to take."
    )

    reordering = k.remote_call(k.helper("jittered_range"), 400, 8)
    got = _rows_of(k.call("first_rows_by", reordering, "id", 10), "a pipeline whose blocks finish out of order")
    assert [r.get("id") for r in got] == list(range(10)), (
        "On a pipeline whose blocks finish out of order, the rows are not the smallest ids in "
        "ascending order. Do not rely on the order rows happen to come out in."
    )
