"""A correct answer written from chapter 04 in another style: a smaller budget (48 MiB) with
4 MiB blocks and a 4-image decode batch, the limit set as a new ExecutionResources rather than
a copy of the old one, and a training loop that counts the rows itself."""
ANSWERS = {
    "build_pipeline_answer": '''
DECODE_BATCH = 4  # images per decode_images call: 4 MiB of pixels at a time


def build_pipeline(num_rows: int):
    """The lazy dataset of num_rows decoded images (columns id and image)."""
    ids = image_source(num_rows)
    images = ids.map_batches(decode_images, batch_size=DECODE_BATCH, batch_format="numpy")
    return images
''',
    "train_answer": '''
def train(ds, trainer) -> int:
    """Feed ds to trainer.step in batches of BATCH_ROWS images; return the rows consumed."""
    consumed = 0
    batches = ds.iter_batches(batch_size=BATCH_ROWS, batch_format="numpy", prefetch_batches=1)
    for batch in batches:
        consumed += len(batch["id"])
        trainer.step(batch)
    return consumed
''',
    "configure_answer": '''
BUDGET_BYTES = 48 * MiB  # a quarter of the allowance: the rest is for running tasks, batches and freed memory
BLOCK_BYTES = 4 * MiB    # four decoded images per block


def configure(ctx) -> None:
    """Apply BUDGET_BYTES and BLOCK_BYTES to the DataContext ctx."""
    ctx.target_max_block_size = BLOCK_BYTES
    ctx.execution_options.resource_limits = ray.data.ExecutionResources(object_store_memory=BUDGET_BYTES)
''',
}
FAILS = set()
