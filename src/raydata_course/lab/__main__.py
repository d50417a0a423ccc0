"""``make lab``: reproduce the hidden-buffer overage of the Ray Data → Ray Train ingest path.

    python -m raydata_course.lab [--quick] [--out build/lab] [--device auto|cpu|cuda]

Runs the variants of :func:`raydata_course.lab.variants.variants_for` on an embedded local cluster,
prints a table like upstream's release test (variant, budget, measured peak as median and
spread, overage, predicted hidden, realization), and writes ``results.json``,
``timeline-<variant>.png``, ``breakdown.png`` and ``table.md`` to the output folder.
``--quick`` (for CI) runs only the slow variants, once, and exits 1 unless every slow
variant's peak exceeds its budget by the hidden batches the buffer model predicts
(:func:`raydata_course.lab.report.quick_check`).

Pull against push: every Train variant also runs sharded by the push-based split
(``<variant>-push``, :mod:`raydata_course.push_split`), and the Train variants run a second
time on a cluster started with ``_system_config={"free_objects_period_milliseconds": 0}``
(the raylet deletes freed objects at once instead of every 1000 ms). This is the default of
a full run; ``--quick --push`` does it at the quick size; ``--no-push`` turns it off. The
pull-vs-push tables go to ``table-push.md``, the side-by-side timelines to
``push-vs-pull-<variant>-<setting>.png``, the second setting's runs to ``free0/results.json``.

``--gpu-check`` is the GPU run for a device machine: it exits 2 at once unless torch sees
CUDA, runs the Train variants (slow and fast, pull and push) for one epoch each, with the
lazy free on and off, starts no run after ``--deadline-s`` seconds (default 420, so the
whole check fits in 8 minutes), and writes ``table-gpu.md`` (peak / budget, throughput and
the host-to-device copies timed with CUDA events) beside the usual tables and figures.

Every run ends with the playground's simulator on the run's own inputs, beside what it
measured (``table-model.md``, :mod:`raydata_course.lab.model_check`), and writes the run, cut
to what the simulator needs, to ``playground/`` in the output folder (the playground's copy:
``playground/lab/``). ``--model-check DIR`` does only that, on the run already in ``DIR``
(after a change to the simulator or the push split's rules), with no cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from pathlib import Path

from raydata_course.units import MiB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raydata_course.lab", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI mode: slow variants once, assert the overage")
    parser.add_argument("--out", type=Path, default=Path("build/lab"), help="output folder (default build/lab)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--variants", default="", help="comma-separated subset of variant names")
    parser.add_argument("--fast-step-rows", type=int, default=None, metavar="ROWS",
                        help="rows of each batch the producer-bound Train variant (train-fast) trains on "
                             "(default: raydata_course.lab.variants.FAST_STEP_ROWS; 0: the whole batch, "
                             "as the variant was before it was made producer-bound)")
    parser.add_argument("--push", action=argparse.BooleanOptionalAction, default=None,
                        help="also run the push-based split, with the raylet's lazy free on and off "
                             "(default: on for a full run, off for --quick)")
    parser.add_argument("--interleave", action="store_true",
                        help="run the producer-bound pull and push variants alternately, one epoch per run "
                             "(pull, push, pull, ...), instead of each variant's epochs in one run")
    parser.add_argument("--compare-with", nargs="*", type=Path, default=[], metavar="RESULTS_JSON",
                        help="results.json files of other Ray versions to put beside this run in one table")
    parser.add_argument("--gpu-check", action="store_true",
                        help="the GPU check: CUDA required; Train variants, pull and push, 1 epoch each")
    parser.add_argument("--deadline-s", type=float, default=420.0,
                        help="--gpu-check starts no run after this many seconds (default 420)")
    parser.add_argument("--model-check", type=Path, metavar="DIR",
                        help="only compare the simulator with the lab run already in DIR (its results.json)")
    args = parser.parse_args(argv)
    if args.model_check is not None:
        results = args.model_check / "results.json"
        if not results.is_file():
            print(f"--model-check: {results} is missing: give the folder of a `make lab` run.", file=sys.stderr)
            return 2
        run_id = json.loads(results.read_text())["meta"].get("run_id") or "(no run id)"
        print(_model_check(args.model_check.resolve(), run_id))
        return 0
    if args.gpu_check:
        import torch

        if not torch.cuda.is_available():
            print("--gpu-check needs a CUDA device, and torch sees none (torch.cuda.is_available() is False, "
                  f"torch {torch.__version__}, CUDA build {torch.version.cuda}): run it on a GPU node with a "
                  "CUDA build of torch.", file=sys.stderr)
            return 2
        args.device, args.push, args.quick = "cuda", True, False

    import matplotlib

    matplotlib.use("Agg")
    import ray
    import torch

    from raydata_course.lab.buffer_model import inspect_consumer_pipeline
    from raydata_course.lab.plots import plot_breakdown, plot_pull_vs_push, plot_timeline
    from raydata_course.lab.report import (
        format_gpu_table,
        format_push_table,
        format_push_targets,
        format_table,
        format_versions_table,
        pull_push_pairs,
        push_targets,
        quick_check,
        save_results,
        summarize,
    )
    from raydata_course.lab.session import LabSession
    from raydata_course.lab.variants import variants_for

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print("--device cuda was asked for, but torch sees no CUDA device.", file=sys.stderr)
        return 2
    push = (not args.quick) if args.push is None else args.push
    if args.fast_step_rows is not None and args.fast_step_rows < 0:
        print(f"--fast-step-rows must be >= 0, got {args.fast_step_rows}", file=sys.stderr)
        return 2
    variants = variants_for(device, args.quick, push=push,
                            **({} if args.fast_step_rows is None else {"fast_step_rows": args.fast_step_rows}))
    if args.gpu_check:
        variants = [v.with_(epochs=1) for v in variants if v.mode == "train"]
    deadline = time.perf_counter() + args.deadline_s if args.gpu_check else None
    if args.variants:
        wanted = set(args.variants.split(","))
        unknown = wanted - {v.name for v in variants}
        if unknown:
            print(f"unknown variant(s) {sorted(unknown)}; choose from {[v.name for v in variants]}", file=sys.stderr)
            return 2
        variants = [v for v in variants if v.name in wanted]

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results, wall = [], {}
    facts = inspect_consumer_pipeline()
    task_s: dict = {}
    rates: dict = {}
    results = _run_variants(LabSession, out, variants, wall, system_config=None, warm_up=not args.quick,
                            deadline=deadline, task_s=task_s, rates=None if args.quick else rates,
                            interleave=args.interleave)
    push_results = {None: results}
    if push and any(v.split == "push" for v in variants):
        train_variants = [v for v in variants if v.mode == "train"]
        free0_wall: dict = {}
        push_results[0] = _run_variants(LabSession, out / "free0", train_variants, free0_wall,
                                        system_config={"free_objects_period_milliseconds": 0},
                                        warm_up=not args.quick, deadline=deadline, interleave=args.interleave)
        wall.update({f"{k} (free 0 ms)": v for k, v in free0_wall.items()})
    rows = summarize(results)
    table = format_table(rows, ray.__version__)
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    meta = {
        "run_id": run_id, "ray_version": ray.__version__, "torch_version": torch.__version__, "python": platform.python_version(),
        "device": device, "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
        "machine": platform.machine(), "cpus": os.cpu_count(), "quick": args.quick,
        "pipeline": facts.__dict__, "variant_wall_s": wall, "total_wall_s": round(time.perf_counter() - t0, 1),
        "task_s": task_s, "producer_vs_consumers": rates,
        "probe_cost": results[0].probe_cost if results else {},
    }
    save_results(results, rows, out, meta)
    (out / "table.md").write_text(f"Lab run {run_id}\n\n{table}\n")
    import matplotlib.pyplot as plt

    for row in rows:
        first = next(r for r in results if r.variant == row["variant"])
        plot_timeline(first.__dict__, out / f"timeline-{row['variant']}.png")
        plt.close("all")
    plot_breakdown(rows, [r.__dict__ for r in results], out / "breakdown.png")
    push_tables = []
    for free_ms, runs in push_results.items():
        # Each setting has its targets: push's peak may pass the budget by more while the
        # raylet frees lazily (see chapter 06).
        checks = push_targets(runs, free_ms)
        if free_ms is not None:
            free0_rows = summarize(runs)
            save_results(runs, free0_rows, out / "free0", {**meta, "push_targets": checks, "system_config": {
                "free_objects_period_milliseconds": free_ms}})
        push_table = format_push_table(runs, free_ms)
        if push_table:
            if checks:
                label = "lazy free off" if free_ms == 0 else "lazy free at its default"
                push_table += f"\n\nTargets ({label}; medians over repeats):\n\n" + format_push_targets(checks)
            push_tables.append(push_table)
        setting = "lazyfree" if free_ms is None else f"free{free_ms}"
        for name in pull_push_pairs(runs):
            pull_run = next(r for r in runs if r.variant == name)
            push_run = next(r for r in runs if r.variant == f"{name}-push")
            plot_pull_vs_push(pull_run.__dict__, push_run.__dict__, out / f"push-vs-pull-{name}-{setting}.png")
            plt.close("all")
    if push_tables:
        (out / "table-push.md").write_text(f"Lab run {run_id}\n\n" + "\n\n".join(push_tables) + "\n")
    model_table = _model_check(out, run_id) if results else ""

    if device == "cuda":
        gpu_table = format_gpu_table([r for runs in push_results.values() for r in runs])
        (out / "table-gpu.md").write_text(f"GPU: {meta['gpu']}\n\n{gpu_table}\n")
        push_tables.append("GPU runs (host-to-device copies timed with CUDA events):\n\n" + gpu_table)
    print()
    print(table)
    for push_table in push_tables:
        print()
        print(push_table)
    if model_table:
        print()
        print(model_table)
    print(f"\n[lab] wall time per variant (s): {json.dumps(wall)}; total {meta['total_wall_s']} s")
    print(f"[lab] sampler cost per call: {meta['probe_cost']}")
    print(f"[lab] wrote {out / 'results.json'}, {out / 'table.md'} and figures")
    others = [p.resolve() for p in args.compare_with if p.is_file() and p.resolve() != (out / "results.json")]
    if others:
        versions_table = format_versions_table([out / "results.json", *others])
        (out / "table-versions.md").write_text(versions_table + "\n")
        print("\nAcross Ray versions:\n")
        print(versions_table)

    if args.quick:
        problems = quick_check(rows)
        if problems:
            print("[lab] QUICK CHECK FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
        print("[lab] quick check passed: every slow variant exceeded its budget and held the hidden "
              "batches the buffer model predicts.")
    return 0


def _model_check(out: Path, run_id: str) -> str:
    """The playground's side of a lab run: the run's inputs and results, cut to what the
    simulator needs, go to ``out/playground/`` (what the playground's build and notebooks read:
    copy it to ``playground/lab/`` with ``out``'s tables to ``docs/lab/``), and the simulator's
    prediction of every variant beside what this run measured goes to ``out/table-model.md``.

    Returns:
        The table, with the run's id and the targets above it.
    """
    from raydata_course.lab.model_check import PEAK_TOLERANCE, THROUGHPUT_TOLERANCE, compare, format_comparison
    from raydata_course.lab.playground_data import trim_results

    trim_results(out, out / "playground")
    print("[lab] the playground's simulator on this run's inputs ...", flush=True)
    rows = compare(out / "playground" / "results.json")
    missed = [f"{r['variant']} ({r['setting']})" for r in rows if not (r["peak_met"] and r["throughput_met"])]
    table = (f"Lab run {run_id}: the playground's simulator against this run (peak within {PEAK_TOLERANCE:.0%}, "
             f"the rate after the first batch within {THROUGHPUT_TOLERANCE:.0%}; a miss says where the model and "
             f"the lab part)\n\n{format_comparison(rows)}\n\n"
             + (f"Missed: {', '.join(missed)}." if missed else "Every row within its tolerances."))
    (out / "table-model.md").write_text(table + "\n")
    return table


def _run_variants(session_cls, out, variants, wall: dict, *, system_config, warm_up: bool,
                  deadline: float | None = None, task_s: dict | None = None, rates: dict | None = None,
                  interleave: bool = False) -> list:
    """Run ``variants`` on one fresh local cluster started with ``system_config``; start no
    variant after ``deadline`` (a ``time.perf_counter()`` value), saying which were skipped;
    an empty ``task_s`` dict is filled first with
    :meth:`~raydata_course.lab.session.LabSession.time_tasks`."""
    from raydata_course.lab.targets import consumer_bound

    results = []
    setting = "" if system_config is None else f" [{system_config}]"
    if deadline is not None and time.perf_counter() > deadline:
        print(f"[lab]{setting} past the deadline: skipped {[v.name for v in variants]}", flush=True)
        return results
    with session_cls(out, object_store_bytes=variants[0].object_store_bytes, num_cpus=variants[0].num_cpus,
                     system_config=system_config, warm_up=warm_up) as lab:
        if task_s is not None and not task_s:
            task_s.update(lab.time_tasks(variants[0]))
            task_s["push_send_s"] = lab.time_push_send(variants[0])
            print(f"[lab] one block's tasks, alone on the cluster (s): {json.dumps(task_s)}", flush=True)
        train = next((v for v in variants if v.mode == "train"), None)
        bound = next((v for v in variants if v.mode == "train" and v.gpu_step_s > 0), None)
        if rates is not None and not rates and train is not None:
            # The consumer-bound variant stands for a GPU job only if its producer outruns it;
            # the producer-bound one is that only if its consumers outrun the producer.
            rates.update(lab.producer_rate(train.with_(epochs=1)))
            print(f"[lab] the producer alone makes {rates['producer_batches_per_s']:.2f} batches/s", flush=True)
            if bound is not None:
                rates["consumers_at_most_batches_per_s"] = round(bound.consumers / bound.gpu_step_s, 3)
                verdict = "outruns" if rates["producer_batches_per_s"] > rates["consumers_at_most_batches_per_s"] \
                    else "does NOT outrun"
                print(f"[lab] {bound.name}: {bound.consumers} consumers at {bound.gpu_step_s} s of GPU stand-in per "
                      f"step take at most {rates['consumers_at_most_batches_per_s']:.2f} batches/s: the producer "
                      f"{verdict} them", flush=True)
        done: dict[str, list] = {}
        for config, repeat in _schedule(variants, interleave):
            if deadline is not None and time.perf_counter() > deadline:
                print(f"[lab]{setting} past the deadline: skipped {config.name}", flush=True)
                continue
            print(f"[lab]{setting} {config.name}: {config.mode}, {config.consumers} consumer(s), pf={config.prefetch_batches}, "
                  f"{config.batch_bytes / MiB:.1f} MiB batches, {config.batches_per_consumer} batches x "
                  f"{config.epochs} epoch(s), delay {config.step_delay_s} s/step, GPU stand-in {config.gpu_step_s} s/step"
                  f"{'' if repeat is None else f', repeat {repeat} (interleaved)'} ...", flush=True)
            t = time.perf_counter()
            runs = lab.run(config)
            if repeat is not None:
                for r in runs:
                    r.repeat = repeat
            wall[config.name] = round(wall.get(config.name, 0.0) + time.perf_counter() - t, 1)
            done.setdefault(config.name, []).extend(runs)
            for r in runs:
                print(f"[lab]   epoch {r.repeat}: peak {r.peak_bytes / MiB:.0f} MiB, budget {r.budget_bytes / MiB:.0f} MiB, "
                      f"Ray Data believed {r.believed_peak_bytes / MiB:.0f} MiB, hidden {r.hidden_peak_bytes / MiB:.0f} MiB "
                      f"({r.hidden_batches_per_consumer:.1f} batches/consumer)", flush=True)
        for config in variants:
            runs = done.get(config.name, [])
            if runs and rates and config.mode == "train" and config.split == "pull" and not consumer_bound(config.as_dict()):
                _print_producer_bound(config, runs, rates)
            results += runs
    return results


def _schedule(variants, interleave: bool) -> list:
    """The order the lab runs ``variants`` in: ``(config, repeat)`` pairs. Without
    ``interleave``, each variant once with all its epochs (``repeat`` None: each epoch is a
    repeat). With it, a producer-bound pull variant and its push partner (``<name>-push``)
    alternate, one epoch per run, ``epochs`` times (pull, push, pull, push, ...), so that a
    slow drift of a shared machine's speed falls on both splits alike; ``repeat`` is then the
    pair's index. Every other variant runs as without ``interleave``.

    Examples:
        >>> from types import SimpleNamespace as V
        >>> fast = lambda name, split: V(name=name, epochs=2, split=split, as_dict=dict,
        ...                              with_=lambda **k: f"{name} x1")
        >>> slow = V(name="s", epochs=3, split="pull", as_dict=lambda: {"gpu_step_s": 0.25})
        >>> vs = [fast("a", "pull"), fast("a-push", "push"), slow, V(name="s-push", epochs=3)]
        >>> [(c if isinstance(c, str) else c.name, r) for c, r in _schedule(vs, True)]
        [('a x1', 0), ('a-push x1', 0), ('a x1', 1), ('a-push x1', 1), ('s', None), ('s-push', None)]
        >>> [r for _, r in _schedule(vs, False)]
        [None, None, None, None]
    """
    from raydata_course.lab.targets import consumer_bound

    names = {v.name: v for v in variants}
    order, paired = [], set()
    for v in variants:
        if v.name in paired:
            continue
        partner = names.get(f"{v.name}-push")
        if interleave and partner is not None and v.split == "pull" and not consumer_bound(v.as_dict()):
            paired.add(partner.name)
            for k in range(v.epochs):
                order += [(v.with_(epochs=1), k), (partner.with_(epochs=1), k)]
        else:
            order.append((v, None))
    return order


def _print_producer_bound(config, runs: list, rates: dict) -> None:
    """Print whether ``config`` (a Train variant with no wait in its step) is producer-bound:
    its consumers alone, each at its median measured step (seconds, the step's CPU part run
    beside the producer), take batches faster than the producer alone makes them. Records
    ``<variant>_consumers_at_most_batches_per_s`` in ``rates``."""
    import math
    import statistics

    steps = [r.step_s_median for r in runs if r.step_s_median and math.isfinite(r.step_s_median)]
    if not steps:
        return
    step_s = statistics.median(steps)
    ceiling = round(config.consumers / step_s, 3)
    rates[f"{config.name}_consumers_at_most_batches_per_s"] = ceiling
    verdict = "outrun" if ceiling > rates["producer_batches_per_s"] else "do NOT outrun"
    print(f"[lab] {config.name}: {config.consumers} consumers at a median step of {step_s:.3f} s take at most "
          f"{ceiling:.2f} batches/s; the producer alone makes {rates['producer_batches_per_s']:.2f}: the consumers "
          f"{verdict} it", flush=True)


if __name__ == "__main__":
    sys.exit(main())
