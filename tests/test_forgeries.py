"""The forgery class, graded in the sandbox: a forged fact earns nothing its unforged twin would not.

``autograder/fixtures/forgery_class.py`` builds one student per kind of forgery (a forged clock
and timing helpers, a faked load counter, a replaced measurement helper, a class that takes
Ray's name, a driver-side write with the grader's guard switched off, and a split that is not
a ``streaming_split``), each on top of mutants whose lost cells are known. For each row: the
score is at most the unforged twin's; either the twin's cells are lost exactly (the fact is
recomputed or observed outside the kernel, so the trick changed nothing) or the row is in
``review`` with the passed checks that rest on a reported fact held (and, held points aside,
the twin's cells lost); the lines that forge are
quoted; and the feedback never says "The grader measured" about a figure the kernel made.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from raydata_course.units import GiB
from raydata_grader.facts import forged_by, rests_on_reported
from raydata_grader.grade import GradeOptions, grade_class
from raydata_grader.judge import load_checks
from raydata_grader.paths import oracles_dir
from raydata_grader.review import decide

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _load():
    spec = importlib.util.spec_from_file_location("forgery_class", ROOT / "autograder" / "fixtures" / "forgery_class.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["forgery_class"] = module
    spec.loader.exec_module(module)
    return module


def test_no_forgery_scores_above_its_unforged_twin(tmp_path, sandbox_support):
    forgeries = _load()
    folder = forgeries.build_forgery_class(tmp_path / "class")
    out = tmp_path / "grading"
    options = GradeOptions(cell_timeout_s=150, notebook_timeout_s=900, memory_bytes=4 * GiB, quiet=True, jobs=1)
    rows = grade_class(folder, out, options)
    problems = []
    for forgery in forgeries.FORGERIES:
        row = rows.get((forgery.student, forgery.assignment))
        if row is None:
            problems.append(f"{forgery.student}: no row")
            continue
        twin_lost = forgeries.unforged_lost(forgery)
        twin_score = row.max_score - sum(m for gid, (s, m) in row.cells.items() if gid in twin_lost)
        lost = {gid for gid, (s, m) in row.cells.items() if s < m}
        print(f"  {forgery.student:12} {row.status:7} {row.score:g}/{row.max_score:g} (twin {twin_score:g}) "
              f"held {sorted(row.held)} lost {sorted(lost)}")
        if row.score > twin_score:
            problems.append(f"{forgery.student}: scored {row.score:g}, its unforged twin {twin_score:g}")
        if row.status != forgery.status:
            problems.append(f"{forgery.student}: {row.status}, expected {forgery.status} ({row.message[:300]})")
        if row.status == "review":
            reported_cells = {gid for gid, check in load_checks(forgery.assignment, oracles_dir()).items()
                              if rests_on_reported(check) or forged_by(check)}
            if not row.held or not set(row.held) <= reported_cells:
                problems.append(f"{forgery.student}: in review holding {sorted(row.held)}, not only cells that rest "
                                f"on reported or imitable facts ({sorted(reported_cells)})")
            if lost - set(row.held) != set(twin_lost) - set(row.held):
                problems.append(f"{forgery.student}: lost {sorted(lost)} besides what is held, twin {sorted(twin_lost)}")
        elif lost != set(twin_lost):
            problems.append(f"{forgery.student}: lost {sorted(lost)}, its unforged twin {sorted(twin_lost)}")
        if not row.findings:
            problems.append(f"{forgery.student}: the forging lines were not quoted")
    assert not problems, "\n".join(problems)

    # The feedback says where a figure came from: nothing the kernel made is "measured by the grader".
    lowpeak = (out / "feedback" / "lowpeak" / "data04" / "data04.html").read_text()
    assert "The grader measured: the store peaked" not in lowpeak or "peaked at 64 MiB" not in lowpeak

    # The instructor decides: the held points are given, and the row is graded again.
    decided = decide(out, "ghostload", "data03", accept=False, note="the load counter was replaced")
    assert decided.status == "graded" and decided.held == {} and "not given" in decided.message
