"""One measured run of a dataset and its consumer: the store as it is, and as Ray Data saw it.

:func:`measure_streaming_run` waits for the store to settle, takes a baseline, builds and
consumes the dataset while :class:`~raydata_course.measure.store.PlasmaSampler` reads the
store (20 Hz) and :class:`~raydata_course.measure.raydata.RayDataProbe` reads the executor,
and returns a :class:`StreamingRun`: peak bytes above the baseline, spilled bytes, Ray Data's
limit and peak estimate, and both timelines.

Chapter 04 and exercise data04 measure with it; the lab measures longer runs, several
consumers and several processes, with the same two probes (:mod:`raydata_course.lab.session`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from raydata_course.measure.raydata import RayDataProbe
from raydata_course.measure.store import PlasmaSampler, object_store_stats, settle_store
from raydata_course.units import MiB

__all__ = ["StreamingRun", "measure_streaming_run"]


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


def measure_streaming_run(
    build: Callable[[], Any],
    consume: Callable[[Any], Any],
    *,
    interval_s: float = 0.05,
    settle: bool = True,
) -> StreamingRun:
    """Build a dataset and consume it while sampling the object store and the executor.

    ``build`` and ``consume`` both run inside the measured window, so a ``build`` that
    executes eagerly (``materialize()``) is measured too. :class:`RayDataProbe` is added to
    the current ``DataContext`` for the run and removed afterwards. The executor must run in
    this process (``iter_batches``, ``materialize``); under ``streaming_split`` it runs in a
    coordinator actor and only the lab's recorder sees it.

    Args:
        build: called with no arguments; returns the dataset.
        consume: called with the dataset; consumes it and returns a row count (or any value,
            kept as ``rows``).
        interval_s: seconds between object-store samples (0.05 = 20 Hz; one sample costs
            about a millisecond).
        settle: first wait for the store to settle (:func:`settle_store`, 1-6 s) so that
            memory freed by earlier work does not distort the baseline.

    Returns:
        A :class:`StreamingRun`.

    Raises:
        RuntimeError: if Ray is not initialized.
        Exception: whatever ``build`` or ``consume`` raise, after the probes are stopped.
    """
    import ray
    import ray.data

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running in this process: call raydata_course.setup() first.")
    if settle:
        settle_store()
    ctx = ray.data.DataContext.get_current()
    added = RayDataProbe not in ctx.custom_execution_callback_classes
    if added:
        ctx.custom_execution_callback_classes.append(RayDataProbe)
    RayDataProbe.reset()
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
        if added and RayDataProbe in ctx.custom_execution_callback_classes:
            ctx.custom_execution_callback_classes.remove(RayDataProbe)
    after = object_store_stats()
    baseline = before.used_bytes
    start_offset = sampler.t0_monotonic - t0
    executor = RayDataProbe.samples()
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
        operators=RayDataProbe.operators(),
        interval_s=interval_s,
        t_s=[s.t_s + start_offset for s in samples],
        used_bytes=[s.used_bytes - baseline for s in samples],
        ray_data_t_s=[s.t_monotonic_s - t0 for s in executor],
        ray_data_usage_bytes=[s.usage_bytes for s in executor],
        failed_readings=sampler.failed_readings,
    )
