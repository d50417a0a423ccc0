"""A correct answer written from chapter 05 in another style: a NumPy-batch collate (np.stack of
the object array), train_batches as a generator over iter_torch_batches, shards read by plain
threading.Thread workers that collect per-batch id arrays, null labels dropped by an Arrow
map_batches as chapter 05 does it, and a training loop that moves the model to the device and
sets train mode."""
ANSWERS = {
    "collate_answer": '''
class DigitsCollate(NumpyBatchCollateFn):
    """NumPy batch -> (pixels / 16 as float32 (n, 64), labels as int64 (n,))."""

    def __call__(self, batch):
        # a fixed-size list column arrives as an object array of (64,) uint8 arrays
        pixels = np.stack(list(batch["pixels"])).reshape(-1, 64)
        features = pixels.astype(np.float32) / np.float32(16)
        labels = np.array(batch["label"], dtype=np.int64)
        return torch.from_numpy(features), torch.from_numpy(labels)
''',
    "train_batches_answer": '''
import pyarrow.compute as pc


def drop_null_labels(table):
    """Keep the rows whose label is not null (an Arrow batch: the label stays int64)."""
    return table.filter(pc.is_valid(table["label"]))


def train_batches(ds, *, batch_size: int, epoch: int, device="cpu"):
    """One shuffled epoch of (features, labels) batches of ds on device, without null labels."""
    labelled = ds.map_batches(drop_null_labels, batch_format="pyarrow")
    batches = labelled.iter_torch_batches(
        batch_size=batch_size,
        collate_fn=DigitsCollate(),
        local_shuffle_buffer_size=batch_size * 8,
        local_shuffle_seed=epoch,
        device=device,
    )
    for features, labels in batches:
        yield features, labels
''',
    "read_shards_answer": '''
import threading


def read_shards(ds, num_shards: int) -> list:
    """Ids read by each of num_shards streaming_split shards, read concurrently."""
    shards = ds.streaming_split(num_shards, equal=False)
    pieces = [[] for _ in range(num_shards)]
    errors = []

    def reader(index):
        try:
            for batch in shards[index].iter_batches(batch_format="numpy"):
                pieces[index].append(np.array(batch["id"]))
        except Exception as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(num_shards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in pieces]
''',
    "train_model_answer": '''
def train_model(ds, *, epochs: int = 10, batch_size: int = 64, device="cpu"):
    """Train ingest.DigitsMLP on ds with train_batches; return the model."""
    torch.manual_seed(0)
    net = ingest.DigitsMLP().to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    criterion = torch.nn.CrossEntropyLoss()
    net.train()
    for epoch in range(epochs):
        for features, labels in train_batches(ds, batch_size=batch_size, epoch=epoch, device=device):
            opt.zero_grad()
            criterion(net(features), labels).backward()
            opt.step()
    net.eval()
    return net
''',
}
FAILS = set()
