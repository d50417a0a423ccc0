"""Diagnosing and tuning a training-ingest pipeline: the data, the UDFs and the measurements.

Chapter 07 starts from a slow, memory-hungry pipeline over real photographs and fixes it one
step at a time. This module holds what the steps share:

- **The data.** :func:`write_photo_shards` turns the lab's JPEG crops (built offline by
  :func:`raydata_course.lab.photos.build_image_parquet`) into Parquet shards with the columns
  a real image table tends to have: ``id`` (int64, the row's position), ``label`` (int64),
  ``image`` (JPEG bytes), and ``preview``, an uncompressed 96×96 RGB thumbnail (27,648 bytes a
  row) that training never reads.
- **The UDFs.** :func:`decode_jpeg` (deterministic: JPEG bytes → ``uint8`` (n, 240, 240, 3)),
  :func:`random_crop_flip` (random: a 224×224 crop, half of them mirrored, channels first) and
  :func:`decode_and_augment` (both in one batch UDF, the way the slow pipeline does it).
- **The measurement.** :func:`measure_epoch` consumes one epoch the way a training loop does,
  with a fixed step time standing in for a GPU step, and returns the epoch's seconds, rows,
  object-store peak and the share of the time the loop waited for data.
  :func:`order_metrics` says how shuffled the consumed order is.
  :func:`most_at_once` counts how many tasks ran at the same time.

Reading Ray's own stats text is :mod:`raydata_course.chapters.ch07_stats`; deciding which step
to keep, :mod:`raydata_course.chapters.ch07_decide`.

Examples:
    >>> batch = random_crop_flip({"id": np.arange(2), "label": np.zeros(2, np.int64),
    ...                           "pixels": np.zeros((2, 240, 240, 3), np.uint8)}, seed=0)
    >>> batch["image"].shape, batch["image"].dtype.name
    ((2, 3, 224, 224), 'uint8')
    >>> order_metrics(np.arange(0, 20, 2))["in_order_pairs"]  # every other row, in order
    1.0
"""

from __future__ import annotations

import io
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

from raydata_course.measure.run import measure_streaming_run
from raydata_course.units import MiB

__all__ = [
    "DECODED_SIDE",
    "CROP_SIDE",
    "PREVIEW_SIDE",
    "write_photo_shards",
    "decode_jpeg",
    "random_crop_flip",
    "decode_and_augment",
    "EpochResult",
    "measure_epoch",
    "order_metrics",
    "most_at_once",
]

#: Side of a decoded photo, in pixels (the lab's crops are stored at this size).
DECODED_SIDE = 240
#: Side of the training crop, in pixels.
CROP_SIDE = 224
#: Side of the unused thumbnail column, in pixels.
PREVIEW_SIDE = 96


