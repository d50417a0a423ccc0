"""Does the budget bound the push split's mid-run throughput? Push at 1x, 2x and 3x the budget.

    .venv/bin/python benchmarks/push_budget_sweep.py [--rounds 1] [--budgets 256,512,768]
                                                     [--out build/bench-budget-sweep]

On one local cluster with the raylet's lazy free off (``free_objects_period_milliseconds=0``,
as ``make lab``'s second setting), runs the lab's fast Train variant, its steps on whole
batches (``fast_step_rows=0``), with the pull split at the lab's budget (256 MiB), then the same variant with the push split at each of
``--budgets`` (MiB), 3 epochs each, ``--rounds`` times. Pull ignores its budget (that is the
overage the lab reproduces), so a push that needed more decoded stock than the budget
allows would gain mid-run throughput as its budget grows.

For each push budget it prints, as medians over epochs and rounds: push / pull throughput,
overall and mid-run, each split's rate before the mid-run window (the first batch's wait included) and its wait
for the first batch, the store's usage as that window opens
(the stock each split had decoded ahead), push's peak and Ray Data's believed peak over
push's own budget, push's training step and its wait per batch. Each round takes about 3
minutes on two cores. Every figure is measured on this machine in this run; compare ratios,
not seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from raydata_course.lab.epoch import RunResult  # noqa: E402
from raydata_course.lab.targets import median_recorded, push_targets  # noqa: E402
from raydata_course.tables import markdown_table  # noqa: E402
from raydata_course.units import MiB  # noqa: E402


def figures(pull: list[RunResult], push: list[RunResult]) -> dict:
    """One push budget's figures against pull's runs (medians over the runs given; NaN for a
    figure no run recorded)."""
    med = statistics.median
    renamed = [dataclasses.replace(r, variant="train-fast-push") for r in push]
    checks = {c["target"]: c["value"] for c in push_targets(pull + renamed, 0)}

    def ratio(attr):
        base = med(getattr(r, attr) for r in pull)
        return med(getattr(r, attr) for r in push) / base if base else float("nan")

    def recorded(runs, attr, scale=1.0):
        value = median_recorded(runs, attr)
        return float("nan") if value is None else value / scale

    return {
        "budget_mib": push[0].budget_bytes / MiB,
        "overall": ratio("overall_batches_per_s"),
        "midrun": ratio("midrun_batches_per_s"),
        "production": checks.get("push / pull production rate over the epoch >=", float("nan")),
        "early_pull": recorded(pull, "early_batches_per_s"), "early_push": recorded(push, "early_batches_per_s"),
        "stock_pull_mib": recorded(pull, "midrun_start_store_bytes", MiB),
        "stock_push_mib": recorded(push, "midrun_start_store_bytes", MiB),
        "peak": med(r.peak_bytes / r.budget_bytes for r in push),
        "peak_mib": med(r.peak_bytes for r in push) / MiB,
        "believed": med(r.believed_peak_bytes / r.budget_bytes for r in push),
        "step_s": recorded(push, "midrun_step_s_median"),
        "first_pull_s": med(r.first_batch_s for r in pull), "first_push_s": med(r.first_batch_s for r in push),
        "wait_s": med(r.wait_s_median for r in push),
    }


def run_round(out: Path, budgets_mib: list[int]) -> tuple[list[RunResult], dict[int, list[RunResult]], float]:
    """One cluster, pull once then push at each budget; returns pull's runs, push's by budget, seconds."""
    import matplotlib

    matplotlib.use("Agg")
    from raydata_course.lab.session import LabSession
    from raydata_course.lab.variants import variants_for

    # the fast Train variant as these figures were first measured: steps on whole batches
    by_name = {v.name: v for v in variants_for("cpu", quick=False, push=True, fast_step_rows=0)}
    pull_cfg, push_cfg = by_name["train-fast"], by_name["train-fast-push"]
    t0 = time.monotonic()
    with LabSession(out, object_store_bytes=pull_cfg.object_store_bytes, num_cpus=pull_cfg.num_cpus,
                    system_config={"free_objects_period_milliseconds": 0}, warm_up=True) as lab:
        pull = lab.run(pull_cfg)
        push = {}
        for b in budgets_mib:
            print(f"  push at {b} MiB ...", flush=True)
            push[b] = lab.run(push_cfg.with_(name=f"train-fast-push-{b}", budget_bytes=b * MiB))
    return pull, push, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--budgets", default="256,512,768", help="push budgets, MiB, comma-separated")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench-budget-sweep")
    args = parser.parse_args(argv)
    try:
        budgets = [int(b) for b in args.budgets.split(",")]
    except ValueError:
        parser.error(f"--budgets takes whole MiB separated by commas, e.g. 256,512,768; got {args.budgets!r}")
    if not budgets or min(budgets) < 64:
        parser.error(f"each budget must be at least 64 MiB (two 32 MiB batches); got {args.budgets!r}")
    pulls: list[RunResult] = []
    pushes: dict[int, list[RunResult]] = {b: [] for b in budgets}
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}:", flush=True)
        pull, push, secs = run_round(args.out / f"round{rnd}", budgets)
        print(f"round {rnd + 1}/{args.rounds}: {secs:.0f} s", flush=True)
        pulls += pull
        for b in budgets:
            pushes[b] += push[b]
    rows = []
    for b in budgets:
        m = figures(pulls, pushes[b])
        rows.append([b, f"{m['overall']:.2f}", f"{m['midrun']:.2f}", f"{m['early_pull']:.2f} / {m['early_push']:.2f}",
                     f"{m['first_pull_s']:.2f} / {m['first_push_s']:.2f}",
                     f"{m['stock_pull_mib']:.0f} / {m['stock_push_mib']:.0f}", f"{m['peak_mib']:.0f}", f"{m['peak']:.2f}",
                     f"{m['believed']:.2f}", f"{m['step_s']:.3f}", f"{m['wait_s']:.3f}"])
    print("\n" + markdown_table(
        ["push budget MiB", "push/pull overall", "push/pull mid-run", "before the window b/s, pull / push",
         "first batch s, pull / push", "stored as the window opens MiB, pull / push", "push peak MiB",
         "push peak / its budget", "believed / its budget", "push mid-run step s", "push wait s"], rows, align="r" * 11))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
