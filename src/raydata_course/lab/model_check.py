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
read / decode task seconds   ``meta["task_s"]``: one block's tasks timed alone on the lab's cluster
step seconds, delay          the run's median train-step time; ``config.step_delay_s``
task slots, cores            ``num_cpus`` less the Train workers' CPUs; ``meta["cpus"]``
lazy-free period             1 s (Ray's default), or 0 where the run set it off
format cap                   ``meta["pipeline"]["format_cap"]``
==========================  ==========================================================

Throughput is compared as the lab reports it in its tables: mid-run batches per second
(batches 25-90 % of each consumer's epoch, summed over consumers), which leaves out the
start-up the model does not simulate (worker processes, Ray Train's set-up).
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

__all__ = ["DEFAULT_FREE_PERIOD_S", "PEAK_TOLERANCE", "THROUGHPUT_TOLERANCE", "ingest_config", "compare",
           "format_comparison", "validation_for_site", "trim_results"]

#: Ray's default ``free_objects_period_milliseconds`` (1000), in seconds.
DEFAULT_FREE_PERIOD_S = 1.0
#: the issue's targets: predicted peak within 15 %, throughput within 20 % of the measured medians.
PEAK_TOLERANCE = 0.15
THROUGHPUT_TOLERANCE = 0.20


def ingest_config(config: dict[str, Any], task_s: dict[str, float], *, step_s: float, budget_bytes: int,
                  cores: float, free_period_s: float = DEFAULT_FREE_PERIOD_S, format_cap: int = 4) -> IngestConfig:
    """The simulator's input for one lab variant.

    Args:
        config: a run's ``config`` from ``results.json`` (:meth:`LabConfig.as_dict`).
        task_s: ``{"read_block_s", "decode_block_s", "read_block_bytes"}``, seconds and bytes
            per block (``meta["task_s"]`` of ``results.json``).
        step_s: the train step's own seconds (the run's median).
        budget_bytes: Ray Data's budget as the run probed it.
        cores: physical cores of the machine that ran the lab.
        free_period_s: the raylet's lazy-free period in seconds (0: off).
        format_cap: the installed Ray's cap on format workers.

    Raises:
        KeyError: ``task_s`` lacks a duration (a ``results.json`` from before the lab timed its
            tasks: run ``make lab`` again).
    """
    missing = {"read_block_s", "decode_block_s", "read_block_bytes"} - set(task_s)
    if missing:
        raise KeyError(f"task_s lacks {sorted(missing)}; this results.json predates the lab's task timing: "
                       "run `make lab` again.")
    train = config["mode"] == "train"
    slots = int(config["num_cpus"] - (config["consumers"] * config["cpus_per_worker"] if train else 0))
    return IngestConfig(
        operators=[Operator("read", task_s["read_block_s"], int(task_s["read_block_bytes"])),
                   Operator("decode", task_s["decode_block_s"], int(config["batch_bytes"]))],
        budget_bytes=int(budget_bytes), split=config.get("split", "pull"), consumers=config["consumers"],
        batches_per_consumer=config["batches_per_consumer"], prefetch_batches=config["prefetch_batches"],
        format_cap=format_cap, step_s=step_s, delay_s=config["step_delay_s"], task_slots=max(1, slots),
        cores=cores, free_period_s=free_period_s)


def _variant_runs(data: dict) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in data["runs"]:
        free_ms = run.get("free_objects_period_ms")
        setting = "lazy free" if free_ms is None else f"free {free_ms} ms"
        groups.setdefault((run["variant"], setting), []).append(run)
    return groups


def compare(*result_files: str | Path) -> list[dict[str, Any]]:
    """Simulate every variant of each ``results.json`` and compare with the lab's medians.

    Args:
        result_files: ``results.json`` files of ``python -m raydata_course.lab``; a run
            folder's ``free0/results.json`` (lazy free off) is read as well when present.

    Returns:
        One dict per variant and setting: ``variant``, ``setting``, ``split``, ``repeats``,
        ``measured_peak_bytes``, ``predicted_peak_bytes``, ``peak_error`` (signed fraction:
        predicted / measured - 1), ``measured_batches_per_s``, ``predicted_batches_per_s``,
        ``throughput_error``, ``peak_met`` and ``throughput_met`` (within the tolerances).
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
            for (variant, setting), runs in _variant_runs(data).items():
                free_ms = runs[0].get("free_objects_period_ms")
                cfg = ingest_config(runs[0]["config"], task_s,
                                    step_s=statistics.median(r["step_s_median"] for r in runs),
                                    budget_bytes=statistics.median(r["budget_bytes"] for r in runs),
                                    cores=float(meta["cpus"]), format_cap=cap,
                                    free_period_s=DEFAULT_FREE_PERIOD_S if free_ms is None else free_ms / 1000)
                timeline = simulate(cfg)
                peak = statistics.median(r["peak_bytes"] for r in runs)
                rate = statistics.median(r["midrun_batches_per_s"] for r in runs)
                predicted_peak = timeline.sampled(0.1)  # the lab samples at 10 Hz
                predicted_peak_bytes = max(c + h + f for c, h, f in zip(
                    predicted_peak["counted_bytes"], predicted_peak["hidden_bytes"], predicted_peak["freed_bytes"]))
                predicted_rate = timeline.midrun_batches_per_s
                peak_error = predicted_peak_bytes / peak - 1 if peak else float("nan")
                rate_error = predicted_rate / rate - 1 if rate else float("nan")
                rows.append({
                    "variant": variant, "setting": setting, "split": cfg.split, "repeats": len(runs),
                    "quick": bool(meta.get("quick")),
                    "measured_peak_bytes": peak, "predicted_peak_bytes": predicted_peak_bytes,
                    "peak_error": peak_error, "measured_batches_per_s": rate,
                    "predicted_batches_per_s": predicted_rate, "throughput_error": rate_error,
                    "peak_met": abs(peak_error) <= PEAK_TOLERANCE,
                    "throughput_met": abs(rate_error) <= THROUGHPUT_TOLERANCE,
                    "measured_hidden_bytes": statistics.median(r["hidden_peak_bytes"] for r in runs),
                    "predicted_hidden_bytes": timeline.hidden_peak_bytes,
                    "inputs": {k: v for k, v in asdict(cfg).items() if k != "notes"},
                })
    return rows


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`compare` as a Markdown table (MiB, batches/s, signed errors in %)."""
    headers = ["variant", "setting", "repeats", "peak MiB: lab", "model", "error", "batches/s: lab", "model", "error",
               "hidden MiB: lab", "model", "within 15 % / 20 %"]
    body = [[r["variant"], r["setting"], r["repeats"], f"{r['measured_peak_bytes'] / MiB:,.0f}",
             f"{r['predicted_peak_bytes'] / MiB:,.0f}", f"{r['peak_error']:+.0%}",
             f"{r['measured_batches_per_s']:.2f}", f"{r['predicted_batches_per_s']:.2f}",
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
               "free_objects_period_ms", "peak_breakdown", "first_batch_s", "wait_s_median")


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
        runs = [{k: r.get(k) for k in _RUN_FIELDS} for r in data["runs"]]
        dst = Path(out_dir) / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
        written.append(dst)
    return written
