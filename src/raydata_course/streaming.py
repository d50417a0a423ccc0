"""Streaming execution and backpressure: run a pipeline against a slow consumer and measure it.

Chapter 04, exercise data04 and its hidden tests share this module. It has four parts:

- **A workload** whose memory is easy to reason about. :func:`image_source` stands for a
  folder of files (``rows_per_file`` rows each, one read task and one block per file), and
  :func:`decode_images` "decodes" each row into a 1 MiB RGBA image, so a decoded block of
  ``n`` rows holds ``n`` MiB. :class:`SlowTrainer` is the consumer: it checks every batch,
  records the ids it saw, and sleeps like a training step.
- **Two probes.** The object store's *actual* usage comes from
  :class:`raydata_course.lab.probes.PlasmaSampler` (every raylet, from a background thread).
  (This module uses a subclass that skips a failed reading instead of stopping.)
  What *Ray Data believes* comes from :class:`ExecutorProbe`, a Ray Data
  ``ExecutionCallback`` that reads the executor's resource manager after every scheduling
  step: its global object-store usage estimate and its limit (the budget), plus the operator
  topology it is running.
- **One measured run**, :func:`measure_streaming_run`: wait for the store to settle, take a
  baseline, build and consume the dataset while both probes sample, and report peak bytes
  above the baseline, spilled bytes, Ray Data's limit and peak estimate, and the timelines.
- **Citations of the installed Ray**: :func:`ray_source_line` finds a line in Ray's own
  source and returns it as ``path:line``, so the chapter can show where a default lives
  instead of quoting it from memory.

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

import gc
import inspect
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = [
    "MiB",
    "IMAGE_SHAPE",
    "IMAGE_BYTES",
    "ROWS_PER_FILE",
    "PIXEL_MODULUS",
    "image_source",
    "decode_images",
    "expected_pixel",
    "SlowTrainer",
    "ExecutorProbe",
    "ExecutorSample",
    "StreamingRun",
    "wait_for_store_to_settle",
    "measure_streaming_run",
    "reset_streaming_knobs",
    "measure_configured_run",
    "SourceLine",
    "ray_source_line",
    "object_store_limit_fraction",
    "backpressure_policy_names",
    "plot_store_timeline",
]

MiB = 1024**2
#: Shape of one decoded image: 512 x 512 pixels, 4 channels (RGBA), ``uint8``.
IMAGE_SHAPE = (512, 512, 4)
#: Bytes of one decoded image (exactly 1 MiB).
IMAGE_BYTES = int(np.prod(IMAGE_SHAPE))
#: Rows per simulated input file: one read task and one input block per file.
ROWS_PER_FILE = 64
#: Every pixel of the image of row ``id`` equals ``id % PIXEL_MODULUS``.
PIXEL_MODULUS = 251


# ---------------------------------------------------------------------------- workload


def image_source(num_rows: int, rows_per_file: int = ROWS_PER_FILE):
    """A dataset of ``num_rows`` image ids, read as files of ``rows_per_file`` rows.

    It is ``ray.data.range`` with one block per "file", which is how a folder of Parquet or
    image files arrives: a few large input blocks.

    Args:
        num_rows: rows (images) in the dataset; at least 1.
        rows_per_file: rows per file, so the read makes ``ceil(num_rows / rows_per_file)``
            blocks.

    Returns:
        A lazy ``ray.data.Dataset`` with one ``int64`` column ``id`` (0 .. num_rows-1).

    Raises:
        ValueError: if ``num_rows`` or ``rows_per_file`` is below 1.
    """
    import ray.data

    if num_rows < 1 or rows_per_file < 1:
        raise ValueError(
            f"num_rows and rows_per_file must be at least 1, got {num_rows} and {rows_per_file}.")
    num_files = -(-num_rows // rows_per_file)
    return ray.data.range(num_rows, override_num_blocks=num_files)


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
        problems: descriptions of wrong batches (shape, dtype, pixel values), at most 10.

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
        self.problems: list[str] = []
        self._ids: list[np.ndarray] = []

    def _complain(self, message: str) -> None:
        if len(self.problems) < 10:
            self.problems.append(f"batch {self.num_steps}: {message}")

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


# ------------------------------------------------------------------------------ probes


@dataclass(frozen=True)
class ExecutorSample:
    """What one Ray Data executor believed at one moment.

    Attributes:
        t_monotonic_s: ``time.monotonic()`` when read (same process: the driver).
        usage_bytes: the resource manager's global object-store usage estimate, in bytes.
        limit_bytes: its global object-store limit (the budget), in bytes; -1 when unknown
            or unlimited (a materializing operator's infinite budget).
    """

    t_monotonic_s: float
    usage_bytes: int
    limit_bytes: int


try:
    from ray.data._internal.execution.execution_callback import (
        ExecutionCallback as _ExecutionCallback,
    )
except ImportError:  # pragma: no cover - the interface exists in Ray 2.60
    _ExecutionCallback = object


class ExecutorProbe(_ExecutionCallback):
    """A Ray Data ``ExecutionCallback`` that records the executor's budget and usage.

    Ray instantiates the class once per execution (``ray/data/_internal/planner/planner.py``)
    and calls :meth:`on_execution_step` on the scheduling thread after every loop step
    (``ray/data/_internal/execution/streaming_executor.py``). For ``iter_batches``,
    ``materialize`` and friends that thread is in the driver, so the samples land in this
    class's process-wide list. (Under ``streaming_split`` the executor runs in a coordinator
    actor and nothing arrives here; the lab's ``RayDataProbe`` covers that case.)

    Register it on the ``DataContext`` *before* building the dataset, because a dataset keeps
    the context it was created with::

        ctx.custom_execution_callback_classes.append(ExecutorProbe)

    Read :meth:`samples` and :meth:`operators`; :meth:`reset` clears both.
    What is read is private to Ray Data: ``executor._resource_manager`` and
    ``executor._topology`` (2.60.0). Reads are defensive: a missing attribute records nothing.
    """

    min_interval_s = 0.02
    _lock = threading.Lock()
    _samples: list[ExecutorSample] = []
    _operators: list[str] = []

    def __init__(self) -> None:
        self._last_s = 0.0

    @classmethod
    def reset(cls) -> None:
        """Forget every sample and the recorded topology."""
        with cls._lock:
            cls._samples = []
            cls._operators = []

    @classmethod
    def samples(cls) -> list[ExecutorSample]:
        """The samples recorded since the last :meth:`reset`, oldest first."""
        with cls._lock:
            return list(cls._samples)

    @classmethod
    def operators(cls) -> list[str]:
        """Names of the physical operators of the last execution, upstream first."""
        with cls._lock:
            return list(cls._operators)

    def before_execution_starts(self, executor) -> None:
        return None

    def on_execution_step(self, executor) -> None:
        now = time.monotonic()
        if now - self._last_s < self.min_interval_s:
            return
        self._last_s = now
        rm = getattr(executor, "_resource_manager", None)
        if rm is None:
            return
        usage = rm.get_global_usage().object_store_memory
        limit = rm.get_global_limits().object_store_memory
        finite = lambda x: int(x) if x is not None and x != float("inf") else -1  # noqa: E731
        sample = ExecutorSample(now, finite(usage), finite(limit))
        topology = getattr(executor, "_topology", None) or {}
        with self._lock:
            type(self)._samples.append(sample)
            names = [op.name for op in topology]
            if names:
                type(self)._operators = names

    def after_execution_succeeds(self, executor) -> None:
        return None

    def after_execution_fails(self, executor, error: Exception) -> None:
        return None


# --------------------------------------------------------------------------- measuring


@dataclass
class StreamingRun:
    """One measured run of a pipeline and its consumer.

    All byte figures are cluster-wide object-store (plasma) bytes. "Above baseline" means
    minus what the store held, settled, just before the run, so objects that other work left
    in the store do not count.

    Attributes:
        rows: what the consume function returned (rows it consumed).
        wall_s: seconds from building the dataset to the end of consumption.
        baseline_bytes: bytes in the store before the run, after it settled.
        peak_bytes: highest sampled ``used`` bytes above the baseline. ``used`` includes
            freed objects the raylet has not deleted yet.
        spilled_bytes: bytes spilled to disk during the run (``spilled_bytes_total`` delta).
        fallback_peak_bytes: most bytes the store had to allocate on disk at once because
            shared memory was full ("fallback allocation"; also a kind of spilling).
        ray_data_limit_bytes: the largest object-store limit (budget) the executor reported,
            in bytes; None if no executor reported one (e.g. the dataset never executed).
        ray_data_peak_usage_bytes: the largest usage estimate the executor reported.
        operators: the executed physical operators, upstream first.
        interval_s: seconds between plasma samples.
        t_s: sample times, seconds since the run started.
        used_bytes: ``used`` above the baseline at each sample (may dip below 0 when old
            objects are deleted).
        ray_data_t_s: times of the executor's samples, seconds since the run started.
        ray_data_usage_bytes: the executor's usage estimate at those times.
        failed_readings: object-store readings that failed (a busy raylet missing its RPC
            deadline) and were skipped; the timeline has gaps where they were.
    """

    rows: Any
    wall_s: float
    baseline_bytes: int
    peak_bytes: int
    spilled_bytes: int
    fallback_peak_bytes: int
    ray_data_limit_bytes: int | None
    ray_data_peak_usage_bytes: int | None
    operators: list[str]
    interval_s: float
    t_s: list[float] = field(repr=False, default_factory=list)
    used_bytes: list[int] = field(repr=False, default_factory=list)
    ray_data_t_s: list[float] = field(repr=False, default_factory=list)
    ray_data_usage_bytes: list[int] = field(repr=False, default_factory=list)
    failed_readings: int = 0

    def summary(self) -> str:
        """One line: rows, seconds, peak, spilled, Ray Data's limit and estimate, in MiB."""
        def mib(num_bytes: int | None, missing: str) -> str:
            return missing if num_bytes is None else f"{num_bytes / MiB:.0f} MiB"

        fallback = ""
        if self.fallback_peak_bytes:
            fallback = f" (+{mib(self.fallback_peak_bytes, '')} fallback on disk)"
        return (f"rows={self.rows} | {self.wall_s:.1f} s | "
                f"peak above baseline {mib(self.peak_bytes, '')} | "
                f"spilled {mib(self.spilled_bytes, '')}{fallback} | Ray Data limit "
                f"{mib(self.ray_data_limit_bytes, 'none seen')}, peak estimate "
                f"{mib(self.ray_data_peak_usage_bytes, '-')}")


def wait_for_store_to_settle(timeout_s: float = 6.0, quiet_s: float = 1.1, poll_s: float = 0.2,
                             empty_bytes: int = 4 * MiB) -> int:
    """Wait until the object store stops shrinking; return the bytes it then holds.

    The raylet deletes freed objects in batches (every ``free_objects_period_milliseconds``),
    so right after other work the store still holds memory that is about to go. This collects Python garbage (dropping forgotten ObjectRefs), then polls
    until the store holds at most ``empty_bytes`` or has not shrunk for ``quiet_s`` seconds.

    Args:
        timeout_s: give up after this many seconds and return the last reading.
        quiet_s: how long the reading must not drop; keep it above the raylet's free period.
        poll_s: seconds between readings.
        empty_bytes: a store holding no more than this counts as settled at once.

    Returns:
        ``used_bytes`` of the store, cluster-wide, once settled.
    """
    from raydata_course.memory import object_store_stats

    gc.collect()
    start = time.monotonic()
    lowest = object_store_stats().used_bytes
    lowest_since = start
    while lowest > empty_bytes and time.monotonic() - start < timeout_s:
        time.sleep(poll_s)
        current = object_store_stats().used_bytes
        now = time.monotonic()
        if current < lowest:
            lowest, lowest_since = current, now
        elif now - lowest_since >= quiet_s:
            break
    return lowest


def measure_streaming_run(
    build: Callable[[], Any],
    consume: Callable[[Any], Any],
    *,
    interval_s: float = 0.05,
    settle: bool = True,
) -> StreamingRun:
    """Build a dataset and consume it while sampling the object store and the executor.

    ``build`` and ``consume`` both run inside the measured window, so a ``build`` that
    executes eagerly (``materialize()``) is measured too. :class:`ExecutorProbe` is added to
    the current ``DataContext`` for the run and removed afterwards.

    Args:
        build: called with no arguments; returns the dataset.
        consume: called with the dataset; consumes it and returns a row count (or any value,
            kept as ``rows``).
        interval_s: seconds between object-store samples (0.05 = 20 Hz; one sample costs
            about a millisecond).
        settle: first wait for the store to settle (:func:`wait_for_store_to_settle`, 1-6 s)
            so that memory freed by earlier work does not distort the baseline.

    Returns:
        A :class:`StreamingRun`.

    Raises:
        RuntimeError: if Ray is not initialized.
        Exception: whatever ``build`` or ``consume`` raise, after the probes are stopped.
    """
    import ray
    import ray.data

    from raydata_course.memory import object_store_stats

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running in this process: call raydata_course.setup() first.")
    if settle:
        wait_for_store_to_settle()
    ctx = ray.data.DataContext.get_current()
    added = ExecutorProbe not in ctx.custom_execution_callback_classes
    if added:
        ctx.custom_execution_callback_classes.append(ExecutorProbe)
    ExecutorProbe.reset()
    from raydata_course.lab.probes import PlasmaSampler

    sampler = PlasmaSampler(interval_s=interval_s, classify_every=0)
    before = object_store_stats()
    t0 = time.monotonic()
    sampler.start()
    try:
        ds = build()
        rows = consume(ds)
        wall_s = time.monotonic() - t0
    finally:
        samples = sampler.stop()
        if added and ExecutorProbe in ctx.custom_execution_callback_classes:
            ctx.custom_execution_callback_classes.remove(ExecutorProbe)
    after = object_store_stats()
    baseline = before.used_bytes
    start_offset = sampler.t0_monotonic - t0
    executor = ExecutorProbe.samples()
    limits = [s.limit_bytes for s in executor if s.limit_bytes > 0]
    return StreamingRun(
        rows=rows,
        wall_s=wall_s,
        baseline_bytes=baseline,
        peak_bytes=max([s.used_bytes for s in samples] + [baseline, after.used_bytes]) - baseline,
        spilled_bytes=after.spilled_bytes_total - before.spilled_bytes_total,
        fallback_peak_bytes=max([s.fallback_bytes for s in samples] + [after.fallback_bytes]),
        ray_data_limit_bytes=max(limits) if limits else None,
        ray_data_peak_usage_bytes=max((s.usage_bytes for s in executor), default=None),
        operators=ExecutorProbe.operators(),
        interval_s=interval_s,
        t_s=[s.t_s + start_offset for s in samples],
        used_bytes=[s.used_bytes - baseline for s in samples],
        ray_data_t_s=[s.t_monotonic_s - t0 for s in executor],
        ray_data_usage_bytes=[s.usage_bytes for s in executor],
        failed_readings=sampler.failed_readings,
    )


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


@dataclass(frozen=True)
class SourceLine:
    """A line of the installed Ray's source.

    Attributes:
        path: path relative to the ``site-packages`` folder, e.g.
            ``ray/data/_internal/execution/resource_manager.py``.
        line: 1-based line number.
        text: the line, stripped.
    """

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def ray_source_line(module: str, pattern: str, occurrence: int = 1) -> SourceLine:
    """Find the ``occurrence``-th line containing ``pattern`` in an installed Ray module.

    Args:
        module: a module name, e.g. ``"ray.data._internal.execution.resource_manager"``.
        pattern: plain text to look for.
        occurrence: which match to return, 1-based.

    Returns:
        A :class:`SourceLine` (path relative to ``site-packages``).

    Raises:
        LookupError: if the module has fewer than ``occurrence`` lines with ``pattern``.

    Examples:
        >>> ray_source_line("ray.data.context", "class DataContext").path
        'ray/data/context.py'
    """
    import importlib

    mod = importlib.import_module(module)
    path = Path(inspect.getsourcefile(mod))
    root = path
    for _ in module.split("."):
        root = root.parent
    if path.name == "__init__.py":
        root = root.parent
    seen = 0
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if pattern in text:
            seen += 1
            if seen == occurrence:
                return SourceLine(path.relative_to(root).as_posix(), number, text.strip())
    raise LookupError(f"{pattern!r} occurs {seen} time(s) in {path}, not {occurrence}.")


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
