"""Streaming execution and backpressure: a workload to watch, and the knobs of the budget.

Chapter 04, exercise data04 and its hidden tests share this module:

- **A workload** whose memory is easy to reason about. :func:`image_source` stands for a
  folder of files (blocks of at most ``rows_per_file`` rows, one read task per block), and
  :func:`decode_images` "decodes" each row into a 1 MiB RGBA image, so a decoded block of
  ``n`` rows holds ``n`` MiB. :class:`SlowTrainer` is the consumer: it checks every batch,
  records the ids it saw, and sleeps like a training step.
- **The knobs** of Ray Data's object-store budget: :func:`reset_streaming_knobs` puts them
  back to Ray's defaults, and :func:`measure_configured_run` configures them, then measures a
  run (with :func:`raydata_course.measure.run.measure_streaming_run`), as data04 does.
- **Ray's defaults, cited** from the installed source: :func:`object_store_limit_fraction`
  and :func:`backpressure_policy_names` return a value and the line that defines it.
- :func:`plot_store_timeline` draws measured runs: the store's actual bytes, Ray Data's
  estimate, and its budget.

Why peaks exceed budgets (what the measurements show): Ray Data's budget
(``DataContext.execution_options.resource_limits.object_store_memory``, or a fraction of the
store by default) is checked *before* a task is launched, against an estimate. The store
also holds the outputs of tasks already running, the consumer's batches whose ObjectRefs
were dropped but whose memory is still pinned by zero-copy views, and freed objects the raylet
has not deleted yet (the raylet deletes freed objects in batches, every
``free_objects_period_milliseconds``; chapter 04 measures the delay). A budget is therefore a
target, not a cap.

Examples:
    >>> IMAGE_BYTES == 1024 * 1024
    True
    >>> batch = decode_images({"id": np.array([0, 252])})
    >>> batch["image"].shape, int(batch["image"][1, 0, 0, 0])
    ((2, 512, 512, 4), 1)
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from raydata_course.measure.run import StreamingRun, measure_streaming_run
from raydata_course.show import SourceLine, ray_source_line
from raydata_course.units import MiB

__all__ = [
    "IMAGE_SHAPE",
    "IMAGE_BYTES",
    "ROWS_PER_FILE",
    "PIXEL_MODULUS",
    "image_source",
    "source_block_rows",
    "decode_images",
    "expected_pixel",
    "SlowTrainer",
    "reset_streaming_knobs",
    "measure_configured_run",
    "object_store_limit_fraction",
    "backpressure_policy_names",
    "plot_store_timeline",
]

#: Shape of one decoded image: 512 x 512 pixels, 4 channels (RGBA), ``uint8``.
IMAGE_SHAPE = (512, 512, 4)
#: Bytes of one decoded image (exactly 1 MiB).
IMAGE_BYTES = int(np.prod(IMAGE_SHAPE))
#: Rows per simulated input file: one read task and one input block per file.
ROWS_PER_FILE = 64
#: Every pixel of the image of row ``id`` equals ``id % PIXEL_MODULUS``.
PIXEL_MODULUS = 251


# ---------------------------------------------------------------------------- workload


def _num_files(num_rows: int, rows_per_file: int) -> int:
    """``ceil(num_rows / rows_per_file)``: the blocks :func:`image_source` asks the read for."""
    if num_rows < 1 or rows_per_file < 1:
        raise ValueError(
            f"num_rows and rows_per_file must be at least 1, got {num_rows} and {rows_per_file}.")
    return -(-num_rows // rows_per_file)


def source_block_rows(num_rows: int, rows_per_file: int = ROWS_PER_FILE) -> list[int]:
    """Rows per block of :func:`image_source` (``num_rows``, ``rows_per_file``), in order.

    The source asks ``ray.data.range`` for ``k = ceil(num_rows / rows_per_file)`` blocks, and
    Ray 2.60 cuts a range into read tasks of ``num_rows // k`` rows, plus one short task with
    what is left (``RangeDatasource.get_read_tasks`` in
    ``ray/data/_internal/datasource/range_datasource.py``). So the blocks hold
    ``rows_per_file`` rows only when ``num_rows`` is a multiple of it; otherwise they are a
    little smaller, and there may be one more of them than ``k``.

    Examples:
        >>> source_block_rows(256), source_block_rows(288), source_block_rows(100)
        ([64, 64, 64, 64], [57, 57, 57, 57, 57, 3], [50, 50])

    Raises:
        ValueError: if ``num_rows`` or ``rows_per_file`` is below 1.
    """
    per_task = max(1, num_rows // _num_files(num_rows, rows_per_file))
    full, rest = divmod(num_rows, per_task)
    return [per_task] * full + ([rest] if rest else [])


def image_source(num_rows: int, rows_per_file: int = ROWS_PER_FILE):
    """A dataset of ``num_rows`` image ids, read as "files" of about ``rows_per_file`` rows.

    It is ``ray.data.range`` asked for one block per "file", which is how a folder of Parquet
    or image files arrives: a few large input blocks. The blocks are not exactly
    ``rows_per_file`` rows unless that divides ``num_rows``: :func:`source_block_rows` gives
    their sizes (288 rows make blocks of 57, 57, 57, 57, 57 and 3 rows).

    Args:
        num_rows: rows (images) in the dataset; at least 1.
        rows_per_file: the rows a "file" aims at; the read asks for
            ``ceil(num_rows / rows_per_file)`` blocks.

    Returns:
        A lazy ``ray.data.Dataset`` with one ``int64`` column ``id`` (0 .. num_rows-1).

    Raises:
        ValueError: if ``num_rows`` or ``rows_per_file`` is below 1.
    """
    import ray.data

    return ray.data.range(num_rows, override_num_blocks=_num_files(num_rows, rows_per_file))


def expected_pixel(ids: np.ndarray) -> np.ndarray:
    """The value every pixel of the image of each id must have (``id % 251``, ``uint8``)."""
    return (np.asarray(ids) % PIXEL_MODULUS).astype(np.uint8)


def decode_images(batch: dict) -> dict:
    """"Decode" each id into a 512x512 RGBA image: a UDF that multiplies the data.

    Each 8-byte id becomes :data:`IMAGE_BYTES` (1 MiB) of pixels, as decoding a compressed
    image does. Every pixel of row ``id`` is ``id % 251``, so a consumer can check it.

    Args:
        batch: a NumPy batch with an ``id`` column of ``n`` integers.

    Returns:
        ``{"id": int64 (n,), "image": uint8 (n, 512, 512, 4)}``, a new dict (the input is
        read-only and is not modified).

    Raises:
        KeyError: if the batch has no ``id`` column.
    """
    ids = np.asarray(batch["id"], dtype=np.int64)
    images = np.empty((len(ids), *IMAGE_SHAPE), dtype=np.uint8)
    images[...] = expected_pixel(ids)[:, None, None, None]
    return {"id": ids, "image": images}


class SlowTrainer:
    """A consumer that behaves like a training loop: it checks each batch and takes time.

    Call :meth:`step` once per batch. The first step sleeps ``first_step_s`` (a model's
    start-up, e.g. compilation), every later one ``step_s``. While the consumer sleeps, the
    producer keeps running: how far it may run ahead is what backpressure decides.

    Args:
        step_s: seconds each step after the first takes.
        first_step_s: seconds the first step takes.

    Attributes:
        num_steps: batches received.
        problems: descriptions of wrong batches (shape, dtype, pixel values), at most 10
            (read-only: a copy of the trainer's own record).

    Raises:
        ValueError: if a duration is negative.

    Examples:
        >>> trainer = SlowTrainer(step_s=0.0)
        >>> trainer.step(decode_images({"id": np.arange(3)}))
        >>> trainer.num_rows, trainer.problems
        (3, [])
        >>> trainer.step(decode_images({"id": np.array([2, 3])}))
        >>> trainer.missing_and_repeated(5)  # id 4 never came, id 2 came twice
        (1, 1)
        >>> wrong = decode_images({"id": np.array([7])})
        >>> trainer.step({"id": np.array([8]), "image": wrong["image"]})
        >>> trainer.problems
        ['batch 2: some images do not belong to their ids']
    """

    def __init__(self, step_s: float, first_step_s: float = 0.0):
        if step_s < 0 or first_step_s < 0:
            raise ValueError(
                f"step_s and first_step_s must be >= 0, got {step_s} and {first_step_s}.")
        self.step_s = step_s
        self.first_step_s = first_step_s
        self.num_steps = 0
        self._problems: list[str] = []
        self._ids: list[np.ndarray] = []

    @property
    def problems(self) -> list[str]:
        """Descriptions of wrong batches, at most 10 (a copy: what the trainer saw stays as it saw it)."""
        return list(self._problems)

    def _complain(self, message: str) -> None:
        if len(self._problems) < 10:
            self._problems.append(f"batch {self.num_steps}: {message}")

    def step(self, batch: dict) -> None:
        """Check one NumPy batch (``id`` and ``image`` columns), record its ids, then sleep."""
        if not isinstance(batch, dict) or "id" not in batch or "image" not in batch:
            kind = type(batch).__name__
            keys = sorted(batch) if isinstance(batch, dict) else "-"
            self._complain(f"expected a dict of NumPy arrays with 'id' and 'image', "
                           f"got {kind} with keys {keys}")
        else:
            ids = np.asarray(batch["id"])
            images = batch["image"]
            well_formed = (isinstance(images, np.ndarray) and images.dtype == np.uint8
                           and images.shape[1:] == IMAGE_SHAPE)
            if not well_formed:
                what = (f"{type(images).__name__} {getattr(images, 'dtype', '')} "
                        f"{getattr(images, 'shape', '')}")
                self._complain(f"'image' must be uint8 with shape (n, 512, 512, 4), got {what}")
            elif len(images) != len(ids):
                self._complain(f"{len(ids)} ids but {len(images)} images")
            else:
                # Two pixels per image: the first and the last, enough to catch a mix-up.
                want = expected_pixel(ids)
                first, last = images[:, 0, 0, 0], images[:, -1, -1, -1]
                if not (np.array_equal(first, want) and np.array_equal(last, want)):
                    self._complain("some images do not belong to their ids")
            self._ids.append(ids.astype(np.int64, copy=True))
        time.sleep(self.first_step_s if self.num_steps == 0 else self.step_s)
        self.num_steps += 1

    @property
    def num_rows(self) -> int:
        """Rows received so far."""
        return int(sum(len(i) for i in self._ids))

    @property
    def batch_rows(self) -> list[int]:
        """Rows of each batch received, in arrival order."""
        return [len(i) for i in self._ids]

    @property
    def ids_seen(self) -> np.ndarray:
        """Every id received, in arrival order (``int64``)."""
        return np.concatenate(self._ids) if self._ids else np.empty(0, dtype=np.int64)

    def missing_and_repeated(self, num_rows: int) -> tuple[int, int]:
        """Count ids in ``0 .. num_rows-1`` that never arrived, and ids that arrived twice or more.

        Ids outside that range are ignored here; :attr:`num_rows` still counts them.
        """
        ids = self.ids_seen
        counts = np.bincount(ids[(ids >= 0) & (ids < num_rows)], minlength=num_rows)
        return int((counts == 0).sum()), int((counts > 1).sum())


# ------------------------------------------------------------------- the budget's knobs


def reset_streaming_knobs(ctx) -> None:
    """Put the knobs this chapter turns back to Ray Data's defaults on ``ctx``.

    Resets ``execution_options.resource_limits`` (no user limit),
    ``override_object_store_memory_limit_fraction`` (None) and ``target_max_block_size``
    (128 MiB in 2.60.0), taking the defaults from a fresh ``DataContext()``. Other settings
    are left alone.

    Args:
        ctx: a ``ray.data.DataContext``, usually ``DataContext.get_current()``.
    """
    import ray.data

    fresh = ray.data.DataContext()
    ctx.execution_options.resource_limits = fresh.execution_options.resource_limits
    fraction = fresh.override_object_store_memory_limit_fraction
    ctx.override_object_store_memory_limit_fraction = fraction
    ctx.target_max_block_size = fresh.target_max_block_size


def measure_configured_run(
    configure: Callable[[Any], None],
    build_pipeline: Callable[[int], Any],
    train: Callable[[Any, SlowTrainer], Any],
    *,
    num_rows: int,
    trainer: SlowTrainer,
    settle: bool = True,
) -> StreamingRun:
    """Configure Ray Data, then build and train on ``num_rows`` images, measuring the store.

    This is how exercise data04 runs a student's answer (and how its hidden tests do):

    1. reset the streaming knobs of the current ``DataContext`` (:func:`reset_streaming_knobs`)
       so that earlier cells cannot change the outcome, then call ``configure(ctx)``;
    2. under :func:`measure_streaming_run`, call ``build_pipeline(num_rows)`` and then
       ``train(dataset, trainer)``.

    Args:
        configure: ``configure(ctx)`` sets options on the ``DataContext`` it is given.
        build_pipeline: ``build_pipeline(num_rows)`` returns the dataset to train on.
        train: ``train(ds, trainer)`` calls ``trainer.step(batch)`` per batch and returns the
            rows it consumed.
        num_rows: images in the run.
        trainer: the consumer; read its ``problems`` and ids afterwards.
        settle: wait for the store to settle before the baseline (see
            :func:`measure_streaming_run`).

    Returns:
        A :class:`StreamingRun` whose ``rows`` is what ``train`` returned.
    """
    import ray.data

    ctx = ray.data.DataContext.get_current()
    reset_streaming_knobs(ctx)
    configure(ctx)
    return measure_streaming_run(lambda: build_pipeline(num_rows), lambda ds: train(ds, trainer),
                                 settle=settle)


# ------------------------------------------------------------------- citing Ray's code


def object_store_limit_fraction() -> tuple[float, SourceLine]:
    """The fraction of the object store Ray Data's executor may use by default.

    Read from ``ResourceManager.DEFAULT_OBJECT_STORE_MEMORY_LIMIT_FRACTION`` (env
    ``RAY_DATA_OBJECT_STORE_MEMORY_LIMIT_FRACTION``, default 0.5 in Ray 2.60.0) in
    ``ray/data/_internal/execution/resource_manager.py``. It applies when the operator
    resource allocator is on (the default);
    ``DataContext.override_object_store_memory_limit_fraction`` replaces it.

    Returns:
        ``(fraction, where)``: the value in effect in this process and the source line that
        defines it.
    """
    from ray.data._internal.execution.resource_manager import ResourceManager

    where = ray_source_line("ray.data._internal.execution.resource_manager",
                            '"RAY_DATA_OBJECT_STORE_MEMORY_LIMIT_FRACTION"')
    return float(ResourceManager.DEFAULT_OBJECT_STORE_MEMORY_LIMIT_FRACTION), where


def backpressure_policy_names() -> tuple[list[str], SourceLine]:
    """The backpressure policies the streaming executor enables by default.

    Read from ``ENABLED_BACKPRESSURE_POLICIES`` in
    ``ray/data/_internal/execution/backpressure_policy/__init__.py``; a ``DataContext`` can
    replace the list with ``set_config("backpressure_policies.enabled", [...])``.

    Returns:
        ``(class names in order, where the list is defined)``.
    """
    from ray.data._internal.execution import backpressure_policy

    where = ray_source_line("ray.data._internal.execution.backpressure_policy",
                            "ENABLED_BACKPRESSURE_POLICIES = [")
    return [p.__name__ for p in backpressure_policy.ENABLED_BACKPRESSURE_POLICIES], where


# ------------------------------------------------------------------------------ plotting


def plot_store_timeline(runs: dict[str, StreamingRun], *, allowance_bytes: int | None = None,
                        ax=None):
    """Plot object-store bytes above baseline over time, one line per run.

    Solid lines are the store's actual ``used`` bytes (:class:`PlasmaSampler`); dotted
    lines of the same colour are Ray Data's own usage estimate; dashed horizontal lines are
    each run's Ray Data limit (its budget).

    Args:
        runs: ``{label: StreamingRun}``.
        allowance_bytes: draw this bound as a thick grey line, if given.
        ax: draw into this matplotlib axes; a new figure if None.

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(11, 4))
    for i, (label, run) in enumerate(runs.items()):
        color = f"C{i}"
        ax.plot(run.t_s, [b / MiB for b in run.used_bytes], color=color,
                label=f"{label}: store (actual)")
        if run.ray_data_t_s:
            ax.plot(run.ray_data_t_s, [b / MiB for b in run.ray_data_usage_bytes], color=color,
                    linestyle=":", label=f"{label}: Ray Data's estimate")
        if run.ray_data_limit_bytes:
            ax.axhline(run.ray_data_limit_bytes / MiB, color=color, linestyle="--", linewidth=1)
    if allowance_bytes is not None:
        ax.axhline(allowance_bytes / MiB, color="grey", linewidth=3, alpha=0.5, label="allowance")
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("MiB above baseline")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    ax.figure.tight_layout()
    return ax
