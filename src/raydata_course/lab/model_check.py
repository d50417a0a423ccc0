"""The playground's simulator checked against the lab: predicted peak and throughput per variant.

:func:`ingest_config` turns one measured lab run (its :class:`~raydata_course.lab.workload.LabConfig`,
as saved in ``results.json``) and the lab's measured task durations (``meta["task_s"]``, from
:meth:`~raydata_course.lab.session.LabSession.time_tasks`) into an
:class:`~raydata_course.sim.config.IngestConfig`; :func:`compare` simulates every variant of a
``results.json`` and sets the predictions beside the medians the lab measured.

What goes in, and where each number comes from (nothing is fitted to the result it predicts):

==========================  ==========================================================
simulator input             lab source
==========================  ==========================================================
block bytes, batches         ``config.batch_bytes``, ``batches_per_consumer``, ``consumers``
budget                       the run's ``budget_bytes`` (Ray Data's own limit, as probed)
``prefetch_batches``, split  ``config``
read / decode task seconds   ``meta["task_s"]``: one block's tasks timed alone on the lab's cluster;
                             and the run's own seconds per block (``operator_generation``)
step seconds, delay          the run's median train step (its CPU part, the whole epoch);
                             ``config.step_delay_s`` plus ``config.gpu_step_s``
task slots, cores            ``num_cpus`` less the Train workers' CPUs; ``meta["cpus"]``
lazy-free period             1 s (Ray's default), or 0 where the run set it off
format cap                   ``meta["pipeline"]["format_cap"]``
other CPU per batch          the machine's busy CPU after the first batch less the steps', the reads'
                             and the decodes' CPU (:func:`overhead_cpu_s`), run on the shared cores
push: delivery seconds       ``meta["task_s"]["push_send_s"]``: one block's delivery, an actor call
                             timed on the lab's cluster (``LabSession.time_push_send``)
push: steer on store         ``config.push_steer_on_store``
push: the control rule       not an input: the simulator runs the push split's own window
                             controller, share and backpressure guard (:mod:`raydata_course.sim.push`)
==========================  ==========================================================

Throughput is compared as the consumers' rate after their first batch (per consumer, its
batches after the first over the time from that batch to its last step, summed: the lab's
``consumption_batches_per_s``), which leaves out the start-up the model does not simulate
(worker processes, Ray Train's set-up). Beside the two targets the table sets Ray Data's
believed peak, the hidden bytes, the median wait per batch and the stall fraction D, measured
and predicted.

The producer runs at its tasks' CPU time (one block's read and decode, timed alone on the lab's
cluster), on the machine's cores, which it shares with the consumers' steps (their CPU seconds)
and with everything else the machine did per batch, as the run measured it (Ray's own
processes, the split's coordinator, the lab's sampling and any outside load:
:func:`overhead_cpu_s`). Every CPU second is counted once: the run's own seconds per block
(``operator_generation``, :func:`in_run_task_s`) already hold the sharing, so they are reported
beside the prediction, not fed to it. One input is not known, so the model predicts a range:
**the raylet's free timer** runs from the raylet's start, so an epoch meets it at an unknown
phase; the model runs at ``FREE_PHASES`` evenly spaced phases of the period (lazy free off has
no timer, and one prediction).

A measurement inside the predicted range has error 0; outside, the error is the nearest end's,
signed (predicted / measured - 1), and the targets apply to that.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from raydata_course.sim import IngestConfig, Operator, simulate
from raydata_course.tables import markdown_table
from raydata_course.units import MiB

__all__ = ["DEFAULT_FREE_PERIOD_S", "FREE_PHASES", "PEAK_TOLERANCE", "THROUGHPUT_TOLERANCE", "ingest_config",
           "in_run_task_s", "overhead_cpu_s", "compare",
           "format_comparison"]

#: Ray's default ``free_objects_period_milliseconds`` (1000), in seconds.
DEFAULT_FREE_PERIOD_S = 1.0
#: the issue's targets: predicted peak within 15 %, throughput within 20 % of the measured medians.
PEAK_TOLERANCE = 0.15
THROUGHPUT_TOLERANCE = 0.20
#: phases of the raylet's free timer the model runs at (evenly spaced over one period).
FREE_PHASES = 4
#: the tasks' CPU times in ``meta["task_s"]`` (runs from before the lab recorded them lack these).
_CPU_KEYS = frozenset({"read_block_cpu_s", "decode_block_cpu_s"})


def ingest_config(config: dict[str, Any], task_s: dict[str, float], *, step_s: float, budget_bytes: int,
                  cores: float | None, free_period_s: float = DEFAULT_FREE_PERIOD_S, format_cap: int = 4,
                  cpu_time: bool = False, step_cpu_s: float | None = None,
                  overhead_cpu_s: float = 0.0) -> IngestConfig:
    """The simulator's input for one lab variant.

    Args:
        config: a run's ``config`` from ``results.json`` (:meth:`LabConfig.as_dict`).
        task_s: ``{"read_block_s", "decode_block_s", "read_block_bytes"}``, seconds and bytes
            per block (``meta["task_s"]`` of ``results.json``).
        step_s: the train step's own seconds (the run's median, wall time).
        step_cpu_s: the train step's CPU seconds (the run's median), where the run recorded
            them: the step then runs on the shared ``cores`` beside Ray Data's tasks, as
            ``step_cpu_s`` of work on ``max(1, step_cpu_s / step_s)`` cores (PyTorch's threads
            can use more than one); without them, or without ``cores``, the step takes no core.
        overhead_cpu_s: the machine's other CPU seconds per batch (:func:`overhead_cpu_s`),
            run on the shared ``cores`` (none without them).
        budget_bytes: Ray Data's budget as the run probed it.
        cores: physical cores of the machine that ran the lab, which the tasks, the steps and
            the other work share; ``None``: nothing shares a core (every job at full speed).
        free_period_s: the raylet's lazy-free period in seconds (0: off).
        format_cap: the installed Ray's cap on format workers.
        cpu_time: run the tasks at their CPU time (``read_block_cpu_s``, ``decode_block_cpu_s``)
            instead of their wall time.

    The push split's delivery time is ``task_s["push_send_s"]`` where the run measured it
    (:meth:`~raydata_course.lab.session.LabSession.time_push_send`; 0 for runs before it), and
    its ``steer_on_store`` is the run's ``push_steer_on_store``.

    Raises:
        KeyError: ``task_s`` lacks a duration (a ``results.json`` from before the lab timed its
            tasks: run ``make lab`` again).
    """
    missing = {"read_block_s", "decode_block_s", "read_block_bytes"} - set(task_s)
    if missing:
        raise KeyError(f"task_s lacks {sorted(missing)}; this results.json predates the lab's task timing: "
                       "run `make lab` again.")
    if cpu_time and not _CPU_KEYS <= set(task_s):
        raise KeyError("task_s lacks the tasks' CPU times (read_block_cpu_s, decode_block_cpu_s); this "
                       "results.json predates them: run `make lab` again, or compare at wall time.")
    kind = "_cpu_s" if cpu_time else "_s"
    train = config["mode"] == "train"
    slots = int(config["num_cpus"] - (config["consumers"] * config["cpus_per_worker"] if train else 0))
    return IngestConfig(
        operators=[Operator("read", task_s[f"read_block{kind}"], int(task_s["read_block_bytes"])),
                   Operator("decode", task_s[f"decode_block{kind}"], int(config["batch_bytes"]))],
        budget_bytes=int(budget_bytes), split=config.get("split", "pull"), consumers=config["consumers"],
        batches_per_consumer=config["batches_per_consumer"], prefetch_batches=config["prefetch_batches"],
        format_cap=format_cap, delay_s=config["step_delay_s"] + config.get("gpu_step_s", 0.0),
        **_step_inputs(step_s, step_cpu_s if cores is not None else None),
        overhead_cpu_s=overhead_cpu_s if cores is not None else 0.0,
        task_slots=max(1, slots),
        cores=cores, free_period_s=free_period_s, send_s=float(task_s.get("push_send_s", 0.0)),
        steer_on_store=bool(config.get("push_steer_on_store", False)))


def overhead_cpu_s(runs: list[dict], task_s: dict[str, float]) -> float:
    """The CPU seconds per batch the machine spent beside the read, the decode and the steps,
    after the first batch: the machine's busy CPU less the consumers' step CPU less one read
    and one decode per block decoded in that time (their CPU seconds timed alone, ``task_s``;
    every batch taken where the run did not count the decoded ones), over the batches taken;
    the median over ``runs``, at least 0. Ray's own processes, the split's coordinator and
    the lab's sampling are in it, and any other load on the machine.

    Returns:
        Seconds per batch; 0 where no run recorded ``cpu_after_first_batch``.

    Examples:
        >>> run = {"cpu_after_first_batch": {"machine_cpu_s": 20.0, "steps_cpu_s": 6.0, "batches": 40}}
        >>> overhead_cpu_s([run], {"read_block_cpu_s": 0.05, "decode_block_cpu_s": 0.2})
        0.1
    """
    per_block = task_s.get("read_block_cpu_s", task_s.get("read_block_s", 0.0)) + \
        task_s.get("decode_block_cpu_s", task_s.get("decode_block_s", 0.0))
    values = []
    for r in runs:
        cpu = r.get("cpu_after_first_batch")
        if cpu and cpu.get("batches"):
            decoded = cpu.get("decoded_batches")
            decoded = cpu["batches"] if decoded is None else decoded
            values.append(max(0.0, cpu["machine_cpu_s"] - cpu["steps_cpu_s"] - decoded * per_block) / cpu["batches"])
    return round(statistics.median(values), 4) if values else 0.0


def _step_inputs(step_s: float, step_cpu_s: float | None) -> dict[str, Any]:
    """The simulator's step fields: a wait of ``step_s`` seconds, or ``step_cpu_s`` of CPU
    work on the shared cores, on as many cores as the run's step used (at least one)."""
    if not step_cpu_s:
        return {"step_s": step_s}
    width = max(1.0, step_cpu_s / step_s) if step_s > 0 else 1.0
    return {"step_s": step_cpu_s / width, "step_on_cores": True, "step_width": width}


