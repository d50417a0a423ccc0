"""Divides the uint8 pixels by 16 without a cast: NumPy gives float64 features, which a float32 model rejects."""
ANSWERS = {
    "collate_answer": '''
class DigitsCollate(NumpyBatchCollateFn):
    def __call__(self, batch: dict) -> tuple:
        features = np.stack(batch["pixels"]) / 16
        return torch.from_numpy(features), torch.as_tensor(batch["label"])
''',
}
FAILS = {"collate_visible", "collate_hidden", "train_batches_visible", "train_batches_hidden",
         "train_model_visible", "train_model_hidden"}
