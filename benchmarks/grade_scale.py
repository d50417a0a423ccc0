"""Grading throughput: one set of notebooks graded one at a time, several at once, and across a
local multi-node Ray cluster, in one run; and what that projects for 500 notebooks.

    .venv/bin/python benchmarks/grade_scale.py [--jobs 2] [--mutant-groups 1] [--out build/bench/grade-scale]

The notebooks: for each exercise (data01-data05), the reference answers, the blank release and
the first ``--mutant-groups`` groups of mutants (plausible wrong answers that share a notebook,
as the contract tests grade them): 15 with the defaults. ``python -m raydata_grader grade``
grades them three times, each time in a process of its own, into a fresh folder, every kernel
in its sandbox with a Ray runtime of its own, with the default limits (6 GiB per notebook):

1. **serial**: ``--jobs 1``;
2. **jobs**: ``--jobs J`` on this machine (default 2);
3. **cluster**: ``--cluster`` on a local Ray cluster of three nodes started with
   ``ray.cluster_utils.Cluster``: a head that grades nothing (no CPUs) and two nodes of one CPU
   each, whose memory resource takes one notebook at a time each.

It checks that the three runs gave every notebook the same status, score and per-cell scores,
and prints, per run: wall time, the speed-up over serial (measured in this one run),
notebooks per minute, CPU-seconds per notebook (the worker, its kernel and everything they
started: the cgroup's figure), the autograde's median wall time, and the grading process's
own seconds per notebook (merging each result, writing its feedback).

From the serial run's figures it then projects the wall time of 500 notebooks on one 16-core
node and on four, with the assumptions printed beside the figures (``--node-memory-gib``, 64 by
default): a node grades k notebooks at once, k = min(cores / CPUs per notebook, Ray's memory
resource (70 % of RAM) / (memory limit + 2 GiB)); each takes the serial autograde time while
the k of them need no more CPU than the node has, and the CPU-seconds bound holds otherwise;
the grading process merges results one at a time beside them. The project's target is 500
notebooks in at most 30 minutes on one 16-core node.

Every time is wall time on this machine at the time of the run: compare the ratios and the
CPU-seconds, not the seconds, across machines.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the local cluster helper the grading tests use

GiB = 1024**3
#: Ray's default ``memory`` resource: this share of a node's RAM (a cluster's nodes).
RAY_MEMORY_SHARE = 0.7
#: What ``--jobs`` finds available on one node: this share of its RAM (the rest: the system and
#: the grading process).
AVAILABLE_SHARE = 0.9
#: The project's target: this many notebooks ...
TARGET_NOTEBOOKS = 500
#: ... in at most this many seconds on one node of this many cores.
TARGET_S, TARGET_CORES = 30 * 60, 16


def build_submissions(folder: Path, mutant_groups: int) -> list[str]:
    """Write each exercise's reference, blank and first mutant groups; return ``student/assignment`` keys."""
    import nbformat

    from raydata_grader.answers import reference_submission
    from raydata_grader.mutants import load_mutants, mutant_groups as groups_of, mutant_submission
    from raydata_grader.paths import ASSIGNMENTS, release_notebook

    if folder.exists():
        shutil.rmtree(folder)
    keys = []
    for assignment in ASSIGNMENTS:
        notebooks = [("ref", reference_submission(assignment)),
                     ("blank", nbformat.read(release_notebook(assignment), as_version=4))]
        for i, group in enumerate(groups_of(assignment, load_mutants(assignment, ROOT), ROOT)[:mutant_groups]):
            notebooks.append((f"mut{i + 1}", mutant_submission(assignment, group)))
        for student, nb in notebooks:
            path = folder / student / assignment / f"{assignment}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)
            keys.append(f"{student}/{assignment}")
    return keys


def grade(submissions: Path, out: Path, log: Path, *args: str) -> dict:
    """One grading run in a process of its own; what :func:`collect` reads of it."""
    if out.exists():
        shutil.rmtree(out)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", RAYDATA_COURSE_HEADLESS="1")
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "raydata_grader", "grade", str(submissions), "--out", str(out), *args]
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    return collect(out)


def collect(out: Path) -> dict:
    """A finished run's figures: its wall time (the run's own, from ``runs.jsonl``), rows, and the
    largest memory peaks of a kernel's sandbox and of a worker, in bytes."""
    rows = {f"{r['student']}/{r['assignment']}": r for r in json.loads((out / "grades.json").read_text())["rows"]}
    run = json.loads((out / "runs.jsonl").read_text().splitlines()[-1])
    results = [json.loads(p.read_text()) for p in (out / "work").rglob("result.json")]
    kernel = [r.get("sandbox", {}).get("peak_memory_bytes", 0) for r in results]
    worker = [r.get("worker_peak_rss_bytes", 0) for r in results]
    return {"wall_s": run["wall_s"], "rows": rows, "run": run, "kernel_peak_bytes": max(kernel, default=0),
            "worker_peak_bytes": max(worker, default=0)}


