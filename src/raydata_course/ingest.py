"""Feeding Ray Data batches to PyTorch: what chapter 05, exercise data05 and its grader share.

The pieces:

- :func:`digits_split`: the UCI digits (see :mod:`raydata_course.data`) cut into a fixed
  train and test table, each row tagged with its original ``id``;
- :func:`digits_arrays`: an Arrow table of digits as ``float32`` features and ``int64``
  labels, the reference conversion used to *evaluate* models;
- :class:`DigitsMLP` and :func:`accuracy`: a small classifier and its test accuracy;
- :func:`id_probe_table` / :func:`ids_from_features`: digits-shaped rows whose pixels spell
  out the row's id, so that a check can tell from the *features* alone which rows a
  training loop saw, and :func:`row_coverage` to count missing and repeated rows;
- :func:`run_with_timeout`: run a call that may block forever and give up after a deadline;
  :func:`run_split_readers` does the same for code that reads ``streaming_split``
  iterators, and on a timeout also ends the blocked readers, so nothing stays stuck;
- :func:`time_iteration`: rows per second of any batch iterator;
- :class:`DigitsTorchDataset`: the same digits as a map-style ``torch.utils.data.Dataset``,
  for the side-by-side with ``torch.utils.data.DataLoader``;
- :func:`train_loop_per_worker`: the Ray Train worker loop of the chapter's ``TorchTrainer``.

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
    >>> probe = id_probe_table(300)
    >>> ids = ids_from_features(digits_arrays(probe)[0])
    >>> bool((ids == np.arange(300)).all())
    True
    >>> row_coverage([0, 1, 1, 3], num_rows=4)
    RowCoverage(num_rows=4, seen=4, missing=1, repeated=1, unknown=0)
"""

from __future__ import annotations

import contextlib
import threading
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
    "id_probe_table",
    "ids_from_features",
    "RowCoverage",
    "row_coverage",
    "run_with_timeout",
    "track_split_coordinators",
    "run_split_readers",
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

# Pixels that carry a probe row's id in base DIGITS_PIXEL_MAX + 1 (17**4 = 83,521 ids).
_PROBE_ID_PIXELS = 4


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


