"""Feeding Ray Data batches to PyTorch: what chapter 05, exercise data05 and its grader share.

The pieces:

- :func:`digits_split`: the UCI digits (see :mod:`raydata_course.data`) cut into a fixed
  train and test table, each row tagged with its original ``id``;
- :func:`digits_arrays`: an Arrow table of digits as ``float32`` features and ``int64``
  labels, the reference conversion used to *evaluate* models;
- :class:`DigitsMLP` and :func:`accuracy`: a small classifier and its test accuracy;
- :func:`time_iteration`: rows per second of any batch iterator;
- :class:`DigitsTorchDataset`: the same digits as a map-style ``torch.utils.data.Dataset``,
  for the side-by-side with ``torch.utils.data.DataLoader``;
- :func:`train_loop_per_worker`: the Ray Train worker loop of the chapter's ``TorchTrainer``.

Checking which rows a split delivered is :mod:`raydata_course.chapters.ch05_split_checks`.

Shapes and units: ``n`` is the number of rows in a batch; features are ``float32`` of shape
``(n, 64)`` with values in ``[0, 1]`` (pixel grey levels 0-16 divided by 16); labels are
``int64`` of shape ``(n,)`` with values 0-9; times are seconds.

Examples:
    >>> train, test = digits_split()
    >>> train.num_rows, test.num_rows, train.column_names
    (1438, 359, ['id', 'pixels', 'label'])
    >>> x, y = digits_arrays(test)
    >>> x.shape, x.dtype, y.shape, y.dtype, float(x.max())
    ((359, 64), dtype('float32'), (359,), dtype('int64'), 1.0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from raydata_course.data import load_digits_table

__all__ = [
    "DIGITS_NUM_FEATURES",
    "DIGITS_NUM_CLASSES",
    "DIGITS_PIXEL_MAX",
    "digits_split",
    "digits_arrays",
    "DigitsMLP",
    "accuracy",
    "IterationTiming",
    "time_iteration",
    "DigitsTorchDataset",
    "train_loop_per_worker",
]

#: Pixels per digit scan (8x8, row-major).
DIGITS_NUM_FEATURES = 64
#: Digit classes 0-9.
DIGITS_NUM_CLASSES = 10
#: Largest grey level in the scans; features are ``pixels / DIGITS_PIXEL_MAX``.
DIGITS_PIXEL_MAX = 16


def digits_split(test_fraction: float = 0.2, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    """Split the 1,797 digits into a train and a test table, the same way every time.

    Args:
        test_fraction: share of rows in the test table, strictly between 0 and 1.
        seed: seed of the permutation that assigns rows to the two tables.

    Returns:
        ``(train, test)``: Arrow tables with columns ``id`` (``int64``, the row's index in
        :func:`raydata_course.data.load_digits_table`), ``pixels`` (fixed-size list of 64
        ``uint8``, 0-16) and ``label`` (``int64``, 0-9). Both are sorted by ``id``. With the
        defaults: 1,438 train rows and 359 test rows.

    Raises:
        ValueError: if ``test_fraction`` is not strictly between 0 and 1.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be strictly between 0 and 1, got {test_fraction!r}.")
    table = load_digits_table()
    table = table.add_column(0, "id", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    order = np.random.default_rng(seed).permutation(table.num_rows)
    num_test = int(round(table.num_rows * test_fraction))
    test_ids = np.sort(order[:num_test])
    train_ids = np.sort(order[num_test:])
    return table.take(pa.array(train_ids)), table.take(pa.array(test_ids))


def digits_arrays(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Turn an Arrow table of digits into model inputs (the reference conversion).

    Args:
        table: a table with ``pixels`` (fixed-size list of 64 integers, 0-16) and
            ``label`` columns, e.g. from :func:`digits_split`.

    Returns:
        ``(features, labels)``: ``float32`` of shape ``(n, 64)`` holding ``pixels / 16``,
        and ``int64`` of shape ``(n,)``.

    Raises:
        KeyError: if a column is missing.
    """
    for name in ("pixels", "label"):
        if name not in table.column_names:
            raise KeyError(f"The table needs a {name!r} column; it has {table.column_names}.")
    pixels = table.column("pixels").combine_chunks()
    flat = pixels.flatten().to_numpy(zero_copy_only=False)
    features = flat.reshape(len(pixels), DIGITS_NUM_FEATURES).astype(np.float32) / DIGITS_PIXEL_MAX
    labels = table.column("label").to_numpy().astype(np.int64)
    return features, labels


class DigitsMLP(nn.Module):
    """A two-layer perceptron for 8x8 digits.

    Input: ``float32`` features of shape ``(n, 64)``, values in ``[0, 1]``.
    Output: ``float32`` logits of shape ``(n, 10)``.

    Args:
        hidden: width of the hidden layer.

    Examples:
        >>> DigitsMLP()(torch.zeros(5, 64)).shape
        torch.Size([5, 10])
    """

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(DIGITS_NUM_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, DIGITS_NUM_CLASSES)
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.layers(features)


@torch.no_grad()
def accuracy(model: nn.Module, table: pa.Table) -> float:
    """Share of rows of ``table`` whose label is the model's top logit.

    The model runs on CPU in ``eval`` mode on features from :func:`digits_arrays`; its
    training mode is restored afterwards.

    Args:
        model: maps ``float32`` ``(n, 64)`` to logits ``(n, 10)``.
        table: digits rows, e.g. the test table of :func:`digits_split`.

    Returns:
        Accuracy between 0 and 1.

    Raises:
        ValueError: if the model's output does not have shape ``(n, 10)``.
    """
    features, labels = digits_arrays(table)
    was_training = model.training
    model.eval()
    try:
        params = list(model.parameters())
        device = params[0].device if params else torch.device("cpu")
        logits = model(torch.from_numpy(features).to(device)).cpu()
    finally:
        model.train(was_training)
    if tuple(logits.shape) != (len(labels), DIGITS_NUM_CLASSES):
        raise ValueError(
            f"The model should map features of shape ({len(labels)}, {DIGITS_NUM_FEATURES}) to "
            f"logits of shape ({len(labels)}, {DIGITS_NUM_CLASSES}); it returned {tuple(logits.shape)}."
        )
    return float((logits.argmax(dim=1).numpy() == labels).mean())


@dataclass(frozen=True)
class IterationTiming:
    """Throughput of one pass over a batch iterator.

    Attributes:
        rows: rows delivered.
        batches: batches delivered.
        seconds: wall time from creating the iterator to its end, in seconds.
        first_batch_s: wall time until the first batch arrived, in seconds.
    """

    rows: int
    batches: int
    seconds: float
    first_batch_s: float

    @property
    def rows_per_s(self) -> float:
        """Rows per second over the whole pass."""
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


def _batch_rows(batch: Any) -> int:
    if isinstance(batch, (tuple, list)):
        return _batch_rows(batch[0])
    if isinstance(batch, dict):
        return _batch_rows(next(iter(batch.values())))
    return len(batch)


def time_iteration(make_batches: Callable[[], Iterable[Any]], *, rows_of: Callable[[Any], int] = _batch_rows,
                   consume: Callable[[Any], Any] | None = None) -> IterationTiming:
    """Time one full pass over the batches that ``make_batches()`` returns.

    The clock starts before ``make_batches()`` is called, so the set-up of a lazy iterator
    (for Ray Data, starting the streaming executor) counts.

    Args:
        make_batches: returns an iterable of batches.
        rows_of: rows in one batch; default: the length of the batch, of its first element
            (tuples) or of its first column (dicts).
        consume: called on each batch (e.g. a training step); default: nothing.

    Returns:
        An :class:`IterationTiming`.

    Examples:
        >>> timing = time_iteration(lambda: [np.zeros(4), np.zeros(2)])
        >>> timing.rows, timing.batches
        (6, 2)
    """
    start = time.perf_counter()
    first = None
    rows = batches = 0
    for batch in make_batches():
        if first is None:
            first = time.perf_counter() - start
        rows += rows_of(batch)
        batches += 1
        if consume is not None:
            consume(batch)
    seconds = time.perf_counter() - start
    return IterationTiming(rows, batches, seconds, first if first is not None else seconds)


class DigitsTorchDataset(torch.utils.data.Dataset):
    """The digits as a map-style PyTorch dataset: one ``(features, label)`` per index.

    This is what a ``torch.utils.data.DataLoader`` reads: it calls ``__getitem__`` once per
    row and stacks the rows of a batch with its default collate.

    Args:
        table: digits rows (``pixels``, ``label``), e.g. from :func:`digits_split`.

    Examples:
        >>> ds = DigitsTorchDataset(digits_split()[1])
        >>> x, y = ds[0]
        >>> len(ds), x.shape, x.dtype, y.dtype
        (359, torch.Size([64]), torch.float32, torch.int64)
    """

    def __init__(self, table: pa.Table):
        features, labels = digits_arrays(table)
        self.features = torch.from_numpy(features)
        self.labels = torch.from_numpy(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[index], self.labels[index]


def train_loop_per_worker(config: dict) -> list[dict]:
    """Ray Train worker loop: train :class:`DigitsMLP` on this worker's shard of ``"train"``.

    Each of the ``world_size`` workers reads its own ``streaming_split`` shard through
    ``ray.train.get_dataset_shard("train")`` and converts batches with the default collate:
    ``dtypes`` casts the ``uint8`` pixels to ``float32``. With a ``dtypes`` dict, every column
    of the shard needs an entry (Ray 2.60 raises ``KeyError`` for a missing one in
    ``arrow_batch_to_tensors``, ``ray/data/util/torch_utils.py``), so the ``"train"`` dataset
    must hold exactly ``pixels`` and ``label``. ``prepare_model`` wraps the model in
    ``DistributedDataParallel`` (gloo on CPU), so gradients are averaged over the workers.

    After each epoch the workers gather their row counts and summed losses over the process
    group (``all_gather_object``) and every worker calls ``ray.train.report``. In Ray 2.60's
    Train V2, ``Result.metrics`` only keeps metrics reported *with a checkpoint*
    (``TrainController._build_result``, ``ray/train/v2/_internal/execution/controller/
    controller.py``), so the history is also returned: rank 0's return value becomes
    ``Result.return_value``.

    Args:
        config: ``epochs`` (passes over the data), ``batch_size`` (rows per worker step),
            ``lr`` (Adam learning rate), ``shuffle_buffer_rows`` (local shuffle buffer, rows),
            ``test_features`` (``float32``, shape ``(m, 64)``) and ``test_labels``
            (``int64``, shape ``(m,)``).

    Returns:
        One dict per epoch: ``epoch``, ``rows_per_worker`` (rows each rank trained on),
        ``mean_loss`` (cross-entropy over all rows) and, on rank 0, ``test_accuracy``
        (between 0 and 1).
    """
    import ray.train
    import ray.train.torch

    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(DigitsMLP())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.CrossEntropyLoss()
    shard = ray.train.get_dataset_shard("train")
    context = ray.train.get_context()
    test_x = torch.tensor(np.asarray(config["test_features"], dtype=np.float32), device=device)
    test_y = torch.tensor(np.asarray(config["test_labels"], dtype=np.int64), device=device)
    history = []
    for epoch in range(config["epochs"]):
        rows, loss_sum = 0, 0.0
        batches = shard.iter_torch_batches(
            batch_size=config["batch_size"],
            dtypes={"pixels": torch.float32, "label": torch.int64},
            local_shuffle_buffer_size=config["shuffle_buffer_rows"],
            local_shuffle_seed=epoch,
        )
        for batch in batches:
            features = batch["pixels"] / DIGITS_PIXEL_MAX
            loss = loss_fn(model(features), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rows += len(batch["label"])
            loss_sum += loss.item() * len(batch["label"])
        # Every worker's row count and summed loss, gathered over the gloo process group.
        per_worker = [None] * context.get_world_size()
        torch.distributed.all_gather_object(per_worker, (rows, loss_sum))
        metrics = {"epoch": epoch, "rows_per_worker": [r for r, _ in per_worker],
                   "mean_loss": sum(s for _, s in per_worker) / max(sum(r for r, _ in per_worker), 1)}
        if context.get_world_rank() == 0:
            with torch.no_grad():
                model.eval()
                metrics["test_accuracy"] = float((model(test_x).argmax(dim=1) == test_y).float().mean())
                model.train()
        ray.train.report(metrics)
        history.append(metrics)
    return history
