"""Grading a class at scale: several notebooks at once, across a Ray cluster, nothing lost or graded twice.

The slow tests grade small classes of data01 notebooks, each in its sandbox with a Ray runtime
of its own, as ``make grade`` does, through the grader's command line in a process of its own:
the blank release (0/12) and a group of mutants (2/12: exactly the cells they are meant to
fail; the reference answers, 12/12, are graded this way by tests/test_attacks.py's honest
student). Those are the scores the serial grader gives these notebooks
(``tests/test_grading_contract.py`` grades the same notebooks one at a time), so each run must
give exactly them:

- a run stopped with SIGTERM after its first row, then run again: the second run grades only
  the rows the first did not write, and nothing of the stopped job is left (processes,
  folders, cgroups). Each kernel starts a fresh Ray runtime, and none outlives its notebook;
- a run on a local Ray cluster (``--cluster``) whose only grading node is killed (its raylet)
  while it grades a notebook, and another node joins: Ray grades that notebook again on the
  new node, and every row is written exactly once. Before it, a run that asks for more memory
  than any node has is refused, with the reason.

Both grade one notebook at a time, so that they load a 2-core CI machine no more than the
other grading tests running beside them; several at once is :class:`LocalRunner`'s fast test
below (and ``benchmarks/grade_scale.py`` grades 15 notebooks serially, two at once and on a
cluster, and checks that the scores agree). The fast tests cover the parts: how many jobs a
machine takes, the progress lines, the throughput table, the gradebook record, the limited
runner's CPU count, stop event and parent-death signal, the sweep of what a killed job left,
and the refusals.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from support.ray_cluster import local_cluster
from support.tables import markdown_rows

from raydata_course.units import GiB
from raydata_grader.answers import reference_submission
from raydata_grader.dispatch import default_jobs
from raydata_grader.gradebook import GradebookRecord, NotebookRecord
from raydata_grader.jobs import GradeJob, JobLimits, JobResult, KitCorrupted, NodeMismatch, notebook_bytes_needed, run_job
from raydata_grader.kit import CourseKit, installation_digest
from raydata_grader.mutants import load_mutants, mutant_groups, mutant_submission
from raydata_grader.paths import release_notebook
from raydata_grader.progress import Progress
from raydata_grader.records import Row
from raydata_grader.results import merge_result
from raydata_grader.sandbox import run_limited
from raydata_grader.scratch import owner_pid, sweep
from raydata_grader.summary import RunStats, summary_markdown

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "data01"
#: Every grading command of these tests: a short per-cell limit is not wanted (a busy CI machine
#: has run hidden tests past 60 s), and 3 GiB per notebook lets two share a 2-core, 24 GiB machine.
LIMITS = ["--cell-timeout", "150", "--notebook-timeout", "900", "--memory-gib", "3"]


# ------------------------------------------------------------------ the small class


def _small_class(folder: Path, students: tuple[str, ...] = ("blank", "mut")) -> dict[str, frozenset[str]]:
    """Write ``<student>/data01/data01.ipynb`` for ``students``; return the cells each must lose."""
    release = nbformat.read(release_notebook(ASSIGNMENT), as_version=4)
    all_cells = frozenset(c.metadata["nbgrader"]["grade_id"] for c in release.cells
                          if c.metadata.get("nbgrader", {}).get("grade"))
    group = next(g for g in mutant_groups(ASSIGNMENT, load_mutants(ASSIGNMENT, ROOT), ROOT) if len(g) > 1)
    notebooks = {"ref": (reference_submission(ASSIGNMENT), frozenset()),
                 "blank": (release, all_cells),
                 "mut": (mutant_submission(ASSIGNMENT, group), frozenset().union(*(m.fails for m in group)))}
    notebooks = {student: notebooks[student] for student in students}
    for student, (nb, _) in notebooks.items():
        path = folder / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    return {student: lost for student, (_, lost) in notebooks.items()}


def _grade_cmd(submissions: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "raydata_grader", "grade", str(submissions), "--out", str(out), *LIMITS, *extra]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("RAY_ADDRESS", None)
    return env


def _rows(out: Path) -> list[dict]:
    path = out / "grades.json"
    return json.loads(path.read_text())["rows"] if path.is_file() else []


def _check_rows(out: Path, expected: dict[str, frozenset[str]]) -> list[dict]:
    """Exactly one row per student, in grades.json and grades.csv, each losing exactly its cells."""
    rows = _rows(out)
    assert sorted(r["student"] for r in rows) == sorted(expected), rows
    with open(out / "grades.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert sorted(r["student"] for r in table) == sorted(expected)
    for row in rows:
        lost = {cell for cell, (score, most) in row["cells"].items() if score < most}
        assert row["status"] == "graded" and lost == expected[row["student"]], row
        assert row["score"] == row["max_score"] - sum(m for c, (s, m) in row["cells"].items() if c in lost)
        assert row["cpu_seconds"] > 0 and row["node"], row
        assert (out / "feedback" / row["student"] / ASSIGNMENT / f"{ASSIGNMENT}.html").is_file()
    return rows


def _leftovers(since: float, owners: set[int] = frozenset()) -> list[str]:
    """What grading jobs left behind: folders, cgroups and processes of owners that are gone (or in ``owners``).

    Every folder a job makes is ``/tmp/rdg-<owner pid>-...`` and every cgroup
    ``raydata-grader-<owner pid>-...``; a worker's and a kernel's command lines name such a folder.
    Live owners' things (another test's jobs, running beside this one) are not leftovers.
    """
    def ended(pid: int | None) -> bool:
        return pid is not None and (pid in owners or not psutil.pid_exists(pid))

    left = [e.path for e in os.scandir("/tmp") if ended(owner_pid(e.name)) and e.stat().st_mtime >= since]
    cgroups = Path("/sys/fs/cgroup/pids")
    if cgroups.is_dir():
        left += [str(d) for d in cgroups.glob("raydata-grader-*") if ended(owner_pid(d.name))]
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any(part in ("raydata_grader.worker", "ipykernel_launcher") for part in cmd):
            folders = [Path(a).parts[2] for a in cmd if a.startswith("/tmp/rdg-") and len(Path(a).parts) > 2]
            if any(ended(owner_pid(f)) for f in folders):
                left.append(f"pid {proc.pid}: {' '.join(cmd)[:160]}")
    return left


# ------------------------------------------------------------------ slow: whole runs


@pytest.mark.slow
def test_a_stopped_run_resumes_with_only_what_is_missing(tmp_path, sandbox_support):
    expected = _small_class(tmp_path / "class")
    out = tmp_path / "grading"
    started = time.time()
    log1 = tmp_path / "run1.log"
    with open(log1, "w") as log:
        run = subprocess.Popen(_grade_cmd(tmp_path / "class", out, "--jobs", "1"), env=_env(), cwd=ROOT,
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.poll() is None and not any(r["seconds"] for r in _rows(out)):
        time.sleep(0.5)
    assert run.poll() is None, f"the run ended before it could be stopped:\n{log1.read_text()[-3000:]}"
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=120) == 130, log1.read_text()[-3000:]
    first = {r["student"] for r in _rows(out) if r["seconds"]}
    assert first == {"blank"}, first  # graded in order: the second was stopped in the middle
    assert "run the same command again to grade the rest" in log1.read_text()
    assert not _leftovers(started, {run.pid}), _leftovers(started, {run.pid})

    resumed = subprocess.run(_grade_cmd(tmp_path / "class", out), env=_env(), cwd=ROOT,
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    text = resumed.stdout + resumed.stderr
    assert f"[grade] blank/{ASSIGNMENT}: unchanged since" in text and f"[grade] blank/{ASSIGNMENT}: graded" not in text
    assert text.count(f"[grade] mut/{ASSIGNMENT}: graded") == 1
    assert "notebooks graded 1 at once" in text or "notebooks graded 2 at once" in text  # the default, said
    assert "1/1 done, 0 failed" in text
    rows = _check_rows(out, expected)
    assert all(r["node"] == rows[0]["node"] for r in rows)
    summary = (out / "summary.md").read_text()
    assert "## This run" in summary and "notebooks per minute" in summary and "CPU-seconds per notebook" in summary
    assert len((out / "runs.jsonl").read_text().splitlines()) == 1  # the stopped run wrote no figures
    assert not _leftovers(started), _leftovers(started)


def _wait_for_a_job_under(raylet_pid: int, deadline_s: float, after_s: float = 5.0) -> str | None:
    """Wait until a grading worker under ``raylet_pid`` has run ``after_s``; return its student (None: never)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if "raydata_grader.worker" not in cmd:
                continue
            try:
                if raylet_pid in {p.pid for p in proc.parents()} and time.time() - proc.create_time() >= after_s:
                    return cmd[cmd.index("--student") + 1]
            except psutil.Error:
                continue
        time.sleep(0.5)
    return None


