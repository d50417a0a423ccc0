"""Test the tests: for every assignment, through nbgrader's autograde with hidden oracles,

- the reference solution scores full marks;
- the blank release scores zero in every grade cell;
- every mutant (a plausible wrong answer in autograder/mutants/) fails exactly the grade
  cells it names, passes the others, and so scores below full marks.

Mutants that cannot reach each other's grade cells share one graded notebook
(``raydata_grader.mutants.mutant_groups``: their answer cells only define things, and they change parts
that no name links); that notebook must fail exactly the union of their cells. The others
are graded alone. Graded kernels connect to the session's shared cluster (RAY_ADDRESS) to
save a cluster start per notebook.
"""

from pathlib import Path

import nbformat
import pytest

from raydata_grader.answers import reference_submission
from raydata_grader.course_dir import autograde, plant_submission, prepare_course_dir
from raydata_grader.mutants import load_mutants, mutant_groups, mutant_submission, part_components, part_of
from raydata_grader.paths import ASSIGNMENTS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    return prepare_course_dir(tmp_path_factory.mktemp("course"))


def _grade(course_dir, ray_cluster, assignment, student, notebook):
    plant_submission(course_dir, assignment, student, notebook)
    score = autograde(course_dir, assignment, student, env={"RAY_ADDRESS": ray_cluster.address})
    assert score.success, f"autograde failed for {student}:\n{score.log[-3000:]}"
    return score


def _cases():
    for assignment in ASSIGNMENTS:
        yield pytest.param(assignment, None, id=f"{assignment}-reference")
        yield pytest.param(assignment, "blank", id=f"{assignment}-blank")
        for group in mutant_groups(assignment, load_mutants(assignment, ROOT), ROOT):
            yield pytest.param(assignment, group, id=f"{assignment}-{'+'.join(m.name for m in group)}")


@pytest.mark.parametrize("assignment,case", list(_cases()))
def test_grading_contract(course_dir, ray_cluster, assignment, case):
    release = course_dir / "exercises" / assignment / f"{assignment}.ipynb"
    if case is None:
        score = _grade(course_dir, ray_cluster, assignment, "reference",
                       reference_submission(assignment, release))
        assert score.max_score > 0
        assert score.score == score.max_score, f"reference solution lost points: {score.cells}"
    elif case == "blank":
        score = _grade(course_dir, ray_cluster, assignment, "blank", nbformat.read(release, as_version=4))
        assert score.cells and all(s == 0 for s, _ in score.cells.values()), f"blank release earned points: {score.cells}"
    else:
        name = "+".join(m.name for m in case)
        score = _grade(course_dir, ray_cluster, assignment, name.replace("+", "-"),
                       mutant_submission(assignment, case, release))
        failed = {cell for cell, (s, m) in score.cells.items() if s == 0}
        partial = {cell for cell, (s, m) in score.cells.items() if 0 < s < m}
        assert not partial, f"{name}: partial grades {partial}"
        # Graded here without a sandbox: what only the host could observe is not failed here
        # (tests/test_forgeries.py grades those mutants in the sandbox).
        fails = {m.name: m.fails - m.observed_fails for m in case}
        problems = [f"{m.name} ({m.description.splitlines()[0]}) should fail {sorted(fails[m.name])}; passed "
                    f"{sorted(fails[m.name] - failed)}" for m in case if not fails[m.name] <= failed]
        expected = set().union(*fails.values())
        if failed - expected:
            problems.append(f"cells that no mutant in {name} names failed: {sorted(failed - expected)}")
        assert not problems, "\n".join(problems)
        assert (score.score < score.max_score) if expected else (score.score == score.max_score)


def test_mutant_groups_keep_coupled_parts_and_side_effects_apart():
    """What lets mutants share a notebook, on the real exercises."""
    groups = {a: mutant_groups(a, load_mutants(a, ROOT), ROOT) for a in ASSIGNMENTS}
    for assignment, found in groups.items():
        names = [m.name for g in found for m in g]
        assert sorted(names) == sorted(m.name for m in load_mutants(assignment, ROOT))
    # data01's parts test only their own function: mutants in one notebook fail disjoint parts
    for g in groups["data01"]:
        parts = [{part_of(c) for c in m.fails} for m in g]
        assert len(set().union(*parts)) == sum(map(len, parts)), g
    assert max(map(len, groups["data01"])) > 1
    # the mutant that patches the grader at cell run time is graded alone
    assert ("m7_patch_grader",) in [tuple(m.name for m in g) for g in groups["data01"]]
    # data04's parts all meet in the measured pipeline: nothing is shared
    assert all(len(g) == 1 for g in groups["data04"])
    components = part_components("data03", ROOT)
    assert components["predictor"] == components["predict_wine"] != components["evaluate"]


def test_a_kernel_that_dies_after_every_grade_cell_keeps_its_grades(course_dir, ray_cluster):
    """Every grade cell is judged by the time the tear-down runs: a kernel that dies there
    (Ray's shutdown, or anything a submission left running) changes no grade. The death is
    noted in the submission's metadata, and the cells after it are marked as not run."""
    from raydata_grader.inert import recorded_caps

    release = course_dir / "exercises" / "data01" / "data01.ipynb"
    nb = reference_submission("data01", release)
    answer = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")
                  and c.cell_type == "code")
    answer.source += "\nimport os as _os, raydata_course as _rc\n_rc.shutdown = lambda *a, **k: _os._exit(1)\n"
    score = _grade(course_dir, ray_cluster, "data01", "dies-in-teardown", nb)
    assert score.score == score.max_score > 0, score.cells
    graded = nbformat.read(course_dir / "autograded" / "dies-in-teardown" / "data01" / "data01.ipynb", as_version=4)
    assert any("after every graded cell had been run and judged: the grades stand" in n
               for n in recorded_caps(graded.metadata)), graded.metadata
    nbformat.validate(graded)  # markdown cells after the death got no outputs
