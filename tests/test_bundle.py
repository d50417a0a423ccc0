"""The student bundle is self-consistent: everything its notebooks and README name is in it,
and it ships the browser playground, which opens from the bundle alone.

The fast tests build the bundle with a stand-in for the playground's site (the session's
``stand_in_bundle``: no network, no site build) and follow, in the unpacked bundle, every link
and every ``make`` command that a chapter, an exercise, a playground notebook or the README
names: a link must lead to a file or folder of the bundle, a command must be one the bundle's
Makefile accepts (``make -n``). The same links and commands must hold in the course itself.
The slow tests build the real bundle from ``make playground``'s site, as ``make
student-bundle`` does, check its site, and open one playground notebook in headless Chromium
from the bundle's own ``make playground`` server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from raydata_grader.bundle import SITE_DIR, TOP, build_bundle, lab_rules, slow_optional
from raydata_grader.bundle_refs import broken_references, makefile_targets, references

ROOT = Path(__file__).resolve().parents[1]
PLAYGROUND_NOTEBOOKS = sorted(p.name for p in (ROOT / "playground").glob("*.ipynb"))
ARTIFACTS = ROOT / "build" / "student-bundle-test"


def _unpack(zip_path: Path, where: Path) -> Path:
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(where)
    return where / TOP


def _named(top: Path) -> list:
    """Every reference a bundled notebook or the README names, read from the unpacked files."""
    targets = makefile_targets((top / "Makefile").read_text()) | makefile_targets((ROOT / "Makefile").read_text())
    found = []
    for path in sorted([top / "README.md", *top.glob("chapters/*.ipynb"), *top.glob("exercises/*/*.ipynb"),
                        *top.glob("playground/*.ipynb")]):
        found += references(path.relative_to(top).as_posix(), path.read_text(), targets)
    return found


@pytest.fixture(scope="module")
def unpacked(stand_in_bundle, tmp_path_factory):
    return _unpack(stand_in_bundle, tmp_path_factory.mktemp("bundle"))


def test_every_link_and_make_command_a_bundled_notebook_names_is_in_the_bundle(unpacked):
    named = _named(unpacked)
    links = [r for r in named if r.kind == "link" and not r.text.startswith(("http:", "https:", "mailto:", "#"))]
    commands = [r for r in named if r.kind == "make"]
    # what the chapters are known to name, so that a scanner that finds nothing cannot pass
    assert {r.text for r in links} >= {f"../playground/{name}" for name in PLAYGROUND_NOTEBOOKS}
    assert {r.text for r in commands} >= {"playground", "lab", "lab QUICK=1", "lab RAY=2.55.1", "setup", "jupyter"}
    for ref in links:
        path = (unpacked / ref.source).parent / ref.text.split("#", 1)[0].split("?", 1)[0]
        assert path.exists(), f"{ref.where()} links to {ref.text}, which the bundle lacks"
        assert path.resolve().is_relative_to(unpacked.resolve()), f"{ref.where()} links outside the bundle"
    for command in sorted({r.text for r in commands}):
        proc = subprocess.run(["make", "-n", *command.split()], cwd=unpacked, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "MAKEFLAGS": ""})
        assert proc.returncode == 0, f"`make {command}` fails in the bundle: {proc.stderr.strip()[-500:]}"


def test_the_bundles_set_up_removes_the_courses_slow_optional_package(unpacked):
    package = slow_optional((ROOT / "Makefile").read_text())
    proc = subprocess.run(["make", "-n", "setup"], cwd=unpacked, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MAKEFLAGS": ""})
    assert proc.returncode == 0, proc.stderr
    assert f"pip uninstall --quiet --yes {package}" in proc.stdout
    assert f"pip uninstall -y {package}" in (unpacked / "README.md").read_text()  # the conda path too


def test_the_bundle_runs_the_lab_with_the_courses_own_rules(unpacked):
    """One source for ``make lab``: the bundle's Makefile holds the course's lab part as it is,
    and a course Makefile without that part is refused, saying so."""
    part = lab_rules((ROOT / "Makefile").read_text())
    assert "lab: $(LAB_VENV)/.installed-stamp" in part and ".venv-ray%/.installed-stamp" in part
    assert part in (unpacked / "Makefile").read_text()
    with pytest.raises(ValueError, match="no '# >>> the lab'"):
        lab_rules("SLOW_OPTIONAL := x\n")


def test_the_bundles_playground_is_where_its_readme_and_makefile_say(unpacked):
    readme = (unpacked / "README.md").read_text()
    assert f"python3 -m http.server --directory {SITE_DIR} --bind 127.0.0.1 8000" in readme
    assert "http://127.0.0.1:8000/lab/index.html?path=04_backpressure_playground.ipynb" in readme
    for name in PLAYGROUND_NOTEBOOKS:
        assert (unpacked / "playground" / name).is_file() and (unpacked / SITE_DIR / "files" / name).is_file()
    proc = subprocess.run(["make", "-n", "playground", "PORT=8123"], cwd=unpacked, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "MAKEFLAGS": ""})
    assert f"-m http.server --directory {SITE_DIR} --bind 127.0.0.1 8123" in proc.stdout


def test_the_chapters_links_and_make_commands_hold_in_the_course_too():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0:
        names = listed.stdout.split()
    else:  # not a git checkout: what is on disk
        names = [p.relative_to(ROOT).as_posix() for folder in ("chapters", "exercises", "playground", "docs")
                 for p in (ROOT / folder).rglob("*") if p.is_file()] + ["README.md", "Makefile"]
    assert broken_references(names, lambda name: (ROOT / name).read_text()) == []


def test_broken_references_names_each_missing_link_target_and_variable():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("[here](../playground/04_x.ipynb) and [gone](../playground/gone.ipynb), "
                                      "[web](https://ray.io) [top](#top), ![img](../docs/a.png), "
                                      "<a href=\"/etc/passwd\">abs</a> [up](../../x.md)"),
        nbformat.v4.new_markdown_cell("Run `make lab QUICK=1`, `make lab FAST=1`, `make nosuch`, then "
                                      "make playground; make it run, make lab's figures"),
        nbformat.v4.new_code_cell('print("written by make lab-gpu")  # make progress'),
    ])
    files = {"Makefile": "QUICK ?=\nlab:\n\techo $(QUICK)\nplayground:\n\techo\n",
             "chapters/04.ipynb": nbformat.writes(notebook), "playground/04_x.ipynb": "{}", "README.md": "`make lab`\n"}
    problems = broken_references(files, files.__getitem__, other_targets={"lab-gpu"})
    assert problems == [
        "chapters/04.ipynb (cell 0): links to ../playground/gone.ipynb (playground/gone.ipynb), which is not there",
        "chapters/04.ipynb (cell 0): links to ../docs/a.png (docs/a.png), which is not there",
        "chapters/04.ipynb (cell 0): links to ../../x.md, outside the folder",
        "chapters/04.ipynb (cell 0): links to /etc/passwd, an absolute path",
        "chapters/04.ipynb (cell 1): names `make lab FAST=1`, but the Makefile has no variable FAST",
        "chapters/04.ipynb (cell 1): names `make nosuch`, but the Makefile has no target nosuch",
        "chapters/04.ipynb (cell 2): names `make lab-gpu`, but the Makefile has no target lab-gpu",
    ]


def test_a_bundle_without_the_built_playground_is_refused_in_one_line(tmp_path):
    (tmp_path / "site").mkdir()
    with pytest.raises(FileNotFoundError, match=r"lacks index.html, .*: build it first with `make playground`") as exc:
        build_bundle(tmp_path / "bundle.zip", ROOT, site=tmp_path / "site")
    assert "\n" not in str(exc.value) and not (tmp_path / "bundle.zip").exists()


# ------------------------------------------------------------------ the real bundle


@pytest.fixture(scope="module")
def real_bundle(playground_site, tmp_path_factory):
    """``python -m raydata_grader bundle`` with ``make playground``'s site, as ``make
    student-bundle`` runs it; unpacked. Its size goes to ``build/student-bundle-test/size.json``."""
    out = tmp_path_factory.mktemp("real-bundle")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "raydata_grader", "bundle", "--out", str(out / "bundle.zip"),
                           "--site", str(ROOT / "build" / "playground")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    top = _unpack(out / "bundle.zip", out)
    with zipfile.ZipFile(out / "bundle.zip") as z:
        infos = z.infolist()
    site_bytes = sum(i.file_size for i in infos if i.filename.startswith(f"{TOP}/{SITE_DIR}/"))
    size = {"zip_bytes": (out / "bundle.zip").stat().st_size, "unpacked_bytes": sum(i.file_size for i in infos),
            "site_bytes": site_bytes, "files": len(infos), "bundle_command": proc.stdout.strip()}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "size.json").write_text(json.dumps(size, indent=1))
    return top


@pytest.mark.slow
def test_the_real_bundle_ships_the_built_playground(real_bundle, playground_site):
    site = real_bundle / SITE_DIR
    for name in ("index.html", "lab/index.html", "jupyter-lite.json"):
        assert (site / name).is_file(), f"the bundle's site lacks {name}"
    built = sorted(p.relative_to(ROOT / "build" / "playground").as_posix()
                   for p in (ROOT / "build" / "playground").rglob("*") if p.is_file())
    shipped = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert shipped == built, "the bundle's site is not make playground's"
    kernel = json.loads((site / "jupyter-lite.json").read_text())["jupyter-config-data"]["litePluginSettings"]
    assert kernel["@jupyterlite/pyodide-kernel-extension:kernel"]["disablePyPIFallback"] is True
    for name in PLAYGROUND_NOTEBOOKS:
        for path in (real_bundle / "playground" / name, site / "files" / name):
            nbformat.validate(nbformat.read(path, as_version=4))
    assert not [r for r in _named(real_bundle) if r.kind == "link" and not (
        r.text.startswith(("http:", "https:", "mailto:", "#"))
        or ((real_bundle / r.source).parent / r.text.split("#", 1)[0].split("?", 1)[0]).exists())]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.browser
def test_the_bundles_playground_opens_from_its_own_make_playground(real_bundle):
    from playwright.sync_api import expect, sync_playwright

    from test_browser_playground import CHROMIUM, CHROMIUM_ARGS, FIGURES, KERNEL_TIMEOUT_MS, RUN_TIMEOUT_MS

    name = "04_backpressure_playground.ipynb"
    port = _free_port()
    server = subprocess.Popen(["make", "playground", f"PORT={port}"], cwd=real_bundle, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env={**os.environ, "MAKEFLAGS": ""},
                              start_new_session=True)
    requests: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "make playground did not start its server in 30 s"
                time.sleep(0.2)
        base = f"http://127.0.0.1:{port}/"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.on("request", lambda request: requests.append(request.url))
                t0 = time.perf_counter()
                page.goto(f"{base}lab/index.html?path={name}")
                panel = page.locator(".jp-NotebookPanel")
                panel.locator(".jp-Cell").first.wait_for(timeout=KERNEL_TIMEOUT_MS)
                expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle", timeout=KERNEL_TIMEOUT_MS)
                page.locator(".lm-MenuBar-item", has_text="Run").click()
                page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
                figures = panel.locator(".jp-OutputArea-output[data-mime-type='image/svg+xml']")
                expect(figures).to_have_count(FIGURES[name], timeout=RUN_TIMEOUT_MS)
                expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle", timeout=RUN_TIMEOUT_MS)
                errors = panel.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
                texts = [t for t in errors.all_text_contents() if "Error" in t or "Traceback" in t]
                assert not texts, f"{name} raised in the bundle's playground: {texts[0][:2000]}"
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "bundle-playground.png"))
                (ARTIFACTS / "browser.json").write_text(json.dumps(
                    {"notebook": name, "all_cells_s": round(time.perf_counter() - t0, 1)}, indent=1))
            finally:
                browser.close()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    page_requests = [u for u in requests if not u.startswith(("data:", "blob:", "about:"))]
    assert page_requests and not [u for u in page_requests if not u.startswith(base)], \
        f"requests left the bundle's server: {sorted({u for u in page_requests if not u.startswith(base)})[:10]}"
