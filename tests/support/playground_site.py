"""The playground's site for tests: ``make playground`` once per test run, and a stand-in.

:func:`build_once` runs ``make playground`` (``$MAKE``, default ``make``) under a lock file, once for all the workers of one
pytest run (``PYTEST_XDIST_TESTRUNUID``): a second build would delete ``build/playground/``
and the build cache's scratch folders while another worker serves or copies them. Later
callers of the same run get the first build's summary.

:func:`stand_in_site` writes the few files that :func:`raydata_grader.bundle.check_site` asks
for, so that a test of the bundle's packaging needs neither the network nor the build.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

__all__ = ["BUILD_TIMEOUT_S", "build_once", "stand_in_site"]

#: the first build installs the build tools and downloads Pyodide and the wheels.
BUILD_TIMEOUT_S = 900


def build_once(root: Path) -> dict:
    """``make playground`` in ``root``, once per test run; returns its build summary plus
    ``make_playground_s``, the seconds the make took.

    Raises:
        AssertionError: the build failed (its output's tail is the message).
    """
    build = root / "build"
    build.mkdir(exist_ok=True)
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    stamp = build / ".playground-test-run.json"
    with open(build / ".playground-test-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file():
            done = json.loads(stamp.read_text())
            if done.get("run_id") == run_id and (build / "playground" / "index.html").is_file():
                return done["summary"]
        t0 = time.perf_counter()
        proc = subprocess.run([os.environ.get("MAKE", "make"), "playground"], cwd=root, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        summary = json.loads((build / "playground-cache" / "build-summary.json").read_text())
        summary["make_playground_s"] = round(time.perf_counter() - t0, 1)
        stamp.write_text(json.dumps({"run_id": run_id, "summary": summary}))
        return summary


def stand_in_site(folder: Path, notebooks: list[Path]) -> Path:
    """A folder with the files a built playground must have (``index.html``, ``lab/index.html``,
    ``jupyter-lite.json``, ``files/<notebook>``), copies of ``notebooks`` under ``files/``."""
    (folder / "lab").mkdir(parents=True, exist_ok=True)
    (folder / "files").mkdir(exist_ok=True)
    (folder / "index.html").write_text("<!doctype html><title>stand-in playground</title>\n")
    (folder / "lab" / "index.html").write_text("<!doctype html><title>stand-in playground</title>\n")
    (folder / "jupyter-lite.json").write_text('{"jupyter-lite-schema-version": 0, "jupyter-config-data": {}}\n')
    for notebook in notebooks:
        (folder / "files" / notebook.name).write_bytes(notebook.read_bytes())
    return folder
