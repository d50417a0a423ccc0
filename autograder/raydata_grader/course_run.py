"""``make course``, the course's main job: run every chapter, grade every reference solution.

``make course`` runs ``python -m raydata_grader course``. It writes, under ``build/course/``:

- ``chapters/<name>.ipynb``: each chapter, executed top to bottom in a fresh kernel on the
  embedded local Ray cluster;
- ``grading/``: a scratch nbgrader course in which each assignment's release, filled with the
  reference answers, was autograded (every grade cell judged by the oracles, outside the kernel);
- ``lab/``: the training-ingest lab in its quick mode (``python -m raydata_course.lab --quick``):
  its table, ``results.json`` and figures;
- ``summary.md`` and ``summary.json``: per notebook, status and seconds; per exercise, score
  over max.

It exits non-zero if a chapter fails, states a speed, size or time figure in its prose that no
cell prints or sets (:func:`raydata_course.prose.unbacked_figures`), a reference solution
scores less than full marks, or the quick lab does not reproduce the overage.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from raydata_course.notebooks import execute_notebook
from raydata_course.prose import unbacked_figures
from raydata_course.tables import markdown_table
from raydata_grader.answers import reference_submission
from raydata_grader.course_dir import autograde, plant_submission, prepare_course_dir
from raydata_grader.paths import ASSIGNMENTS, instructor_root, release_notebook

__all__ = ["chapter_notebooks", "run_chapters", "grade_references", "run_quick_lab", "run_course"]


def chapter_notebooks(root: Path | None = None) -> list[Path]:
    """The chapter notebooks, ``chapters/NN_*.ipynb``, in order."""
    root = root or instructor_root()
    return sorted((root / "chapters").glob("[0-9][0-9]_*.ipynb"))


def run_chapters(out_dir: Path, cell_timeout_s: int = 900) -> list[dict]:
    """Execute each chapter into ``out_dir``; return one record per chapter."""
    records = []
    for path in chapter_notebooks():
        print(f"[course] running {path.name} ...", flush=True)
        run = execute_notebook(path, out_dir / path.name, cell_timeout_s=cell_timeout_s)
        status, error = run.status, run.error
        if status == "ok" and run.notebook is not None:
            # Every speed, size or time figure in the prose must be printed or set by a cell.
            unbacked = unbacked_figures(run.notebook)
            if unbacked:
                status = "error"
                error = "figures in the prose that no cell prints or sets: " + "; ".join(
                    f"cell {f.cell}: {f.text!r} ({f.context})" for f in unbacked)
        print(f"[course]   {status} in {run.seconds:.1f} s" + (f": {error}" if error else ""), flush=True)
        records.append({"notebook": f"chapters/{path.name}", "status": status,
                        "seconds": round(run.seconds, 1), "error": error})
    return records


def grade_references(course_dir: Path) -> list[dict]:
    """Autograde each assignment's reference submission in a scratch course folder.

    The kernels run in the grader's sandbox where the machine has one (the path every
    student's notebook takes), else as ordinary local kernels: the reference answers are the
    instructor's own code. The judge decides every grade cell either way.
    """
    from raydata_grader.kernel_sandbox import probe

    if course_dir.exists():
        shutil.rmtree(course_dir)
    prepare_course_dir(course_dir)
    support = probe()
    sandbox = support if support.available else None
    print(f"[course] grading in a sandbox: {support.describe()}" if sandbox else
          f"[course] grading the reference answers without a sandbox ({support.why})", flush=True)
    records = []
    for assignment in ASSIGNMENTS:
        print(f"[course] grading the reference solution of {assignment} ...", flush=True)
        plant_submission(course_dir, assignment, "reference",
                         reference_submission(assignment, release_notebook(assignment, course_dir)))
        t0 = time.perf_counter()
        score = autograde(course_dir, assignment, "reference", sandbox=sandbox)
        seconds = time.perf_counter() - t0
        print(f"[course]   {score.score:g}/{score.max_score:g} in {seconds:.1f} s", flush=True)
        records.append({"assignment": assignment, "score": score.score, "max_score": score.max_score,
                        "seconds": round(seconds, 1), "success": score.success, "sandbox": score.sandbox.get("level"),
                        "cells": {k: list(v) for k, v in score.cells.items()}})
    return records


def run_quick_lab(out_dir: Path) -> dict:
    """Run the lab's quick mode in a fresh process (its own cluster); return a record."""
    import os
    import subprocess

    print("[course] running the training-ingest lab (quick) ...", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "raydata_course.lab", "--quick", "--out", str(out_dir)],
                          env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    table = (out_dir / "table.md").read_text() if (out_dir / "table.md").is_file() else ""
    status = "ok" if proc.returncode == 0 else "error"
    print(f"[course]   {status} in {seconds:.1f} s", flush=True)
    if status != "ok":
        print(proc.stdout[-4000:] + proc.stderr[-4000:], file=sys.stderr)
    return {"status": status, "seconds": round(seconds, 1), "table": table}


def _summary_markdown(chapters: list[dict], exercises: list[dict], wall_s: float, lab: dict | None = None) -> str:
    import ray

    from raydata_course import __version__

    notebooks = [[c["notebook"], c["status"] + (": " + c["error"] if c["error"] else ""), f"{c['seconds']:.1f}"]
                 for c in chapters]
    scores = [[e["assignment"], f"{e['score']:g} / {e['max_score']:g}" + ("" if e["success"] else " (autograde failed)"),
               e.get("sandbox") or "none", f"{e['seconds']:.1f}"] for e in exercises]
    lines = ["# Streaming Ray Data: course run", "",
             f"raydata_course {__version__}, Ray {ray.__version__}; wall time {wall_s:.0f} s.", "",
             "## Notebooks", "", markdown_table(["notebook", "status", "seconds"], notebooks, align="llr"),
             "", "## Reference solutions (every grade cell judged outside the kernel)", "",
             markdown_table(["exercise", "score", "sandbox", "seconds"], scores, align="lrlr")]
    if lab is not None:
        lines += ["", f"## Training-ingest lab, quick mode: {lab['status']} in {lab['seconds']:.1f} s", "", lab["table"]]
    return "\n".join(lines) + "\n"


def run_course(out: Path, *, chapters: bool = True, grading: bool = True, lab: bool = True) -> int:
    """Run the course's main job into ``out``; return the exit status (0: everything passed).

    Args:
        out: output folder (``build/course`` from ``make course``).
        chapters: run the chapters.
        grading: grade the reference solutions.
        lab: run the quick lab.
    """
    t0 = time.perf_counter()
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    chapter_records = run_chapters(out / "chapters") if chapters else []
    exercises = grade_references(out / "grading") if grading else []
    lab_record = run_quick_lab(out / "lab") if lab else None
    wall_s = time.perf_counter() - t0
    (out / "summary.json").write_text(json.dumps({"chapters": chapter_records, "exercises": exercises,
                                                  "lab": lab_record, "wall_s": round(wall_s, 1)}, indent=2))
    summary = _summary_markdown(chapter_records, exercises, wall_s, lab_record)
    (out / "summary.md").write_text(summary)
    print(summary)
    print(f"[course] wrote {out / 'summary.md'}")
    failed = [c["notebook"] for c in chapter_records if c["status"] != "ok"]
    failed += [e["assignment"] for e in exercises if not e["success"] or e["score"] < e["max_score"]]
    if lab_record is not None and lab_record["status"] != "ok":
        failed.append("lab (quick)")
    if failed:
        print(f"[course] FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0

