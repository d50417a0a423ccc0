"""Tables and checks on the lab's results: what ``make lab`` prints and what CI asserts.

- :func:`summarize` turns the runs of :mod:`raydata_course.lab.session` into one row per
  variant (medians and spreads over repeats); :func:`format_table` prints them like
  upstream's release test, plus the hidden-buffer columns;
- :func:`quick_check` is what the quick lab (CI) must reproduce: every slow pull variant over
  its budget by the hidden batches the buffer model predicts;
- :func:`format_push_table` compares the push-based split with pull, and
  :func:`~raydata_course.lab.targets.push_targets` (re-exported here) checks its targets;
- :func:`format_versions_table` puts one variant's results under several Ray versions side
  by side;
- :func:`save_results` / :func:`load_results` write and read ``results.json``.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from raydata_course.lab.epoch import RunResult
from raydata_course.lab.targets import (LAZY_FREE_PERIOD_S, PUSH_LIVE_PEAK_MAX, PUSH_PULL_OVERAGE_MIN,
                                        PUSH_STALL_FLOOR, PUSH_STALL_MARGIN, PUSH_THROUGHPUT_MIN, _mib,
                                        believed_where, format_push_targets, median_recorded,
                                        midrun_stock_needed_bytes, peak_where, pull_push_pairs, push_targets,
                                        rate_where, stall_where)
from raydata_course.tables import markdown_table
from raydata_course.units import MiB

__all__ = ["summarize", "format_table", "HIDDEN_VS_MODEL_RANGE", "quick_check", "pull_push_pairs",
           "format_push_table", "PUSH_PULL_OVERAGE_MIN", "PUSH_THROUGHPUT_MIN", "PUSH_LIVE_PEAK_MAX",
           "PUSH_STALL_FLOOR", "PUSH_STALL_MARGIN", "LAZY_FREE_PERIOD_S", "push_targets", "format_gpu_table",
           "believed_where", "peak_where", "rate_where", "stall_where", "midrun_stock_needed_bytes", "format_push_targets",
           "format_versions_table", "load_results", "save_results"]


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
            "gpu_step_s": first.config.get("gpu_step_s", 0.0),
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
    """A Markdown table like upstream's release test, plus the hidden-buffer columns."""
    headers = ["variant", "budget MiB", "measured peak MiB (median, min-max)", "overage MiB", "RD believed MiB",
               "hidden measured MiB (batches/consumer)", "predicted hidden MiB (model batches per consumer)",
               "hidden / predicted", "realization", "upstream pf+4N+2 realization", "spilled MiB", "rows/s",
               "batches/s", "step s", "run s"]
    body = [[r["variant"], _mib(r["budget_bytes"]),
             f"{_mib(r['peak_bytes_median'])} ({_mib(r['peak_bytes_min'])}-{_mib(r['peak_bytes_max'])})",
             _mib(r["overage_bytes"]), _mib(r["believed_peak_bytes"]),
             f"{_mib(r['hidden_peak_bytes'])} ({r['hidden_batches_per_consumer']:.1f})",
             f"{_mib(r['predicted_hidden_bytes'])} ({r['predicted_hidden_batches']}; range "
             f"{r['hidden_range_batches'][0]}-{r['hidden_range_batches'][1]})",
             f"{r['hidden_vs_model']:.0%}", f"{r['realization']:.0%}", f"{r['upstream_realization']:.0%}",
             _mib(r["spilled_bytes"]), f"{r['rows_per_s']:,.0f}", f"{r['batches_per_s']:.2f}",
             f"{r['step_s_median']:.3f}", ", ".join(str(w) for w in r["wall_s"])] for r in rows]
    return f"Ray {ray_version}\n\n" + markdown_table(headers, body, align="lrlrrllrrrrrrrl")


#: how far the measured hidden bytes (over the buffer model's nominal prediction) may stray
#: before the quick check fails: one epoch on a busy machine is a noisy measurement.
HIDDEN_VS_MODEL_RANGE = (0.75, 1.34)


def quick_check(rows: list[dict[str, Any]]) -> list[str]:
    """What the quick lab must reproduce, checked on :func:`summarize` rows of pull variants.

    For every slow variant (``step_delay_s > 0`` or ``gpu_step_s > 0``; push variants and fast
    ones are skipped):
    the peak is above the budget (``overage_bytes > 0``); at least one hidden batch per
    consumer was measured; the hidden batches per consumer lie in the buffer model's range
    (:func:`raydata_course.lab.buffer_model.hidden_batches`, plus or minus half a batch);
    and hidden bytes over the model's nominal bytes lie in ``HIDDEN_VS_MODEL_RANGE``.

    Returns:
        One sentence per failed check (empty when everything was reproduced).
    """
    problems = []
    for r in rows:
        if r["variant"].endswith("-push") or not (r["step_delay_s"] > 0 or r.get("gpu_step_s", 0) > 0):
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


