"""Run lab variants, measure them, and report: the engine behind ``make lab``.

One *run* = one variant on the lab's local cluster, with :class:`PlasmaSampler` polling the
raylets at 10 Hz and :class:`RayDataProbe` recording what Ray Data believes. From the samples
it derives, for that run:

- ``peak_bytes``: the highest actual object-store usage;
- ``budget_bytes``: Ray Data's object-store limit, as its resource manager reported it;
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
  the time they took), summed over consumers;
- the memory at the peak split three ways: *referenced* (some ``ObjectRef`` alive),
  *pinned, unreferenced* (zero-copy views only) and *freed, not yet deleted* (the rest of
  ``used``: the raylet frees objects every ``free_objects_period_milliseconds``).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from raydata_course.lab.buffer_model import hidden_batches
from raydata_course.lab.workload import ROW_BYTES, MiB, LabConfig

__all__ = ["RunResult", "LabSession", "summarize", "format_table", "format_push_table", "push_targets",
           "format_push_targets", "format_versions_table", "variants_for", "load_results", "save_results"]

#: seconds to wait after a run so that the probes' last samples reach the recorder.
PROBE_FLUSH_WAIT_S = 1.0
#: the smallest object the lab classifies, in bytes: objects up to Ray's
#: ``max_direct_call_object_size`` (100 KiB, ``ray_config_def.h``) are returned inline to
#: their owner and never occupy plasma, so counting them would overstate referenced bytes.
PLASMA_MIN_OBJECT_BYTES = 100 * 1024 + 1


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
    peak_breakdown: dict = field(default_factory=dict)
    probe_cost: dict = field(default_factory=dict)
    timeline: dict = field(default_factory=dict)


def variants_for(device: str, quick: bool, push: bool = False) -> list[LabConfig]:
    """The lab's variants: slow and fast consumers, in the driver and under Ray Train.

    CPU: 32 MiB batches, ``prefetch_batches=4``, a 256 MiB Ray Data budget in a 2 GiB store,
    2 TorchTrainer workers (gloo), 20 batches per consumer and 3 epochs (each epoch is a
    fresh execution, measured as one repeat). GPU: 96 MiB batches (a batch must stay one
    block, under the 128 MiB ``target_max_block_size``), real host-to-device copies, a 1 GiB
    budget in an 8 GiB store, one DDP (NCCL) worker per GPU (NCCL allows one rank per GPU).
    ``quick`` keeps only the slow variants, one epoch of 12 (driver) or 8 (Train) batches.
    ``push`` adds, after each Train variant, the same variant sharded by the push-based
    split (``<name>-push``).
    """
    if device == "cuda":
        import torch

        gpus = max(1, torch.cuda.device_count())
        base = LabConfig(name="", device="cuda", batch_rows=(96 * MiB) // ROW_BYTES,
                         budget_bytes=1024 * MiB, object_store_bytes=8192 * MiB, num_cpus=8,
                         batches_per_consumer=32, cpus_per_worker=1.0)
        train_consumers = gpus
    else:
        base = LabConfig(name="", batches_per_consumer=20)
        train_consumers = 2
    slow, fast = 0.25, 0.0
    variants = [
        base.with_(name="driver-slow", mode="driver", consumers=1, step_delay_s=slow),
        base.with_(name="train-slow", mode="train", consumers=train_consumers, step_delay_s=slow),
    ]
    if not quick:
        variants += [
            base.with_(name="driver-fast", mode="driver", consumers=1, step_delay_s=fast),
            base.with_(name="train-fast", mode="train", consumers=train_consumers, step_delay_s=fast),
        ]
    if push:
        variants = [w for v in variants
                    for w in ([v, v.with_(name=f"{v.name}-push", split="push")] if v.mode == "train" else [v])]
    if quick:
        # Enough batches for each buffer to fill once (the driver needs more: its producer
        # has all the CPUs), few enough to finish in about 90 s on two cores.
        return [v.with_(batches_per_consumer=12 if v.mode == "driver" else 8, epochs=1) for v in variants]
    return [v.with_(epochs=3) for v in variants]


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
        from raydata_course.lab.probes import RayDataProbe, start_recorder

        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # setup() itself retries a start that misses Ray's start-up wait on a busy machine.
        self.session = rc.setup(num_cpus=num_cpus, object_store_memory_bytes=object_store_bytes,
                                require_object_store_bytes=int(object_store_bytes * 0.9),
                                system_config=system_config)
        self.recorder = start_recorder()
        ctx = ray.data.DataContext.get_current()
        if RayDataProbe not in ctx.custom_execution_callback_classes:
            ctx.custom_execution_callback_classes.append(RayDataProbe)
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

    def wait_until_store_drains(self, timeout_s: float = 30.0, below_bytes: int = 8 * MiB) -> int:
        """Block until the object store holds under ``below_bytes``; return what it holds."""
        from raydata_course.memory import object_store_stats

        deadline = time.monotonic() + timeout_s
        used = object_store_stats().used_bytes
        while used > below_bytes and time.monotonic() < deadline:
            time.sleep(0.2)
            used = object_store_stats().used_bytes
        return used

    def data_dir(self, config: LabConfig) -> Path:
        from raydata_course.lab.photos import build_image_parquet
        from raydata_course.lab.workload import ENCODED_SIDE

        rows_per_file = config.batch_rows * 4
        files = -(-config.num_rows // rows_per_file)
        return build_image_parquet(self.out_dir / "data" / f"rows{config.batch_rows}", files * rows_per_file,
                                   encoded_side=ENCODED_SIDE, rows_per_file=rows_per_file)

    def run(self, config: LabConfig) -> list[RunResult]:
        """Run one variant (``config.epochs`` epochs) and measure each epoch as a repeat."""
        import ray
        import ray.data

        from raydata_course.lab.probes import PlasmaSampler, time_probe_cost_s
        from raydata_course.lab.workload import build_dataset, consume_in_driver

        data_dir = self.data_dir(config)
        self.wait_until_store_drains()
        ray.get(self.recorder.drain.remote())
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
                              end - start, spilled0, probe_cost, total_wall_s=wall_s)
            result.free_objects_period_ms = self.free_objects_period_ms
            results.append(result)
        return results

    def _run_trainer(self, ds, config: LabConfig) -> None:
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        from raydata_course.lab.workload import train_loop_per_worker

        use_gpu = config.device == "cuda"
        loop_config = {k: v for k, v in asdict(config).items()}
        dataset_config = None
        if config.split == "push":
            from raydata_course.push_train import PushDataConfig

            dataset_config = PushDataConfig()
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config=loop_config,
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
            scaling_config=ScalingConfig(num_workers=config.consumers, use_gpu=use_gpu,
                                         resources_per_worker={"CPU": config.cpus_per_worker}),
            datasets={"train": ds},
            dataset_config=dataset_config,
            run_config=RunConfig(storage_path=str((self.out_dir / "ray_results").resolve()),
                                 name=f"{config.name}-{int(time.time() * 1000)}"),
        )
        trainer.fit()


def _measure(config: LabConfig, repeat: int, samples, probe_samples: list[dict], consumers: list[dict],
             t_wall0: float, wall_s: float, spilled0: int, probe_cost: dict, total_wall_s: float) -> RunResult:
    model = hidden_batches(config.prefetch_batches)
    peak = max((s.used_bytes for s in samples), default=0)
    limits = [p["limit_bytes"] for p in probe_samples if p["limit_bytes"] > 0]
    budget = max(limits) if limits else config.budget_bytes
    believed = [p["usage_bytes"] for p in probe_samples]
    hidden = [s.pinned_unreferenced_bytes for s in samples if s.pinned_unreferenced_bytes is not None]
    hidden_peak = max(hidden, default=0)
    predicted = model.hidden_bytes(config.batch_bytes, config.consumers)
    overage = peak - budget
    rows = sum(int(c.get("rows", 0)) for c in consumers)
    batches = sum(int(c.get("batches", 0)) for c in consumers)
    consume_s = max((float(c.get("consume_s", 0.0)) for c in consumers), default=0.0) or wall_s
    steps = [s for c in consumers for s in c.get("step_s", [])]
    waits = [w for c in consumers for w in c.get("wait_s", [])[1:]]
    first_waits = [c["wait_s"][0] for c in consumers if c.get("wait_s")]
    peak_t = next((x.t_s for x in samples if x.used_bytes == peak), 0.0)
    overall, midrun = _throughputs(consumers)
    classified = [s for s in samples if s.referenced_bytes is not None]
    peak_c = max(classified, key=lambda s: s.used_bytes, default=None)
    nearest = lambda ts, vs: vs[min(range(len(ts)), key=lambda i: abs(ts[i] - peak_t))] if ts else 0  # noqa: E731
    believed_at_peak = nearest([p["t_wall_s"] - t_wall0 for p in probe_samples], believed)
    hidden_at_peak = nearest([x.t_s for x in samples if x.pinned_unreferenced_bytes is not None], hidden)
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
        probe_cost=probe_cost, timeline=timeline,
    )


def _throughputs(consumers: list[dict]) -> tuple[float, float]:
    """(overall, mid-run) batches/s summed over consumers.

    Overall: all batches over the time from the consumers' first start to the last batch
    (wall clock, so start-up counts). Mid-run: per consumer, the batches from 25 % to 90 % of
    its epoch over the time they took, summed over consumers.
    """
    starts = [c["t_start_wall_s"] for c in consumers if c.get("batch_t_s")]
    ends = [c["t_start_wall_s"] + c["batch_t_s"][-1] for c in consumers if c.get("batch_t_s")]
    batches = sum(len(c.get("batch_t_s", [])) for c in consumers)
    overall = batches / (max(ends) - min(starts)) if starts and max(ends) > min(starts) else 0.0
    midrun = 0.0
    for c in consumers:
        t = c.get("batch_t_s", [])
        lo, hi = int(0.25 * len(t)), int(0.90 * len(t)) - 1
        if hi > lo and t[hi] > t[lo]:
            midrun += (hi - lo) / (t[hi] - t[lo])
    return overall, midrun


# ------------------------------------------------------------------------------ reports


def summarize(results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per variant: medians and spreads over its repeats."""
    rows = []
    for name in dict.fromkeys(r.variant for r in results):
        runs = [r for r in results if r.variant == name]
        peaks = [r.peak_bytes for r in runs]
        med = lambda xs: statistics.median(xs)  # noqa: E731
        first = runs[0]
        rows.append({
            "variant": name,
            "repeats": len(runs),
            "consumers": first.config["consumers"],
            "batch_bytes": first.config["batch_bytes"],
            "step_delay_s": first.config["step_delay_s"],
            "budget_bytes": med([r.budget_bytes for r in runs]),
            "peak_bytes_median": med(peaks),
            "peak_bytes_min": min(peaks),
            "peak_bytes_max": max(peaks),
            "overage_bytes": med([r.overage_bytes for r in runs]),
            "believed_peak_bytes": med([r.believed_peak_bytes for r in runs]),
            "hidden_peak_bytes": med([r.hidden_peak_bytes for r in runs]),
            "hidden_batches_per_consumer": med([r.hidden_batches_per_consumer for r in runs]),
            "unaccounted_at_peak_bytes": med([r.unaccounted_at_peak_bytes for r in runs]),
            "unaccounted_batches_per_consumer": med([r.unaccounted_at_peak_bytes for r in runs])
            / (first.config["batch_bytes"] * first.config["consumers"]),
            "predicted_hidden_bytes": first.predicted_hidden_bytes,
            "predicted_hidden_batches": first.predicted_hidden_batches,
            "hidden_range_batches": list(first.hidden_range_batches),
            "upstream_hidden_batches": first.upstream_hidden_batches,
            "realization": med([r.realization for r in runs]),
            "upstream_realization": med([r.overage_bytes for r in runs])
            / (first.upstream_hidden_batches * first.config["batch_bytes"] * first.config["consumers"]),
            "hidden_vs_model": med([r.hidden_peak_bytes for r in runs]) / first.predicted_hidden_bytes,
            "spilled_bytes": max(r.spilled_bytes for r in runs),
            "rows_per_s": med([r.rows_per_s for r in runs]),
            "batches_per_s": med([r.batches_per_s for r in runs]),
            "step_s_median": med([r.step_s_median for r in runs]),
            "wall_s": [round(r.wall_s, 1) for r in runs],
        })
    return rows


