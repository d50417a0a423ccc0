"""The browser playground end to end: ``make playground`` builds the JupyterLite site (once per
test run, for every worker: ``support.playground_site``), a static server serves it on 127.0.0.1, and headless Chromium (the same Playwright set-up as
``tests/test_browser.py``) opens each playground notebook, runs all its cells in the Pyodide
kernel, and waits for its SVG figures. No request the pages make may leave 127.0.0.1.

Screenshots go to ``build/browser-playground/`` (ignored by git), with ``timings.json``: the
site's size, and per notebook the seconds from opening it to its first figure (the first
notebook's includes loading Pyodide and the wheels). One browser and one server serve the
three notebooks in turn. Deselect with ``-m "not browser"``. Both tests are slow: the first
build needs PyPI and the npm registry, and installs the build tools (98 MB).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from support.static_server import StaticServer

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "playground"
ARTIFACTS = ROOT / "build" / "browser-playground"
CHROMIUM = Path(os.environ.get("RAYDATA_COURSE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTEBOOKS = ("04_backpressure_playground.ipynb", "05_prefetch_playground.ipynb", "06_pull_vs_push_playground.ipynb")
#: figures each notebook draws when all its cells run.
FIGURES = {"04_backpressure_playground.ipynb": 1, "05_prefetch_playground.ipynb": 1,
           "06_pull_vs_push_playground.ipynb": 3}
KERNEL_TIMEOUT_MS = 240_000
RUN_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def site(playground_site):
    """``make playground`` (offline once its downloads are cached in build/playground-cache)."""
    return playground_site


@pytest.mark.slow
def test_the_site_ships_only_its_wheels_and_never_falls_back_to_a_cdn(site):
    config = json.loads((SITE / "jupyter-lite.json").read_text())["jupyter-config-data"]
    kernel = config["litePluginSettings"]["@jupyterlite/pyodide-kernel-extension:kernel"]
    assert kernel["disablePyPIFallback"] is True
    assert kernel["pyodideUrl"] == "./static/pyodide/pyodide.mjs"
    static = SITE / "static" / "pyodide"
    lock = json.loads((static / "pyodide-lock.json").read_text())
    shipped = {p.name for p in static.glob("*.whl")}
    assert {e["file_name"] for e in lock["packages"].values()} == shipped
    assert any(name.startswith("simpy-") for name in shipped)
    assert any(name.startswith("raydata_course_playground-") for name in shipped)
    for name in NOTEBOOKS:
        notebook = json.loads((SITE / "files" / name).read_text())
        text = json.dumps(notebook)
        assert "a model of Ray Data, not Ray" in text and "| variant" in text, name


@pytest.mark.slow
@pytest.mark.browser
def test_each_playground_notebook_runs_in_the_browser_and_draws_offline(site):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    docs_run_id = (ROOT / "docs" / "lab" / "table.md").read_text().split()[2]  # "Lab run <id>"
    requests: list[str] = []
    timings = {"site_bytes": site["site_bytes"], "site_files": site["site_files"],
               "make_playground_s": site["make_playground_s"], "notebooks": {}}
    with StaticServer(SITE) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            for name in NOTEBOOKS:
                # a fresh context per notebook: a fresh workspace, so the notebooks opened before
                # (and their kernels) stay closed
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                context.on("request", lambda request: requests.append(request.url))
                page = context.new_page()
                t0 = time.perf_counter()
                page.goto(f"{server.url}lab/index.html?path={name}")
                panel = page.locator(".jp-NotebookPanel")
                panel.locator(".jp-Cell").first.wait_for(timeout=KERNEL_TIMEOUT_MS)
                expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle", timeout=KERNEL_TIMEOUT_MS)
                kernel_s = time.perf_counter() - t0
                page.locator(".lm-MenuBar-item", has_text="Run").click()
                page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
                figures = panel.locator(".jp-OutputArea-output[data-mime-type='image/svg+xml']")
                figures.first.wait_for(timeout=RUN_TIMEOUT_MS)
                first_s = time.perf_counter() - t0
                expect(figures).to_have_count(FIGURES[name], timeout=RUN_TIMEOUT_MS)
                expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle", timeout=RUN_TIMEOUT_MS)
                errors = panel.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
                texts = [t for t in errors.all_text_contents() if "Error" in t or "Traceback" in t]
                assert not texts, f"{name} raised: {texts[0][:2000]}"
                assert panel.locator(".jp-OutputArea-output table").count() >= 1, f"{name}: its table is missing"
                # the validation table (near the top: scroll back, the notebook renders its cells lazily)
                panel.locator(".jp-Cell").first.scroll_into_view_if_needed()
                validation = panel.locator(".jp-MarkdownCell", has_text="How close the model came to the lab")
                validation.first.scroll_into_view_if_needed()
                expect(validation.first).to_contain_text(docs_run_id, timeout=10_000)
                figures.first.scroll_into_view_if_needed()
                page.screenshot(path=str(ARTIFACTS / f"{Path(name).stem}.png"))
                timings["notebooks"][name] = {"kernel_idle_s": round(kernel_s, 1), "first_figure_s": round(first_s, 1),
                                              "all_cells_s": round(time.perf_counter() - t0, 1)}
                context.close()
        finally:
            (ARTIFACTS / "timings.json").write_text(json.dumps(timings, indent=1))
            browser.close()
    page_requests = [u for u in requests if not u.startswith(("data:", "blob:", "about:"))]
    assert page_requests, "the pages made no request at all"
    outside = sorted({u for u in page_requests if not u.startswith(server.url)})
    assert not outside, f"requests left 127.0.0.1: {outside[:20]}"
    timings["page_requests"] = len(page_requests)
    (ARTIFACTS / "timings.json").write_text(json.dumps(timings, indent=1))