def format_push_table(results: list[RunResult], free_objects_period_ms: Optional[int] = None) -> str:
    """Pull against push, per Train variant, from one cluster setting's runs.

    For each variant ``X`` with a ``X-push`` twin: medians over repeats of peak / budget, the
    peak without the freed-but-not-yet-deleted bytes over the budget, the bytes of the store's
    largest classified sample split into referenced by the executor / referenced by the push
    split's windows (the coordinator's refs) / pinned-unreferenced / freed-not-deleted,
    push's peak as a fraction of pull's, throughput (the consumers' overall, batches/s; the
    producer's over the whole epoch and after the consumers' first batch, with push over pull;
    the share of the files read by that batch), the job-level stall fraction ``D``
    (:func:`~raydata_course.lab.epoch.stall_fraction`), the first batch's wait, and where a
    consumer's time went: its training step and its wait for the next batch (medians, seconds). A slower step under push with no more waiting is CPU the
    producer takes while the consumers train, instead of before (pull's hidden buffers let
    the producer run ahead). Then the CPU seconds the executor's scheduling thread used per
    epoch (median; ``RunResult.loop_cpu_s``): Ray Data's loop shares the cores with the
    consumers. Every run's wall time is listed.

    Returns:
        A Markdown table (empty string when no push variant ran).
    """
    med = statistics.median
    setting = ("default lazy free" if free_objects_period_ms is None
               else f"free_objects_period_milliseconds={free_objects_period_ms}")
    headers = ["variant", "split", "repeats", "budget MiB", "peak MiB (median, min-max)", "peak / budget",
               "peak without freed-not-deleted / budget",
               "at peak: executor / windows / pinned-unref / freed-not-deleted MiB", "push peak / pull peak", "overall b/s",
               "produced over the epoch b/s", "push/pull produced over the epoch", "produced after first batch b/s",
               "push/pull produced after first batch", "files read by first batch", "stall D", "first batch s",
               "step / wait s (median)", "executor loop CPU s", "run s"]
    body = []
    names = pull_push_pairs(results)
    for name in names:
        rows = {}
        for split, vname in (("pull", name), ("push", f"{name}-push")):
            runs = [r for r in results if r.variant == vname]
            rows[split] = {
                "runs": runs, "budget": med([r.budget_bytes for r in runs]),
                "peak": med([r.peak_bytes for r in runs]), "min": min(r.peak_bytes for r in runs),
                "max": max(r.peak_bytes for r in runs), "overage": med([r.overage_bytes for r in runs]),
                "ref": med([r.peak_breakdown.get("executor_bytes", r.peak_breakdown.get("referenced_bytes", 0))
                            for r in runs]),
                "win": med([r.peak_breakdown.get("coordinator_bytes", 0) for r in runs]),
                "pin": med([r.peak_breakdown.get("pinned_unreferenced_bytes", 0) for r in runs]),
                "freed": med([r.peak_breakdown.get("freed_not_deleted_bytes", 0) for r in runs]),
                "overall": med([r.overall_batches_per_s for r in runs]),
                "production": median_recorded(runs, "production_batches_per_s") or 0.0,
                "epoch_production": median_recorded(runs, "epoch_production_batches_per_s"),
                "read_at_first": median_recorded(runs, "read_done_at_first_batch"),
                "stall": median_recorded(runs, "stall_fraction"),
                "live": median_recorded(runs, "live_peak_bytes"),
                "first": med([r.first_batch_s for r in runs]),
                "step": med([r.step_s_median for r in runs]), "wait": med([r.wait_s_median for r in runs]),
                "loop": [r.loop_cpu_s for r in runs if r.loop_cpu_s is not None],
            }
        pull, push = rows["pull"], rows["push"]
        for split, r in rows.items():
            is_push = split == "push"
            ratio = f"{push['peak'] / pull['peak']:.2f}" if is_push and pull["peak"] else ""
            both = is_push and pull["production"]
            both_epoch = is_push and pull["epoch_production"] and push["epoch_production"] is not None
            body.append([name, split, len(r["runs"]), _mib(r["budget"]),
                         f"{_mib(r['peak'])} ({_mib(r['min'])}-{_mib(r['max'])})", f"{r['peak'] / r['budget']:.2f}",
                         "n/a" if r["live"] is None else f"{r['live'] / r['budget']:.2f}",
                         f"{_mib(r['ref'])} / {_mib(r['win']) if is_push else '-'} / {_mib(r['pin'])} / {_mib(r['freed'])}", ratio,
                         f"{r['overall']:.2f}",
                         "n/a" if r["epoch_production"] is None else f"{r['epoch_production']:.2f}",
                         f"{push['epoch_production'] / pull['epoch_production']:.2f}" if both_epoch else "",
                         f"{r['production']:.2f}",
                         f"{push['production'] / pull['production']:.2f}" if both else "",
                         "n/a" if r["read_at_first"] is None else f"{r['read_at_first']:.0%}",
                         "n/a" if r["stall"] is None else f"{r['stall']:.3f}", f"{r['first']:.2f}",
                         f"{r['step']:.3f} / {r['wait']:.3f}",
                         f"{med(r['loop']):.2f}" if r["loop"] else "n/a",
                         ", ".join(f"{x.wall_s:.1f}" for x in r["runs"])])
    if not names:
        return ""
    return f"Pull vs push, raylet {setting}\n\n" + markdown_table(headers, body, align="llrrlrrlrrrrrrrrrlrl")