def in_run_task_s(runs: list[dict], batch_rows: int) -> dict[str, float] | None:
    """The read's and the decode's seconds per block of ``batch_rows`` rows during the runs
    themselves: per run, an operator's ``generation_s / rows`` (``RunResult.operator_generation``)
    times ``batch_rows``; the median over ``runs``.

    The read is the operator whose name starts with ``Read``, the decode the one that runs
    :func:`~raydata_course.lab.workload.decode_and_augment`.

    Returns:
        ``{"read_block_s", "decode_block_s"}`` in seconds, or ``None`` where a run lacks either
        operator's figures (a run from before the lab recorded them, or a plan that fused the
        read with the decode, so their times can't be told apart).
    """
    from raydata_course.lab.workload import decode_and_augment

    def per_block(generation: dict, match) -> float | None:
        ops = [v for name, v in generation.items() if match(name)]
        if len(ops) != 1 or ops[0]["rows"] <= 0 or ops[0]["generation_s"] <= 0:
            return None
        return ops[0]["generation_s"] / ops[0]["rows"] * batch_rows

    decode_name = decode_and_augment.__name__
    reads, decodes = [], []
    for run in runs:
        generation = run.get("operator_generation") or {}
        read = per_block(generation, lambda n: n.startswith("Read") and decode_name not in n)
        decode = per_block(generation, lambda n: decode_name in n and "Read" not in n)
        if read is None or decode is None:
            return None
        reads.append(read)
        decodes.append(decode)
    if not runs:
        return None
    return {"read_block_s": statistics.median(reads), "decode_block_s": statistics.median(decodes)}


