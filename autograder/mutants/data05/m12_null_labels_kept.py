"""Ignores null labels (the schema says int64, so the labels look safe): every row reaches the
batches, and NumPy's cast of a null (NaN) to int64 gives -9223372036854775808, a class no model
has. Correct on data without nulls."""
ANSWERS = {
    "train_batches_answer": '''
def train_batches(ds, *, batch_size: int, epoch: int, device="cpu"):
    return ds.iter_torch_batches(batch_size=batch_size, collate_fn=DigitsCollate(), drop_last=False,
                                 local_shuffle_buffer_size=8 * batch_size, local_shuffle_seed=epoch, device=device)
''',
}
FAILS = {"train_batches_hidden"}