@pytest.mark.slow
def test_a_cluster_grades_every_notebook_once_when_a_node_dies(tmp_path, sandbox_support):
    from raydata_course.layout import TEMP_ROOT_ENV

    expected = _small_class(tmp_path / "class")
    out = tmp_path / "grading"
    started = time.time()
    temp = Path(os.environ.get(TEMP_ROOT_ENV, "/tmp")) / f"cl{os.getpid()}"
    per_node = notebook_bytes_needed(JobLimits(150, 900, 3 * GiB, 20_000))
    with local_cluster(temp, nodes=1, memory_bytes=per_node) as cluster:  # a head (no CPUs) and node A
        # a cluster too small for the limits asked is refused before any notebook, and says why
        small = subprocess.run(_grade_cmd(tmp_path / "class", tmp_path / "refused", "--cluster", cluster.address,
                                          "--memory-gib", "6"), env=_env(), cwd=ROOT, capture_output=True,
                               text=True, timeout=300)
        assert small.returncode == 2 and "can hold one notebook" in small.stderr, small.stderr[-2000:]
        assert not _rows(tmp_path / "refused")

        log = tmp_path / "cluster.log"
        with open(log, "w") as f:
            run = subprocess.Popen(_grade_cmd(tmp_path / "class", out, "--cluster", cluster.address),
                                   env=_env(), cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        victim = _wait_for_a_job_under(cluster.raylet_pids[0], deadline_s=600)
        assert victim in expected, f"no notebook ran on node A:\n{log.read_text()[-3000:]}"
        cluster.kill_node(0)  # node A is lost while it grades the victim's notebook ...
        time.sleep(2)
        cluster.add_node()  # ... and node B joins: it grades the rest, and the victim's again
        assert run.wait(timeout=900) == 0, log.read_text()[-4000:]
        text = log.read_text()
    rows = {r["student"]: r for r in _check_rows(out, expected)}
    node_a, node_b = cluster.node_ids[0][:8], cluster.node_ids[1][:8]
    assert all(r["node"].endswith(node_b) for r in rows.values()), rows  # nothing finished on A
    assert text.count(f"[grade] {victim}/{ASSIGNMENT}: graded") == 1
    assert "up to 1 notebook(s) at once" in text and node_a in text
    assert not _leftovers(started, {run.pid}), _leftovers(started, {run.pid})


@pytest.mark.slow
def test_a_kit_is_built_once_checked_when_reused_and_carries_the_due_date(tmp_path):
    """The kit's cached course is reused only as it was written; its gradebook takes the class's
    due date and a submission's record travels between gradebooks unchanged."""
    from nbgrader.api import Gradebook

    from raydata_grader.gradebook import apply_record, read_record
    from raydata_grader.grade import ensure_course
    from raydata_grader.jobs import _set_duedate
    from raydata_grader.kit import build_kit

    out = tmp_path / "grading"
    ensure_course(out, (ASSIGNMENT,))
    kit = build_kit(out, ASSIGNMENT)
    assert kit.max_score == 12 and set(kit.files) >= {f"solutions/{ASSIGNMENT}/{ASSIGNMENT}.ipynb", "gradebook.db",
                                                     f"exercises/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"}
    stamp = out / "kits" / ASSIGNMENT / "key.txt"
    written = stamp.stat().st_mtime_ns
    assert build_kit(out, ASSIGNMENT) == kit and stamp.stat().st_mtime_ns == written  # reused as it was
    (out / "kits" / ASSIGNMENT / "gradebook.db").write_bytes(b"changed")
    again = build_kit(out, ASSIGNMENT)  # made again, from the source
    assert again.files["gradebook.db"].startswith(b"SQLite format 3") and stamp.stat().st_mtime_ns != written
    assert {k: v for k, v in again.files.items() if k != "gradebook.db"} == {
        k: v for k, v in kit.files.items() if k != "gradebook.db"}

    course = tmp_path / "job"
    for name, data in kit.files.items():
        (course / name).parent.mkdir(parents=True, exist_ok=True)
        (course / name).write_bytes(data)
    _set_duedate(course, ASSIGNMENT, "2026-12-01T12:00:00")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert gb.find_assignment(ASSIGNMENT).duedate.isoformat() == "2026-12-01T12:00:00"
        gb.add_student("ann")
    record = GradebookRecord(ASSIGNMENT, "ann", "2026-12-02T08:30:00", (NotebookRecord(
        ASSIGNMENT, 0.0, {"block_row_counts_visible": 1.0, "block_row_counts_hidden": 0.0},
        {"block_row_counts_answer": None}),))
    apply_record(course, record)
    apply_record(out, record)  # the student is new there: made
    assert read_record(course, ASSIGNMENT, "ann") == read_record(out, ASSIGNMENT, "ann")
    back = read_record(out, ASSIGNMENT, "ann")
    assert back.timestamp.startswith("2026-12-02T08:30:00")
    assert back.notebooks[0].grades["block_row_counts_visible"] == 1.0
    assert back.notebooks[0].grades["block_row_counts_hidden"] == 0.0


# ------------------------------------------------------------------ fast: the parts


def test_the_local_runner_grades_several_at_once_and_stops_them_all(monkeypatch):
    """Up to ``jobs`` at once, each result as it ends; leaving on an error stops the running ones."""
    import threading

    from raydata_grader import dispatch
    from raydata_grader.jobs import JobStopped

    running, most, lock = [0], [0], threading.Lock()

    def fake_run_job(kit, job, stop):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            if job.student == "forever":
                stop.wait(60)
                raise JobStopped(job.student)
            time.sleep(0.3)
            return job.student
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(dispatch, "run_job", fake_run_job)
    limits = JobLimits(180, 1200, 6 * GiB, 20_000)
    jobs = [GradeJob(s, ASSIGNMENT, b"{}", None, limits, "") for s in ("a", "b", "c", "d", "e")]
    with dispatch.LocalRunner(2, {ASSIGNMENT: _kit()}) as runner:
        for job in jobs:
            runner.submit(job)
        done = sorted(result for _, result in runner.completed())
    assert done == ["a", "b", "c", "d", "e"] and most[0] == 2
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with dispatch.LocalRunner(2, {ASSIGNMENT: _kit()}) as runner:
            for student in ("forever", "forever", "a"):
                runner.submit(GradeJob(student, ASSIGNMENT, b"{}", None, limits, ""))
            raise KeyboardInterrupt  # Ctrl-C while both "forever" jobs run and "a" waits
    assert time.monotonic() - start < 10 and running[0] == 0


def test_a_cluster_run_stops_when_no_node_can_take_the_rest(monkeypatch):
    """Every node that could grade died and none joined: Ray would keep the tasks waiting forever."""
    import ray

    from raydata_grader import dispatch

    limits = JobLimits(180, 1200, 3 * GiB, 20_000)
    runner = dispatch.ClusterRunner("10.0.0.1:6379", {}, limits)
    runner._pending = {"ref-1": GradeJob("ann", ASSIGNMENT, b"{}", None, limits, "")}
    monkeypatch.setattr(dispatch, "STALL_CHECK_S", 0.01)
    monkeypatch.setattr(dispatch, "STALL_S", 0.3)
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns, timeout: ([], refs))
    nodes = [{"Alive": True, "Resources": {"CPU": 0.0, "memory": 100 * GiB}},  # the head: no CPUs
             {"Alive": False, "Resources": {"CPU": 8.0, "memory": 64 * GiB}},  # died
             {"Alive": True, "Resources": {"CPU": 8.0, "memory": 4 * GiB}}]  # too small for 3 + 2 GiB
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    assert runner._capacity() == 0
    with pytest.raises(dispatch.ClusterTooSmall, match="1 still to grade"):
        next(runner.completed())
    nodes[1]["Alive"] = True  # it came back: the run waits on
    assert runner._capacity() == 8  # min(8 CPUs / 1, 64 GiB / 5 GiB)


