"""Counts rows in the driver for the whole dataset instead of per block."""
ANSWERS = {
    "block_row_counts_answer": '''
def block_row_counts(ds) -> list:
    return [ds.count()]
''',
}
FAILS = {"block_row_counts_visible", "block_row_counts_hidden"}
