"""Writes the files itself with pyarrow instead of with Ray Data."""
ANSWERS = {
    "write_files_answer": '''
def write_files(table, directory, num_files: int) -> list:
    import pyarrow.parquet as pq
    step = -(-table.num_rows // num_files)
    paths = []
    for i in range(num_files):
        path = Path(directory) / f"part-{i}.parquet"
        pq.write_table(table.slice(i * step, step), path)
        paths.append(str(path))
    return sorted(paths)
''',
}
FAILS = {"write_files_hidden"}
