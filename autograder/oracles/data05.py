"""Hidden tests for data05 (grader only; never copied into exercises/ or the student bundle).

Each ``check_*`` receives the student's objects and raises ``AssertionError`` with a message
that names the kind of input that failed and what to fix, never the input or expected value.
The datasets here are built from :func:`raydata_course.chapters.ch05_split_checks.id_probe_table`: digits-shaped
rows whose first pixels spell out the row id, so the check can tell from the features alone
which rows a batch held.
"""

import warnings

import numpy as np
import pyarrow as pa
import ray
import torch
from ray.data.collate_fn import CollateFn

from raydata_course.chapters import ch05_split_checks as split_checks
from raydata_course.chapters import ch05_torch_ingest as ingest

#: Longest a correct read of every shard may take on a loaded 2-core machine, in seconds
#: (a correct answer needs a few seconds on a quiet one).
SPLIT_TIMEOUT_S = 30.0


def _probe_dataset(num_rows: int, num_blocks: int, seed: int = 0):
    table = split_checks.id_probe_table(num_rows, seed=seed)
    return ray.data.from_arrow(table).repartition(num_blocks).materialize(), table


def _expected_features(table: pa.Table) -> np.ndarray:
    return ingest.digits_arrays(table)[0]


def _check_xy(batch, what: str):
    assert isinstance(batch, (tuple, list)) and len(batch) == 2, (
        f"{what}: each batch must be a tuple (features, labels), got {type(batch).__name__}."
    )
    x, y = batch
    assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor), (
        f"{what}: features and labels must be torch tensors."
    )
    assert x.dtype == torch.float32, f"{what}: features must be float32, got {x.dtype}."
    assert y.dtype == torch.int64, f"{what}: labels must be int64 (what CrossEntropyLoss expects), got {y.dtype}."
    assert x.ndim == 2 and x.shape[1] == ingest.DIGITS_NUM_FEATURES, (
        f"{what}: features must have shape (rows, 64), got {tuple(x.shape)}."
    )
    assert y.shape == (x.shape[0],), (
        f"{what}: labels must have shape (rows,), one label per row, got {tuple(y.shape)} for "
        f"{x.shape[0]} rows."
    )
    return x, y


