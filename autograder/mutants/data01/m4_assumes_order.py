"""Relies on output order: take(k) without sorting."""
ANSWERS = {
    "first_rows_by_answer": '''
def first_rows_by(ds, column: str, k: int) -> list:
    return ds.take(k)
''',
}
FAILS = {"first_rows_by_visible", "first_rows_by_hidden"}