def _variant_runs(data: dict) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in data["runs"]:
        free_ms = run.get("free_objects_period_ms")
        setting = "lazy free" if free_ms is None else f"free {free_ms} ms"
        groups.setdefault((run["variant"], setting), []).append(run)
    return groups


def _step_s(runs: list[dict]) -> float:
    """The consumers' training step for the model, seconds: the runs' median over the epoch."""
    return statistics.median(r["step_s_median"] for r in runs)


def _range_error(low: float, high: float, measured: float) -> float:
    """Signed error of the range ``[low, high]`` against ``measured``: 0 inside, else the nearest
    end's ``end / measured - 1``."""
    if not measured:
        return float("nan")
    if low <= measured <= high:
        return 0.0
    return (low if measured < low else high) / measured - 1


def _store_peak_bytes(timeline) -> int:
    """The timeline's peak of counted + hidden + freed-not-deleted bytes, sampled at 10 Hz as the lab samples."""
    sampled = timeline.sampled(0.1)
    return max(c + h + f for c, h, f in zip(sampled["counted_bytes"], sampled["hidden_bytes"], sampled["freed_bytes"]))


def _predict(cfg: IngestConfig) -> list[tuple[int, float, Any]]:
    """``(peak_bytes, batches_per_s, timeline)`` at every phase of the raylet's free timer
    (phase 0 first); the rate is the consumers' after their first batch
    (:attr:`Timeline.consumption_batches_per_s`)."""
    phases = [k * cfg.free_period_s / FREE_PHASES for k in range(FREE_PHASES)] if cfg.free_period_s else [0.0]
    out = []
    for phase in phases:
        timeline = simulate(cfg.with_(free_phase_s=phase))
        out.append((_store_peak_bytes(timeline), timeline.consumption_batches_per_s or 0.0, timeline))
    return out


