"""Points held for review: the inventory of facts, the hold, and the instructor's decision.

The hold and the decision run on a small gradebook made with nbgrader's own API (no kernel, no
release): a row whose notebook holds forging code keeps what rests on recomputed and observed
facts and has what rests on reported facts held; ``review --accept`` gives them, ``--reject``
keeps them at 0, and a decision saved in formgrader is taken in.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from raydata_grader.facts import (REPORTED, InventoryError, facts_of, forged_by, inventory_rows, observed,
                                  recomputed, reported)
from raydata_grader.gradebook import GradebookRecord, NotebookRecord, apply_record
from raydata_grader.judge import judges, load_checks
from raydata_grader.paths import ASSIGNMENTS, oracles_dir
from raydata_grader.records import Row, read_rows, save_rows
from raydata_grader.review import cells_to_hold, decide, hold, hold_in_gradebook, pending, release_in_gradebook, sync_formgrader

ROOT = Path(__file__).resolve().parents[1]
CELLS = {"a_visible": 1.0, "a_hidden": 2.0, "b_visible": 1.0, "b_hidden": 2.0}
FINDING = "b_answer, line 2 (patches-imported: changes time, which the notebook imported): time.perf_counter = f"


def test_every_check_names_its_facts_and_the_inventory_is_current():
    """What CI runs (``python -m raydata_grader inventory --check``): every grade cell's check
    names at least one fact of a known kind, and docs/grader/inventory.md is what the oracles say."""
    from raydata_grader.__main__ import main

    assert main(["inventory", "--check", "--out", str(ROOT / "docs" / "grader" / "inventory.md")]) == 0
    rows = inventory_rows(tuple(ASSIGNMENTS), oracles_dir())
    assert {r["kind"] for r in rows} <= {"recomputed", "observed outside", "reported"}


def test_a_check_without_facts_fails_the_inventory(tmp_path):
    source = (oracles_dir() / "data01.py").read_text()
    (tmp_path / "data01.py").write_text(source.replace(
        '@judges("first_rows_by_visible", facts=[recomputed("the visible rows")])', '@judges("first_rows_by_visible")'))
    with pytest.raises(InventoryError, match="first_rows_by_visible.*names no fact"):
        inventory_rows(("data01",), tmp_path)


def test_measurements_the_kernel_could_fake_are_no_longer_what_a_point_rests_on_alone():
    """The clocks, load counters and peaks moved outside: the data02 speed check, the data03
    load counts, data04's hidden peak and spill and data05's split rest on no reported fact
    of their own."""
    moved = {("data02", "phenol_ratio_hidden"), ("data03", "predictor_hidden"), ("data05", "read_shards_hidden")}
    for assignment, gid in moved:
        facts = facts_of(load_checks(assignment, oracles_dir())[gid])
        assert facts and all(f.kind != REPORTED for f in facts), (assignment, gid, facts)
    data04 = load_checks("data04", oracles_dir())
    for gid in ("peak_hidden", "no_spill_hidden"):
        kinds = {f.what: f.kind for f in facts_of(data04[gid])}
        measured = [k for what, k in kinds.items() if "peak" in what or "spilled" in what]
        assert measured == ["observed outside"], kinds


def test_judges_keeps_the_facts():
    @judges("x_hidden", facts=[recomputed("x"), reported("y", "the kernel")])
    def check(k):
        return None

    assert [f.kind for f in facts_of(check)] == ["recomputed", "reported"]


def _row(**kw) -> Row:
    cells = {g: [m, m] for g, m in CELLS.items()}
    base = dict(student="ann", assignment="dx", score=6.0, max_score=6.0, status="graded", message="", cells=cells)
    return Row(**{**base, **kw})


def test_the_hold_takes_only_the_reported_points_and_only_with_findings():
    assert hold(_row(), ["b_hidden"], []) == _row()
    held = hold(_row(), ["b_hidden", "a_visible"], [FINDING])
    assert held.status == "review" and held.score == 3.0
    assert held.held == {"a_visible": [1.0, 1.0], "b_hidden": [2.0, 2.0]}
    assert held.cells["b_hidden"] == [0.0, 2.0] and held.cells["a_hidden"] == [2.0, 2.0]
    assert "3 point(s) held" in held.message and "time.perf_counter" in held.message
    # A reported check that failed anyway holds nothing: the row stays graded, the lines noted.
    failed = _row(score=4.0, cells={**_row().cells, "b_hidden": [0.0, 2.0]})
    kept = hold(failed, ["b_hidden"], [FINDING])
    assert kept.status == "graded" and kept.held == {} and kept.findings == [FINDING] and "no point" in kept.message


def test_an_observed_fact_that_code_could_imitate_is_held_only_when_the_scan_finds_that_code():
    """data05's split is observed from Ray's own processes, but a class of the notebook's named
    SplitCoordinator would show the same title: the check names the rule that flags such a
    class, and only a notebook that trips it has the check's points held."""
    split = load_checks("data05", oracles_dir())["read_shards_hidden"]
    assert forged_by(split) == ["impostor-name"]
    imitable = {"read_shards_hidden": forged_by(split)}
    assert cells_to_hold(["collate_hidden"], imitable, ["patches-imported"]) == {"collate_hidden"}
    assert cells_to_hold(["collate_hidden"], imitable, ["impostor-name"]) == {"collate_hidden", "read_shards_hidden"}
    with pytest.raises(ValueError, match="rules the scan does not have"):
        observed("x", "y", forged_by=("no-such-rule",))
    with pytest.raises(ValueError, match="only an observed fact"):
        from raydata_grader.facts import Fact

        Fact("reported", "x", "y", ("impostor-name",))


