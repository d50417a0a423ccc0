"""Materializes every decoded image before training, so the trainer never waits on decoding."""
ANSWERS = {
    "build_pipeline_answer": '''
def build_pipeline(num_rows: int):
    return image_source(num_rows).map_batches(decode_images, batch_size=BATCH_ROWS).materialize()
''',
}
FAILS = {"pipeline_hidden", "no_spill_hidden", "peak_visible", "peak_hidden"}