def _median(runs: list[dict], key: str) -> float | None:
    """The runs' median of ``key``, or None where a run lacks it."""
    values = [r.get(key) for r in runs]
    return None if any(v is None for v in values) or not values else statistics.median(values)


#: the parts of the store at the peak, lab name → model name (the lab's classified sample)
_PARTS = {"referenced_bytes": ("counted_bytes", "referenced by a ref (Ray Data's operators and the windows)"),
          "pinned_unreferenced_bytes": ("hidden_bytes", "pinned without a ref (batches the pull consumer holds)"),
          "freed_not_deleted_bytes": ("freed_bytes", "freed but not yet deleted (the raylet's lazy free)")}


def _peak_miss(runs: list[dict], timeline) -> str:
    """For a peak the model misses: the part of the store at the peak the model is furthest
    from, with the lab's and the model's bytes (MiB)."""
    lab = {k: statistics.median(r["peak_breakdown"].get(k) or 0 for r in runs) for k in _PARTS
           if all(r.get("peak_breakdown") for r in runs)}
    if not lab:
        return "the run recorded no breakdown at its peak"
    model = timeline.peak_breakdown()
    part = max(lab, key=lambda k: abs(lab[k] - model[_PARTS[k][0]]))
    return (f"{_PARTS[part][1]}: lab {lab[part] / MiB:,.0f} MiB, model {model[_PARTS[part][0]] / MiB:,.0f} MiB "
            "at the peak")


def _rate_miss(runs: list[dict], rates: list[float]) -> str:
    """For a rate the model misses: the producer's measured rate after the first batch against
    the consumers' (batches/s), which says which side the model got wrong."""
    produced = _median(runs, "production_batches_per_s")
    step = _median(runs, "step_s_median")
    said = f"the producer made {produced:.2f} batches/s after the first batch" if produced else \
        "the run recorded no producer rate"
    return f"{said}; the train step's median {step:.3f} s; the model's rate {min(rates):.2f}-{max(rates):.2f} b/s"