def write_photo_shards(jpeg_folder: str | Path, out_folder: str | Path, *, rows_per_file: int = 64) -> Path:
    """Write Parquet shards of ``id``, ``label``, ``image`` and ``preview`` (see the module docstring).

    Args:
        jpeg_folder: a folder of ``part-*.parquet`` files with ``image`` (JPEG bytes of
            :data:`DECODED_SIDE` pixels a side) and ``label`` columns, as
            :func:`raydata_course.lab.photos.build_image_parquet` writes them.
        out_folder: where to write ``shard-*.parquet``; emptied of old shards first.
        rows_per_file: rows per shard.

    Returns:
        ``out_folder`` as a Path.

    Raises:
        FileNotFoundError: if ``jpeg_folder`` holds no ``part-*.parquet`` file.
        ValueError: if ``rows_per_file`` is not positive.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    if rows_per_file < 1:
        raise ValueError(f"rows_per_file must be at least 1, got {rows_per_file}.")
    parts = sorted(Path(jpeg_folder).glob("part-*.parquet"))
    if not parts:
        raise FileNotFoundError(f"{jpeg_folder} holds no part-*.parquet files: build it with "
                                "raydata_course.lab.photos.build_image_parquet first.")
    table = pa.concat_tables(pq.read_table(p, columns=["image", "label"]) for p in parts)
    previews = []
    for encoded in table.column("image").to_pylist():
        thumb = Image.open(io.BytesIO(encoded)).convert("RGB").resize((PREVIEW_SIDE, PREVIEW_SIDE))
        previews.append(np.asarray(thumb).tobytes())
    table = pa.table({
        "id": pa.array(np.arange(table.num_rows, dtype=np.int64)),
        "label": table.column("label"),
        "image": table.column("image"),
        "preview": pa.array(previews, pa.binary()),
    })
    out = Path(out_folder)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("shard-*.parquet"):
        old.unlink()
    for i, start in enumerate(range(0, table.num_rows, rows_per_file)):
        pq.write_table(table.slice(start, rows_per_file), out / f"shard-{i:04d}.parquet")
    return out


def decode_jpeg(batch: dict) -> dict:
    """Batch UDF: JPEG bytes → pixels. Deterministic, so its output can be cached.

    Args:
        batch: ``{"id": int64 (n,), "label": int64 (n,), "image": JPEG bytes (n,), ...}``;
            other columns are dropped.

    Returns:
        ``{"id", "label", "pixels": uint8 (n, 240, 240, 3)}``, new arrays.
    """
    from PIL import Image

    images = batch["image"]
    pixels = np.empty((len(images), DECODED_SIDE, DECODED_SIDE, 3), dtype=np.uint8)
    for i, encoded in enumerate(images):
        pixels[i] = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))
    return {"id": np.asarray(batch["id"]), "label": np.asarray(batch["label"]), "pixels": pixels}


def random_crop_flip(batch: dict, seed: int | None = None) -> dict:
    """Batch UDF: a random 224×224 crop of each photo, mirrored with probability 1/2.

    Args:
        batch: ``{"id", "label", "pixels": uint8 (n, 240, 240, 3)}``.
        seed: seed of the generator; None draws fresh crops on every call (training).

    Returns:
        ``{"id", "label", "image": uint8 (n, 3, 224, 224)}`` (150,528 bytes of pixels a row).
    """
    rng = np.random.default_rng(seed)
    pixels = batch["pixels"]
    out = np.empty((len(pixels), 3, CROP_SIDE, CROP_SIDE), dtype=np.uint8)
    for i, photo in enumerate(pixels):
        top, left = rng.integers(0, DECODED_SIDE - CROP_SIDE + 1, size=2)
        crop = photo[top : top + CROP_SIDE, left : left + CROP_SIDE]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        out[i] = crop.transpose(2, 0, 1)
    return {"id": np.asarray(batch["id"]), "label": np.asarray(batch["label"]), "image": out}


def decode_and_augment(batch: dict) -> dict:
    """Batch UDF: :func:`decode_jpeg` then :func:`random_crop_flip`, in one task."""
    return random_crop_flip(decode_jpeg(batch))


@dataclass
class EpochResult:
    """One measured epoch of a pipeline and its training loop.

    Attributes:
        name: the step's name.
        rows: rows the loop consumed.
        seconds: wall seconds from building the dataset to the last batch.
        rows_per_s: ``rows / seconds``.
        peak_store_bytes: the object store's peak during the epoch, above what it held before
            (:class:`raydata_course.measure.run.StreamingRun`'s ``peak_bytes``).
        spilled_bytes: bytes spilled to disk during the epoch.
        waiting_fraction: share of the loop's time spent waiting in ``next()`` for a batch
            (the rest is the training step): near 1, the pipeline is the bottleneck.
        first_batch_s: seconds from building the dataset to the first batch.
        ids: the ``id`` of every consumed row, in the order consumed.
    """

    name: str
    rows: int
    seconds: float
    rows_per_s: float
    peak_store_bytes: int
    spilled_bytes: int
    waiting_fraction: float
    first_batch_s: float
    ids: np.ndarray

    def row(self) -> dict[str, Any]:
        """The figures as a table row (MiB for bytes, rounded), without the ids."""
        d = asdict(self)
        d.pop("ids")
        d["seconds"] = round(self.seconds, 2)
        d["rows_per_s"] = round(self.rows_per_s, 1)
        d["peak_store_MiB"] = round(d.pop("peak_store_bytes") / MiB)
        d["spilled_MiB"] = round(d.pop("spilled_bytes") / MiB)
        d["waiting_fraction"] = round(self.waiting_fraction, 2)
        d["first_batch_s"] = round(self.first_batch_s, 2)
        return d


def measure_epoch(name: str, build: Callable[[], Any], *, step_s: float = 0.02, batch_size: int = 64,
                  **iter_kwargs: Any) -> EpochResult:
    """Build a dataset and train one epoch on it, measured.

    The "training step" is ``time.sleep(step_s)``: it stands for a step on a GPU, which leaves
    the CPUs to the pipeline. The loop converts each batch to tensors with
    ``iter_torch_batches(batch_size=batch_size, **iter_kwargs)`` and times how long each
    ``next()`` waits.

    Args:
        name: the step's name, kept in the result.
        build: returns the dataset (called inside the measured window).
        step_s: seconds of one training step.
        batch_size: rows per batch.
        **iter_kwargs: more ``iter_torch_batches`` arguments (``prefetch_batches``,
            ``local_shuffle_buffer_size``, ...).

    Returns:
        An :class:`EpochResult`.

    Raises:
        RuntimeError: if Ray is not running.
    """
    ids: list[np.ndarray] = []
    waited = [0.0]
    first_batch_at = [None]
    built_at = [0.0]

    def timed_build():
        built_at[0] = time.perf_counter()
        return build()

    def consume(ds) -> int:
        batches = iter(ds.iter_torch_batches(batch_size=batch_size, **iter_kwargs))
        rows = 0
        while True:
            t = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                waited[0] += time.perf_counter() - t
                return rows
            waited[0] += time.perf_counter() - t
            if first_batch_at[0] is None:
                first_batch_at[0] = time.perf_counter()
            ids.append(batch["id"].numpy().copy())
            rows += len(batch["id"])
            time.sleep(step_s)

    run = measure_streaming_run(timed_build, consume)
    return EpochResult(name=name, rows=run.rows, seconds=run.wall_s, rows_per_s=run.rows / run.wall_s,
                       peak_store_bytes=run.peak_bytes, spilled_bytes=run.spilled_bytes,
                       waiting_fraction=waited[0] / run.wall_s,
                       first_batch_s=(first_batch_at[0] or time.perf_counter()) - built_at[0],
                       ids=np.concatenate(ids) if ids else np.empty(0, np.int64))


def order_metrics(ids: np.ndarray) -> dict[str, float]:
    """How far a consumed order is from the stored order.

    The stored order is the order of the consumed rows' ids, so a filter that dropped rows in
    between does not count as a change of order.

    Args:
        ids: row ids in the order consumed (ids grow with the position in storage).

    Returns:
        ``{"in_order_pairs": share of consecutive rows that are also consecutive in the stored
        order of the consumed rows (1.0 in stored order, about 0 shuffled),
        "mean_displacement": mean |consumed position − stored rank| / number of rows (0 in
        stored order, about 1/3 for a uniform shuffle)}``.

    Raises:
        ValueError: if ``ids`` has fewer than 2 rows.
    """
    ids = np.asarray(ids)
    if len(ids) < 2:
        raise ValueError(f"order_metrics needs at least 2 rows, got {len(ids)}.")
    ranks = np.argsort(np.argsort(ids))
    return {"in_order_pairs": float(np.mean(np.diff(ranks) == 1)),
            "mean_displacement": float(np.mean(np.abs(ranks - np.arange(len(ids)))) / len(ids))}


def most_at_once(rows: list[dict[str, Any]]) -> int:
    """The most tasks that ran at the same time, from rows that record each task's run.

    Args:
        rows: one row per task, with ``start`` and ``end`` (seconds on one clock, e.g.
            ``time.time()`` on one node; scalars or one-element arrays).

    Returns:
        The largest number of tasks whose ``[start, end)`` intervals overlap; 0 for no rows.

    Examples:
        >>> most_at_once([{"start": 0, "end": 2}, {"start": 1, "end": 3}, {"start": 2, "end": 4}])
        2
    """
    starts = np.array([float(np.asarray(r["start"]).reshape(-1)[0]) for r in rows])
    ends = np.array([float(np.asarray(r["end"]).reshape(-1)[0]) for r in rows])
    return max((int(((starts <= t) & (ends > t)).sum()) for t in starts), default=0)
