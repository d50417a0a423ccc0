"""Test the tests: for every assignment, through nbgrader's autograde with hidden oracles,

- the reference solution scores full marks;
- the blank release scores zero in every grade cell;
- every mutant (a plausible wrong answer in autograder/mutants/) fails exactly the grade
  cells it names, passes the others, and so scores below full marks.

Graded kernels connect to the session's shared cluster (RAY_ADDRESS) to save a cluster start
per notebook.
"""

from pathlib import Path

import nbformat
import pytest

from raydata_course import grading

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory):
    return grading.prepare_course_dir(tmp_path_factory.mktemp("course"))


def _grade(course_dir, ray_cluster, assignment, student, notebook):
    grading.plant_submission(course_dir, assignment, student, notebook)
    score = grading.autograde(course_dir, assignment, student, env={"RAY_ADDRESS": ray_cluster.address})
    assert score.success, f"autograde failed for {student}:\n{score.log[-3000:]}"
    return score


def _cases():
    for assignment in grading.ASSIGNMENTS:
        yield pytest.param(assignment, None, id=f"{assignment}-reference")
        yield pytest.param(assignment, "blank", id=f"{assignment}-blank")
        for mutant in grading.load_mutants(assignment, ROOT):
            yield pytest.param(assignment, mutant, id=f"{assignment}-{mutant.name}")


@pytest.mark.parametrize("assignment,case", list(_cases()))
def test_grading_contract(course_dir, ray_cluster, assignment, case):
    release = course_dir / "exercises" / assignment / f"{assignment}.ipynb"
    if case is None:
        score = _grade(course_dir, ray_cluster, assignment, "reference",
                       grading.reference_submission(assignment, release))
        assert score.max_score > 0
        assert score.score == score.max_score, f"reference solution lost points: {score.cells}"
    elif case == "blank":
        score = _grade(course_dir, ray_cluster, assignment, "blank", nbformat.read(release, as_version=4))
        assert score.cells and all(s == 0 for s, _ in score.cells.values()), f"blank release earned points: {score.cells}"
    else:
        score = _grade(course_dir, ray_cluster, assignment, case.name,
                       grading.mutant_submission(assignment, case, release))
        failed = {cell for cell, (s, m) in score.cells.items() if s == 0}
        partial = {cell for cell, (s, m) in score.cells.items() if 0 < s < m}
        assert not partial, f"{case.name}: partial grades {partial}"
        assert failed == case.fails, (
            f"{case.name} ({case.description.splitlines()[0]}) should fail exactly {sorted(case.fails)}, "
            f"failed {sorted(failed)}"
        )
        assert score.score < score.max_score