def compare(*result_files: str | Path) -> list[dict[str, Any]]:
    """Simulate every variant of each ``results.json`` and compare with the lab's medians.

    Every variant is simulated at ``FREE_PHASES`` phases of the raylet's free timer, its
    producer at its tasks' CPU time on cores shared with the steps and the machine's other
    work (see the module docstring).

    Args:
        result_files: ``results.json`` files of ``python -m raydata_course.lab``; a run
            folder's ``free0/results.json`` (lazy free off) is read as well when present.

    Returns:
        One dict per variant and setting: ``variant``, ``setting``, ``split``, ``repeats``,
        ``run_id`` (the lab run's), ``measured_peak_bytes``, ``predicted_peak_bytes`` (free
        timer at phase 0), ``predicted_peak_low_bytes`` /
        ``predicted_peak_high_bytes`` (the range), ``peak_error`` (signed fraction against the
        range: 0 inside it), ``measured_batches_per_s`` (the consumers' rate after their first
        batch), ``predicted_batches_per_s``, ``predicted_batches_per_s_low`` / ``_high``,
        ``throughput_error``, ``peak_met`` and ``throughput_met`` (within the tolerances),
        ``measured_`` / ``predicted_`` ``believed_bytes``, ``hidden_bytes``, ``wait_s`` (median
        wait per batch after the first) and ``stall_fraction``, ``peak_miss`` /
        ``throughput_miss`` (where a target is missed: which bytes, or which rate, and its
        measured size; else ``""``), ``producer_speed`` (``"cpu"``, or ``"wall"`` for a run
        that lacks the tasks' CPU times), ``in_run_task_s`` (the run's own seconds per block,
        for reference) and ``inputs`` (the phase-0 configuration).

    Raises:
        KeyError: a run lacks the consumers' rate after the first batch (a ``results.json``
            from before the lab recorded it: run ``make lab`` again).
    """
    rows = []
    for path in result_files:
        path = Path(path)
        paths = [path] + ([path.parent / "free0" / "results.json"]
                          if (path.parent / "free0" / "results.json").is_file() else [])
        for one in paths:
            data = json.loads(one.read_text())
            meta = data["meta"]
            task_s = meta.get("task_s") or {}
            cap = int(meta.get("pipeline", {}).get("format_cap", 4))
            has_cpu = _CPU_KEYS <= set(task_s)
            for (variant, setting), runs in _variant_runs(data).items():
                rate = _median(runs, "consumption_batches_per_s")
                if rate is None:
                    raise KeyError(f"{one}: {variant} lacks consumption_batches_per_s (the rate after the first "
                                   "batch); this results.json predates it: run `make lab` again.")
                free_ms = runs[0].get("free_objects_period_ms")
                kwargs = dict(step_s=_step_s(runs), step_cpu_s=_median(runs, "step_cpu_s_median"),
                              overhead_cpu_s=overhead_cpu_s(runs, task_s),
                              budget_bytes=statistics.median(r["budget_bytes"] for r in runs),
                              cores=float(meta["cpus"]), format_cap=cap,
                              free_period_s=DEFAULT_FREE_PERIOD_S if free_ms is None else free_ms / 1000)
                cfg = ingest_config(runs[0]["config"], task_s, cpu_time=has_cpu, **kwargs)
                in_run = in_run_task_s(runs, int(runs[0]["config"]["batch_rows"]))
                predictions = _predict(cfg)
                nominal_peak, nominal_rate, timeline = predictions[0]
                peaks = [p for p, _, _ in predictions]
                rates = [r for _, r, _ in predictions]
                peak = statistics.median(r["peak_bytes"] for r in runs)
                peak_error = _range_error(min(peaks), max(peaks), peak)
                rate_error = _range_error(min(rates), max(rates), rate)
                peak_met, rate_met = abs(peak_error) <= PEAK_TOLERANCE, abs(rate_error) <= THROUGHPUT_TOLERANCE
                nearest = min(predictions, key=lambda x: abs(x[0] - peak))[2]
                rows.append({
                    "variant": variant, "setting": setting, "split": cfg.split, "repeats": len(runs),
                    "quick": bool(meta.get("quick")), "run_id": meta.get("run_id"),
                    "measured_peak_bytes": peak, "predicted_peak_bytes": nominal_peak,
                    "predicted_peak_low_bytes": min(peaks), "predicted_peak_high_bytes": max(peaks),
                    "peak_error": peak_error, "measured_batches_per_s": rate,
                    "predicted_batches_per_s": nominal_rate, "predicted_batches_per_s_low": min(rates),
                    "predicted_batches_per_s_high": max(rates), "throughput_error": rate_error,
                    "peak_met": peak_met, "throughput_met": rate_met,
                    "peak_miss": "" if peak_met else _peak_miss(runs, nearest),
                    "throughput_miss": "" if rate_met else _rate_miss(runs, rates),
                    "measured_believed_bytes": _median(runs, "believed_peak_bytes"),
                    "predicted_believed_bytes": timeline.believed_peak_bytes,
                    "measured_hidden_bytes": statistics.median(r["hidden_peak_bytes"] for r in runs),
                    "predicted_hidden_bytes": timeline.hidden_peak_bytes,
                    "measured_wait_s": _median(runs, "wait_s_median"), "predicted_wait_s": timeline.wait_s_median,
                    "measured_stall_fraction": _median(runs, "stall_fraction"),
                    "predicted_stall_fraction": timeline.stall_fraction,
                    "producer_speed": "cpu" if has_cpu else "wall",
                    "in_run_task_s": in_run,
                    "inputs": {k: v for k, v in asdict(cfg).items() if k != "notes"},
                })
    return rows


