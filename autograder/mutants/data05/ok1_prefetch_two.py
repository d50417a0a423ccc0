"""A correct answer that prefetches two batches: batches are formatted in two threads and the
short one may arrive before full ones. It must score full marks on every run."""
ANSWERS = {
    "train_batches_answer": '''
def train_batches(ds, *, batch_size: int, epoch: int, device="cpu"):
    from ray.data.expressions import col

    return ds.filter(expr=col("label").is_not_null()).iter_torch_batches(
        batch_size=batch_size, collate_fn=DigitsCollate(), prefetch_batches=2,
        local_shuffle_buffer_size=8 * batch_size, local_shuffle_seed=epoch, device=device)
''',
}
FAILS = set()
