"""The lab's ingest workload: encoded photos → decode and augment → train a small CNN.

Pipeline (one block = one batch, so every hidden batch pins exactly one block)::

    read_parquet(JPEG bytes, label)                             # one file = one batch = one block
      → map_batches(decode_and_augment, batch_size=batch_rows)  # CPU work: JPEG decode,
                                                                 # random 224 crop, flip
      → iter_torch_batches(batch_size=batch_rows, prefetch_batches=pf)   (driver), or
        TorchTrainer + get_dataset_shard("train").iter_torch_batches(...) (Ray Train V2)

Each decoded row is a (3, 224, 224) ``uint8`` image, 150,528 bytes, plus an ``int64`` label,
so a batch of ``batch_rows`` rows is ``batch_rows * 150,536`` bytes (223 rows ≈ 32.0 MiB).

Each Parquet file holds one batch (``batch_rows`` rows), so a read task yields one encoded
block per batch and nothing has to re-block the stream. The read's blocks are the unit of
read-ahead: with files of four batches the read could never hold less than two 28 MiB encoded
blocks ahead of the decode, which took a large share of a push split's limit
(:mod:`raydata_course.push_split.readahead`).

The read is one file per read task. Ray 2.60's Parquet reader (``ParquetDatasourceV2``)
bin-packs files into read units of ``RAY_DATA_PARQUET_BIN_PACKING_BYTES`` (128 MiB by default,
``parquet_datasource_v2.py:190-214``); ``override_num_blocks`` does not reach that packer. With
the default, most of the lab's files become one read task and one block of nearly 128 MiB, and
Ray Data charges that task's pending output at two more such blocks
(``obj_store_mem_max_pending_output_per_task``, ``op_runtime_metrics.py:861-880``): at the
start of every epoch it believed the read alone used more than the lab's whole budget, for
one block. :func:`build_dataset` sets the unit to the largest file's size.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from raydata_course.lab.steps import StepTimer, gpu_wait
from raydata_course.units import MiB

__all__ = [
    "IMAGE_SIDE",
    "ENCODED_SIDE",
    "ROW_BYTES",
    "LabConfig",
    "rows_for_batch_bytes",
    "decode_and_augment",
    "SmallCNN",
    "build_dataset",
    "train_step",
    "consume_in_driver",
    "train_loop_per_worker",
]

IMAGE_SIDE = 224
ENCODED_SIDE = 240
#: bytes of one decoded row: a (3, 224, 224) uint8 image and an int64 label.
ROW_BYTES = 3 * IMAGE_SIDE * IMAGE_SIDE + 8


def rows_for_batch_bytes(batch_bytes: int) -> int:
    """Rows per batch so that a batch holds at most ``batch_bytes`` bytes (at least 1)."""
    return max(1, batch_bytes // ROW_BYTES)


@dataclass(frozen=True)
class LabConfig:
    """One lab variant.

    Attributes:
        name: variant name used in tables and file names.
        mode: ``"driver"`` (one ``iter_torch_batches`` in the driver) or ``"train"``
            (``TorchTrainer`` with ``consumers`` workers, each iterating its shard).
        consumers: number of consuming iterators (1 for driver mode).
        batch_rows: rows per batch and per block.
        batches_per_consumer: batches each consumer trains on.
        prefetch_batches: ``prefetch_batches`` of ``iter_torch_batches``.
        step_delay_s: extra seconds per training step, a sleep after the real step; > 0 makes
            a slow consumer whose step still takes CPU (the driver variants).
        gpu_step_s: the GPU stand-in: seconds per step that are a pure wait, a sleep on the
            CPU or a CUDA kernel that keeps the device busy that long (:func:`gpu_wait`); with
            ``cpu_step_rows`` the step's CPU part is tiny, so on two cores the producer has the
            CPU it would have beside a real GPU (the consumer-bound Train variant).
        cpu_step_rows: train the real step on only this many rows of each batch (0: all).
        budget_bytes: Ray Data's object-store limit
            (``DataContext.execution_options.resource_limits.object_store_memory``).
        object_store_bytes: size of the object store of the lab's local cluster.
        num_cpus: logical CPUs of the lab's local cluster.
        device: ``"cpu"`` or ``"cuda"``.
        cpus_per_worker: CPUs each Train worker reserves.
        epochs: passes over the data in one run; each epoch is a fresh execution of the
            dataset (and, under Ray Train, of the split), so each is measured as a repeat.
        split: how Ray Train shards the data (train mode): ``"pull"`` is Ray's
            ``streaming_split``; ``"push"`` is :func:`raydata_course.push_split.push_split`
            through :class:`raydata_course.push_split.train.PushDataConfig`. The training loop
            is the same for both.
        push_window: the push split's window policy, ``"adaptive"`` (budget-aware) or
            ``"fixed"`` (``prefetch_batches * batch_size`` rows each).
        push_steer_on_store: the bytes the object store holds over the budget (freed but not
            yet deleted, as measured) are charged to the executor's share, never to the
            consumers' windows (``push_split``'s ``steer_on_store``).
    """

    name: str
    mode: str = "driver"
    consumers: int = 1
    batch_rows: int = rows_for_batch_bytes(32 * MiB)
    batches_per_consumer: int = 32
    prefetch_batches: int = 4
    step_delay_s: float = 0.25
    gpu_step_s: float = 0.0
    cpu_step_rows: int = 0
    budget_bytes: int = 256 * MiB
    object_store_bytes: int = 2048 * MiB
    num_cpus: int = 4
    device: str = "cpu"
    cpus_per_worker: float = 0.5
    epochs: int = 1
    split: str = "pull"
    push_window: str = "adaptive"
    push_steer_on_store: bool = True

    def __post_init__(self) -> None:
        if self.split not in ("pull", "push"):
            raise ValueError(f"split must be 'pull' or 'push', got {self.split!r}.")
        if self.split == "push" and self.mode != "train":
            raise ValueError("split='push' shards data between Train workers; use mode='train'.")
        if self.mode not in ("driver", "train"):
            raise ValueError(f"mode must be 'driver' or 'train', got {self.mode!r}.")
        if self.mode == "driver" and self.consumers != 1:
            raise ValueError(f"driver mode has exactly one consumer, got consumers={self.consumers}.")
        if self.batch_rows * ROW_BYTES > 120 * MiB:
            raise ValueError("a batch must stay under Ray Data's 128 MiB target_max_block_size "
                             f"to remain one block; {self.batch_rows} rows is {self.batch_bytes / MiB:.0f} MiB.")
        if self.gpu_step_s < 0 or self.cpu_step_rows < 0 or self.step_delay_s < 0:
            raise ValueError("step_delay_s, gpu_step_s and cpu_step_rows must be >= 0, got "
                             f"{self.step_delay_s}, {self.gpu_step_s}, {self.cpu_step_rows}.")
        for field_name in ("batches_per_consumer", "batch_rows", "consumers", "epochs"):
            if getattr(self, field_name) < 1:
                raise ValueError(f"{field_name} must be at least 1, got {getattr(self, field_name)}.")

    @property
    def batch_bytes(self) -> int:
        """Bytes of one decoded batch (= one block)."""
        return self.batch_rows * ROW_BYTES

    @property
    def num_rows(self) -> int:
        """Rows the consumers read in total."""
        return self.batch_rows * self.batches_per_consumer * self.consumers

    def with_(self, **changes: Any) -> LabConfig:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return {**asdict(self), "batch_bytes": self.batch_bytes, "num_rows": self.num_rows}


def decode_and_augment(batch: dict) -> dict:
    """Map-batches UDF: decode JPEG bytes, take a random 224x224 crop, flip half the images.

    Args:
        batch: ``{"image": array of JPEG bytes (n,), "label": int64 (n,)}``.

    Returns:
        ``{"image": uint8 (n, 3, 224, 224), "label": int64 (n,)}``; new arrays, the input
        (read-only, zero-copy) is not modified.
    """
    from PIL import Image

    rng = np.random.default_rng()
    images = batch["image"]
    out = np.empty((len(images), 3, IMAGE_SIDE, IMAGE_SIDE), dtype=np.uint8)
    for i, encoded in enumerate(images):
        pixels = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))
        h, w, _ = pixels.shape
        top = int(rng.integers(0, h - IMAGE_SIDE + 1))
        left = int(rng.integers(0, w - IMAGE_SIDE + 1))
        crop = pixels[top : top + IMAGE_SIDE, left : left + IMAGE_SIDE]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        out[i] = crop.transpose(2, 0, 1)
    return {"image": out, "label": np.asarray(batch["label"], dtype=np.int64)}


def _torch_module():
    import torch.nn as nn

    class _SmallCNN(nn.Module):
        """A small CNN for 3x224x224 images: an 8x8/8 patch convolution, a 3x3 convolution,
        4x4 average pooling and a linear classifier (about 28 k parameters)."""

        def __init__(self, num_classes: int = 12):
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(3, 16, kernel_size=8, stride=8),
                nn.ReLU(),
                nn.Conv2d(16, 32, kernel_size=3, padding=1),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(4),
                nn.Flatten(),
                nn.Linear(32 * 16, num_classes),
            )

        def forward(self, x):
            return self.net(x)

    return _SmallCNN


def SmallCNN(num_classes: int = 12):  # noqa: N802 - a factory that reads like a class
    """Return a fresh small CNN (torch ``nn.Module``) for (n, 3, 224, 224) inputs."""
    return _torch_module()(num_classes)


#: Ray 2.60's Parquet read-unit size, an environment variable (not a public API).
READ_UNIT_ENV = "RAY_DATA_PARQUET_BIN_PACKING_BYTES"


@contextlib.contextmanager
def _env(name: str, value: str):
    """Set an environment variable for the ``with`` block, then restore it."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def build_dataset(config: LabConfig, data_dir: str | Path):
    """The lab's lazy Dataset over ``data_dir`` (see the module docstring).

    Reads exactly the files holding ``config.num_rows`` rows (each file holds ``batch_rows``
    rows, :meth:`raydata_course.lab.session.LabSession.data_dir`), one file per read task and
    block.

    Raises:
        ValueError: ``data_dir`` holds fewer rows than ``config.num_rows``.
    """
    import pyarrow.parquet as pq
    import ray

    files = sorted(Path(data_dir).glob("part-*.parquet"))
    chosen, rows, unit_bytes = [], 0, 0
    for path in files:
        if rows >= config.num_rows:
            break
        chosen.append(str(path))
        md = pq.read_metadata(path)
        rows += md.num_rows
        unit_bytes = max(unit_bytes, sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups)))
    if rows < config.num_rows:
        raise ValueError(f"{data_dir} holds {rows} rows, the variant needs {config.num_rows}; rebuild it larger.")
    # One file per read task (unit_bytes: the largest file's size), see the module docstring.
    # The packer reads the variable when the read is planned, in this call.
    with _env(READ_UNIT_ENV, str(unit_bytes)):
        ds = ray.data.read_parquet(chosen)
    if rows > config.num_rows:
        ds = ds.limit(config.num_rows)
    return ds.map_batches(decode_and_augment, batch_size=config.batch_rows)