def test_default_jobs_takes_the_smaller_of_cores_and_memory(monkeypatch):
    limits = JobLimits(180, 1200, 6 * GiB, 20_000)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("M", (), {"available": 64 * GiB})())
    jobs, reason = default_jobs(limits)
    assert jobs == 8 and "16 logical CPUs" in reason and "64.0 GiB available / 8.0 GiB per notebook = 8" in reason
    assert default_jobs(limits, cpus_per_notebook=4)[0] == 4
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("M", (), {"available": 2 * GiB})())
    assert default_jobs(limits)[0] == 1  # never 0: one notebook at a time still grades
    # without cgroups, the sandbox's private /tmp, /dev/shm and home count besides the limit
    from raydata_grader.kernel_sandbox import SandboxLimits

    assert notebook_bytes_needed(limits, cgroups=False) == 6 * GiB + SandboxLimits().scratch_bytes
    assert notebook_bytes_needed(JobLimits(180, 1200, 6 * GiB, 20_000, sandbox=False)) == 6 * GiB


def test_progress_lines_in_a_log(capsys):
    with Progress(3, stream=io.StringIO()) as progress:
        progress.done("[grade] a/data01: graded 12/12")
        progress.done("[grade] b/data01: crashed 0/12", failed=True)
        progress.done("[grade] c/data01: graded 3/12")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[grade] a/data01: graded 12/12"
    assert lines[1].startswith("[grade] 1/3 done, 0 failed, 00:00 so far, about 00:00 left")
    assert lines[3].startswith("[grade] 2/3 done, 1 failed")
    assert lines[5].startswith("[grade] 3/3 done, 1 failed") and "left" not in lines[5]
    with Progress(3, quiet=True) as quiet:
        quiet.done("[grade] a/data01: graded 12/12")
    assert capsys.readouterr().out == ""


