"""Does the push split's read-ahead cap starve the decode of task slots? One run, both ways.

    .venv/bin/python benchmarks/read_ahead_outputs.py [--rounds 1] [--out build/bench-read-ahead]

Runs the lab's fast Train variant with its steps on whole batches, pull and push (``python -m
raydata_course.lab --variants train-fast,train-fast-push --fast-step-rows 0``: 3 epochs each,
with the raylet's lazy free at its default and off), once with the read-ahead cap reading running tasks' outputs only up to the cap
(``PUSH_SPLIT_READ_AHEAD_CAP_OUTPUTS=1``, as the policy first did) and once with every
running task's outputs read (``=0``, the default; new inputs are capped in both), in turn,
``--rounds`` times
(:mod:`raydata_course.push_split.readahead` explains why a capped task holds a CPU).

For each setting it prints, as medians over epochs and rounds: push / pull throughput
(overall and mid-run, as ``make lab`` defines them), the share of push's probe samples in
which the decode ran two or more tasks, and in which the file listing or the read held a
task, push's wait per batch, its training step and that step's CPU seconds, and push's peak
and Ray Data's believed peak over the budget. Each round takes about 9 minutes on two
cores. Every figure is measured on this machine in this run; compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from raydata_course.lab.report import load_results  # noqa: E402
from raydata_course.lab.targets import push_targets  # noqa: E402
from raydata_course.push_split.readahead import CAP_OUTPUTS_ENV  # noqa: E402
from raydata_course.tables import markdown_table  # noqa: E402


def _share(op_tasks: list, operators: list[str], prefix: str, at_least: int) -> tuple[int, int]:
    """(samples where the operator named ``prefix...`` ran ``at_least`` tasks, samples where
    any operator ran a task)."""
    idx = next((i for i, o in enumerate(operators) if o.startswith(prefix)), None)
    busy = [t for t in op_tasks if t and any(t)]
    if idx is None:
        return 0, len(busy)
    return sum(1 for t in busy if t[idx] >= at_least), len(busy)


def summarize(results_json: Path) -> dict:
    """The figures of one lab run's ``results.json`` for the table: the throughput ratios and
    Ray Data's believed peak / budget as ``make lab`` checks them
    (:func:`raydata_course.lab.targets.push_targets`), and push's own medians."""
    runs = load_results(results_json)
    push = [r for r in runs if r.split == "push"]
    checks = {c["target"]: c["value"] for c in push_targets(runs)}
    med = statistics.median
    out = {
        "overall": checks["push / pull throughput, overall >="],
        "midrun": checks["push / pull throughput, mid-run >="],
        "believed": checks["push: Ray Data's believed peak / budget <="],
        "wait_s": med(r.wait_s_median for r in push),
        "step_s": med(r.step_s_median for r in push),
        "step_cpu_s": med(r.step_cpu_s_median for r in push),
        "peak": med(r.peak_bytes / r.budget_bytes for r in push),
    }
    for key, prefix, n in (("decode2", "MapBatches", 2), ("listing", "ListFiles", 1), ("read", "Read", 1)):
        hits = [_share(r.timeline["op_tasks"], r.timeline["operators"], prefix, n) for r in push]
        out[key] = sum(h for h, _ in hits) / max(1, sum(t for _, t in hits))
    return out


def run_lab(out: Path, cap_outputs: bool) -> tuple[dict, dict, float]:
    """One lab run of the fast pair; returns the figures with the lazy free on and off, and its seconds."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env[CAP_OUTPUTS_ENV] = "1" if cap_outputs else "0"
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "raydata_course.lab", "--variants", "train-fast,train-fast-push",
                           "--fast-step-rows", "0", "--out", str(out)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the lab run failed (exit {proc.returncode}); its last output:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return summarize(out / "results.json"), summarize(out / "free0" / "results.json"), time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench-read-ahead")
    args = parser.parse_args(argv)
    figures: dict[tuple[str, str], list[dict]] = {}
    for rnd in range(args.rounds):
        for cap in (True, False):
            name = "outputs capped" if cap else "outputs read"
            lazy, free0, secs = run_lab(args.out / f"round{rnd}-{'capped' if cap else 'read'}", cap)
            print(f"round {rnd + 1}/{args.rounds}, {name}: {secs:.0f} s", flush=True)
            figures.setdefault((name, "lazy free 1000 ms"), []).append(lazy)
            figures.setdefault((name, "lazy free 0 ms"), []).append(free0)
    table = []
    for (name, setting), rows in figures.items():
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        table.append([name, setting, f"{m['overall']:.2f}", f"{m['midrun']:.2f}", f"{m['decode2']:.0%}",
                      f"{m['listing']:.0%}", f"{m['read']:.0%}", f"{m['wait_s']:.3f}", f"{m['step_s']:.3f}",
                      f"{m['step_cpu_s']:.3f}", f"{m['peak']:.2f}", f"{m['believed']:.2f}"])
    print("\n" + markdown_table(
        ["read-ahead cap", "lazy free", "push/pull overall", "push/pull mid-run", "decode >= 2 tasks",
         "listing holds a task", "read holds a task", "push wait s", "push step s", "step CPU s",
         "push peak / budget", "believed / budget"], table, align="ll" + "r" * 10))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
