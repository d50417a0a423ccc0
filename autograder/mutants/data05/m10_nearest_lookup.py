"""A model that learns nothing: for each image it finds the nearest image of the course's public
digits and answers that image's class, under the name the training data gives that class. Test
images that are only nudged copies of public ones are still found; images whose pixels sit in
other places are not."""
ANSWERS = {
    "train_model_answer": '''
def train_model(ds, *, epochs: int = 10, batch_size: int = 64, device="cpu"):
    from raydata_course.data import load_digits_table

    public = load_digits_table()
    images = np.asarray(public.column("pixels").combine_chunks().flatten()).reshape(-1, 64).astype(np.float32)
    truth = public.column("label").to_numpy()

    def nearest(pixels):
        d = ((pixels[:, None, :] - images[None, :, :]) ** 2).sum(axis=2)
        return truth[d.argmin(axis=1)]

    votes = np.zeros((10, 10), dtype=np.int64)
    for batch in ds.iter_batches(batch_size=256):
        pixels = np.stack(batch["pixels"]).astype(np.float32)
        np.add.at(votes, (nearest(pixels), np.asarray(batch["label"])), 1)
    names = votes.argmax(axis=1)

    class Lookup(torch.nn.Module):
        def forward(self, x):
            found = nearest(x.detach().cpu().numpy() * 16)
            logits = torch.zeros(len(found), 10)
            logits[torch.arange(len(found)), torch.from_numpy(names[found])] = 1.0
            return logits.to(x.device)

    return Lookup()
''',
}
FAILS = {"train_model_hidden"}