def test_the_summary_reports_throughput():
    rows = {("a", "data01"): Row("a", "data01", 12, 12, "graded", "")}
    stats = RunStats(mode="on the Ray cluster at 10.0.0.1:6379: 3 node(s)", slots=4, wall_s=120.0)
    for cpu_s, host in ((60.0, "n1"), (80.0, "n2"), (70.0, "n2"), (90.0, "n1")):
        stats.add(40.0, cpu_s, host)
    text = summary_markdown(rows, stats)
    assert "## This run" in text and text.rstrip().endswith("on the Ray cluster at 10.0.0.1:6379: 3 node(s)")
    assert ["4", "4", "120", "2.00", "75.0", "40.0", "n1 2, n2 2"] in markdown_rows(text)
    assert "## This run" not in summary_markdown(rows)


def test_a_gradebook_record_travels_as_json():
    record = GradebookRecord("data01", "ann", "2026-12-01T10:00:00", (
        NotebookRecord("data01", None, {"a_visible": 1.0, "a_hidden": 0.0}, {"a_answer": None, "b_answer": "No response."}),))
    assert GradebookRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    for bad in ({}, {"assignment": "data01", "student": "ann", "timestamp": None, "notebooks": [{"name": "x"}]},
                {"assignment": "data01", "student": "ann", "timestamp": None,
                 "notebooks": [{"name": "x", "late_penalty": None, "grades": {"a": "lots"}, "comments": {}}]}):
        with pytest.raises(ValueError, match="not a gradebook record"):
            GradebookRecord.from_json(bad)