def id_probe_table(num_rows: int, seed: int = 0) -> pa.Table:
    """Digits-shaped rows whose features identify the row.

    The first four pixels of row ``i`` are the base-17 digits of ``i`` (most significant
    first); the other 60 are random grey levels; ``label`` is ``i % 10``. The schema is that
    of :func:`raydata_course.data.load_digits_table` (``pixels``, ``label``), so any ingest
    path built for the digits accepts it, and :func:`ids_from_features` recovers ``i`` from
    the features that path produces.

    Args:
        num_rows: rows to make, between 1 and 83,521.
        seed: seed of the random pixels.

    Returns:
        An Arrow table of ``num_rows`` rows in id order.

    Raises:
        ValueError: if ``num_rows`` is out of range.
    """
    base = DIGITS_PIXEL_MAX + 1
    if not 1 <= num_rows <= base**_PROBE_ID_PIXELS:
        raise ValueError(f"num_rows must be between 1 and {base ** _PROBE_ID_PIXELS}, got {num_rows!r}.")
    ids = np.arange(num_rows, dtype=np.int64)
    pixels = np.random.default_rng(seed).integers(0, base, size=(num_rows, DIGITS_NUM_FEATURES), dtype=np.uint8)
    for k in range(_PROBE_ID_PIXELS):
        pixels[:, k] = (ids // base ** (_PROBE_ID_PIXELS - 1 - k)) % base
    column = pa.FixedSizeListArray.from_arrays(pa.array(pixels.reshape(-1)), DIGITS_NUM_FEATURES)
    return pa.table({"pixels": column, "label": pa.array(ids % DIGITS_NUM_CLASSES)})


def ids_from_features(features: np.ndarray | torch.Tensor) -> np.ndarray:
    """Recover the row ids of :func:`id_probe_table` rows from their features.

    Args:
        features: shape ``(n, 64)``, ``pixels / 16`` (any float dtype, any device).

    Returns:
        ``int64`` ids of shape ``(n,)``.

    Raises:
        ValueError: if ``features`` is not two-dimensional with 64 columns.
    """
    if isinstance(features, torch.Tensor):
        features = features.detach().cpu().numpy()
    features = np.asarray(features)
    if features.ndim != 2 or features.shape[1] != DIGITS_NUM_FEATURES:
        raise ValueError(f"features must have shape (n, {DIGITS_NUM_FEATURES}), got {features.shape}.")
    digits = np.rint(features[:, :_PROBE_ID_PIXELS].astype(np.float64) * DIGITS_PIXEL_MAX).astype(np.int64)
    base = DIGITS_PIXEL_MAX + 1
    weights = base ** np.arange(_PROBE_ID_PIXELS - 1, -1, -1, dtype=np.int64)
    return digits @ weights


@dataclass(frozen=True)
class RowCoverage:
    """How a stream of row ids covered ``range(num_rows)``.

    Attributes:
        num_rows: rows that should each be seen once.
        seen: ids received, repeats included.
        missing: ids in ``range(num_rows)`` never received.
        repeated: extra receipts of ids received more than once.
        unknown: ids outside ``range(num_rows)``.
    """

    num_rows: int
    seen: int
    missing: int
    repeated: int
    unknown: int

    @property
    def exactly_once(self) -> bool:
        """True when every row was seen once and nothing else was seen."""
        return self.missing == 0 and self.repeated == 0 and self.unknown == 0


def row_coverage(ids: Iterable[int] | np.ndarray, num_rows: int) -> RowCoverage:
    """Count missing, repeated and unknown ids against ``range(num_rows)``.

    Args:
        ids: the ids a consumer received, in any order.
        num_rows: the number of rows ``0 .. num_rows - 1`` that should each appear once.

    Returns:
        A :class:`RowCoverage`.
    """
    ids = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=np.int64).reshape(-1)
    known = ids[(ids >= 0) & (ids < num_rows)]
    counts = np.bincount(known, minlength=num_rows)
    return RowCoverage(
        num_rows=num_rows,
        seen=int(ids.size),
        missing=int((counts == 0).sum()),
        repeated=int(np.clip(counts - 1, 0, None).sum()),
        unknown=int(ids.size - known.size),
    )


