"""Computes mean and std inside the UDF, i.e. per batch, not over the dataset."""
ANSWERS = {
    "standardize_answer": '''
def standardize(ds, columns: list):
    def apply(batch):
        out = dict(batch)
        for c in columns:
            x = batch[c].astype(np.float64)
            out[c] = (x - x.mean()) / x.std(ddof=1)
        return out
    return ds.map_batches(apply)
''',
}
FAILS = {"standardize_visible", "standardize_hidden"}
