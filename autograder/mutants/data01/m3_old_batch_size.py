"""Assumes an old fixed map_batches batch size (4096 rows) instead of whole blocks.

Before Ray 2.43 map_batches cut fixed-size batches; a student copying that habit counts
batches, not blocks. With an explicit batch_size Ray also *bundles* small blocks into one
batch, so even 25-row blocks come back as a single count.
"""
ANSWERS = {
    "block_row_counts_answer": '''
def block_row_counts(ds) -> list:
    per_batch = ds.map_batches(lambda b: {"n": np.array([len(b["id"])])}, batch_size=4096)
    return sorted(int(r["n"]) for r in per_batch.take_all())
''',
}
FAILS = {"block_row_counts_visible", "block_row_counts_hidden"}
