"""Grading a class: lint and repair, the sandbox, the fixture class end to end, feedback
without hidden tests, re-runs, the student self-check and the student bundle.

The fixture class (``autograder/fixtures/make_class.py``) is generated from the release, one
broken-but-honest submission per student. The slow test grades it with every grade cell judged
outside the kernel, but without the sandbox (``--no-sandbox``), through the shared test
cluster (``--ray-address``: one driver per kernel, each its own Ray job), so that it costs no
Ray start per notebook; every row must then say it was graded without a sandbox. The per-cell
limit is 150 s (two test workers on 2 cores have run data02's standardize_hidden past 60 s),
except for cai, whose answer cell never returns: cai is graded in a second run into the same
folder, with a 30 s limit, so the test does not wait out 150 s. It checks every row's status
and per-cell grades. The class is graded one notebook at a time (``jobs=1``): two test
workers already share two cores. Grading as ``make grade`` does, in the sandbox with a fresh
Ray runtime per notebook, and what a stopped or spread-out run leaves, are
tests/test_grade_at_scale.py's; the hostile submissions, graded in the sandbox, are
tests/test_attacks.py's.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import psutil
import pytest

from support.playground_site import stand_in_site
from support.tables import markdown_rows

from raydata_course.classroom import self_check
from raydata_course.classroom.lint import lint_notebook
from raydata_course.layout import KERNEL_NAME
from raydata_course.units import GiB
from raydata_grader.answers import fill_answers, reference_submission
from raydata_grader.bundle import MARKERS, PACKAGE, audit_bundle, build_bundle, find_secrets, html_text, secret_lines
from raydata_grader.grade import UNSANDBOXED_NOTE, GradeOptions, grade_class
from raydata_grader.intake import choose, collect_submissions
from raydata_grader.outcome import classify
from raydata_grader.paths import ASSIGNMENTS, release_notebook
from raydata_grader.records import Row
from raydata_grader.sandbox import RunOutcome, run_limited
from raydata_grader.summary import summary_markdown

ROOT = Path(__file__).resolve().parents[1]


def _load_fixtures():
    spec = importlib.util.spec_from_file_location("make_class", ROOT / "autograder" / "fixtures" / "make_class.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_class"] = module
    spec.loader.exec_module(module)
    return module


fixtures = _load_fixtures()


@pytest.fixture(scope="module")
def fixture_class(tmp_path_factory):
    return fixtures.build_class(tmp_path_factory.mktemp("class") / "submissions")


def _release(assignment):
    return nbformat.read(release_notebook(assignment), as_version=4)


def _submitted(folder: Path, student: str, assignment: str) -> bytes:
    found, *_ = collect_submissions(folder, ASSIGNMENTS)
    return choose(found[(student, assignment)])[0].data


# ------------------------------------------------------------------- lint and repair


def _exercises():
    from raydata_course.classroom.lint import exercise_grade_ids

    return {a: exercise_grade_ids(_release(a)) for a in ASSIGNMENTS}


@pytest.mark.parametrize("case", [c for c in fixtures.CASES if c.status in ("repaired", "invalid") and c.linted],
                         ids=lambda c: c.student)
def test_lint_status_of_each_fixture(fixture_class, case):
    raw = _submitted(fixture_class, case.student, case.assignment)
    result = lint_notebook(raw, _release(case.assignment), exercise=case.assignment, exercises=_exercises())
    assert result.status == case.status, (result.status, result.message)
    assert case.message in result.message, result.message
    if result.status == "repaired":
        ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in result.notebook.cells]
        release_ids = [c.metadata["nbgrader"]["grade_id"] for c in _release(case.assignment).cells]
        assert [i for i in ids if i] == release_ids, "the repaired notebook must have the release's cells, in order, once"
        assert result.notebook.metadata["kernelspec"]["name"] == KERNEL_NAME
        nbformat.validate(result.notebook)


def test_lint_keeps_student_code_in_duplicated_and_retyped_cells(fixture_class):
    result = lint_notebook(_submitted(fixture_class, "dan", "data02"), _release("data02"))
    assert "appears more than once" in result.message and "changed from code to markdown" in result.message
    answers = [c for c in result.notebook.cells if "def standardize" in c.source]
    assert len(answers) == 2 and answers[0].metadata["nbgrader"]["grade_id"] == "standardize_answer"
    assert "nbgrader" not in answers[1].metadata and "NotImplementedError" not in answers[1].source
    cell = next(c for c in result.notebook.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "long_format_answer")
    assert cell.cell_type == "code" and "def long_format" in cell.source


def test_lint_restores_deleted_and_tampered_cells_from_the_release(fixture_class):
    release = _release("data02")
    by_id = {c.metadata["nbgrader"]["grade_id"]: c for c in release.cells}
    dan = lint_notebook(_submitted(fixture_class, "dan", "data02"), release)
    fay = lint_notebook(_submitted(fixture_class, "fay", "data02"), release)
    for result, gid in ((dan, "phenol_ratio_hidden"), (dan, "add_bands_visible"), (fay, "add_bands_visible"), (fay, "add_bands_hidden")):
        cell = next(c for c in result.notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid)
        assert cell.source == by_id[gid].source
    assert sum("deleted" in r for r in dan.repairs) == 2


def test_lint_deleted_answer_cell_comes_back_empty():
    release = _release("data02")
    nb = reference_submission("data02")
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "standardize_answer")
    nb.cells.remove(answer)
    nb.cells.insert(2, nbformat.v4.new_code_cell(answer.source))  # the student's code, moved to a cell of their own
    result = lint_notebook(nbformat.writes(nb), release)
    restored = next(c for c in result.notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "standardize_answer")
    assert "NotImplementedError" not in restored.source and "def " not in restored.source
    assert any("put back empty" in r for r in result.repairs)


def test_lint_rejects_a_notebook_that_is_not_the_exercise():
    chapter = (ROOT / "chapters" / "01_datasets_and_blocks.ipynb").read_bytes()
    result = lint_notebook(chapter, _release("data01"))
    assert result.status == "invalid" and "not the exercise" in result.message


def test_collect_handles_zips_resubmissions_and_empty_folders(fixture_class):
    found, students, empty, notes = collect_submissions(fixture_class, ASSIGNMENTS)
    assert students == {c.student for c in fixtures.CASES}
    assert len(found[(fixtures.QUINN, "data02")]) == 2 and ("ben", "data02") in found
    chosen, note = choose(found[(fixtures.QUINN, "data02")])
    assert chosen.origin.endswith(f"{fixtures.QUINN}.zip!data02/data02.ipynb") and "2 submissions found" in note
    assert chosen.timestamp_text is None, "a zip's dates (and a timestamp.txt inside it) are never passed on"
    assert "2025-03-02 18:30 UTC" in note and "2025-03-01 09:00 UTC" in note, note
    assert empty[("lea", "data02")] == "the data02 folder holds no .ipynb file (only notes.txt)"


# ------------------------------------------------------------------------------ sandbox


def test_sandbox_stops_a_process_tree_over_its_memory_limit(tmp_path):
    # three children of 160 MiB each: every one is under the per-process limit, the tree is not
    code = ("import subprocess, sys, time\n"
            "kids = [subprocess.Popen([sys.executable, '-c', \"b = bytearray(160 * 2**20); import time; time.sleep(60)\"]) for _ in range(3)]\n"
            "time.sleep(60)\n")
    start = time.monotonic()
    out = run_limited([sys.executable, "-c", code], timeout_s=40, memory_bytes=320 * 2**20, memory_poll_s=0.2)
    assert out.killed == "memory" and out.peak_bytes > 320 * 2**20
    assert time.monotonic() - start < 30


def test_sandbox_per_process_limit_and_wall_time(tmp_path):
    hog = run_limited([sys.executable, "-c", "b = bytearray(2 * 2**30)"], timeout_s=30, memory_bytes=512 * 2**20,
                      log_path=tmp_path / "hog.log")
    assert hog.returncode != 0 and hog.killed is None and "MemoryError" in (tmp_path / "hog.log").read_text()
    sleeper = run_limited([sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"],
                          timeout_s=2, memory_bytes=GiB, memory_poll_s=0.2)
    assert sleeper.killed == "timeout" and sleeper.wall_s < 10
    time.sleep(0.5)
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "300"]
                and p.create_time() > time.time() - 20], "the sandbox left a grandchild running"


# ------------------------------------------------------------------------------ summary


def test_summary_lists_averages_failed_parts_and_students_to_look_at():
    rows = {
        ("a", "data02"): Row("a", "data02", 12, 12, "graded", "", cells={"p_visible": [1, 1], "p_hidden": [2, 2]}),
        ("b", "data02"): Row("b", "data02", 1, 12, "timeout", "p_hidden ran past the per-cell limit",
                             cells={"p_visible": [1, 1], "p_hidden": [0, 2]}),
        ("c", "data02"): Row("c", "data02", 0, 12, "missing", "no submission for data02"),
    }
    table = markdown_rows(summary_markdown(rows))
    assert ["data02", "2/3", "54%", "36%", "graded 1, timeout 1, missing 1"] in table
    assert ["data02", "p_hidden", "1", "2"] in table
    attention = [r[:3] for r in table if len(r) == 5 and r[1] == "data02"]
    assert ["b", "data02", "timeout"] in attention and ["c", "data02", "missing"] in attention
    assert not [r for r in attention if r[0] == "a"]


# --------------------------------------------------------------------- hidden tests


def test_no_hidden_test_or_solution_in_exercises():
    secrets = secret_lines(ROOT)
    assert secrets["oracles"] and secrets["solutions"], "the leak check needs something to look for"
    assert not secrets["hidden"], "hidden-test blocks hold no code: the judge holds the checks"
    for path in sorted((ROOT / "exercises").rglob("*.ipynb")):
        assert find_secrets(path.read_text(), secrets) == [], path


def test_student_bundle_holds_no_grader_material(tmp_path, stand_in_bundle):
    path = stand_in_bundle
    assert audit_bundle(path, ROOT) == []
    with zipfile.ZipFile(path) as z:
        names = {n.split("/", 1)[1] for n in z.namelist()}
    assert {"README.md", "Makefile", "requirements.txt", "requirements-lock.txt", "pyproject.toml"} <= names
    released = {p.relative_to(ROOT).as_posix() for p in (ROOT / "exercises").glob("*/*.ipynb")}
    assert released and released <= names and {f".pristine/{r}" for r in released} <= names
    assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "chapters").glob("*.ipynb")} <= names
    # the whole student package, by construction, and nothing of the grader's
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*.py")}
    assert package and package <= names
    assert not [n for n in names if n.split("/")[0] in ("solutions", "autograder", "tests")]
    assert not [n for n in names if "raydata_grader" in n]
    # every raydata_course module a bundled notebook imports is in the bundle
    import ast

    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not name.endswith(".ipynb"):
                continue
            for cell in nbformat.reads(z.read(name).decode(), as_version=4).cells:
                if cell.cell_type != "code":
                    continue
                try:
                    tree = ast.parse("\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
                except SyntaxError:
                    continue
                for node in ast.walk(tree):
                    mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                            else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                    for mod in mods:
                        if mod.startswith("raydata_course."):
                            rel = "src/" + mod.replace(".", "/")
                            assert f"{rel}.py" in names or f"{rel}/__init__.py" in names, f"{name} imports {mod}"
    # the audit does catch a leak
    leaky = tmp_path / "leaky.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(leaky, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item))
        dst.write(ROOT / "autograder" / "oracles" / "data01.py", "streaming-ray-data/src/raydata_course/oracle_copy.py")
        dst.writestr("streaming-ray-data/src/raydata_course/needs_grader.py", "import raydata_grader.hidden\n")
    leaks = audit_bundle(leaky, ROOT)
    assert any("oracles:" in leak for leak in leaks)
    assert "src/raydata_course/needs_grader.py: imports the grader (raydata_grader)" in leaks
    # files unpack readable by everyone, not only their owner
    with zipfile.ZipFile(path) as z:
        assert {info.external_attr >> 16 for info in z.infolist()} == {0o644}
    # nbgrader's Validate, run from the unpacked bundle, grades as the grader does
    with zipfile.ZipFile(path) as z:
        z.extractall(tmp_path / "unpacked")
    from nbgrader.preprocessors import Execute
    from nbgrader.server_extensions.validate_assignment.handlers import ValidateAssignmentHandler
    from nbgrader.validator import Validator

    from raydata_course.jupyter import VALIDATE_KERNEL_ARGUMENTS
    from raydata_course.layout import GRADER_CELL_TIMEOUT_S

    cwd = os.getcwd()
    os.chdir(tmp_path / "unpacked" / "streaming-ray-data")
    try:
        execute = Execute(parent=Validator(config=ValidateAssignmentHandler.load_config(None)))
    finally:
        os.chdir(cwd)
    assert execute.extra_arguments == VALIDATE_KERNEL_ARGUMENTS
    assert (execute.timeout, execute.kernel_name) == (GRADER_CELL_TIMEOUT_S, KERNEL_NAME)


def test_student_bundle_refuses_answered_exercises(tmp_path):
    """An instructor who answered an exercise in place cannot ship the answers."""
    course = tmp_path / "course"
    for name in ("chapters", "exercises", "solutions", "autograder/oracles", "autograder/mutants", "src/raydata_course",
                 "playground"):
        shutil.copytree(ROOT / name, course / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "Makefile", course / "Makefile")
    answered = reference_submission("data01", course / "exercises" / "data01" / "data01.ipynb")
    nbformat.write(answered, course / "exercises" / "data01" / "data01.ipynb")
    site = stand_in_site(tmp_path / "site", sorted((ROOT / "playground").glob("*.ipynb")))
    with pytest.raises(RuntimeError, match=r"answered or edited by hand\?\): exercises/data01/data01.ipynb\."):
        build_bundle(tmp_path / "bundle.zip", course, site=site)
    assert not (tmp_path / "bundle.zip").exists()


# ------------------------------------------------------------------------ self-check


def test_self_check_reports_structure_without_running(tmp_path, fixture_class):
    course = tmp_path / "course"  # an exercise kept with its pristine release, without chapters/
    (course / "exercises" / "data02").mkdir(parents=True)
    (course / ".pristine" / "exercises" / "data02").mkdir(parents=True)
    (course / ".pristine" / "exercises" / "data02" / "data02.ipynb").write_bytes(release_notebook("data02").read_bytes())
    mine = course / "exercises" / "data02" / "data02.ipynb"
    mine.write_bytes(_submitted(fixture_class, "dan", "data02"))
    report = self_check(notebook=mine, run=False, verbose=False)
    assert not report.ok and sum("was deleted" in s for s in report.structure) == 2
    assert set(report.hidden) == {"phenol_ratio_hidden", "standardize_hidden", "add_bands_hidden", "long_format_hidden"}
    mine.write_bytes(release_notebook("data02").read_bytes())
    report = self_check(notebook=mine, run=False, verbose=False)
    assert report.structure == [] and len(report.unanswered) == 4


@pytest.mark.slow
def test_self_check_runs_visible_tests_only(tmp_path, ray_cluster, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    nb = fill_answers(reference_submission("data02"),
                      {"add_bands_answer": "def add_bands(ds):\n    return ds\n"})
    mine = tmp_path / "data02.ipynb"
    nbformat.write(nb, mine)
    report = self_check("data02", notebook=mine, verbose=False)
    assert report.ran and report.structure == []
    assert report.visible == {**{g: "passed" for g in ("phenol_ratio_visible", "standardize_visible", "long_format_visible")},
                              "add_bands_visible": report.visible["add_bands_visible"]}
    assert report.visible["add_bands_visible"].startswith(("AssertionError", "KeyError"))
    assert "hidden_check" not in str(report) and not report.ok


# ----------------------------------------------------------------- the fixture class


def _rows_csv(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_grade_the_fixture_class(fixture_class, tmp_path, ray_cluster):
    import shutil
    from dataclasses import replace

    out = tmp_path / "grading"
    # Without the sandbox, on the session's shared cluster: these students are broken, not hostile,
    # and a Ray start per notebook would take minutes each. The sandbox's own statuses (memory,
    # a dead kernel, leftovers) are tests/test_attacks.py's and the fresh-runtime test's below.
    options = GradeOptions(cell_timeout_s=150, notebook_timeout_s=900, memory_bytes=4 * GiB, quiet=True,
                           sandbox=False, ray_address=ray_cluster.address, jobs=1)
    # cai's cell never returns, and uma's ignores the interrupt at the limit: graded in a later run
    # with a short per-cell limit (their other cells take seconds), which keeps everyone else's rows.
    late = ("cai", "uma")
    everyone_else = tmp_path / "class"
    shutil.copytree(fixture_class, everyone_else,
                    ignore=lambda folder, names: set(late) if Path(folder) == fixture_class else set())
    for student in late:
        shutil.copytree(fixture_class / student, tmp_path / "late" / student)
    start = time.monotonic()
    grade_class(everyone_else, out, options)
    rows = grade_class(tmp_path / "late", out, replace(options, cell_timeout_s=30, assignments=fixtures.ASSIGNMENTS))
    wall_s = time.monotonic() - start
    expected = fixtures.expected_rows()
    graded = [r for r in rows.values() if r.seconds]
    print(f"\nfixture class: {len(rows)} rows, {len(graded)} notebooks autograded in {wall_s:.0f} s "
          f"({sum(r.seconds for r in graded) / max(len(graded), 1):.1f} s per notebook)")
    for (student, assignment), row in sorted(rows.items()):
        print(f"  {student:6} {assignment} {row.status:9} {row.score:4g}/{row.max_score:g}  {row.message[:110]}")

    assert set(rows) == set(expected)
    release_max = {a: sum(c.metadata["nbgrader"].get("points", 0) for c in _release(a).cells
                          if c.metadata["nbgrader"].get("grade")) for a in fixtures.ASSIGNMENTS}
    problems = []
    for key, case in expected.items():
        row = rows[key]
        if row.status != case.status or case.message not in row.message:
            problems.append(f"{key}: {row.status} ({row.message[:200]}), expected {case.status} with {case.message!r}")
            continue
        assert row.max_score == release_max[key[1]], key
        assert (UNSANDBOXED_NOTE in row.message) == (row.seconds > 0), key  # every row graded so says so
        if case.lost is None:
            if case.status in ("missing", "invalid", "crashed"):
                assert row.score == 0 and row.message, key
            continue
        lost = {cell for cell, (s, m) in row.cells.items() if s < m}
        if lost != set(case.lost) or row.score != row.max_score - sum(m for c, (s, m) in row.cells.items() if c in case.lost):
            problems.append(f"{key}: lost {sorted(lost)}, score {row.score}, expected to lose {sorted(case.lost)}")
    assert not problems, "\n".join(problems)

    # isolation: ned's ray.shutdown() and oli's os._exit(1) did not reach quinn, graded after them
    assert rows[(fixtures.QUINN, "data02")].score == rows[(fixtures.QUINN, "data02")].max_score
    assert rows[(fixtures.NED, "data02")].status == "graded" and rows[(fixtures.NED, "data02")].score >= 9
    import ray

    assert ray.is_initialized() and ray.cluster_resources().get("CPU") == ray_cluster.num_cpus

    # the CSV: one row per student and assignment, every failure explained
    table = _rows_csv(out)
    assert [tuple(r) for r in [table[0].keys()]] == [("student", "assignment", "score", "max_score", "status", "message")]
    assert len(table) == len({(r["student"], r["assignment"]) for r in table}) == len(expected)
    assert all(r["message"] for r in table if r["status"] != "graded")

    # feedback for every row, small, and without hidden tests or oracle code
    secrets = secret_lines(ROOT, include_solutions=False)
    for (student, assignment), row in rows.items():
        page = out / "feedback" / row.key / assignment / f"{assignment}.html"
        assert page.is_file(), page
        text = page.read_text()
        assert len(text) < 2_000_000, f"{page} is {len(text)} characters"
        # quinn handed in the reference solution as solutions/ holds it: its answer cells carry
        # nbgrader's solution markers, her own text; the hidden tests' markers reach no one
        markers = MARKERS[2:] if student == fixtures.QUINN else MARKERS
        assert find_secrets(html_text(text), secrets, markers) == [] and find_secrets(text, {}, markers) == [], page
        assert f"Status: {row.status}" in html_text(text)
    fay = html_text((out / "feedback" / "fay" / "data02" / "data02.html").read_text())
    assert "Hidden test: the grader ran it outside your kernel" in fay and "AssertionError" in fay
    assert "was edited" in (out / "repairs" / "fay.md").read_text()

    # the summary names the class average, the most-failed parts and who needs attention
    summary = markdown_rows((out / "summary.md").read_text())
    assert any(r[0] == "data02" for r in summary) and any("phenol_ratio_hidden" in r for r in summary)
    attention = {r[0] for r in summary if len(r) == 5 and r[1] == "data02"}
    assert {"cai", "ivy", "jon", "kim", "lea", "oli", "pam", "uma", fixtures.LOOSE} <= attention
    assert {"carol", "dora", fixtures.HAL} <= {r[0] for r in summary if len(r) == 5 and r[1] == "data01"}

    # names as the class wrote them in the rows, every file under a short key
    from raydata_grader.student_names import MAX_KEY_CHARS

    assert {fixtures.QUINN, fixtures.HAL, fixtures.NED} <= {r["student"] for r in table}
    written = [p for folder in ("received", "submitted", "autograded", "work", "feedback", "notes")
               for p in (out / folder).iterdir()]
    assert {p.name for p in written if p.parent.name == "autograded"} >= {rows[(fixtures.QUINN, "data02")].key}
    assert all(len(p.name) <= MAX_KEY_CHARS for p in written), [p.name for p in written if len(p.name) > MAX_KEY_CHARS]

    # re-run: nothing is graded again, nothing is duplicated or lost
    before = (out / "grades.csv").read_text()
    start = time.monotonic()
    grade_class(fixture_class, out, options)
    assert (out / "grades.csv").read_text() == before and time.monotonic() - start < 60
    # a later run with one student only keeps everyone else's grades
    only_hal = tmp_path / "late-hal"
    (only_hal / fixtures.HAL).mkdir(parents=True)
    shutil.copytree(fixture_class / fixtures.HAL / "data01", only_hal / fixtures.HAL / "data01")
    grade_class(only_hal, out, options)
    assert (out / "grades.csv").read_text() == before


@pytest.mark.slow
def test_a_cluster_that_refuses_the_token_stops_the_run_in_one_line(tmp_path):
    """A head started the usual way with token authentication on, and a grader without
    RAY_AUTH_MODE=token: one line saying what to set, exit 2, in seconds (not ray.init's 20 s of
    InvalidAuthToken warnings and a traceback). With the token, the same check passes."""
    import secrets
    import shutil
    import signal
    import subprocess
    import tempfile

    from raydata_course.cluster import ray_processes
    from support.lab_server import free_port

    os.makedirs(os.environ["RAYDATA_COURSE_TMPDIR"], exist_ok=True)
    temp_dir = tempfile.mkdtemp(prefix="auth-", dir=os.environ["RAYDATA_COURSE_TMPDIR"])
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    token_env = {**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    token_env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen([str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={port}",
                             f"--temp-dir={temp_dir}", "--num-cpus=0", "--include-dashboard=false",
                             "--disable-usage-stats"], env=token_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        probe = [sys.executable, "-c", f"from raydata_grader.cluster_auth import check_cluster_auth; "
                                       f"check_cluster_auth({address!r})"]
        deadline = time.monotonic() + 120
        while subprocess.run(probe, env=token_env, capture_output=True).returncode != 0:  # the head is up
            assert head.poll() is None and time.monotonic() < deadline, "the token-auth head did not start"
            time.sleep(1)
        plain_env = {k: v for k, v in token_env.items() if not k.startswith("RAY_AUTH")}
        (tmp_path / "class" / "amy" / "data01").mkdir(parents=True)  # one notebook to grade: the run reaches Ray
        shutil.copyfile(release_notebook("data01"), tmp_path / "class" / "amy" / "data01" / "data01.ipynb")
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "raydata_grader", "grade", str(tmp_path / "class"), "--out",
                              str(tmp_path / "out"), "--cluster", address], env=plain_env, capture_output=True,
                             text=True, timeout=120)
        wall_s = time.monotonic() - start
        lines = [ln for ln in (run.stdout + run.stderr).splitlines() if ln.strip()]
        assert run.returncode == 2, lines
        assert "InvalidAuthToken" not in run.stdout + run.stderr and "Traceback" not in run.stderr, lines
        assert len(lines) == 1 and lines[0].startswith("[grade] error: the Ray cluster at"), lines
        assert "set RAY_AUTH_MODE=token where you run the grader" in lines[0] and "ray get-auth-token" in lines[0]
        assert wall_s < 15, f"{wall_s:.0f} s"
        wrong = subprocess.run(probe, env={**token_env, "RAY_AUTH_TOKEN": "0" * 32}, capture_output=True, text=True)
        assert "refused the token this process sends (from RAY_AUTH_TOKEN)" in wrong.stderr, wrong.stderr
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while ray_processes(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        for proc in ray_processes(temp_dir):
            os.kill(proc["pid"], signal.SIGKILL)


# ----------------------------------------------------------------------- classification


def test_classify_every_outcome():

    options = GradeOptions(cell_timeout_s=15, notebook_timeout_s=100, memory_bytes=4 * GiB)
    ok = RunOutcome(0, 10.0, None, GiB, 0)
    cells = {"a_visible": [1, 1], "a_hidden": [0, 2]}

    def result(*errors, success=True, log=""):
        return {"success": success, "score": 1.0, "max_score": 3.0, "cells": cells, "log": log,
                "errors": [{"index": i, "grade_id": g, "ename": e, "evalue": ""} for i, g, e in errors]}

    where = {"index": 3, "grade_id": "a_answer"}
    assert classify(result(), ok, None, options)[:2] == ("graded", 1.0)
    assert "lost points in a_hidden" in classify(result(), ok, None, options)[3]
    status, score, _, msgs = classify(result((3, "a_answer", "CellTimeoutError")), ok, where, options)
    assert (status, score) == ("timeout", 1.0) and "a_answer ran past the per-cell limit of 15 s" in msgs[0]
    status, _, _, msgs = classify(result((3, "a_answer", "MemoryError")), ok, where, options)
    assert status == "crashed" and "ran out of memory" in msgs[0]
    status, _, _, msgs = classify(result((1, "setup", "Exception")), ok, where, options, frozenset({"setup"}))
    assert status == "crashed" and "instructor's cell 'setup' failed" in msgs[0]
    # an instructor's cell that runs the student's functions, after the student's own cell raised
    status, _, _, msgs = classify(result((3, "a_answer", "NotImplementedError"), (5, "run", "NameError")), ok, where,
                                 options, frozenset({"setup", "run"}))
    assert status == "graded" and "after the student's 'a_answer' raised NotImplementedError" in msgs[0]
    status, _, _, msgs = classify(result((5, "run", "NameError"), (7, "a_answer", "ValueError")), ok, where,
                                  options, frozenset({"setup", "run"}))
    assert status == "crashed" and "instructor's cell 'run' failed" in msgs[0]  # nothing of the student's before it
    # a failed test cell is a verdict, not the student's code raising; and Ray dying is the environment's
    for first in ((2, "a_visible", "AssertionError"), (3, "a_answer", "NotImplementedError")):
        status, _, _, msgs = classify(result(first, (5, "run", "RaySystemError")), ok, where, options,
                                      frozenset({"setup", "run"}))
        assert status == "crashed" and "instructor's cell 'run' failed" in msgs[0], first
    died = result(success=False, log="nbclient.exceptions.DeadKernelError: Kernel died")
    just_started = {**where, "started_s": 1000.0}
    status, score, _, msgs = classify(died, RunOutcome(0, 10.0, None, GiB, 0, ended_s=1005.0), just_started, options)
    assert (status, score) == ("crashed", 0.0) and "kernel died while running cell 'a_answer'" in msgs[0]
    # died after running past the 15 s per-cell limit: the interrupt took the kernel down
    status, score, _, msgs = classify(died, RunOutcome(0, 30.0, None, GiB, 0, ended_s=1016.0), just_started, options)
    assert (status, score) == ("timeout", 0.0) and "cell 'a_answer' ran past the per-cell limit of 15 s" in msgs[0]
    assert "died when it was interrupted" in msgs[0]
    # a cell that ignores the interrupt at the limit (SIGINT ignored, a loop in C): nbclient waits for
    # its output, then fails the notebook; the log of such a run (measured on a real one) says so
    stuck = result(success=False, log="[ERROR] Timeout waiting for execute reply (15s).\n[ERROR] Interrupting "
                                      "kernel\n...\nCellTimeoutError: ... The message was: Timeout waiting for IOPub output.")
    status, score, _, msgs = classify(stuck, RunOutcome(0, 80.0, None, GiB, 0, ended_s=1000.0 + 15 + 60),
                                      just_started, options)
    assert (status, score) == ("timeout", 0.0) and "ignored the interrupt" in msgs[0], msgs
    assert "cell 'a_answer' ran past the per-cell limit of 15 s" in msgs[0] and "overloaded" not in msgs[0]
    # output that stops coming without an interrupt before it: still the machine's load
    slow = result(success=False, log="Timeout waiting for IOPub output")
    status, _, _, msgs = classify(slow, RunOutcome(0, 30.0, None, GiB, 0, ended_s=1005.0), just_started, options)
    assert status == "crashed" and "overloaded" in msgs[0]
    status, score, _, msgs = classify(None, RunOutcome(-9, 100.0, "timeout", GiB, 3), where, options)
    assert (status, score) == ("timeout", 0.0) and "per-notebook limit of 100 s" in msgs[0]
    status, score, _, msgs = classify(None, RunOutcome(-9, 5.0, "memory", 5 * GiB, 3), where, options)
    assert (status, score) == ("crashed", 0.0) and "over the memory limit of 4.0 GiB" in msgs[0]