def train_step(model, optimizer, batch: dict, device) -> float:
    """One real training step: uint8 images → float in [0, 1], forward, backward, update.

    Returns:
        The loss as a Python float.
    """
    import torch.nn.functional as F

    images = batch["image"].to(device, non_blocking=True).float().div_(255.0)
    labels = batch["label"].to(device, non_blocking=True)
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def _consume(iterator_batches, config: LabConfig, device, model, optimizer, timer: StepTimer, epoch: int) -> dict:
    rows = batches = 0
    t_start_wall = time.time()
    t_start = time.perf_counter()
    t_wait = time.perf_counter()
    batch_t_s = []
    for batch in iterator_batches:
        timer.wait_s.append(time.perf_counter() - t_wait)
        batch = timer.to_device(batch)
        step_batch = {k: v[:config.cpu_step_rows] for k, v in batch.items()} if config.cpu_step_rows else batch
        timer.run(lambda b=step_batch: train_step(model, optimizer, b, device))
        del step_batch
        if config.step_delay_s:
            time.sleep(config.step_delay_s)
        gpu_wait(config.gpu_step_s, device)
        rows += int(batch["label"].shape[0])
        batches += 1
        del batch
        t_wait = time.perf_counter()
        batch_t_s.append(t_wait - t_start)
    return {"epoch": epoch, "rows": rows, "batches": batches, "consume_s": time.perf_counter() - t_start,
            "step_s": timer.step_s, "step_cpu_s": timer.step_cpu_s, "wait_s": timer.wait_s, "h2d_s": timer.h2d_s,
            "h2d_bytes": timer.h2d_bytes,
            "batch_t_s": batch_t_s, "t_start_wall_s": t_start_wall,
            "t_end_wall_s": time.time()}


