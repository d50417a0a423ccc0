"""Sorts only the first rows it happened to take, not the whole dataset."""
ANSWERS = {
    "first_rows_by_answer": '''
def first_rows_by(ds, column: str, k: int) -> list:
    return sorted(ds.take(1000), key=lambda row: row[column])[:k]
''',
}
FAILS = {"first_rows_by_hidden"}
