"""One epoch of a lab run, measured: what :class:`~raydata_course.lab.session.LabSession`'s samples say.

From the plasma sampler's samples, the Ray Data probe's samples and the consumers' records
of one epoch (one *repeat*), :func:`measure_epoch` derives:

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
- throughput: rows/s and batches/s over the consumption phase, the median train step,
  ``overall_batches_per_s``, ``midrun_batches_per_s`` (batches 25-90 % of each epoch),
  ``early_batches_per_s`` (the batches before that window, first wait included) and
  ``midrun_start_store_bytes`` (the store's usage as that window opens), see :func:`_throughputs`;
- the memory at the peak split three ways: *referenced* (some ``ObjectRef`` alive),
  *pinned, unreferenced* (zero-copy views only) and *freed, not yet deleted* (the rest of
  ``used``: the raylet frees objects every ``free_objects_period_milliseconds``);
- ``operator_generation``: per operator, the seconds its tasks spent making blocks during the
  epoch and those blocks' rows (the producer's speed in the run itself, which
  :mod:`raydata_course.lab.model_check` gives the simulator); ``midrun_step_s_median``: the
  median training step inside the mid-run window; ``step_cpu_s_median``: the median CPU
  seconds a consumer's process used during one step (all its threads); a step that takes
  longer than that waited, for a core or for the other ranks;
- ``timeline["op_tasks"]``: at each probe sample, each operator's running tasks (upstream
  first, named in ``timeline["operators"]``): how many decode tasks the executor could run
  at once, and which operators held task slots; ``timeline["op_rows"]``: at the same samples,
  the rows each operator's tasks had made (``rows_task_outputs_generated``), so that the
  producer's rate can be read over any part of the epoch;
- ``stall_fraction`` (the job-level ``D`` a GPU user means: the time the slowest rank waited
  for its batch, over the steps after the first batch, over the wall time), the producer's
  rate over the epoch and after the first batch (from Ray Data's counters), the share of the
  files read by that batch, and the consumers' rate, and
  ``live_peak_bytes``, the store's peak without the bytes freed but not yet deleted;
- ``loop_cpu_s``: the CPU seconds the executor's scheduling thread used in the epoch (summed
  over the epoch's executions; ``RayDataSample.loop_cpu_s``): Ray Data's own overhead in the
  process that runs it, which shares the machine with the consumers;
- ``cpu_after_first_batch``: from the last consumer's first batch to the last step's end, the
  machine's busy CPU seconds (``/proc/stat``, :func:`raydata_course.measure.store.machine_busy_cpu_s`),
  the consumers' processes' CPU seconds during their steps, and the batches they took
  (:func:`~raydata_course.lab.producer.cpu_after_first_batch`): what the machine spent beside the decode and the steps.

The tables and checks built on these results are :mod:`raydata_course.lab.report`.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Optional

from raydata_course.lab.buffer_model import hidden_batches
from raydata_course.lab.producer import (
    cpu_after_first_batch,
    decoded_batches_after,
    epoch_production_batches_per_s,
    last_first_batch_wall_s,
    made_bytes_per_batch,
    production_batches_per_s,
    read_done_at,
)
from raydata_course.lab.workload import LabConfig
from raydata_course.sim.timeline import consumption_batches_per_s, stall_fraction

__all__ = ["RunResult", "measure_epoch", "stall_fraction", "consumption_batches_per_s"]


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
    early_batches_per_s: Optional[float] = None  # batches up to the mid-run window over their time (first wait included), summed
    midrun_step_s_median: Optional[float] = None  # the median training step inside the mid-run window
    step_cpu_s_median: Optional[float] = None  # the median CPU seconds a consumer's process used in one step
    peak_breakdown: dict = field(default_factory=dict)
    #: per operator, its tasks' time making blocks during this run, and those blocks' rows:
    #: ``{name: {"generation_s", "rows"}}`` (:func:`_generation_per_operator`)
    operator_generation: dict = field(default_factory=dict)
    probe_cost: dict = field(default_factory=dict)
    timeline: dict = field(default_factory=dict)
    loop_cpu_s: Optional[float] = None  # the executor's scheduling thread, CPU seconds (None: not recorded)
    #: the job-level stall fraction D (:func:`stall_fraction`); None when not recorded
    stall_fraction: Optional[float] = None
    #: batches per second the consumers took after each one's first batch, summed (:func:`consumption_batches_per_s`)
    consumption_batches_per_s: Optional[float] = None
    #: batches per second the producer made after the consumers' first batch (:func:`~raydata_course.lab.producer.production_batches_per_s`)
    production_batches_per_s: Optional[float] = None
    #: batches per second the producer made over the whole epoch, its start to its last block (:func:`~raydata_course.lab.producer.epoch_production_batches_per_s`)
    epoch_production_batches_per_s: Optional[float] = None
    #: the share of the read's rows made by the consumers' first batch (:func:`~raydata_course.lab.producer.read_done_at`)
    read_done_at_first_batch: Optional[float] = None
    #: the bytes the plan's operators made per batch, the batch and the blocks it was made from (:func:`~raydata_course.lab.producer.made_bytes_per_batch`)
    made_bytes_per_batch: Optional[int] = None
    #: the store's peak without the bytes freed but not yet deleted: referenced + pinned, at
    #: the classified samples (bytes)
    live_peak_bytes: Optional[int] = None
    #: the machine's CPU after the first batch (:func:`~raydata_course.lab.producer.cpu_after_first_batch`); None when not recorded
    cpu_after_first_batch: Optional[dict] = None


def measure_epoch(config: LabConfig, repeat: int, samples, probe_samples: list[dict], consumers: list[dict],
                  t_wall0: float, wall_s: float, spilled0: int, probe_cost: dict, total_wall_s: float,
                  windows: list[dict] = ()) -> RunResult:
    """One epoch's :class:`RunResult` (see the module docstring for each measure).

    Args:
        config: the variant that ran.
        repeat: the epoch's index, reported as the repeat.
        samples: the plasma sampler's samples inside the epoch (``t_s`` from the run's start).
        probe_samples: the Ray Data probe's samples inside the epoch, as dicts
            (:class:`~raydata_course.measure.raydata.RayDataSample`).
        consumers: each consumer's record of this epoch (``batch_t_s``, ``step_s``, ``wait_s``, ...,
            :func:`raydata_course.lab.workload.consume_in_driver`).
        t_wall0: ``time.time()`` when the run started (the samples' zero).
        wall_s: the epoch's wall time, seconds.
        spilled0: bytes spilled before the run started.
        probe_cost: what one sampler call costs (seconds), reported as is.
        total_wall_s: the whole run's wall time, seconds.
        windows: the push split's window samples inside the epoch (none under pull).
    """
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
    step_cpu = [s for c in consumers for s in c.get("step_cpu_s", [])]
    h2d_s = [s for c in consumers for s in c.get("h2d_s", [])]
    h2d_bytes = sum(b for c in consumers for b in c.get("h2d_bytes", []))
    waits = [w for c in consumers for w in c.get("wait_s", [])[1:]]
    first_waits = [c["wait_s"][0] for c in consumers if c.get("wait_s")]
    peak_t = next((x.t_s for x in samples if x.used_bytes == peak), 0.0)
    overall, midrun, mid_start_wall, early = _throughputs(consumers)
    midrun_steps = _midrun_steps_s(consumers)
    first_wall = last_first_batch_wall_s(consumers)
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
        "op_tasks": [p.get("op_tasks") for p in probe_samples],
        "op_rows": [p.get("op_rows") for p in probe_samples],
        "operators": probe_samples[0]["operators"] if probe_samples else [],
        "window_t_s": [round(t, 3) for t in window_t],
        "windows_rows": [w["windows_rows"] for w in windows],
        "window_held_bytes": [w["held_bytes"] for w in windows],
        # the controller's L (bytes over the budget, remembered) and the part of it charged to E
        "window_lazy_bytes": [w.get("lazy_bytes") for w in windows],
        "window_lazy_charged_bytes": [w.get("lazy_charged_bytes") for w in windows],
        # each consumer's wait for each batch, at the batch's arrival (seconds since the run started)
        "waits": [{"t_s": [round(c["t_start_wall_s"] - t_wall0 + (c["batch_t_s"][k - 1] if k else 0.0) + w, 3)
                           for k, w in enumerate(c["wait_s"][:len(c["batch_t_s"])])],
                   "wait_s": [round(w, 4) for w in c["wait_s"][:len(c["batch_t_s"])]]}
                  for c in sorted(consumers, key=lambda c: c.get("rank", 0)) if c.get("batch_t_s")],
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
        early_batches_per_s=early if early else None,
        midrun_start_store_bytes=mid_store if mid_start_wall and samples else None,
        operator_generation=_generation_per_operator(probe_samples),
        midrun_step_s_median=statistics.median(midrun_steps) if midrun_steps else None,
        loop_cpu_s=_loop_cpu_s(probe_samples),
        step_cpu_s_median=statistics.median(step_cpu) if step_cpu else None,
        probe_cost=probe_cost, timeline=timeline,
        h2d_s_median=statistics.median(h2d_s) if h2d_s else None,
        h2d_gb_per_s=h2d_bytes / sum(h2d_s) / 1e9 if h2d_s and sum(h2d_s) > 0 else None,
        stall_fraction=stall_fraction(consumers), consumption_batches_per_s=consumption_batches_per_s(consumers),
        production_batches_per_s=production_batches_per_s(probe_samples, first_wall, config.batch_rows),
        epoch_production_batches_per_s=epoch_production_batches_per_s(probe_samples, consumers, config.batch_rows),
        read_done_at_first_batch=read_done_at(probe_samples, first_wall),
        made_bytes_per_batch=made_bytes_per_batch(probe_samples, config.batch_rows),
        live_peak_bytes=max((s.referenced_bytes + (s.pinned_unreferenced_bytes or 0) for s in classified), default=None),
        cpu_after_first_batch=cpu_after_first_batch(samples, consumers, t_wall0,
                                                    decoded_batches_after(probe_samples, first_wall, config.batch_rows)),
    )


def _generation_per_operator(probe_samples: list[dict]) -> dict[str, dict]:
    """Per operator name, the seconds its tasks spent making blocks and those blocks' rows,
    summed over the executions sampled in ``probe_samples`` (each execution's last sample: the
    counters are cumulative from its start; see ``RayDataSample.op_generation_s``).

    Returns:
        ``{name: {"generation_s": seconds, "rows": rows}}``; empty when the probe recorded no
        per-operator counters.
    """
    last: dict[str, dict] = {}
    for p in probe_samples:
        if p.get("op_generation_s") and (p["executor"] not in last or p["t_wall_s"] >= last[p["executor"]]["t_wall_s"]):
            last[p["executor"]] = p
    out: dict[str, dict] = {}
    for p in last.values():
        for name, gen_s, rows in zip(p["operators"], p["op_generation_s"], p["op_rows"]):
            entry = out.setdefault(name, {"generation_s": 0.0, "rows": 0})
            entry["generation_s"] += gen_s
            entry["rows"] += rows
    return out


def _loop_cpu_s(probe_samples: list[dict]) -> Optional[float]:
    """The CPU seconds the scheduling threads of the executions sampled in ``probe_samples``
    used, summed: each execution's highest ``loop_cpu_s`` (cumulative from its thread's
    start). None when no sample recorded it (results from before it was recorded)."""
    last: dict[str, float] = {}
    for p in probe_samples:
        if p.get("loop_cpu_s"):
            last[p["executor"]] = max(last.get(p["executor"], 0.0), float(p["loop_cpu_s"]))
    return round(sum(last.values()), 3) if last else None


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


def _midrun_span(batches: int) -> tuple[int, int]:
    """The mid-run window of an epoch of ``batches`` batches: it runs from the end of step
    ``lo`` to the end of step ``hi`` (25 % and 90 % of the epoch), so steps ``lo + 1 .. hi``."""
    return int(0.25 * batches), int(0.90 * batches) - 1


def _midrun_steps_s(consumers: list[dict]) -> list[float]:
    """The training steps (seconds) inside each consumer's mid-run window (:func:`_midrun_span`)."""
    out = []
    for c in consumers:
        lo, hi = _midrun_span(len(c.get("batch_t_s", [])))
        out.extend(c.get("step_s", [])[lo + 1:hi + 1])
    return out