def run_with_timeout(fn: Callable[..., Any], timeout_s: float, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` in a daemon thread; wait at most ``timeout_s`` seconds.

    Use it for a call that may block forever, such as reading one ``streaming_split``
    iterator while its siblings are never read (every split must reach the epoch barrier in
    ``SplitCoordinator.start_epoch``, ``ray/data/_internal/iterator/stream_split_iterator.py``).

    .. warning::
        Python cannot stop a thread. After a timeout the call keeps running (or stays
        blocked) in the background until the process ends or something unblocks it.

    Args:
        fn: the callable.
        timeout_s: how long to wait, in seconds (> 0).
        *args: positional arguments for ``fn``.
        **kwargs: keyword arguments for ``fn``.

    Returns:
        What ``fn`` returned.

    Raises:
        TimeoutError: if ``fn`` has not returned after ``timeout_s`` seconds.
        ValueError: if ``timeout_s`` is not positive.
        Exception: whatever ``fn`` raised, re-raised here.

    Examples:
        >>> run_with_timeout(sum, 5.0, [1, 2, 3])
        6
        >>> run_with_timeout(time.sleep, 0.05, 1.0)
        Traceback (most recent call last):
        ...
        TimeoutError: sleep did not return within 0.05 s (it may be blocked; it keeps running in the background).
    """
    name, thread, outcome = _start_in_thread("run_with_timeout", fn, timeout_s, args, kwargs)
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(
            f"{name} did not return within {timeout_s:g} s (it may be blocked; it keeps running "
            "in the background)."
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@contextlib.contextmanager
def track_split_coordinators():
    """Record the ``SplitCoordinator`` actors that ``streaming_split`` creates in this block.

    ``Dataset.streaming_split`` calls ``StreamSplitDataIterator.create``
    (``ray/data/_internal/iterator/stream_split_iterator.py``), which starts one coordinator
    actor per split call; every iterator of that call holds it as ``_coord_actor``. Inside the
    ``with`` block, ``create`` is wrapped so that each new coordinator's handle is appended to
    the yielded list; the original is restored on exit.

    Yields:
        The list of coordinator actor handles created so far (it grows while the block runs).
    """
    from ray.data._internal.iterator.stream_split_iterator import StreamSplitDataIterator

    created: list = []
    original = StreamSplitDataIterator.create

    def create(base_dataset, n, locality_hints):
        iterators = original(base_dataset, n, locality_hints)
        if iterators:
            created.append(iterators[0]._coord_actor)
        return iterators

    StreamSplitDataIterator.create = staticmethod(create)
    try:
        yield created
    finally:
        StreamSplitDataIterator.create = staticmethod(original)


def run_split_readers(fn: Callable[..., Any], timeout_s: float, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)``, which reads ``streaming_split`` iterators, with a deadline.

    Like :func:`run_with_timeout`, but on a timeout it also ends the readers that are still
    blocked: it kills the ``SplitCoordinator`` actors that ``fn`` created (see
    :func:`track_split_coordinators`), so each blocked ``iter_batches`` raises
    ``ActorDiedError`` and its thread finishes. Without that, a reader stuck at the epoch
    barrier would stay in a Ray call until the process exits, and could take the process down
    when Ray shuts down.

    Args:
        fn: a callable that creates and reads ``streaming_split`` iterators.
        timeout_s: how long to wait, in seconds (> 0).
        *args: positional arguments for ``fn``.
        **kwargs: keyword arguments for ``fn``.

    Returns:
        What ``fn`` returned.

    Raises:
        TimeoutError: if ``fn`` has not returned after ``timeout_s`` seconds; its split
            coordinators have then been killed.
        ValueError: if ``timeout_s`` is not positive.
        Exception: whatever ``fn`` raised, re-raised here.
    """
    import ray

    with track_split_coordinators() as coordinators:
        name, thread, outcome = _start_in_thread("run_split_readers", fn, timeout_s, args, kwargs)
        thread.join(timeout_s)
        if thread.is_alive():
            for actor in coordinators:
                ray.kill(actor, no_restart=True)
            thread.join(_READER_EXIT_WAIT_S)
            raise TimeoutError(
                f"{name} did not return within {timeout_s:g} s; its {len(coordinators)} "
                f"streaming_split coordinator(s) were stopped"
                + ("." if not thread.is_alive() else ", but it is still running.")
            )
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _start_in_thread(
    caller: str, fn: Callable[..., Any], timeout_s: float, args: tuple, kwargs: dict
) -> tuple[str, threading.Thread, dict[str, Any]]:
    """Start ``fn(*args, **kwargs)`` in a daemon thread; its result or error lands in a dict.

    Returns:
        ``(name, thread, outcome)``: ``fn``'s name, the started thread, and a dict that gets
        ``"value"`` or ``"error"`` when ``fn`` ends.

    Raises:
        ValueError: if ``timeout_s`` is not positive (checked before anything starts).
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}.")
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    name = getattr(fn, "__name__", type(fn).__name__)
    thread = threading.Thread(target=target, name=f"{caller}:{name}", daemon=True)
    thread.start()
    return name, thread, outcome


# After killing a blocked reader's coordinator: how long to wait for the reader to end, in seconds.
_READER_EXIT_WAIT_S = 20.0


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
