"""The playground's parts that need no browser: the simulator's wheel runs the push split's own
rules without Ray, the build writes the lab run into each notebook, and every playground
notebook runs top to bottom in the course's own kernel from the committed lab run.
(``tests/test_browser_playground.py`` builds the site and runs the notebooks in Chromium.)"""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from raydata_course.playground.site import PUSH_RULES, course_wheel, render_notebook, validation_text

ROOT = Path(__file__).resolve().parents[1]
PLAYGROUND = ROOT / "playground"
NOTEBOOKS = sorted(PLAYGROUND.glob("*.ipynb"))


def test_the_browser_wheel_runs_the_push_split_rules_without_ray(tmp_path):
    """What the browser gets: the simulator and the push split's pure rules, importable and
    runnable with Ray, numpy and the rest of the course package absent."""
    wheel = course_wheel(tmp_path / "wheel", "0.0.test")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    assert {f"raydata_course/push_split/{name}" for name in PUSH_RULES} <= names
    assert not any(n.startswith("raydata_course/push_split/") and n.rsplit("/", 1)[-1] not in {*PUSH_RULES, "__init__.py"}
                   for n in names), sorted(names)
    script = (
        "import sys\n"
        "for name in ('ray', 'numpy', 'pyarrow', 'torch'):\n"
        "    sys.modules[name] = None  # any import of these fails\n"
        f"sys.path.insert(0, {str(tmp_path / 'site')!r})\n"
        "from raydata_course.sim import IngestConfig, Operator, simulate\n"
        "cfg = IngestConfig([Operator('decode', 0.1, 1 << 20)], budget_bytes=8 << 20, split='push', consumers=2,\n"
        "                   batches_per_consumer=10, delay_s=0.2, steer_on_store=True, send_s=0.01)\n"
        "t = simulate(cfg)\n"
        "import raydata_course.push_split.window as w\n"
        "assert w.__file__.startswith(sys.path[0]), w.__file__\n"
        "print(t.batches, max(max(x) for x in t.windows_batches))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[0] == "20"


def test_the_build_writes_the_lab_run_and_its_table_into_each_notebook():
    validation = {"lab": {"run_id": "20261206T000000Z-abcdef", "cpus": 2, "device": "cpu", "ray_version": "2.60.0",
                          "quick": False},
                  "rows": [{"variant": "driver-slow", "setting": "lazy free", "inputs": {"budget_bytes": 1}}],
                  "table": "| variant |\n|:--|\n| driver-slow |", "targets": {"peak": 0.15, "throughput": 0.2}}
    for path in NOTEBOOKS:
        rendered = render_notebook(json.loads(path.read_text()), validation)
        assert rendered["metadata"]["kernelspec"]["name"] == "python"  # Pyodide's
        text = json.dumps(rendered)
        assert "20261206T000000Z-abcdef" in text and "| driver-slow |" in text, path.name
        lab_cell = next(c for c in rendered["cells"] if "lab-inputs" in c["metadata"].get("tags", []))
        namespace: dict = {}
        exec(lab_cell["source"], namespace)  # noqa: S102 - our own build's output
        assert namespace["LAB"] == validation
    assert validation_text(validation).endswith(validation["table"])
    with pytest.raises(ValueError, match="lacks the cells tagged"):
        render_notebook({"metadata": {}, "cells": []}, validation)


def test_every_sweep_marks_what_the_lab_did_not_measure():
    """A sweep beyond the lab's measured points says so: each sweep's table has a column that
    tells a lab-measured point from the model's extrapolation."""
    for path in NOTEBOOKS:
        code = [("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
                for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        sweeps = [c for c in code if "for budget_mib in" in c or "for pf in" in c]
        assert sweeps, path.name
        assert all("point(" in c for c in sweeps), path.name


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_playground_notebook_runs_in_the_course_kernel(path):
    """Opened in the course's kernel (from the full course or the student bundle), a playground
    notebook reads the committed lab run itself and runs top to bottom with no error."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="raydata-course", resources={"metadata": {"path": str(PLAYGROUND)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = json.dumps(outputs)
    run_id = json.loads((PLAYGROUND / "lab" / "results.json").read_text())["meta"]["run_id"]
    assert run_id in text, "the notebook's validation table is not from the committed run"
    assert "image/svg+xml" in text


def test_a_first_build_without_network_says_what_it_needs_in_one_line(tmp_path, capsys):
    """No cache and no registry: the build stops with one line naming what it needs, not a traceback."""
    from raydata_course.playground.__main__ import main
    from raydata_course.playground import site

    original = site.PYODIDE_TARBALL_URL
    try:
        site.fetch_pyodide.__defaults__ = ("http://127.0.0.1:9/pyodide.tgz", site.PYODIDE_INTEGRITY)
        code = main(["--jupyter", str(tmp_path / "jupyter"), "--out", str(tmp_path / "site"), "--source", str(PLAYGROUND),
                     "--cache", str(tmp_path / "cache")])
    finally:
        site.fetch_pyodide.__defaults__ = (original, site.PYODIDE_INTEGRITY)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "needs the npm registry for Pyodide" in err and "Traceback" not in err
