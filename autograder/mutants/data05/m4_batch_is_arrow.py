"""Stale advice ("the batch is an Arrow table"): Arrow calls on what a NumpyBatchCollateFn receives, a dict of arrays."""
ANSWERS = {
    "collate_answer": '''
class DigitsCollate(NumpyBatchCollateFn):
    def __call__(self, batch) -> tuple:
        pixels = batch.column("pixels").combine_chunks()
        features = pixels.flatten().to_numpy().reshape(len(pixels), 64).astype(np.float32) / 16
        return torch.from_numpy(features), torch.from_numpy(batch.column("label").to_numpy())
''',
}
FAILS = {"collate_visible", "collate_hidden", "train_batches_visible", "train_batches_hidden",
         "train_model_visible", "train_model_hidden"}
