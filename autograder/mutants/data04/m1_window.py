"""Stale advice: "window pipelines with window(blocks_per_window=N)" to bound memory (removed in Ray 2.10)."""
ANSWERS = {
    "build_pipeline_answer": '''
def build_pipeline(num_rows: int):
    ds = image_source(num_rows).map_batches(decode_images, batch_size=BATCH_ROWS)
    return ds.window(blocks_per_window=2)
''',
}
FAILS = {"pipeline_visible", "pipeline_hidden", "no_spill_visible", "no_spill_hidden", "peak_visible", "peak_hidden"}
