"""Checking what a ``streaming_split`` delivered: every row once, and nobody stuck.

Chapter 05, exercise data05 and its grader share this module:

- :func:`id_probe_table` / :func:`ids_from_features`: digits-shaped rows whose pixels spell
  out the row's id, so that a check can tell from the *features* alone which rows a
  training loop saw, :func:`row_coverage` to count missing and repeated rows, and
  :func:`batches_full` for the sizes of one epoch's batches, in any order;
- :func:`run_with_timeout` and :func:`run_split_readers` (from
  :mod:`~raydata_course.chapters.ch05_split_readers`, re-exported here): run a call that may
  block forever, or code that reads ``streaming_split`` iterators, and give up after a
  deadline, ending the blocked readers so nothing stays stuck.

Examples:
    >>> from raydata_course.chapters.ch05_torch_ingest import digits_arrays
    >>> probe = id_probe_table(300)
    >>> ids = ids_from_features(digits_arrays(probe)[0])
    >>> bool((ids == np.arange(300)).all())
    True
    >>> row_coverage([0, 1, 1, 3], num_rows=4)
    RowCoverage(num_rows=4, seen=4, missing=1, repeated=1, unknown=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from raydata_course.chapters.ch05_split_readers import (
    run_split_readers,
    run_with_timeout,
    split_total_limit_s,
    track_split_coordinators,
    track_split_progress,
)
from raydata_course.chapters.ch05_torch_ingest import DIGITS_NUM_CLASSES, DIGITS_NUM_FEATURES, DIGITS_PIXEL_MAX

__all__ = [
    "id_probe_table",
    "ids_from_features",
    "RowCoverage",
    "row_coverage",
    "batches_full",
    "run_with_timeout",
    "track_split_coordinators",
    "track_split_progress",
    "run_split_readers",
    "split_total_limit_s",
]

#: Leading pixels of a probe row that spell its id, in base 17 (pixels are 0-16).
_PROBE_ID_PIXELS = 4


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


def ids_from_features(features: Any) -> np.ndarray:
    """Recover the row ids of :func:`id_probe_table` rows from their features.

    Args:
        features: shape ``(n, 64)``, ``pixels / 16`` (any float dtype, any device).

    Returns:
        ``int64`` ids of shape ``(n,)``.

    Raises:
        ValueError: if ``features`` is not two-dimensional with 64 columns.
    """
    if hasattr(features, "detach"):  # a torch tensor, on any device
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


def batches_full(sizes: Iterable[int], batch_size: int) -> bool:
    """True when every batch but one holds ``batch_size`` rows and that one holds 1 to
    ``batch_size`` rows, whatever order the batches came in.

    The order is not checked because it is not promised: with ``prefetch_batches > 1`` an
    iterator formats and collates batches in a pool of up to
    ``min(4, prefetch_batches)`` threads, and unless ``DataContext`` ``execution_options.preserve_order``
    is set, a batch that finished early is handed out early. The short batch, made last, can
    then arrive before full ones (``ray/data/_internal/block_batching/iter_batches.py``,
    ``BatchIterator._format_batches`` and ``_pipeline``, step 5).

    Args:
        sizes: rows per batch, in the order received.
        batch_size: the requested rows per batch (``drop_last=False``).

    Examples:
        >>> batches_full([64, 23, 64], 64), batches_full([64, 23, 23], 64), batches_full([], 64)
        (True, False, False)
    """
    ordered = sorted(int(s) for s in sizes)
    return bool(ordered) and 0 < ordered[0] <= batch_size and all(s == batch_size for s in ordered[1:])