def _throughputs(consumers: list[dict]) -> tuple[float, float, float, float]:
    """(overall, mid-run) batches/s summed over consumers, when the mid-run window opened
    (the first consumer to reach 25 % of its epoch; wall clock, 0 for none), and the early
    batches/s summed over consumers (0 for none).

    Overall: all batches over the time from the consumers' first start to the last batch
    (wall clock, so start-up counts). Mid-run: per consumer, the batches from 25 % to 90 % of
    its epoch over the time they took, summed over consumers. Early: per consumer, the
    batches up to the window's opening (steps ``0 .. lo``, :func:`_midrun_span`) over the
    time from its start, summed over consumers.

    Examples:
        >>> c = {"t_start_wall_s": 100.0, "batch_t_s": [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]}
        >>> _throughputs([c])  # early: steps 0-2 in 4 s; mid-run: steps 3-6 in 4 s
        (0.8888888888888888, 1.0, 104.0, 0.75)
    """
    starts = [c["t_start_wall_s"] for c in consumers if c.get("batch_t_s")]
    ends = [c["t_start_wall_s"] + c["batch_t_s"][-1] for c in consumers if c.get("batch_t_s")]
    batches = sum(len(c.get("batch_t_s", [])) for c in consumers)
    overall = batches / (max(ends) - min(starts)) if starts and max(ends) > min(starts) else 0.0
    midrun, opened, early = 0.0, [], 0.0
    for c in consumers:
        t = c.get("batch_t_s", [])
        lo, hi = _midrun_span(len(t))
        if hi > lo and t[hi] > t[lo]:
            midrun += (hi - lo) / (t[hi] - t[lo])
            opened.append(c["t_start_wall_s"] + t[lo])
            if t[lo] > 0:
                early += (lo + 1) / t[lo]
    return overall, midrun, min(opened, default=0.0), early
