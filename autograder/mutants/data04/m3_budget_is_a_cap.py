"""Treats the budget as a hard cap: budget = the whole allowance, blocks left at their default size."""
ANSWERS = {
    "configure_answer": '''
BUDGET_BYTES = ALLOWANCE_BYTES
BLOCK_BYTES = None  # keep Ray Data's default


def configure(ctx) -> None:
    ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(
        object_store_memory=BUDGET_BYTES)
''',
    "build_pipeline_answer": '''
def build_pipeline(num_rows: int):
    return image_source(num_rows).map_batches(decode_images)
''',
}
FAILS = {"peak_visible", "peak_hidden"}
