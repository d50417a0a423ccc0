"""A correct answer written from chapter 01 in another style: block counts from a pyarrow-format
map_batches, exact blocks built from np.array_split slices with from_arrow, files written from
a repartitioned from_arrow dataset and listed with pathlib, and a sort then limit for Part D."""
ANSWERS = {
    "block_row_counts_answer": '''
def _rows_in_block(table: pa.Table) -> pa.Table:
    # batch_size=None below: this table is one whole block
    return pa.table({"rows": pa.array([table.num_rows], type=pa.int64())})


def block_row_counts(ds) -> list:
    """Sorted row counts of the blocks of a MaterializedDataset."""
    per_block = ds.map_batches(_rows_in_block, batch_size=None, batch_format="pyarrow")
    counts = [int(row["rows"]) for row in per_block.take_all()]
    counts.sort()
    return counts
''',
    "make_blocks_answer": '''
def make_blocks(num_rows: int, num_blocks: int):
    """ids 0..num_rows-1 in exactly num_blocks near-equal blocks, materialized."""
    pieces = np.array_split(np.arange(num_rows, dtype=np.int64), num_blocks)
    tables = [pa.table({"id": pa.array(piece, type=pa.int64())}) for piece in pieces]
    return ray.data.from_arrow(tables)
''',
    "write_files_answer": '''
def write_files(table, directory, num_files: int) -> list:
    """Write table as exactly num_files Parquet files with Ray Data; return sorted paths."""
    folder = Path(directory)
    ray.data.from_arrow(table).repartition(num_files).write_parquet(str(folder))
    written = [str(p) for p in folder.iterdir() if p.name.endswith(".parquet")]
    return sorted(written)
''',
    "first_rows_by_answer": '''
def first_rows_by(ds, column: str, k: int) -> list:
    """The k rows with the smallest values of column, ascending, as dicts."""
    smallest = ds.sort(column).limit(k)
    return [dict(row) for row in smallest.iter_rows()]
''',
}
FAILS = set()