@pytest.fixture(scope="module")
def gradebook_template(tmp_path_factory):
    """A one-assignment gradebook (nbgrader's API) with ann's submission, made once (a new
    gradebook runs nbgrader's database migrations, seconds)."""
    import os

    from nbgrader.api import Gradebook

    out = tmp_path_factory.mktemp("gradebook")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")  # alembic
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        gb.add_assignment("dx")
        gb.add_notebook("dx", "dx")
        for name, points in CELLS.items():
            gb.add_grade_cell(name, "dx", "dx", max_score=points, cell_type="code")
            gb.add_source_cell(name, "dx", "dx", cell_type="code", locked=True, source="pass", checksum="x")
    apply_record(out, GradebookRecord("dx", "ann", None, (NotebookRecord("dx", None, dict(CELLS), {}),)))
    return (out / "gradebook.db").read_bytes()


@pytest.fixture()
def course(tmp_path, gradebook_template):
    """A grading folder holding a copy of the template gradebook."""
    out = tmp_path / "grading"
    out.mkdir()
    (out / "gradebook.db").write_bytes(gradebook_template)
    return out


def _scores(out: Path) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        return {g.name: (float(g.score), g.needs_manual_grade) for g in gb.find_submission_notebook("dx", "dx", "ann").grades}


@pytest.mark.parametrize("accept", [True, False])
def test_the_instructor_decides_what_was_held(course, accept):
    row = hold(_row(), ["b_hidden"], [FINDING])
    save_rows(course, {("ann", "dx"): row})
    hold_in_gradebook(course, row)
    assert _scores(course)["b_hidden"] == (0.0, True) and _scores(course)["a_hidden"] == (2.0, False)
    assert [r.student for r in pending(course)] == ["ann"]
    decided = decide(course, "ann", "dx", accept=accept, note="checked by hand")
    assert decided.status == "graded" and decided.held == {} and "checked by hand" in decided.message
    assert decided.score == (6.0 if accept else 4.0)
    assert _scores(course)["b_hidden"] == ((2.0 if accept else 0.0), False)
    assert read_rows(course)[("ann", "dx")] == decided and pending(course) == []
    with pytest.raises(ValueError, match="not in review"):
        decide(course, "ann", "dx", accept=True)


def test_a_decision_saved_in_formgrader_is_taken_in(course):
    from nbgrader.api import Gradebook

    row = hold(_row(), ["a_hidden", "b_hidden"], [FINDING])
    save_rows(course, {("ann", "dx"): row})
    hold_in_gradebook(course, row)
    assert sync_formgrader(course) == []  # nothing decided yet
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:  # what formgrader's save does
        for name, score in (("a_hidden", 2.0), ("b_hidden", 1.0)):
            grade = gb.find_grade(name, "dx", "dx", "ann")
            grade.manual_score, grade.needs_manual_grade = score, False
        gb.db.commit()
    (decided,) = sync_formgrader(course)
    assert decided.status == "graded" and decided.score == 5.0 and decided.cells["b_hidden"] == [1.0, 2.0]


def test_grading_again_releases_an_undecided_hold(course):
    row = hold(_row(), ["b_hidden"], [FINDING])
    hold_in_gradebook(course, row)
    release_in_gradebook(course, row)
    assert _scores(course)["b_hidden"] == (2.0, False)


def test_the_review_command_lists_and_decides(course):
    row = hold(_row(), ["b_hidden"], [FINDING])
    save_rows(course, {("ann", "dx"): row})
    hold_in_gradebook(course, row)
    run = lambda *a: subprocess.run([sys.executable, "-m", "raydata_grader", "review", "--out", str(course), *a],  # noqa: E731
                                    capture_output=True, text=True, cwd=ROOT)
    listed = run()
    assert listed.returncode == 0 and "ann/dx: 2 point(s) held in b_hidden" in listed.stdout
    assert "time.perf_counter = f" in listed.stdout
    assert run("ann", "dx").returncode == 2  # neither --accept nor --reject
    assert run("bob", "dx", "--accept").returncode == 2
    done = run("ann", "dx", "--accept")
    assert done.returncode == 0 and "graded 6/6" in done.stdout, done.stdout