def test_run_limited_counts_cpu_and_stops_on_request(tmp_path):
    import threading

    busy = tmp_path / "busy.py"
    busy.write_text("import subprocess, sys\n"
                    "subprocess.run([sys.executable, '-c', 's = 0\\nfor i in range(10**7): s += i'])\n")
    outcome = run_limited([sys.executable, str(busy)], timeout_s=120, memory_bytes=2 * GiB)
    assert outcome.returncode == 0 and outcome.cpu_s >= 0.3, outcome  # the grandchild's loop counts too
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    outcome = run_limited([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=120, memory_bytes=2 * GiB,
                          stop=stop)
    assert outcome.killed == "stopped" and outcome.wall_s < 10, outcome


def test_a_job_dies_with_the_process_that_runs_it(tmp_path):
    """A grader killed outright (a Ray worker whose node died) takes its job along: the parent-death signal."""
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from raydata_grader.sandbox import run_limited
        run_limited([sys.executable, "-c", "import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"],
                    timeout_s=300, memory_bytes=2 * 1024**3)
    """))
    parent = subprocess.Popen([sys.executable, str(script)])
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_the_sweep_removes_only_what_dead_owners_left(tmp_path):
    from raydata_grader.scratch import LOCK_NAME, owned_temp_dir, remove_owned

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f"rdg-{dead.pid}-jobabc"  # no lock file (an older grader's): its pid decides
    other = tmp_path / "rdg-abcdefgh"  # another tool's name: never touched
    for folder in (gone, other):
        (folder / "course").mkdir(parents=True)
    mine = owned_temp_dir("job", parent=str(tmp_path))  # locked by this process
    # a folder whose owner runs in another process: kept while it runs, swept once it is killed
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from raydata_grader.scratch import owned_temp_dir
        print(owned_temp_dir("job", parent={str(tmp_path)!r}), flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    theirs = Path(holder.stdout.readline().strip())
    assert (theirs / LOCK_NAME).is_file() and (mine / LOCK_NAME).is_file()
    removed = sweep(str(tmp_path))
    assert removed == [str(gone)] and mine.exists() and theirs.exists() and other.exists()
    holder.kill()
    holder.wait()
    assert sweep(str(tmp_path)) == [str(theirs)] and mine.exists()
    remove_owned(mine)
    assert not mine.exists() and sweep(str(tmp_path)) == []


def test_the_sweep_ends_a_dead_owners_cgroup(sandbox_support):
    from raydata_grader.cgroups import CGROUP_PREFIX, Cgroup

    if not sandbox_support.cgroups:
        pytest.skip("no writable cgroups here (not root)")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    group = Cgroup(sandbox_support.cgroups, f"{CGROUP_PREFIX}-{dead.pid}-sweeptest", GiB, 64)
    sleeper = subprocess.Popen(["/bin/sh", "-c", f"echo $$ > {group.procs_files[0]}; exec sleep 60"])
    time.sleep(0.5)
    assert sleeper.pid in group.pids()
    removed = sweep()
    assert any(f"{CGROUP_PREFIX}-{dead.pid}-sweeptest" in r for r in removed)
    assert sleeper.wait(timeout=10) == -signal.SIGKILL and not any(d.exists() for d in group.dirs)


def _kit() -> CourseKit:
    return CourseKit(ASSIGNMENT, {}, b"x = 1\n", "0" * 64, "", 12.0)


def test_a_job_refuses_a_machine_with_another_installation():
    job = GradeJob("ann", ASSIGNMENT, b"{}", None, JobLimits(180, 1200, 6 * GiB, 20_000), "not-this-installation")
    with pytest.raises(NodeMismatch, match="another installation of the course"):
        run_job(_kit(), job)
    job = GradeJob("ann", ASSIGNMENT, b"{}", None, JobLimits(180, 1200, 6 * GiB, 20_000, sandbox=False),
                   installation_digest())
    with pytest.raises(KitCorrupted, match="arrived changed"):
        run_job(_kit(), job)


def test_merging_a_result_keeps_its_files_inside_the_grading_folder(tmp_path):
    job = GradeJob("ann", ASSIGNMENT, b"{}", None, JobLimits(180, 1200, 6 * GiB, 20_000), "")
    result = JobResult("ann", ASSIGNMENT, "crashed", 0.0, {}, ["x"], 1.0, 1.0, "n1",
                       autograded={f"{ASSIGNMENT}.ipynb": nbformat.writes(nbformat.v4.new_notebook()).encode(),
                                   "../../escape.txt": b"no", "/etc/escape": b"no"},
                       work={"result.json": b"{}", "../up.json": b"no"})
    merge_result(tmp_path, job, result)
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == [f"autograded/ann/{ASSIGNMENT}/{ASSIGNMENT}.ipynb", f"work/ann/{ASSIGNMENT}/result.json"]
    bob = JobResult("bob", ASSIGNMENT, "graded", 12.0, {}, [], 1.0, 1.0, "n1")
    with pytest.raises(ValueError, match="another submission's"):
        merge_result(tmp_path, job, bob)
    record = GradebookRecord(ASSIGNMENT, "bob", None, ())
    with pytest.raises(ValueError, match="another submission's"):
        merge_result(tmp_path, job, JobResult("ann", ASSIGNMENT, "graded", 0.0, {}, [], 1.0, 1.0, "n1", gradebook=record))


def test_the_command_line_refuses_conflicting_modes(tmp_path):
    (tmp_path / "subs" / "ann" / ASSIGNMENT).mkdir(parents=True)
    for args, words in ((["--no-sandbox", "--ray-address", "127.0.0.1:1", "--cluster", "127.0.0.1:2"], "do not go together"),
                        (["--jobs", "0"], "at least 1")):
        done = subprocess.run([sys.executable, "-m", "raydata_grader", "grade", str(tmp_path / "subs"), "--out",
                               str(tmp_path / "out"), *args], env=_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]
