"""exercises/ is nbgrader's release of solutions/, current, and free of solutions and oracles."""

import re
import shutil
from pathlib import Path

import nbformat

from raydata_course.notebooks import strip_outputs
from raydata_grader.answers import reference_answers
from raydata_grader.course_dir import release
from raydata_grader.paths import ASSIGNMENTS, release_notebook

ROOT = Path(__file__).resolve().parents[1]


def test_exercises_are_current_with_solutions(tmp_path):
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    for path in release(course_dir=tmp_path):
        fresh = strip_outputs(nbformat.read(path, as_version=4))
        committed_path = ROOT / path.relative_to(tmp_path)
        assert committed_path.is_file(), f"{committed_path} is missing: run `make release`"
        committed = nbformat.read(committed_path, as_version=4)
        assert nbformat.writes(fresh) == nbformat.writes(committed), (
            f"{committed_path.relative_to(ROOT)} is stale: run `make release` and commit exercises/"
        )


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
