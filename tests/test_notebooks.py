"""Every notebook is committed clean, and every chapter runs top to bottom in a fresh kernel."""

import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from raydata_course.layout import KERNEL_NAME
from raydata_course.notebooks import execute_notebook, is_stripped, prose_figures, unbacked_figures
from raydata_grader.course_run import chapter_notebooks

ROOT = Path(__file__).resolve().parents[1]
# Committed notebooks, plus new ones not yet committed (but never ignored paths like .venv),
# except the deliberately broken submissions kept as grading fixtures.
TRACKED = sorted(
    ROOT / p
    for p in subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.ipynb"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    if not p.startswith("autograder/fixtures/")
)
CHAPTERS = chapter_notebooks(ROOT)


def test_there_are_notebooks_to_check():
    assert CHAPTERS, "no chapters/NN_*.ipynb found"
    assert any("solutions" in str(p) for p in TRACKED)


@pytest.mark.parametrize("path", TRACKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_notebook_is_stripped_and_uses_the_course_kernel(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert is_stripped(nb), f"{path.name} has outputs or execution counts: run `make strip`"
    assert nb.metadata.get("kernelspec", {}).get("name") == KERNEL_NAME


@pytest.mark.parametrize("path", [p for p in TRACKED if "solutions" in p.parts or "exercises" in p.parts],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_graded_notebook_metadata_is_intact(path):
    nb = nbformat.read(path, as_version=4)
    meta = [c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata]
    ids = Counter(m["grade_id"] for m in meta)
    assert not [g for g, n in ids.items() if n > 1], f"duplicate grade_ids: {ids}"
    grade_cells = [m for m in meta if m.get("grade")]
    assert 3 <= len({m["grade_id"].rsplit("_", 1)[0] for m in grade_cells}) <= 5, "3-5 graded parts"
    assert all(m.get("points", 0) > 0 and m.get("locked") for m in grade_cells)
    assert any(m.get("solution") for m in meta)


@pytest.mark.slow
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_runs_top_to_bottom(path, tmp_path):
    # RAY_ADDRESS unset: the chapter starts its own embedded cluster, as a student's would.
    # TMPDIR is a fresh folder: what the chapter writes to temp folders it must remove itself.
    # It must be short: multiprocessing (DataLoader workers) binds Unix sockets in it, and a
    # socket path may not exceed 107 bytes (a folder under pytest's tmp_path can).
    scratch = Path(tempfile.mkdtemp(prefix="rdc-nb-"))
    try:
        run = execute_notebook(path, tmp_path / path.name, cell_timeout_s=600,
                               env={"RAY_ADDRESS": None, "TMPDIR": str(scratch)})
        assert run.status == "ok", f"{path.name} failed after {run.seconds:.0f} s: {run.error}"
        # Every speed, size or time figure the prose states is printed by a cell or set in one.
        unbacked = unbacked_figures(run.notebook)
        assert not unbacked, f"{path.name} states figures that no cell prints or sets:\n" + "\n".join(
            f"  cell {f.cell}: {f.text!r} in '...{f.context}...'" for f in unbacked)
        # torchinductor_<user> is torch's compile cache, shared by every process of the user.
        left = sorted(p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_"))
        assert not left, f"{path.name} left temp files behind: {left}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _nb(markdown: str, code: str = "", output: str = ""):
    cell = nbformat.v4.new_code_cell(code)
    if output:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown), cell])


def test_a_figure_in_prose_is_backed_only_by_a_printed_value_or_a_number_the_code_sets():
    text = "The epoch took 3.4 s and peaked at 1,024 MiB with a 256 MiB budget."
    assert [f.text for f in unbacked_figures(_nb(text))] == ["3.4 s", "1,024 MiB", "256 MiB"]
    backed = _nb(text, code="budget = 256 * MiB", output="epoch: 3.4 s, peak 1024 MiB\n")
    assert unbacked_figures(backed) == []
    # a number inside a string or a comment of the code is not an input the chapter sets
    assert [f.text for f in unbacked_figures(_nb("Lingers 1000 ms.", code='print("1000 ms")  # 1000'))] == ["1000 ms"]
    # a value from an earlier run, copied into prose, fails on the next run
    assert [f.text for f in unbacked_figures(_nb("About 1.5× faster.", output="ratio 1.48x"))] == ["1.5×"]
    # comparisons in words cannot be backed: print the ratio instead
    words = "Twice as fast, orders of magnitude slower, far longer, lingers up to a second."
    assert [f.text for f in unbacked_figures(_nb(words, output="2 orders"))] == [
        "Twice as", "orders of magnitude", "far longer", "up to a second"]


def test_code_shapes_and_links_in_prose_are_not_figures():
    text = ("8×8 pixels, `sleep(2 s)` in code, [the docs](https://x/4%20GiB), Ray 2.60, 3 blocks.\n"
            "```\nblock of 64 MiB\n```")
    assert prose_figures(_nb(text)) == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_prose_figures_are_inputs_or_printed(path):
    """The fast half of the prose-figures check: without running the chapter, every figure in
    its prose that is not a number the code sets must at least be one a code cell could print
    (the slow test runs the chapter and checks the outputs). Comparisons in words never pass."""
    nb = nbformat.read(path, as_version=4)
    vague = [f for f in unbacked_figures(nb) if f.number is None]
    assert not vague, f"{path.name}: comparisons in words; print the ratio instead: {vague}"