def _span(low: float, high: float, fmt: str) -> str:
    return format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{format(low, fmt)}–{format(high, fmt)}"


def _fmt(value: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value / scale, fmt)


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`compare` as a Markdown table (MiB, batches/s, seconds, signed errors
    in %); the model's columns show its range (low–high) where it has one, and a missed
    target says where the model and the lab part."""
    headers = ["variant", "setting", "peak MiB: lab", "model", "error", "b/s after 1st batch: lab", "model", "error",
               "believed MiB: lab", "model", "hidden MiB: lab", "model", "wait s: lab", "model", "stall D: lab",
               "model", "within 15 % / 20 %"]
    body = []
    for r in rows:
        verdict = f"{'yes' if r['peak_met'] else 'NO'} / {'yes' if r['throughput_met'] else 'NO'}"
        misses = "; ".join(m for m in (r.get("peak_miss"), r.get("throughput_miss")) if m)
        body.append([
            r["variant"], r["setting"], f"{r['measured_peak_bytes'] / MiB:,.0f}",
            _span(r["predicted_peak_low_bytes"] / MiB, r["predicted_peak_high_bytes"] / MiB, ",.0f"),
            f"{r['peak_error']:+.0%}", f"{r['measured_batches_per_s']:.2f}",
            _span(r["predicted_batches_per_s_low"], r["predicted_batches_per_s_high"], ".2f"),
            f"{r['throughput_error']:+.0%}", _fmt(r.get("measured_believed_bytes"), ",.0f", MiB),
            _fmt(r.get("predicted_believed_bytes"), ",.0f", MiB), f"{r['measured_hidden_bytes'] / MiB:,.0f}",
            f"{r['predicted_hidden_bytes'] / MiB:,.0f}", _fmt(r.get("measured_wait_s"), ".3f"),
            _fmt(r.get("predicted_wait_s"), ".3f"), _fmt(r.get("measured_stall_fraction"), ".3f"),
            _fmt(r.get("predicted_stall_fraction"), ".3f"), verdict + (f": {misses}" if misses else "")])
    return markdown_table(headers, body, align="llrrrrrrrrrrrrrrl")