def format_table(rows: list[dict], ray_version: str) -> str:
    """A Markdown table like upstream's, plus the hidden-buffer columns."""
    mib = lambda b: f"{b / MiB:,.0f}"  # noqa: E731
    head = (f"Ray {ray_version}\n\n"
            "| variant | budget MiB | measured peak MiB (median, min-max) | overage MiB | RD believed MiB "
            "| hidden measured MiB (batches/consumer) | predicted hidden MiB (model batches per consumer) | hidden / predicted "
            "| realization | upstream pf+4N+2 realization | spilled MiB | rows/s | batches/s | step s | run s |\n"
            "|---|---:|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {mib(r['budget_bytes'])} | {mib(r['peak_bytes_median'])} "
            f"({mib(r['peak_bytes_min'])}-{mib(r['peak_bytes_max'])}) | {mib(r['overage_bytes'])} "
            f"| {mib(r['believed_peak_bytes'])} | {mib(r['hidden_peak_bytes'])} ({r['hidden_batches_per_consumer']:.1f}) "
            f"| {mib(r['predicted_hidden_bytes'])} ({r['predicted_hidden_batches']}; range {r['hidden_range_batches'][0]}-{r['hidden_range_batches'][1]}) "
            f"| {r['hidden_vs_model']:.0%} | {r['realization']:.0%} | {r['upstream_realization']:.0%} "
            f"| {mib(r['spilled_bytes'])} | {r['rows_per_s']:,.0f} | {r['batches_per_s']:.2f} | {r['step_s_median']:.3f} "
            f"| {', '.join(str(w) for w in r['wall_s'])} |"
        )
    return "\n".join(lines)