def consume_in_driver(ds, config: LabConfig) -> list[dict]:
    """Train on ``ds`` in this process with ``iter_torch_batches``, ``config.epochs`` times.

    Returns:
        One record per epoch: ``{"epoch", "rows", "batches", "consume_s", "step_s": [...],
        "wait_s": [...], "h2d_s": [...], "h2d_bytes": [...], "batch_t_s": [...], "t_start_wall_s",
        "t_end_wall_s"}`` (seconds; ``h2d_s``/``h2d_bytes``: each batch's host-to-device copy on a GPU;
        ``wait_s[i]`` is how long step ``i`` waited for its batch, ``batch_t_s[i]`` when
        step ``i`` finished, counted from the consumer's start).
    """
    import torch

    device = torch.device(config.device)
    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    records = []
    for epoch in range(config.epochs):
        # On a GPU the batches come as pinned CPU tensors and the loop copies them to the
        # device, timed with CUDA events (StepTimer.to_device).
        batches = ds.iter_torch_batches(batch_size=config.batch_rows, prefetch_batches=config.prefetch_batches,
                                        device="cpu", pin_memory=config.device == "cuda")
        records.append(_consume(batches, config, device, model, optimizer, StepTimer(device), epoch))
    return records


def train_loop_per_worker(loop_config: dict) -> None:
    """Ray Train worker loop: the same steps as the driver, on this worker's shard.

    ``loop_config`` holds the :class:`LabConfig` fields. Each worker sends its throughput
    record to the lab's recorder actor and reports it to Ray Train.
    """
    import ray.train
    import ray.train.torch
    import torch

    from raydata_course.measure.raydata import RECORDER_NAME, RECORDER_NAMESPACE

    config = LabConfig(**loop_config)
    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(SmallCNN())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    shard = ray.train.get_dataset_shard("train")
    rank = ray.train.get_context().get_world_rank()
    try:
        recorder = ray.get_actor(RECORDER_NAME, namespace=RECORDER_NAMESPACE)
    except ValueError:
        recorder = None
    for epoch in range(config.epochs):
        batches = shard.iter_torch_batches(batch_size=config.batch_rows, prefetch_batches=config.prefetch_batches,
                                           device="cpu", pin_memory=config.device == "cuda")
        record = _consume(batches, config, device, model, optimizer, StepTimer(device), epoch)
        record["rank"] = rank
        if recorder is not None:
            ray.get(recorder.add_consumer.remote(record))
        ray.train.report({"epoch": epoch, "rows": record["rows"], "batches": record["batches"],
                          "consume_s": record["consume_s"]})
