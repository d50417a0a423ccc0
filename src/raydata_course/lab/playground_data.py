"""The lab run the playground shows: cut to what the simulator needs, compared, and handed to
the notebooks.

``make lab`` writes a run's :func:`trim_results` into ``build/lab/playground/`` (copy it to
``playground/lab/``); the playground's build writes :func:`validation_for_site` into every
notebook and ``validation.json``; in the course's own kernel a playground notebook computes the
same with :func:`lab_for_notebooks`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from raydata_course.lab.model_check import PEAK_TOLERANCE, THROUGHPUT_TOLERANCE, compare, format_comparison

__all__ = ["validation_for_site", "trim_results", "lab_for_notebooks"]


def validation_for_site(rows: list[dict[str, Any]], results_file: str | Path) -> dict[str, Any]:
    """What the playground notebooks read (``validation.json``): the rows of :func:`compare`,
    the table as Markdown, and where the lab ran (from ``results_file``'s ``meta``)."""
    meta = json.loads(Path(results_file).read_text())["meta"]
    lab = {k: meta.get(k) for k in ("run_id", "ray_version", "device", "cpus", "machine", "quick", "task_s")}
    return {"lab": lab, "table": format_comparison(rows), "rows": rows,
            "targets": {"peak": PEAK_TOLERANCE, "throughput": THROUGHPUT_TOLERANCE}}


#: what :func:`compare` reads from a run; :func:`trim_results` keeps only these.
_RUN_FIELDS = ("variant", "repeat", "config", "peak_bytes", "budget_bytes", "believed_peak_bytes", "hidden_peak_bytes",
               "step_s_median", "batches_per_s", "midrun_batches_per_s", "overall_batches_per_s", "split",
               "free_objects_period_ms", "peak_breakdown", "first_batch_s", "wait_s_median", "operator_generation",
               "midrun_step_s_median", "step_cpu_s_median", "cpu_after_first_batch", "consumption_batches_per_s",
               "production_batches_per_s", "stall_fraction",
               "live_peak_bytes")


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


def lab_for_notebooks(results_file: str | Path | None = None) -> dict[str, Any]:
    """What a playground notebook's ``LAB`` holds when it runs in the course's own kernel
    rather than the browser (where the site's build writes it in): the committed lab run
    (``playground/lab/results.json``, looked for beside the notebook, in ``lab/``, and in the
    course's ``playground/lab/``), compared with the simulator as the build compares it.

    Returns:
        ``{"lab", "rows", "table", "targets"}`` (:func:`validation_for_site`).

    Raises:
        FileNotFoundError: no committed lab run was found (says where it looked and how to
            make one: ``make lab``, then copy ``build/lab/playground/`` to ``playground/lab/``).
    """
    if results_file is None:
        here = Path.cwd()
        candidates = [here / "lab" / "results.json", here / "playground" / "lab" / "results.json",
                      here.parent / "playground" / "lab" / "results.json",
                      Path(__file__).resolve().parents[3] / "playground" / "lab" / "results.json"]
        results_file = next((c for c in candidates if c.is_file()), None)
        if results_file is None:
            raise FileNotFoundError("no lab run for the playground: looked for " + ", ".join(map(str, candidates))
                                    + "; run `make lab` and copy build/lab/playground/ to playground/lab/.")
    return validation_for_site(compare(results_file), results_file)