#: how far the measured hidden bytes (over the buffer model's nominal prediction) may stray
#: before the quick check fails: one epoch on a busy machine is a noisy measurement.
HIDDEN_VS_MODEL_RANGE = (0.75, 1.34)


def quick_check(rows: list[dict[str, Any]]) -> list[str]:
    """What the quick lab must reproduce, checked on :func:`summarize` rows of pull variants.

    For every slow variant (``step_delay_s > 0``; push variants and fast ones are skipped):
    the peak is above the budget (``overage_bytes > 0``); at least one hidden batch per
    consumer was measured; the hidden batches per consumer lie in the buffer model's range
    (:func:`raydata_course.lab.buffer_model.hidden_batches`, plus or minus half a batch);
    and hidden bytes over the model's nominal bytes lie in ``HIDDEN_VS_MODEL_RANGE``.

    Returns:
        One sentence per failed check (empty when everything was reproduced).
    """
    problems = []
    for r in rows:
        if r["variant"].endswith("-push") or not r["step_delay_s"] > 0:
            continue
        name, hidden = r["variant"], r["hidden_batches_per_consumer"]
        low, high = r["hidden_range_batches"]
        if r["overage_bytes"] <= 0:
            problems.append(f"{name}: peak {r['peak_bytes_median'] / MiB:.0f} MiB is not above the "
                            f"{r['budget_bytes'] / MiB:.0f} MiB budget")
        if hidden < 1:
            problems.append(f"{name}: no hidden (pinned, unreferenced) batch was measured")
        elif not low - 0.5 <= hidden <= high + 0.5:
            problems.append(f"{name}: {hidden:.1f} hidden batches per consumer, outside the model's "
                            f"range {low}-{high}")
        lo, hi = HIDDEN_VS_MODEL_RANGE
        if not lo <= r["hidden_vs_model"] <= hi:
            problems.append(f"{name}: hidden bytes are {r['hidden_vs_model']:.0%} of the model's "
                            f"prediction (expected {lo:.0%}-{hi:.0%})")
    return problems


