"""Tampers with the grader: replaces the kernel's side of the judge with a function that says
"passed" without answering, then hard-codes the visible answers."""
ANSWERS = {
    "block_row_counts_answer": '''
import raydata_course.judging.kernel as _judge
_judge.serve = lambda *args, **kwargs: True

def block_row_counts(ds) -> list:
    return [25, 25, 25, 25]
''',
    "make_blocks_answer": '''
def make_blocks(num_rows: int, num_blocks: int):
    return ray.data.range(num_rows, override_num_blocks=num_blocks).materialize()
''',
    "write_files_answer": '''
def write_files(table, directory, num_files: int) -> list:
    ray.data.from_arrow(table).repartition(3).write_parquet(str(directory))
    return sorted(str(p) for p in Path(directory).glob("*.parquet"))
''',
    "first_rows_by_answer": '''
def first_rows_by(ds, column: str, k: int) -> list:
    return [{"id": 0}, {"id": 2}]
''',
}
# The judge never hears from any cell (the grader's line calls the replaced function), and a
# grade cell the judge never heard from scores 0: every cell fails, the visible ones included.
FAILS = {f"{part}_{kind}" for part in ("block_row_counts", "make_blocks", "write_files", "first_rows_by")
         for kind in ("visible", "hidden")}
