"""Drops the last, smaller batch (drop_last=True), so some rows are never seen in an epoch."""
ANSWERS = {
    "train_batches_answer": '''
def train_batches(ds, *, batch_size: int, epoch: int, device="cpu"):
    return ds.iter_torch_batches(batch_size=batch_size, collate_fn=DigitsCollate(), drop_last=True,
                                 local_shuffle_buffer_size=8 * batch_size, local_shuffle_seed=epoch, device=device)
''',
}
FAILS = {"train_batches_visible", "train_batches_hidden"}