def format_gpu_table(results: list[RunResult]) -> str:
    """The GPU check's table: per run, the split, the lazy-free setting, peak / budget,
    throughput, the stall fraction ``D`` and the host-to-device copies (median ms per batch and GB/s, timed with CUDA
    events by the training loop).

    Returns:
        A Markdown table (empty string for no runs).
    """
    if not results:
        return ""
    body = [[r.variant, r.split, "lazy (raylet default)" if r.free_objects_period_ms is None else
             f"{r.free_objects_period_ms} ms", _mib(r.budget_bytes), _mib(r.peak_bytes),
             f"{r.peak_bytes / r.budget_bytes:.2f}", _mib(r.believed_peak_bytes), f"{r.overall_batches_per_s:.2f}",
             "-" if r.stall_fraction is None else f"{r.stall_fraction:.3f}",
             "-" if r.h2d_s_median is None else f"{r.h2d_s_median * 1000:.2f}",
             "-" if r.h2d_gb_per_s is None else f"{r.h2d_gb_per_s:.1f}",
             f"{r.wall_s:.1f}"] for r in results]
    return markdown_table(["variant", "split", "free", "budget MiB", "peak MiB", "peak / budget",
                           "RD believed peak MiB", "overall b/s", "stall D", "H2D ms/batch (median)", "H2D GB/s",
                           "run s"], body, align="lllrrrrrrrrr")


def format_versions_table(result_files: list[Path]) -> str:
    """One table of every variant under every Ray version found in ``result_files``.

    Args:
        result_files: ``results.json`` files written by ``python -m raydata_course.lab``,
            for example ``build/lab/results.json`` and ``build/lab-ray2.55.1/results.json``.

    Returns:
        A Markdown table, rows sorted by variant then Ray version.
    """
    rows = []
    for path in result_files:
        data = json.loads(Path(path).read_text())
        meta = data["meta"]
        for r in data["summary"]:
            rows.append((r["variant"], meta["ray_version"], meta.get("pipeline", {}).get("design", "?"), r))
    headers = ["variant", "Ray", "consumer pipeline", "budget MiB", "peak MiB (median, min-max)", "overage MiB",
               "RD believed MiB", "pinned, no ObjectRef (batches/consumer)",
               "actual - RD at peak (batches/consumer)", "model (batches/consumer)", "realization", "rows/s"]
    body = [[variant, version, design, _mib(r["budget_bytes"]),
             f"{_mib(r['peak_bytes_median'])} ({_mib(r['peak_bytes_min'])}-{_mib(r['peak_bytes_max'])})",
             _mib(r["overage_bytes"]), _mib(r["believed_peak_bytes"]),
             f"{_mib(r['hidden_peak_bytes'])} MiB ({r['hidden_batches_per_consumer']:.1f})",
             f"{_mib(r.get('unaccounted_at_peak_bytes', 0))} MiB ({r.get('unaccounted_batches_per_consumer', 0):.1f})",
             f"{r['predicted_hidden_batches']} (range {r['hidden_range_batches'][0]}-{r['hidden_range_batches'][1]})",
             f"{r['realization']:.0%}", f"{r['rows_per_s']:,.0f}"]
            for variant, version, design, r in sorted(rows, key=lambda x: (x[0], x[1]))]
    return markdown_table(headers, body, align="lllrlrrllrrr")


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
