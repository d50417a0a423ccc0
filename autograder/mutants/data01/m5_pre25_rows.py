"""Pre-2.5 API: treats rows as bare values and sorts them in the driver."""
ANSWERS = {
    "first_rows_by_answer": '''
def first_rows_by(ds, column: str, k: int) -> list:
    return sorted(ds.take_all())[:k]
''',
}
FAILS = {"first_rows_by_visible", "first_rows_by_hidden"}
