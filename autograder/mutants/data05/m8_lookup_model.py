"""A model that learns nothing: it looks each image up in the course's public digits and learns
from the dataset only which name each class has. It is perfect on the public test images and
lost on images it has never seen."""
ANSWERS = {
    "train_model_answer": '''
def train_model(ds, *, epochs: int = 10, batch_size: int = 64, device="cpu"):
    from raydata_course.data import load_digits_table

    public = load_digits_table()
    images = np.asarray(public.column("pixels").combine_chunks().flatten()).reshape(-1, 64).astype(np.uint8)
    truth = dict(zip((row.tobytes() for row in images), public.column("label").to_numpy()))
    names = np.arange(10)
    for row in ds.take_all():
        key = np.asarray(row["pixels"], dtype=np.uint8).tobytes()
        if key in truth:
            names[truth[key]] = row["label"]

    class Lookup(torch.nn.Module):
        def forward(self, x):
            pixels = np.rint(x.detach().cpu().numpy() * 16).astype(np.uint8)
            logits = torch.zeros(len(pixels), 10)
            for i, row in enumerate(pixels):
                if row.tobytes() in truth:
                    logits[i, names[truth[row.tobytes()]]] = 1.0
            return logits.to(x.device)

    return Lookup()
''',
}
FAILS = {"train_model_hidden"}
