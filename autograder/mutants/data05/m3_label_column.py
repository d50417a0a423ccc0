"""Returns labels as a column of shape (n, 1) instead of (n,); CrossEntropyLoss then refuses them."""
ANSWERS = {
    "collate_answer": '''
class DigitsCollate(NumpyBatchCollateFn):
    def __call__(self, batch: dict) -> tuple:
        features = np.stack(batch["pixels"]).astype(np.float32) / 16
        labels = np.array(batch["label"], dtype=np.int64).reshape(-1, 1)
        return torch.from_numpy(features), torch.from_numpy(labels)
''',
}
FAILS = {"collate_visible", "collate_hidden", "train_batches_visible", "train_batches_hidden",
         "train_model_visible", "train_model_hidden"}
