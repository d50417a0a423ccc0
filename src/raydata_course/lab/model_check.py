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
step seconds, delay          the run's median train step inside the mid-run window (the stretch
                             the throughput is compared on; the whole epoch's median for runs that
                             lack it); ``config.step_delay_s`` plus ``config.gpu_step_s``
task slots, cores            ``num_cpus`` less the Train workers' CPUs; ``meta["cpus"]``
lazy-free period             1 s (Ray's default), or 0 where the run set it off
format cap                   ``meta["pipeline"]["format_cap"]``
==========================  ==========================================================

Throughput is compared as the lab reports it in its tables: mid-run batches per second
(batches 25-90 % of each consumer's epoch, summed over consumers), which leaves out the
start-up the model does not simulate (worker processes, Ray Train's set-up).

Two inputs are not known exactly, so the model predicts a range rather than one figure:

- **the raylet's free timer.** It runs from the raylet's start, so an epoch meets it at an
  unknown phase; the model runs at ``FREE_PHASES`` evenly spaced phases of the period.
- **the producer's speed.** One block's tasks are timed once, before the variant runs; a
  machine whose load changes (another job starts, a test runner's second worker) runs the
  producer anywhere between its CPU time (the work alone) and slower than the wall time timed
  then. The model runs at both, where the run recorded both, and at a third speed where the
  run recorded it: the read's and the decode's seconds per block *during the run itself*, from
  the workers' own timing of each block (Ray Data's ``block_generation_time`` and
  ``rows_task_outputs_generated`` per operator, read by the lab's probe, medians over the
  repeats). Those times already hold whatever shared the cores with the tasks, the pipeline's
  other tasks and any outside load alike, so at that speed the model shares no cores
  (``cores=None``) rather than count the sharing twice.

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
           "in_run_task_s", "compare",
           "format_comparison", "validation_for_site", "trim_results"]

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
                  cpu_time: bool = False) -> IngestConfig:
    """The simulator's input for one lab variant.

    Args:
        config: a run's ``config`` from ``results.json`` (:meth:`LabConfig.as_dict`).
        task_s: ``{"read_block_s", "decode_block_s", "read_block_bytes"}``, seconds and bytes
            per block (``meta["task_s"]`` of ``results.json``).
        step_s: the train step's own seconds (the run's median).
        budget_bytes: Ray Data's budget as the run probed it.
        cores: physical cores of the machine that ran the lab; ``None``: the tasks share none
            (their durations already hold the sharing).
        free_period_s: the raylet's lazy-free period in seconds (0: off).
        format_cap: the installed Ray's cap on format workers.
        cpu_time: run the tasks at their CPU time (``read_block_cpu_s``, ``decode_block_cpu_s``)
            instead of their wall time.

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
        format_cap=format_cap, step_s=step_s, delay_s=config["step_delay_s"] + config.get("gpu_step_s", 0.0),
        task_slots=max(1, slots),
        cores=cores, free_period_s=free_period_s)


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
    """The consumers' training step for the model, seconds: the runs' median step inside the
    mid-run window, or over the whole epoch where a run lacks the former."""
    if all(r.get("midrun_step_s_median") for r in runs):
        return statistics.median(r["midrun_step_s_median"] for r in runs)
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


def _predict(cfg: IngestConfig, *others: IngestConfig | None) -> list[tuple[int, float, Any]]:
    """``(peak_bytes, midrun_batches_per_s, timeline)`` for every free-timer phase and producer
    speed (``cfg`` first, then each of ``others`` that is not ``None``)."""
    phases = [k * cfg.free_period_s / FREE_PHASES for k in range(FREE_PHASES)] if cfg.free_period_s else [0.0]
    out = []
    for base in [cfg] + [o for o in others if o is not None]:
        for phase in phases:
            timeline = simulate(base.with_(free_phase_s=phase))
            out.append((_store_peak_bytes(timeline), timeline.midrun_batches_per_s, timeline))
    return out


def compare(*result_files: str | Path) -> list[dict[str, Any]]:
    """Simulate every variant of each ``results.json`` and compare with the lab's medians.

    Every variant is simulated at ``FREE_PHASES`` phases of the raylet's free timer and at
    each producer speed the run recorded: the tasks' wall time timed before it, their CPU
    time, and their seconds per block during the run (see the module docstring).

    Args:
        result_files: ``results.json`` files of ``python -m raydata_course.lab``; a run
            folder's ``free0/results.json`` (lazy free off) is read as well when present.

    Returns:
        One dict per variant and setting: ``variant``, ``setting``, ``split``, ``repeats``,
        ``measured_peak_bytes``, ``predicted_peak_bytes`` (free timer at phase 0, tasks at
        their wall time), ``predicted_peak_low_bytes`` / ``predicted_peak_high_bytes`` (the
        range), ``peak_error`` (signed fraction against the range: 0 inside it),
        ``measured_batches_per_s``, ``predicted_batches_per_s``,
        ``predicted_batches_per_s_low`` / ``_high``, ``throughput_error``, ``peak_met`` and
        ``throughput_met`` (within the tolerances), the hidden bytes, and ``inputs`` (the
        phase-0, wall-time configuration).
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
                free_ms = runs[0].get("free_objects_period_ms")
                kwargs = dict(step_s=_step_s(runs),
                              budget_bytes=statistics.median(r["budget_bytes"] for r in runs),
                              cores=float(meta["cpus"]), format_cap=cap,
                              free_period_s=DEFAULT_FREE_PERIOD_S if free_ms is None else free_ms / 1000)
                cfg = ingest_config(runs[0]["config"], task_s, **kwargs)
                cpu_cfg = ingest_config(runs[0]["config"], task_s, cpu_time=True, **kwargs) if has_cpu else None
                in_run = in_run_task_s(runs, int(runs[0]["config"]["batch_rows"]))
                run_cfg = ingest_config(runs[0]["config"], {**task_s, **in_run}, **{**kwargs, "cores": None}) \
                    if in_run else None
                predictions = _predict(cfg, cpu_cfg, run_cfg)
                nominal_peak, nominal_rate, timeline = predictions[0]
                peaks = [p for p, _, _ in predictions]
                rates = [r for _, r, _ in predictions]
                peak = statistics.median(r["peak_bytes"] for r in runs)
                rate = statistics.median(r["midrun_batches_per_s"] for r in runs)
                peak_error = _range_error(min(peaks), max(peaks), peak)
                rate_error = _range_error(min(rates), max(rates), rate)
                rows.append({
                    "variant": variant, "setting": setting, "split": cfg.split, "repeats": len(runs),
                    "quick": bool(meta.get("quick")),
                    "measured_peak_bytes": peak, "predicted_peak_bytes": nominal_peak,
                    "predicted_peak_low_bytes": min(peaks), "predicted_peak_high_bytes": max(peaks),
                    "peak_error": peak_error, "measured_batches_per_s": rate,
                    "predicted_batches_per_s": nominal_rate, "predicted_batches_per_s_low": min(rates),
                    "predicted_batches_per_s_high": max(rates), "throughput_error": rate_error,
                    "peak_met": abs(peak_error) <= PEAK_TOLERANCE,
                    "throughput_met": abs(rate_error) <= THROUGHPUT_TOLERANCE,
                    "measured_hidden_bytes": statistics.median(r["hidden_peak_bytes"] for r in runs),
                    "predicted_hidden_bytes": timeline.hidden_peak_bytes,
                    "producer_speeds": ["wall"] + (["cpu"] if has_cpu else []) + (["in-run"] if in_run else []),
                    "in_run_task_s": in_run,
                    "inputs": {k: v for k, v in asdict(cfg).items() if k != "notes"},
                })
    return rows


def _span(low: float, high: float, fmt: str) -> str:
    return format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{format(low, fmt)}–{format(high, fmt)}"


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`compare` as a Markdown table (MiB, batches/s, signed errors in %);
    the model's columns show its range (low–high) where it has one."""
    headers = ["variant", "setting", "repeats", "peak MiB: lab", "model", "error", "batches/s: lab", "model", "error",
               "hidden MiB: lab", "model", "within 15 % / 20 %"]
    body = [[r["variant"], r["setting"], r["repeats"], f"{r['measured_peak_bytes'] / MiB:,.0f}",
             _span(r["predicted_peak_low_bytes"] / MiB, r["predicted_peak_high_bytes"] / MiB, ",.0f"),
             f"{r['peak_error']:+.0%}", f"{r['measured_batches_per_s']:.2f}",
             _span(r["predicted_batches_per_s_low"], r["predicted_batches_per_s_high"], ".2f"),
             f"{r['throughput_error']:+.0%}", f"{r['measured_hidden_bytes'] / MiB:,.0f}",
             f"{r['predicted_hidden_bytes'] / MiB:,.0f}",
             f"{'yes' if r['peak_met'] else 'NO'} / {'yes' if r['throughput_met'] else 'NO'}"] for r in rows]
    return markdown_table(headers, body, align="llrrrrrrrrrl")


def validation_for_site(rows: list[dict[str, Any]], results_file: str | Path) -> dict[str, Any]:
    """What the playground notebooks read (``validation.json``): the rows of :func:`compare`,
    the table as Markdown, and where the lab ran (from ``results_file``'s ``meta``)."""
    meta = json.loads(Path(results_file).read_text())["meta"]
    lab = {k: meta.get(k) for k in ("ray_version", "device", "cpus", "machine", "quick", "task_s")}
    return {"lab": lab, "table": format_comparison(rows), "rows": rows,
            "targets": {"peak": PEAK_TOLERANCE, "throughput": THROUGHPUT_TOLERANCE}}


#: what :func:`compare` reads from a run; :func:`trim_results` keeps only these.
_RUN_FIELDS = ("variant", "repeat", "config", "peak_bytes", "budget_bytes", "believed_peak_bytes", "hidden_peak_bytes",
               "step_s_median", "batches_per_s", "midrun_batches_per_s", "overall_batches_per_s", "split",
               "free_objects_period_ms", "peak_breakdown", "first_batch_s", "wait_s_median", "operator_generation",
               "midrun_step_s_median")


def trim_results(run_dir: str | Path, out_dir: str | Path) -> list[Path]:
    """Copy a lab run's ``results.json`` (and ``free0/results.json``) without the timelines,
    keeping what :func:`compare` needs: the playground's committed copy of a lab run.

    Returns:
        The files written.
    """
    written = []
    for rel in ("results.json", "free0/results.json"):
        src = Path(run_dir) / rel
        if not src.is_file():
            continue
        data = json.loads(src.read_text())
        meta = {k: v for k, v in data["meta"].items() if k != "probe_cost"}
        runs = [{k: r[k] for k in _RUN_FIELDS if k in r} for r in data["runs"]]
        dst = Path(out_dir) / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
        written.append(dst)
    return written
