"""Run lab variants and measure them: the engine behind ``make lab``.

One *run* = one variant on the lab's local cluster, with :class:`~raydata_course.measure.store.PlasmaSampler`
polling the raylets at 10 Hz and :class:`LabProbe` (the course's :class:`~raydata_course.measure.raydata.RayDataProbe`,
at 10 Hz) recording what Ray Data believes. From the samples it derives, for that run:

- ``peak_bytes``: the highest actual object-store usage;
- ``budget_bytes``: the variant's object-store budget (else Ray Data's limit; the executor's may be lower);
- ``overage_bytes = peak_bytes - budget_bytes`` (upstream's definition);
- ``believed_peak_bytes``: the highest usage Ray Data's resource manager reported;
- ``hidden_peak_bytes``: the most bytes pinned in memory with no ``ObjectRef`` left (the
  hidden batches, counted directly), and ``hidden_batches_per_consumer`` = that over
  (batch bytes × consumers);
- ``unaccounted_at_peak_bytes``: actual minus Ray Data's belief at the moment of the peak.
  On 2.60, where every live ``ObjectRef`` is counted, it is close to the pinned-only bytes;
  on older releases, blocks whose refs wait in the consumer's queues are uncounted too, so
  this is the measure to compare across versions;
- ``predicted_hidden_bytes`` from :mod:`raydata_course.lab.buffer_model`, and
  ``realization = overage / predicted`` as upstream reports it;
- throughput: rows/s and batches/s over the consumption phase, and the median train-step time;
  ``overall_batches_per_s`` (all batches over the time from the consumers' start to the
  last batch) and ``midrun_batches_per_s`` (batches 25 %-90 % of each consumer's epoch over
  the time they took), summed over consumers; ``midrun_start_store_bytes``: the store's usage
  as that window opens (what the producer had decoded ahead);
- the memory at the peak split three ways: *referenced* (some ``ObjectRef`` alive),
  *pinned, unreferenced* (zero-copy views only) and *freed, not yet deleted* (the rest of
  ``used``: the raylet frees objects every ``free_objects_period_milliseconds``).

The tables and checks built on these results are :mod:`raydata_course.lab.report`.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from raydata_course.lab.buffer_model import hidden_batches
from raydata_course.lab.workload import LabConfig
from raydata_course.measure.raydata import RayDataProbe
from raydata_course.units import MiB

__all__ = ["RunResult", "LabProbe", "LabSession", "PROBE_FLUSH_WAIT_S", "PLASMA_MIN_OBJECT_BYTES"]

#: seconds to wait after a run so that the probes' last samples reach the recorder.
PROBE_FLUSH_WAIT_S = 1.0
#: the smallest object the lab classifies, in bytes: objects up to Ray's
#: ``max_direct_call_object_size`` (100 KiB, ``ray_config_def.h``) are returned inline to
#: their owner and never occupy plasma, so counting them would overstate referenced bytes.
PLASMA_MIN_OBJECT_BYTES = 100 * 1024 + 1


class LabProbe(RayDataProbe):
    """The course's Ray Data probe at the lab's rate: 10 samples a second, like the lab's
    plasma sampler (a module-level class, so that Ray can ship it to the coordinator)."""

    interval_s = 0.1


@dataclass
class RunResult:
    """Measurements of one run (bytes, seconds, rows; see the module docstring)."""

    variant: str
    repeat: int
    config: dict
    peak_bytes: int
    budget_bytes: int
    overage_bytes: int
    believed_peak_bytes: int
    hidden_peak_bytes: int
    hidden_batches_per_consumer: float
    unaccounted_at_peak_bytes: int
    predicted_hidden_bytes: int
    predicted_hidden_batches: int
    hidden_range_batches: tuple[int, int]
    upstream_hidden_batches: int
    realization: float
    spilled_bytes: int
    rows: int
    batches: int
    consume_s: float
    rows_per_s: float
    batches_per_s: float
    step_s_median: float
    wait_s_median: float
    first_batch_s: float
    wall_s: float
    total_wall_s: float
    overall_batches_per_s: float = 0.0
    midrun_batches_per_s: float = 0.0
    split: str = "pull"
    free_objects_period_ms: Optional[int] = None
    #: on a GPU: the median host-to-device copy of one batch (CUDA events), seconds, and
    #: the copies' bytes over their time, GB/s (None on CPU)
    h2d_s_median: Optional[float] = None
    h2d_gb_per_s: Optional[float] = None
    midrun_start_store_bytes: Optional[int] = None  # the store's usage as the mid-run window opens
    peak_breakdown: dict = field(default_factory=dict)
    probe_cost: dict = field(default_factory=dict)
    timeline: dict = field(default_factory=dict)


class LabSession:
    """Owns the lab's local cluster, its recorder and the probes, across runs.

    Args:
        out_dir: folder for data, Ray Train results and outputs.
        object_store_bytes: size of the cluster's object store.
        num_cpus: logical CPUs of the cluster.
        system_config: Ray system settings, e.g. ``{"free_objects_period_milliseconds": 0}``.
        warm_up: run a tiny dataset first so that worker start-up does not land in the first
            variant's time to first batch (memory numbers do not depend on it).
    """

    def __init__(self, out_dir: str | Path, *, object_store_bytes: int = 2048 * MiB, num_cpus: int = 4,
                 system_config: dict | None = None, warm_up: bool = True):
        self.free_objects_period_ms = (system_config or {}).get("free_objects_period_milliseconds")
        import ray.data

        import raydata_course as rc
        from raydata_course.measure.raydata import start_recorder

        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # setup() itself retries a start that misses Ray's start-up wait on a busy machine.
        self.session = rc.setup(num_cpus=num_cpus, object_store_memory_bytes=object_store_bytes,
                                require_object_store_bytes=int(object_store_bytes * 0.9),
                                system_config=system_config)
        self.recorder = start_recorder()
        ctx = ray.data.DataContext.get_current()
        if LabProbe not in ctx.custom_execution_callback_classes:
            ctx.custom_execution_callback_classes.append(LabProbe)
        ctx.enable_progress_bars = False
        if warm_up:
            ray.data.range(64, override_num_blocks=4).map_batches(lambda b: b).materialize()

    def close(self) -> None:
        import raydata_course as rc

        rc.shutdown()

    def __enter__(self) -> LabSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def data_dir(self, config: LabConfig) -> Path:
        from raydata_course.lab.photos import build_image_parquet
        from raydata_course.lab.workload import ENCODED_SIDE

        rows_per_file = config.batch_rows  # one batch per file: see raydata_course.lab.workload
        files = -(-config.num_rows // rows_per_file)
        return build_image_parquet(self.out_dir / "data" / f"rows{config.batch_rows}-b1", files * rows_per_file,
                                   encoded_side=ENCODED_SIDE, rows_per_file=rows_per_file)

    def time_tasks(self, config: LabConfig, repeats: int = 3) -> dict[str, float]:
        """Seconds one block's producer work takes in a task on this cluster, nothing else running.

        Reads the first Parquet file of ``config``'s data and decodes ``config.batch_rows``
        of its rows with :func:`~raydata_course.lab.workload.decode_and_augment`, ``repeats``
        times, inside one Ray task (1 CPU), timed there with ``time.perf_counter``.

        Returns:
            ``{"read_block_s", "decode_block_s", "read_block_cpu_s", "decode_block_cpu_s",
            "read_block_bytes"}``: medians in seconds per block of ``config.batch_rows`` rows
            (the read is the file's read over its blocks), as wall time (``*_block_s``, what
            the machine's load at that moment allowed) and as the task's CPU time
            (``*_cpu_s``, ``time.process_time``: the work itself), and the encoded block's
            bytes. The playground's simulator (:mod:`raydata_course.lab.model_check`) takes
            these as its operators, at both speeds.
        """
        import ray

        path = sorted(self.data_dir(config).glob("part-*.parquet"))[0]
        return ray.get(ray.remote(num_cpus=1)(_time_block_tasks).remote(str(path), config.batch_rows, repeats))

    def run(self, config: LabConfig) -> list[RunResult]:
        """Run one variant (``config.epochs`` epochs) and measure each epoch as a repeat."""
        import ray
        import ray.data

        from raydata_course.measure.store import PlasmaSampler, settle_store, time_probe_cost_s
        from raydata_course.lab.workload import build_dataset, consume_in_driver

        data_dir = self.data_dir(config)
        settle_store(empty_bytes=8 * MiB, timeout_s=30.0, quiet_s=None)  # earlier runs' blocks are gone
        ray.get(self.recorder.drain.remote())
        ray.get(self.recorder.drain_windows.remote())
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(
            object_store_memory=config.budget_bytes)

        # Classify every object that lives in plasma: the decoded blocks, and the smaller
        # encoded ones upstream. Anything larger than Ray's inline limit goes to plasma.
        sampler = PlasmaSampler(interval_s=0.1, classify_every=3, min_object_bytes=PLASMA_MIN_OBJECT_BYTES)
        probe_cost = time_probe_cost_s(sampler)
        spilled0 = sampler.sample().spilled_bytes_total
        wall_start = time.perf_counter()
        sampler.start()
        t_wall0 = time.time()
        try:
            ds = build_dataset(config, data_dir)
            if config.mode == "driver":
                records = consume_in_driver(ds, config)
            else:
                self._run_trainer(ds, config)
                records = []
        finally:
            samples = sampler.stop()
        wall_s = time.perf_counter() - wall_start
        time.sleep(PROBE_FLUSH_WAIT_S)
        probe_samples, worker_records = ray.get(self.recorder.drain.remote())
        windows = ray.get(self.recorder.drain_windows.remote())
        records = records or worker_records
        if not records:
            raise RuntimeError(f"{config.name}: no consumer reported its epochs; see the Ray Train logs above.")
        results = []
        for epoch in range(config.epochs):
            epoch_records = [r for r in records if r["epoch"] == epoch]
            start = min(r["t_start_wall_s"] for r in epoch_records) - t_wall0
            end = max(r["t_end_wall_s"] for r in epoch_records) - t_wall0
            in_window = [x for x in samples if start <= x.t_s <= end]
            probes = [p for p in probe_samples if start <= p["t_wall_s"] - t_wall0 <= end]
            result = _measure(config, epoch, in_window, probes, epoch_records, t_wall0,
                              end - start, spilled0, probe_cost, total_wall_s=wall_s,
                              windows=[w for w in windows if start <= w["t"] - t_wall0 <= end])
            result.free_objects_period_ms = self.free_objects_period_ms
            results.append(result)
        return results

    def _run_trainer(self, ds, config: LabConfig) -> None:
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        from raydata_course.lab.workload import train_loop_per_worker

        from raydata_course.push_split.train import PushDataConfig

        use_gpu = config.device == "cuda"
        dataset_config = PushDataConfig(window=config.push_window, steer_on_store=config.push_steer_on_store) \
            if config.split == "push" else None
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config=asdict(config),
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
            scaling_config=ScalingConfig(num_workers=config.consumers, use_gpu=use_gpu,
                                         resources_per_worker={"CPU": config.cpus_per_worker}),
            datasets={"train": ds},
            dataset_config=dataset_config,
            run_config=RunConfig(storage_path=str((self.out_dir / "ray_results").resolve()),
                                 name=f"{config.name}-{int(time.time() * 1000)}"),
        )
        trainer.fit()


def _time_block_tasks(path: str, batch_rows: int, repeats: int) -> dict[str, float]:
    """Body of the task behind :meth:`LabSession.time_tasks` (median seconds per block)."""
    import pyarrow.parquet as pq

    from raydata_course.lab.workload import decode_and_augment

    reads, decodes, read_cpu, decode_cpu, read_bytes = [], [], [], [], 0
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        table = pq.read_table(path)
        share = batch_rows / max(1, table.num_rows)
        reads.append((time.perf_counter() - t0) * share)
        read_cpu.append((time.process_time() - c0) * share)
        read_bytes = table.nbytes * batch_rows // max(1, table.num_rows)
        batch = {"image": table.column("image").to_numpy(zero_copy_only=False)[:batch_rows],
                 "label": table.column("label").to_numpy()[:batch_rows]}
        t0, c0 = time.perf_counter(), time.process_time()
        decode_and_augment(batch)
        decodes.append(time.perf_counter() - t0)
        decode_cpu.append(time.process_time() - c0)
    return {"read_block_s": statistics.median(reads), "decode_block_s": statistics.median(decodes),
            "read_block_cpu_s": statistics.median(read_cpu), "decode_block_cpu_s": statistics.median(decode_cpu),
            "read_block_bytes": read_bytes}


def _measure(config: LabConfig, repeat: int, samples, probe_samples: list[dict], consumers: list[dict],
             t_wall0: float, wall_s: float, spilled0: int, probe_cost: dict, total_wall_s: float,
             windows: list[dict] = ()) -> RunResult:
    model = hidden_batches(config.prefetch_batches)
    peak = max((s.used_bytes for s in samples), default=0)
    # The budget the variant set; the push split lowers the executor's own limit (push_split.window).
    limits = [p["limit_bytes"] for p in probe_samples if p["limit_bytes"] > 0]
    budget = config.budget_bytes or (max(limits) if limits else 0)
    believed = [p["usage_bytes"] for p in probe_samples]
    hidden = [s.pinned_unreferenced_bytes for s in samples if s.pinned_unreferenced_bytes is not None]
    hidden_peak = max(hidden, default=0)
    predicted = model.hidden_bytes(config.batch_bytes, config.consumers)
    overage = peak - budget
    rows = sum(int(c.get("rows", 0)) for c in consumers)
    batches = sum(int(c.get("batches", 0)) for c in consumers)
    consume_s = max((float(c.get("consume_s", 0.0)) for c in consumers), default=0.0) or wall_s
    steps = [s for c in consumers for s in c.get("step_s", [])]
    h2d_s = [s for c in consumers for s in c.get("h2d_s", [])]
    h2d_bytes = sum(b for c in consumers for b in c.get("h2d_bytes", []))
    waits = [w for c in consumers for w in c.get("wait_s", [])[1:]]
    first_waits = [c["wait_s"][0] for c in consumers if c.get("wait_s")]
    peak_t = next((x.t_s for x in samples if x.used_bytes == peak), 0.0)
    overall, midrun, mid_start_wall = _throughputs(consumers)
    classified = [s for s in samples if s.referenced_bytes is not None]
    peak_c = max(classified, key=lambda s: s.used_bytes, default=None)
    def nearest(ts, vs, at=peak_t):
        """The value of ``vs`` sampled nearest to ``at`` (0 for no samples)."""
        return vs[min(range(len(ts)), key=lambda i: abs(ts[i] - at))] if ts else 0

    mid_store = nearest([x.t_s for x in samples], [x.used_bytes for x in samples], at=mid_start_wall - t_wall0)
    believed_at_peak = nearest([p["t_wall_s"] - t_wall0 for p in probe_samples], believed)
    hidden_at_peak = nearest([x.t_s for x in samples if x.pinned_unreferenced_bytes is not None], hidden)
    window_t = [w["t"] - t_wall0 for w in windows]
    coordinator_at_peak = nearest(window_t, [w["held_bytes"] for w in windows], at=peak_c.t_s) if peak_c else 0
    peak_breakdown = {
        "t_s": peak_t,
        "believed_bytes": believed_at_peak,
        "hidden_bytes": hidden_at_peak,
        "other_bytes": max(0, peak - believed_at_peak - hidden_at_peak),
        # the classified sample with the most bytes used, split three ways
        "classified_t_s": peak_c.t_s if peak_c else None,
        "referenced_bytes": peak_c.referenced_bytes if peak_c else 0,
        "pinned_unreferenced_bytes": peak_c.pinned_unreferenced_bytes if peak_c else 0,
        "freed_not_deleted_bytes": max(0, peak_c.used_bytes - peak_c.referenced_bytes
                                       - peak_c.pinned_unreferenced_bytes) if peak_c else 0,
        # the referenced bytes, split between the push split's windows (the coordinator's
        # held refs, nearest window sample) and the executor's operators
        "coordinator_bytes": min(coordinator_at_peak, peak_c.referenced_bytes) if peak_c else 0,
        "executor_bytes": max(0, peak_c.referenced_bytes - coordinator_at_peak) if peak_c else 0,
        # where Ray Data's believed usage sat at its own peak, per operator
        "believed_operators": _believed_operators(probe_samples),
    }
    timeline = {
        "t_s": [round(s.t_s, 3) for s in samples],
        "used_bytes": [s.used_bytes for s in samples],
        "hidden_t_s": [round(s.t_s, 3) for s in samples if s.pinned_unreferenced_bytes is not None],
        "hidden_bytes": hidden,
        "referenced_bytes": [s.referenced_bytes for s in samples if s.referenced_bytes is not None],
        "classified_used_bytes": [s.used_bytes for s in samples if s.referenced_bytes is not None],
        "believed_t_s": [round(p["t_wall_s"] - t_wall0, 3) for p in probe_samples],
        "believed_bytes": believed,
        "limit_bytes": [p["limit_bytes"] for p in probe_samples],
        "external_consumer_bytes": [p["external_consumer_bytes"] for p in probe_samples],
        "executor": [p["executor"] for p in probe_samples],
        "window_t_s": [round(t, 3) for t in window_t],
        "windows_rows": [w["windows_rows"] for w in windows],
        "window_held_bytes": [w["held_bytes"] for w in windows],
    }
    return RunResult(
        variant=config.name, repeat=repeat, config=config.as_dict(),
        peak_bytes=peak, budget_bytes=budget, overage_bytes=overage,
        believed_peak_bytes=max(believed, default=0),
        hidden_peak_bytes=hidden_peak,
        hidden_batches_per_consumer=hidden_peak / (config.batch_bytes * config.consumers),
        unaccounted_at_peak_bytes=max(0, peak - believed_at_peak),
        predicted_hidden_bytes=predicted, predicted_hidden_batches=model.nominal,
        hidden_range_batches=(model.low, model.high), upstream_hidden_batches=model.upstream,
        realization=overage / predicted if predicted else float("nan"),
        spilled_bytes=max((s.spilled_bytes_total for s in samples), default=spilled0) - spilled0,
        rows=rows, batches=batches, consume_s=consume_s,
        rows_per_s=rows / consume_s if consume_s else 0.0,
        batches_per_s=batches / consume_s if consume_s else 0.0,
        step_s_median=statistics.median(steps) if steps else float("nan"),
        wait_s_median=statistics.median(waits) if waits else float("nan"),
        first_batch_s=max(first_waits, default=float("nan")),
        wall_s=wall_s, total_wall_s=total_wall_s, peak_breakdown=peak_breakdown,
        overall_batches_per_s=overall, midrun_batches_per_s=midrun, split=config.split,
        midrun_start_store_bytes=mid_store if mid_start_wall and samples else None,
        probe_cost=probe_cost, timeline=timeline,
        h2d_s_median=statistics.median(h2d_s) if h2d_s else None,
        h2d_gb_per_s=h2d_bytes / sum(h2d_s) / 1e9 if h2d_s and sum(h2d_s) > 0 else None,
    )


def _believed_operators(probe_samples: list[dict]) -> list[dict]:
    """Ray Data's believed usage at its highest sample, per operator that held any.

    Returns:
        ``[{"operator", "bytes", "pending_bytes", "tasks"}]``, upstream first: the operator's
        short name (``MapBatches``, ``ReadFilesParquetV2``), its object-store usage as Ray
        Data counts it, the part of it that is its running tasks' estimated pending output,
        and its running tasks (empty when the probe recorded no per-operator figures).
    """
    top = max(probe_samples, key=lambda p: p["usage_bytes"], default=None)
    if not top or not top.get("op_bytes"):
        return []
    pending = top.get("op_pending_bytes") or [0] * len(top["op_bytes"])
    tasks = top.get("op_tasks") or [0] * len(top["op_bytes"])
    return [{"operator": re.split(r"[\[(]", name, maxsplit=1)[0], "bytes": b, "pending_bytes": p, "tasks": n}
            for name, b, p, n in zip(top["operators"], top["op_bytes"], pending, tasks) if b > 0]


def _throughputs(consumers: list[dict]) -> tuple[float, float, float]:
    """(overall, mid-run) batches/s summed over consumers, and when the mid-run window
    opened (the first consumer to reach 25 % of its epoch; wall clock, 0 for none).

    Overall: all batches over the time from the consumers' first start to the last batch
    (wall clock, so start-up counts). Mid-run: per consumer, the batches from 25 % to 90 % of
    its epoch over the time they took, summed over consumers.
    """
    starts = [c["t_start_wall_s"] for c in consumers if c.get("batch_t_s")]
    ends = [c["t_start_wall_s"] + c["batch_t_s"][-1] for c in consumers if c.get("batch_t_s")]
    batches = sum(len(c.get("batch_t_s", [])) for c in consumers)
    overall = batches / (max(ends) - min(starts)) if starts and max(ends) > min(starts) else 0.0
    midrun, opened = 0.0, []
    for c in consumers:
        t = c.get("batch_t_s", [])
        lo, hi = int(0.25 * len(t)), int(0.90 * len(t)) - 1
        if hi > lo and t[hi] > t[lo]:
            midrun += (hi - lo) / (t[hi] - t[lo])
            opened.append(c["t_start_wall_s"] + t[lo])
    return overall, midrun, min(opened, default=0.0)


# ------------------------------------------------------------------------------ reports
