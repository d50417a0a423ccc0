"""Writes without controlling the block count, so the file count follows the blocks."""
ANSWERS = {
    "write_files_answer": '''
def write_files(table, directory, num_files: int) -> list:
    ray.data.from_arrow(table).write_parquet(str(directory))
    return sorted(str(p) for p in Path(directory).glob("*.parquet"))
''',
}
FAILS = {"write_files_visible", "write_files_hidden"}