def check_collate(DigitsCollate):
    collate = DigitsCollate()
    assert isinstance(collate, CollateFn), (
        "DigitsCollate must subclass one of Ray's collate classes (ArrowBatchCollateFn, "
        "NumpyBatchCollateFn or PandasBatchCollateFn from ray.data.collate_fn); plain "
        "callables are deprecated since Ray 2.47."
    )
    ds, table = _probe_dataset(301, 5, seed=1)
    expected = _expected_features(table)
    for batch_size in (1, 7, 64):
        xs, ys = [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's "not writable" notice
            for batch in ds.iter_torch_batches(batch_size=batch_size, collate_fn=DigitsCollate()):
                x, y = _check_xy(batch, f"With batches of {batch_size} row(s)")
                xs.append(x)
                ys.append(y)
        x = torch.cat(xs).numpy()
        y = torch.cat(ys).numpy()
        assert len(x) == table.num_rows, f"With batches of {batch_size} row(s), rows were lost or added."
        ids = split_checks.ids_from_features(x)
        assert np.array_equal(np.sort(ids), np.arange(table.num_rows)), (
            "Some features do not match any input row: features must be pixels / 16, in the "
            "pixels' own order."
        )
        assert np.array_equal(x, expected[ids]), "Features must be exactly pixels / 16 (as float32)."
        assert np.array_equal(y, ids % 10), "Each label must be the label of its own row."
    x, y = next(iter(ds.iter_torch_batches(batch_size=16, collate_fn=DigitsCollate(), device="meta")))
    assert x.device.type == "meta" and y.device.type == "meta", (
        "With device= set, your batches stayed on the CPU: return a tuple of tensors so that "
        "iter_torch_batches moves them to the device."
    )


def _epoch(train_batches, ds, batch_size: int, epoch: int, device: str = "cpu"):
    ids, sizes, devices = [], [], set()
    for batch in train_batches(ds, batch_size=batch_size, epoch=epoch, device=device):
        x, y = _check_xy(batch, f"train_batches(batch_size={batch_size})")
        devices.add(x.device.type)
        devices.add(y.device.type)
        sizes.append(x.shape[0])
        if device != "meta":
            ids.append(split_checks.ids_from_features(x))
    return (np.concatenate(ids) if ids else np.zeros(0, np.int64)), sizes, devices


def check_train_batches(train_batches):
    num_rows = 1003
    ds, _ = _probe_dataset(num_rows, 6, seed=2)
    orders = []
    for batch_size in (64, 100):
        for epoch in (0, 1):
            ids, sizes, _ = _epoch(train_batches, ds, batch_size, epoch)
            cover = split_checks.row_coverage(ids, num_rows)
            assert cover.exactly_once, (
                f"In one epoch with batch_size={batch_size}, {cover.missing} row(s) were never "
                f"seen and {cover.repeated} were seen twice: every row must be seen exactly once "
                "per epoch (keep the last, smaller batch)."
            )
            assert all(s == batch_size for s in sizes[:-1]) and 0 < sizes[-1] <= batch_size, (
                f"With batch_size={batch_size}, every batch but the last must hold exactly "
                "batch_size rows."
            )
            if batch_size == 64:
                orders.append(ids)
    assert not np.array_equal(orders[0], np.sort(orders[0])), (
        "The rows came in their stored order: shuffle them with a local shuffle buffer."
    )
    assert not np.array_equal(orders[0], orders[1]), (
        "Epochs 0 and 1 saw the rows in the same order: seed the local shuffle with the epoch."
    )
    _, _, devices = _epoch(train_batches, ds, 128, 0, device="meta")
    assert devices == {"meta"}, (
        "With another device, the batches did not arrive on it: pass device to iter_torch_batches."
    )


def check_read_shards(read_shards):
    for num_rows, num_blocks, num_shards in ((1001, 9, 3),):
        ds = ray.data.range(num_rows, override_num_blocks=num_blocks)
        try:
            # On a timeout the blocked readers are ended too, so nothing is left stuck in Ray.
            shards = split_checks.run_split_readers(read_shards, SPLIT_TIMEOUT_S, ds, num_shards)
        except TimeoutError:
            raise AssertionError(
                f"read_shards did not finish within {SPLIT_TIMEOUT_S:.0f} s. The shards of a "
                "streaming_split must be read at the same time (one thread per shard): a shard "
                "read alone waits at the epoch barrier for the others forever."
            ) from None
        assert len(shards) == num_shards, f"Expected one array per shard ({num_shards}), got {len(shards)}."
        assert all(len(s) > 0 for s in shards), "Every shard should have received rows."
        cover = split_checks.row_coverage(np.concatenate([np.asarray(s) for s in shards]), num_rows)
        assert cover.exactly_once, (
            f"Across the shards, {cover.missing} row(s) were never read and {cover.repeated} were "
            "read twice. Each row must reach exactly one shard: note what equal=True does with "
            "rows that do not divide evenly."
        )


def check_train_model(train_model):
    # Same features, classes renamed: a model must learn from the dataset it is given.
    train, test = ingest.digits_split()
    rename = np.array([3, 7, 0, 9, 1, 5, 2, 8, 6, 4], dtype=np.int64)

    def renamed(table):
        labels = rename[table.column("label").to_numpy()]
        return table.set_column(table.column_names.index("label"), "label", pa.array(labels))

    ds = ray.data.from_arrow(renamed(train)).repartition(3).materialize()
    model = train_model(ds, epochs=10, batch_size=64)
    assert isinstance(model, torch.nn.Module), f"train_model must return a torch.nn.Module, got {type(model).__name__}."
    model = model.cpu()
    acc = ingest.accuracy(model, renamed(test))
    assert acc >= 0.90, (
        f"Trained on another labelling of the digits, the model reached {acc:.1%} test accuracy "
        "(at least 90% is needed). Train on the dataset passed in, for the given epochs."
    )