def _same(a: dict, b: dict) -> list[str]:
    """Keys whose status, score or cells differ between two runs' rows."""
    return [k for k in sorted(set(a) | set(b))
            if k not in a or k not in b or (a[k]["status"], a[k]["score"], a[k]["cells"]) !=
            (b[k]["status"], b[k]["score"], b[k]["cells"])]


def project(c_s: float, w_s: float, d_s: float, memory_limit_gib: float, nodes: int, node_memory_gib: float,
            cores: int = TARGET_CORES, cpus_per_notebook: float = 1.0, notebooks: int = TARGET_NOTEBOOKS) -> dict:
    """Projected wall time of ``notebooks`` on ``nodes`` nodes (see the module docstring for the model).

    One node grades with ``--jobs`` (its available memory: :data:`AVAILABLE_SHARE` of RAM);
    several, as a Ray cluster (Ray's default ``memory`` resource: :data:`RAY_MEMORY_SHARE`).
    """
    reserve_gib = memory_limit_gib + 2
    share = AVAILABLE_SHARE if nodes == 1 else RAY_MEMORY_SHARE
    by_cpu = int(cores // cpus_per_notebook)
    by_memory = int(share * node_memory_gib // reserve_gib)
    k = max(1, min(by_cpu, by_memory)) * nodes
    slots_s = math.ceil(notebooks / k) * w_s
    cpu_s = notebooks * c_s / (cores * nodes)
    driver_s = notebooks * d_s
    total = max(slots_s, cpu_s, driver_s)
    bound = ("slots (memory)" if total == slots_s and by_memory < by_cpu else
             "slots (CPUs asked)" if total == slots_s else "CPU" if total == cpu_s else "grading process")
    return {"k": k, "slots_s": slots_s, "cpu_s": cpu_s, "driver_s": driver_s, "total_s": total, "bound": bound,
            "by_cpu": by_cpu, "by_memory": by_memory}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="notebooks at once in the second run (default 2)")
    parser.add_argument("--mutant-groups", type=int, default=1, help="mutant groups per exercise (default 1)")
    parser.add_argument("--node-memory-gib", type=float, default=64.0,
                        help="RAM of the 16-core node the projection assumes (default 64)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench" / "grade-scale")
    parser.add_argument("--report-only", action="store_true",
                        help="grade nothing: print the table and projection of the runs already in --out")
    args = parser.parse_args(argv)
    from support.ray_cluster import local_cluster

    from raydata_grader.jobs import JobLimits, notebook_bytes_needed

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "grade_scale.log"
    names = {"serial": "serial", "jobs": f"jobs {args.jobs}", "cluster": "cluster, 3 nodes"}
    runs: dict[str, dict] = {}
    if args.report_only:
        runs = {label: collect(out / folder) for folder, label in names.items()}
    else:
        log.unlink(missing_ok=True)
        keys = build_submissions(out / "submissions", args.mutant_groups)
        print(f"[bench] {len(keys)} notebooks: {', '.join(keys)}", flush=True)
        print("[bench] serial (--jobs 1) ...", flush=True)
        runs["serial"] = grade(out / "submissions", out / "serial", log, "--jobs", "1")
        print(f"[bench]   {runs['serial']['wall_s']:.0f} s", flush=True)
        print(f"[bench] --jobs {args.jobs} ...", flush=True)
        runs[names["jobs"]] = grade(out / "submissions", out / "jobs", log, "--jobs", str(args.jobs))
        print(f"[bench]   {runs[names['jobs']]['wall_s']:.0f} s", flush=True)
        per_node = notebook_bytes_needed(JobLimits(180, 1200, 6 * GiB, 20_000))
        temp = Path(f"/tmp/rdc-bench{os.getpid()}")
        print("[bench] --cluster: 3 nodes (head with no CPUs, two of 1 CPU) ...", flush=True)
        cluster_start = time.monotonic()
        with local_cluster(temp, nodes=2, memory_bytes=per_node) as cluster:
            start_s = time.monotonic() - cluster_start
            runs[names["cluster"]] = grade(out / "submissions", out / "cluster", log, "--cluster", cluster.address)
        shutil.rmtree(temp, ignore_errors=True)
        print(f"[bench]   {runs[names['cluster']]['wall_s']:.0f} s (the cluster itself took {start_s:.0f} s to "
              "start)", flush=True)
    keys = sorted(runs["serial"]["rows"])
    serial = runs["serial"]
    lines = ["| run | notebooks | at once | wall (s) | speed-up over serial | notebooks per minute | "
             "CPU-s per notebook (mean) | autograde s per notebook (median) | grading process s per notebook | "
             "same scores as serial |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, r in runs.items():
        run, rows = r["run"], r["rows"]
        differ = _same(serial["rows"], rows)
        lines.append(f"| {name} | {len(rows)} | {run['slots']} | {r['wall_s']:.0f} | "
                     f"{serial['wall_s'] / r['wall_s']:.2f} | {60 * len(rows) / r['wall_s']:.2f} | "
                     f"{statistics.fmean(run['cpu_s']):.1f} | {statistics.median(run['autograde_s']):.1f} | "
                     f"{statistics.fmean(run['driver_s']):.2f} | {'yes' if not differ else 'NO: ' + ', '.join(differ)} |")
    scores = ", ".join(f"{k} {v['score']:g}" for k, v in sorted(serial["rows"].items()))
    c_s = statistics.fmean(serial["run"]["cpu_s"])
    w_s = statistics.median(serial["run"]["autograde_s"])
    d_s = statistics.fmean(runs[names["jobs"]]["run"]["driver_s"])
    kernel_gib = max(r["kernel_peak_bytes"] for r in runs.values()) / GiB
    worker_gib = max(r["worker_peak_bytes"] for r in runs.values()) / GiB
    proj = ["| limits | nodes | notebooks at once (per node: by CPU, by memory) | bound by | slots (min) | "
            "CPU (min) | grading process (min) | projected (min) | target 30 min on one node |",
            "|---|---:|---|---|---:|---:|---:|---:|---|"]
    for limit in (6.0, 3.0):
        for nodes in (1, 4):
            p = project(c_s, w_s, d_s, limit, nodes, args.node_memory_gib)
            verdict = ("met" if p["total_s"] <= TARGET_S else "missed") if nodes == 1 else "-"
            proj.append(f"| --memory-gib {limit:g} | {nodes} ({'--jobs' if nodes == 1 else '--cluster'}) | "
                        f"{p['k']} ({p['by_cpu']}, {p['by_memory']}) | {p['bound']} "
                        f"| {p['slots_s'] / 60:.1f} | {p['cpu_s'] / 60:.1f} | {p['driver_s'] / 60:.1f} | "
                        f"{p['total_s'] / 60:.1f} | {verdict} |")
    assumptions = [
        f"- measured here, serial run: {c_s:.1f} CPU-seconds per notebook (mean), {w_s:.1f} s autograde wall "
        f"time per notebook (median), so a notebook keeps {c_s / w_s:.2f} cores busy while it runs",
        f"- measured here, all runs: the largest memory peak of a kernel's sandbox (its cgroup: kernel, Ray, "
        f"shared memory) was {kernel_gib:.2f} GiB, and of a worker beside it (nbgrader and the judge) "
        + (f"{worker_gib:.2f} GiB" if worker_gib else "not recorded by this run"),
        f"- measured here, --jobs {args.jobs} run: the grading process spends {d_s:.2f} s per notebook merging "
        "its result and writing its feedback, one at a time",
        f"- a node: {TARGET_CORES} cores and {args.node_memory_gib:g} GiB of RAM. One node grades with --jobs, "
        f"with {AVAILABLE_SHARE:.0%} of its RAM available; four grade as a Ray cluster whose memory resource is "
        f"Ray's default, {RAY_MEMORY_SHARE:.0%} of RAM (`ray start --memory` sets it). Every notebook asks for 1 CPU "
        "and its memory limit plus 2 GiB for the worker beside its kernel",
        "- the mix of notebooks is this one's (one reference, one blank, one mutant group per exercise), every "
        "graded kernel gets the same 4-CPU Ray cluster whatever the node (the grader pins it), and CPU time per "
        "notebook does not grow on a bigger node; the cluster is already up (its start is not counted)",
        "- the projected time is the largest of three bounds: the slots (batches of k notebooks, each taking the "
        "serial autograde time), the node's CPUs (CPU-seconds / cores) and the grading process (one merge at a time)",
    ]
    text = "\n".join([
        f"# Grading at scale: {len(keys)} notebooks, three ways, one run", "",
        f"Scores (serial): {scores}.", "", *lines, "",
        f"## Projection: {TARGET_NOTEBOOKS} notebooks", "", *proj, "", "Assumptions:", "", *assumptions, ""])
    print(text)
    (out / "grade_scale.md").write_text(text)
    return 0 if all(not _same(serial["rows"], r["rows"]) for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