def pull_push_pairs(results: list[RunResult]) -> list[str]:
    """The variants of ``results`` that have a push-based twin (``X`` and ``X-push``), in order.

    Returns:
        The pull variants' names, e.g. ``["train-slow"]`` (empty when no push variant ran).
    """
    ran = {r.variant for r in results}
    return [name for name in dict.fromkeys(r.variant for r in results) if f"{name}-push" in ran]


def format_push_table(results: list[RunResult], free_objects_period_ms: Optional[int] = None) -> str:
    """Pull against push, per Train variant, from one cluster setting's runs.

    For each variant ``X`` with a ``X-push`` twin: medians over repeats of peak / budget,
    overage, the peak's bytes split into referenced / pinned-unreferenced / freed-not-deleted,
    push's peak as a fraction of pull's, and push / pull throughput (overall and mid-run
    batches/s). Every run's wall time is listed.

    Returns:
        A Markdown table (empty string when no push variant ran).
    """
    med = statistics.median
    mib = lambda b: f"{b / MiB:,.0f}"  # noqa: E731
    setting = ("default lazy free (1000 ms)" if free_objects_period_ms is None
               else f"free_objects_period_milliseconds={free_objects_period_ms}")
    lines = [f"Pull vs push, raylet {setting}\n",
             "| variant | split | repeats | budget MiB | peak MiB (median, min-max) | peak / budget | overage MiB "
             "| at peak: referenced / pinned-unref / freed-not-deleted MiB | push peak / pull peak "
             "| overall b/s | mid-run b/s | push/pull overall | push/pull mid-run | run s |",
             "|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    names = pull_push_pairs(results)
    for name in names:
        rows = {}
        for split, vname in (("pull", name), ("push", f"{name}-push")):
            runs = [r for r in results if r.variant == vname]
            rows[split] = {
                "runs": runs, "budget": med([r.budget_bytes for r in runs]),
                "peak": med([r.peak_bytes for r in runs]), "min": min(r.peak_bytes for r in runs),
                "max": max(r.peak_bytes for r in runs), "overage": med([r.overage_bytes for r in runs]),
                "ref": med([r.peak_breakdown.get("referenced_bytes", 0) for r in runs]),
                "pin": med([r.peak_breakdown.get("pinned_unreferenced_bytes", 0) for r in runs]),
                "freed": med([r.peak_breakdown.get("freed_not_deleted_bytes", 0) for r in runs]),
                "overall": med([r.overall_batches_per_s for r in runs]),
                "midrun": med([r.midrun_batches_per_s for r in runs]),
            }
        pull, push = rows["pull"], rows["push"]
        for split, r in rows.items():
            ratio = (f"{push['peak'] / pull['peak']:.2f}" if split == "push" and pull["peak"] else "")
            thr = (f"{push['overall'] / pull['overall']:.2f} | {push['midrun'] / pull['midrun']:.2f}"
                   if split == "push" and pull["overall"] and pull["midrun"] else " | ")
            lines.append(
                f"| {name} | {split} | {len(r['runs'])} | {mib(r['budget'])} | {mib(r['peak'])} ({mib(r['min'])}-"
                f"{mib(r['max'])}) | {r['peak'] / r['budget']:.2f} | {mib(r['overage'])} "
                f"| {mib(r['ref'])} / {mib(r['pin'])} / {mib(r['freed'])} | {ratio} | {r['overall']:.2f} "
                f"| {r['midrun']:.2f} | {thr} | {', '.join(f'{x.wall_s:.1f}' for x in r['runs'])} |")
    return "\n".join(lines) if names else ""


#: the lab's targets for the push-based split, checked with the raylet's lazy free off.
PUSH_PULL_OVERAGE_MIN = 1.5
PUSH_THROUGHPUT_MIN = 0.95


def push_targets(results: list[RunResult]) -> list[dict[str, Any]]:
    """Check the push-vs-pull targets on one cluster setting's runs (medians over repeats).

    Targets (meant for runs with ``free_objects_period_milliseconds=0``):

    * a slow variant (``step_delay_s > 0``): push's peak is at most the budget plus one
      batch (= one block) per consumer, and pull's peak is at least
      ``PUSH_PULL_OVERAGE_MIN`` times the budget;
    * a fast variant (``step_delay_s == 0``): push's throughput is at least
      ``PUSH_THROUGHPUT_MIN`` times pull's, overall and mid-run (batches 25-90 %).

    Returns:
        One dict per check: ``variant``, ``target`` (words), ``value``, ``bound`` and ``met``.
    """
    med = statistics.median
    checks = []
    names = pull_push_pairs(results)
    for name in names:
        pull = [r for r in results if r.variant == name]
        push = [r for r in results if r.variant == f"{name}-push"]
        cfg = push[0].config
        if cfg.get("step_delay_s", 0) > 0:
            block_bytes = cfg["batch_rows"] * ROW_BYTES
            bound = med([r.budget_bytes for r in push]) + cfg["consumers"] * block_bytes
            peak = med([r.peak_bytes for r in push])
            checks.append({"variant": name, "target": f"push peak <= budget + {cfg['consumers']} x one block (MiB)",
                           "value": peak / MiB, "bound": bound / MiB, "met": peak <= bound})
            ratio = med([r.peak_bytes / r.budget_bytes for r in pull])
            checks.append({"variant": name, "target": "pull peak / budget", "value": ratio,
                           "bound": PUSH_PULL_OVERAGE_MIN, "met": ratio >= PUSH_PULL_OVERAGE_MIN})
        else:
            for label, attr in (("overall", "overall_batches_per_s"), ("mid-run", "midrun_batches_per_s")):
                pull_rate = med([getattr(r, attr) for r in pull])
                ratio = med([getattr(r, attr) for r in push]) / pull_rate if pull_rate else 0.0
                checks.append({"variant": name, "target": f"push / pull throughput, {label}", "value": ratio,
                               "bound": PUSH_THROUGHPUT_MIN, "met": ratio >= PUSH_THROUGHPUT_MIN})
    return checks


def format_push_targets(checks: list[dict[str, Any]]) -> str:
    """The checks of :func:`push_targets` as a Markdown table (empty string for none)."""
    if not checks:
        return ""
    lines = ["| variant | target | measured | bound | met |", "|---|---|---:|---:|---|"]
    for c in checks:
        op = "<=" if "<=" in c["target"] else ">="
        lines.append(f"| {c['variant']} | {c['target']} | {c['value']:.2f} | {op} {c['bound']:.2f} "
                     f"| {'yes' if c['met'] else 'NO'} |")
    return "\n".join(lines)


def format_versions_table(result_files: list[Path]) -> str:
    """One table of every variant under every Ray version found in ``result_files``.

    Args:
        result_files: ``results.json`` files written by ``python -m raydata_course.lab``,
            for example ``build/lab/results.json`` and ``build/lab-ray2.55.1/results.json``.

    Returns:
        A Markdown table, rows sorted by variant then Ray version.
    """
    mib = lambda b: f"{b / MiB:,.0f}"  # noqa: E731
    rows = []
    for path in result_files:
        data = json.loads(Path(path).read_text())
        meta = data["meta"]
        for r in data["summary"]:
            rows.append((r["variant"], meta["ray_version"], meta.get("pipeline", {}).get("design", "?"), r))
    lines = ["| variant | Ray | consumer pipeline | budget MiB | peak MiB (median, min-max) | overage MiB "
             "| RD believed MiB | pinned, no ObjectRef (batches/consumer) | actual - RD at peak (batches/consumer) "
             "| model (batches/consumer) | realization | rows/s |",
             "|---|---|---|---:|---|---:|---:|---|---|---|---:|---:|"]
    for variant, version, design, r in sorted(rows, key=lambda x: (x[0], x[1])):
        lines.append(
            f"| {variant} | {version} | {design} | {mib(r['budget_bytes'])} | {mib(r['peak_bytes_median'])} "
            f"({mib(r['peak_bytes_min'])}-{mib(r['peak_bytes_max'])}) | {mib(r['overage_bytes'])} "
            f"| {mib(r['believed_peak_bytes'])} | {mib(r['hidden_peak_bytes'])} MiB ({r['hidden_batches_per_consumer']:.1f}) "
            f"| {mib(r.get('unaccounted_at_peak_bytes', 0))} MiB ({r.get('unaccounted_batches_per_consumer', 0):.1f}) "
            f"| {r['predicted_hidden_batches']} (range {r['hidden_range_batches'][0]}-{r['hidden_range_batches'][1]}) "
            f"| {r['realization']:.0%} | {r['rows_per_s']:,.0f} |")
    return "\n".join(lines)


def load_results(path: str | Path) -> list[RunResult]:
    """The runs of a ``results.json`` written by :func:`save_results`, as :class:`RunResult`.

    Raises:
        FileNotFoundError: no file at ``path`` (run ``make lab`` first).
        ValueError: the file holds no ``runs`` list.
    """
    data = json.loads(Path(path).read_text())
    if not isinstance(data.get("runs"), list):
        raise ValueError(f"{path} holds no 'runs' list; it was not written by the lab.")
    known = set(RunResult.__dataclass_fields__)
    runs = []
    for run in data["runs"]:
        run = {k: v for k, v in run.items() if k in known}
        run["hidden_range_batches"] = tuple(run.get("hidden_range_batches", (0, 0)))
        runs.append(RunResult(**run))
    return runs


def save_results(results: list[RunResult], rows: list[dict], out_dir: Path, meta: dict) -> Path:
    """Write ``results.json`` (every run, with timelines) and return its path."""
    path = out_dir / "results.json"
    path.write_text(json.dumps({"meta": meta, "summary": rows, "runs": [asdict(r) for r in results]}, indent=1))
    return path
