"""What the sandbox and the judge cost: today's grader against an earlier one, same notebooks, one run.

    .venv/bin/python benchmarks/grader_overhead.py [--baseline REF] [--rounds 3] [--assignments data01 data02]

The earlier grader (``--baseline``, a git revision of this repository: by default the last
one whose hidden tests ran inside the student's kernel, with no sandbox and no judge) is
checked out into ``build/bench/baseline`` (a ``git worktree``) and run from there with its own
packages first on ``PYTHONPATH``; today's grader is this checkout's. Both grade the same
submissions (each assignment's reference answers and its blank release) into fresh folders,
in turn (A B A B ...), so that a machine whose speed drifts affects both alike. The table
gives, per grader, the median wall time of a whole run and per notebook (the autograde's own
wall time, from each run's ``grades.json``), and the ratio of today's to the baseline's
medians: the cost of the sandbox and the judge per notebook.

Every figure is wall time on this machine at the time of the run; compare the ratio, not the
seconds, across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The last revision whose hidden tests ran in the student's kernel (no sandbox, no judge).
BASELINE_REF = "c5e9568"


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def baseline_checkout(ref: str, folder: Path) -> Path:
    """A worktree of ``ref`` in ``folder`` (reused when it is already there)."""
    if not (folder / "autograder" / "raydata_grader").is_dir():
        if folder.exists():
            shutil.rmtree(folder)
        _run(["git", "-C", str(ROOT), "worktree", "prune"])
        _run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(folder), ref])
    return folder


def build_submissions(folder: Path, assignments: list[str]) -> int:
    """Each assignment's reference answers (student ``ref``) and blank release (``blank``); return the count."""
    import nbformat

    from raydata_grader.answers import reference_submission
    from raydata_grader.paths import release_notebook

    if folder.exists():
        shutil.rmtree(folder)
    for assignment in assignments:
        for student, nb in (("ref", reference_submission(assignment)),
                            ("blank", nbformat.read(release_notebook(assignment), as_version=4))):
            path = folder / student / assignment / f"{assignment}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(nb, path)
    return 2 * len(assignments)


def grade(checkout: Path | None, submissions: Path, out: Path, log: Path) -> dict:
    """One grading run; returns its wall time and each row's autograde seconds and score."""
    if out.exists():
        shutil.rmtree(out)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", RAYDATA_COURSE_HEADLESS="1")
    if checkout is not None:
        env["PYTHONPATH"] = f"{checkout / 'src'}:{checkout / 'autograder'}"
        env["RAYDATA_COURSE_ROOT"] = str(checkout)
    cmd = [sys.executable, "-m", "raydata_grader", "grade", str(submissions), "--out", str(out)]
    start = time.monotonic()
    with open(log, "a") as f:
        subprocess.run(cmd, check=True, env=env, cwd=checkout or ROOT, stdout=f, stderr=subprocess.STDOUT)
    wall_s = time.monotonic() - start
    rows = json.loads((out / "grades.json").read_text())["rows"]
    return {"wall_s": wall_s, "rows": {f"{r['student']}/{r['assignment']}": (r["seconds"], r["score"]) for r in rows}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE_REF, help=f"git revision of the earlier grader ({BASELINE_REF})")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each grader (default 3)")
    parser.add_argument("--assignments", nargs="+", default=["data01", "data02"])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    baseline = baseline_checkout(args.baseline, out / "baseline")
    submissions = out / "submissions"
    count = build_submissions(submissions, args.assignments)
    log = out / "grader_overhead.log"
    log.unlink(missing_ok=True)
    runs: dict[str, list[dict]] = {"baseline": [], "today": []}
    for i in range(args.rounds):
        for name, checkout in (("baseline", baseline), ("today", None)):
            print(f"[bench] round {i + 1}/{args.rounds}: {name} grading {count} notebooks ...", flush=True)
            result = grade(checkout, submissions, out / f"grading-{name}", log)
            runs[name].append(result)
            print(f"[bench]   {result['wall_s']:.0f} s", flush=True)
    for name, results in runs.items():
        scores = {k: s for k, (_, s) in results[-1]["rows"].items()}
        print(f"[bench] {name} scores: {scores}")
    table = ["| grader | run (median s) | per notebook (median s) |", "|---|---:|---:|"]
    med = {}
    for name, results in runs.items():
        per = [statistics.median(sec for sec, _ in r["rows"].values()) for r in results]
        med[name] = (statistics.median(r["wall_s"] for r in results), statistics.median(per))
        table.append(f"| {name} ({args.baseline if name == 'baseline' else 'this checkout'}) | "
                     f"{med[name][0]:.0f} | {med[name][1]:.1f} |")
    pairs = [t["wall_s"] / b["wall_s"] for b, t in zip(runs["baseline"], runs["today"])]
    table.append(f"| ratio today / baseline | {med['today'][0] / med['baseline'][0]:.2f} "
                 f"(pairs {', '.join(f'{p:.2f}' for p in pairs)}) | {med['today'][1] / med['baseline'][1]:.2f} |")
    text = "\n".join(table)
    print(text)
    (out / "grader_overhead.md").write_text(
        f"{count} notebooks ({', '.join(args.assignments)}: reference and blank), {args.rounds} rounds, "
        f"baseline {args.baseline}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
