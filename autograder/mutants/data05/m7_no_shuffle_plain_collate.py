"""A DataLoader habit: a plain collate callable (deprecated since Ray 2.47) and no shuffling of the rows.
With prefetch_batches=4 the batches arrive out of order, which must not pass for a shuffle."""
ANSWERS = {
    "collate_answer": '''
class DigitsCollate:
    def __call__(self, batch: dict) -> tuple:
        features = np.stack(batch["pixels"]).astype(np.float32) / 16
        return torch.from_numpy(features), torch.tensor(batch["label"], dtype=torch.int64)
''',
    "train_batches_answer": '''
def train_batches(ds, *, batch_size: int, epoch: int, device="cpu"):
    return ds.iter_torch_batches(batch_size=batch_size, collate_fn=DigitsCollate(), prefetch_batches=4, device=device)
''',
}
FAILS = {"collate_hidden", "train_batches_hidden"}
