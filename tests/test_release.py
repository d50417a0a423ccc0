"""exercises/ is nbgrader's release of solutions/, current, and free of solutions and oracles."""

import re
from pathlib import Path


from raydata_grader.answers import reference_answers
from raydata_grader.bundle import changed_exercises
from raydata_grader.paths import ASSIGNMENTS, release_notebook

ROOT = Path(__file__).resolve().parents[1]


def test_exercises_are_current_with_solutions():
    assert changed_exercises(ROOT) == [], "exercises/ is stale: run `make release` and commit exercises/"


def test_release_holds_no_solution_or_hidden_test():
    oracle_names = set()
    for oracle in (ROOT / "autograder" / "oracles").glob("*.py"):
        oracle_names |= set(re.findall(r"^def (check_\w+)", oracle.read_text(), re.M))
    assert oracle_names
    for assignment in ASSIGNMENTS:
        text = release_notebook(assignment).read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "hidden_check"):
            assert marker not in text, f"{assignment} release contains {marker!r}"
        for name in oracle_names:
            assert name not in text, f"{assignment} release names hidden check {name}"
        for answer in reference_answers(assignment).values():
            body = [ln for ln in answer.splitlines() if ln.strip() and not ln.lstrip().startswith(("def ", '"""'))]
            assert not any(ln in text for ln in body[:1]), f"{assignment} release contains reference code"
