"""Build the browser playground: a JupyterLite site with the Pyodide kernel, offline.

``make playground`` (``python -m raydata_course.playground``) builds ``build/playground/``
from the package registries alone, with nothing fetched from a CDN, then or later:

1. the Pyodide runtime from the npm registry's tarball (``pyodide@PYODIDE_VERSION``), checked
   against the sha512 ``PYODIDE_INTEGRITY`` that the registry published for it;
2. the pure-Python wheels the kernel loads at start-up (``micropip``, ``ipython`` and what it
   depends on, at the versions Pyodide's ``pyodide-lock.json`` names, plus ``comm``) and
   ``simpy``, from PyPI with ``pip download``;
3. the course's simulator as a wheel of its own (``raydata_course`` with ``raydata_course.sim``
   and the push split's pure rules, :data:`PUSH_RULES`, which the simulator runs: the rest of
   the package needs Ray);
4. ``pyodide-lock.json`` rewritten to list only those wheels, with their real sha256, and
   the kernel told never to fall back to PyPI (``disablePyPIFallback``);
5. ``jupyter lite build`` (JupyterLite and its Pyodide kernel, pinned in
   ``playground/requirements-build.txt``) with the playground notebooks and
   ``validation.json``, the simulator's predictions beside the lab's measurements.

Everything downloaded is kept in ``build/playground-cache/``, so a rebuild needs no network.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from importlib import metadata
from pathlib import Path

__all__ = ["PYODIDE_VERSION", "PYODIDE_INTEGRITY", "PYODIDE_TARBALL_URL", "KERNEL_ROOTS", "COMM_VERSION",
           "COURSE_WHEEL_NAME", "DownloadError", "PUSH_RULES", "check_integrity", "validation_text", "render_notebook", "fetch_pyodide", "download_wheel", "course_wheel",
           "shipped_lock", "build_site"]

#: Pyodide as ``jupyterlite-pyodide-kernel`` 0.8.6 expects it (its ``constants.PYODIDE_VERSION``).
PYODIDE_VERSION = "314.0.6"
#: the npm registry's ``dist.integrity`` of ``pyodide@314.0.6``.
PYODIDE_INTEGRITY = "sha512-BKDTJyIqFxC4BExLqeRS3f5xvXZIjOt8C3zGLN/Cc7tFxSwvKVhVkchQQ2AGLOtR4YrVOIFxbV8poyDOOmWwxQ=="
PYODIDE_TARBALL_URL = f"https://registry.npmjs.org/pyodide/-/pyodide-{PYODIDE_VERSION}.tgz"
#: the packages the kernel loads at start-up (its ipykernel shim needs jedi); what they depend on
#: comes from pyodide-lock.json.
KERNEL_ROOTS = ("micropip", "ipython", "jedi")
#: ``comm`` is not in Pyodide's lock; the kernel's own wheel requires it.
COMM_VERSION = "0.2.3"
#: the push split's modules the simulator imports (pure Python: they import nothing of Ray's,
#: ``tests/test_sim.py`` checks it), shipped with it so the browser runs the same rules.
PUSH_RULES = ("flow.py", "messages.py", "window.py")
#: the distribution that carries the simulator into the browser.
COURSE_WHEEL_NAME = "raydata-course-playground"
_PLUGIN = "@jupyterlite/pyodide-kernel-extension:kernel"
#: the kernel a notebook names to run in the Pyodide kernel.
PYODIDE_KERNELSPEC = {"name": "python", "display_name": "Python (Pyodide)", "language": "python"}


def _key(name: str) -> str:
    """A package name normalized as pyodide-lock.json's keys are (PEP 503, dashes)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class DownloadError(RuntimeError):
    """A first build could not download what it needs (no network, or the registry refused);
    its message is one line that says what and from where."""


def check_integrity(data: bytes, integrity: str) -> None:
    """Raise ValueError unless ``data`` has the npm ``integrity`` (``sha512-<base64>``)."""
    algo, _, expected = integrity.partition("-")
    if algo != "sha512":
        raise ValueError(f"expected an npm sha512 integrity, got {integrity!r}.")
    actual = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if actual != expected:
        raise ValueError(f"the Pyodide tarball's sha512 is {actual}, the pinned integrity says {expected}: "
                         "delete the cached file and download it again.")


def fetch_pyodide(cache_dir: Path, url: str = PYODIDE_TARBALL_URL, integrity: str = PYODIDE_INTEGRITY) -> Path:
    """The Pyodide npm tarball, downloaded once into ``cache_dir`` and checked every time.

    Raises:
        DownloadError: the tarball is not cached and the registry could not be reached.
        ValueError: the tarball's sha512 is not ``integrity``.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / url.rsplit("/", 1)[-1]
    if not path.is_file():
        try:
            with urllib.request.urlopen(url, timeout=300) as response:
                data = response.read()
        except OSError as exc:  # URLError, a timeout, a refused connection
            raise DownloadError(f"the playground's first build needs the npm registry for Pyodide {PYODIDE_VERSION} "
                                f"({url}) and could not reach it ({exc}); connect once, later builds use "
                                f"{cache_dir}") from None
        check_integrity(data, integrity)
        path.write_bytes(data)
    check_integrity(path.read_bytes(), integrity)
    return path


def download_wheel(name: str, version: str, wheel_dir: Path) -> Path:
    """The pure-Python wheel ``name==version`` for Pyodide's Python, from PyPI (cached).

    Raises:
        DownloadError: pip found no ``py3-none-any`` wheel of that version (no network, or none
            on PyPI).
    """
    wheel_dir.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[-_.]+", "_", name).lower()

    def cached() -> list[Path]:
        return [p for p in wheel_dir.glob("*.whl")
                if p.name.lower().startswith(f"{stem}-{version}-")]

    if not cached():
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.14", "--implementation", "py", "--abi", "none", "--platform", "any",
               "--dest", str(wheel_dir), f"{name}=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not cached():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise DownloadError(f"the playground's first build needs PyPI for the wheel {name}=={version} and pip "
                                f"could not get it ({last}); connect once, later builds use {wheel_dir}")
    return cached()[0]


def course_wheel(out_dir: Path, version: str) -> Path:
    """Write the wheel that carries ``raydata_course.sim`` into the browser, and return its path.

    Its ``raydata_course/__init__.py`` and ``raydata_course/push_split/__init__.py`` are
    stubs: the real ones start the package's cluster helpers and the coordinator, which need
    Ray. Beside ``raydata_course.sim`` it carries the push split's :data:`PUSH_RULES`.
    """
    package = Path(__file__).resolve().parents[1]
    sim_dir = package / "sim"
    dist = f"{COURSE_WHEEL_NAME.replace('-', '_')}-{version}"
    files = {"raydata_course/__init__.py": b'"""The course package\'s part that runs in the browser: '
                                           b'raydata_course.sim, the simulator."""\n'}
    for path in sorted(sim_dir.glob("*.py")):
        files[f"raydata_course/sim/{path.name}"] = path.read_bytes()
    files["raydata_course/push_split/__init__.py"] = (b'"""The push split\'s pure rules, which the simulator '
                                                      b'runs (the coordinator needs Ray)."""\n')
    for name in PUSH_RULES:
        files[f"raydata_course/push_split/{name}"] = (package / "push_split" / name).read_bytes()
    files[f"{dist}.dist-info/METADATA"] = (f"Metadata-Version: 2.1\nName: {COURSE_WHEEL_NAME}\nVersion: {version}\n"
                                           "Requires-Dist: simpy\n").encode()
    files[f"{dist}.dist-info/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: raydata_course.playground\n" \
                                       b"Root-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{dist}.dist-info/RECORD"] = ("\n".join(record + [f"{dist}.dist-info/RECORD,,"]) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shipped_lock(lock: dict, wheels: dict[str, Path], extra: dict[str, dict]) -> dict:
    """``pyodide-lock.json`` cut to the shipped wheels, each with its real file name and sha256.

    Args:
        lock: Pyodide's lock as published.
        wheels: lock key → the wheel file shipped for it (next to the lock).
        extra: lock key → a new entry (``name``, ``version``, ``imports``, ``depends``) for a
            package Pyodide's lock does not have.

    Raises:
        ValueError: a shipped package depends on one that is not shipped.
    """
    packages = {}
    for key, path in wheels.items():
        entry = dict(lock["packages"].get(key) or {"install_dir": "site", "package_type": "package",
                                                   "unvendored_tests": False, **extra[key]})
        entry.update(file_name=path.name, sha256=_sha256(path))
        packages[key] = entry
    for key, entry in packages.items():
        missing = [d for d in entry.get("depends", []) if _key(d) not in packages]
        if missing:
            raise ValueError(f"{key} depends on {missing}, which the site does not ship.")
    return {"info": lock["info"], "packages": packages}


def validation_text(validation: dict) -> str:
    """The words above the model-against-lab table, and the table (Markdown): which run, what
    each column is, the targets. The notebooks print the same in the course's own kernel."""
    lab = validation["lab"]
    return (
        f"Lab run `{lab.get('run_id')}`, on {lab.get('cpus')} CPU cores ({lab.get('device')}, Ray "
        f"{lab.get('ray_version')}{', quick mode' if lab.get('quick') else ''}). For each variant: what the lab "
        "measured (median over its repeats) and what the simulator predicts from the lab's own configuration and "
        "measured task times: the object store's peak, the consumers' rate after their first batch, Ray Data's "
        "believed peak, the bytes pinned without a ref, the median wait per batch and the stall fraction D. With "
        "the lazy free on, the simulator gives a range (low–high) over the one input it does not know, the phase "
        "of the raylet's free timer; a measurement inside the range has error 0. Targets: peak within "
        f"{validation['targets']['peak']:.0%}, rate within {validation['targets']['throughput']:.0%}; a row that "
        "misses says where the model and the lab part.\n\n" + validation["table"])


def render_notebook(notebook: dict, validation: dict) -> dict:
    """A playground notebook for the site: its kernel is Pyodide's (the source names the course's,
    where the notebook runs too), and the lab's figures are written in: the markdown cell tagged
    ``lab-validation`` gets the model-against-lab table, the code cell tagged ``lab-inputs``
    defines ``LAB`` (``validation`` whole: the run, each variant's simulator inputs, measurements,
    predictions and errors, and the table), as :func:`raydata_course.lab.model_check.lab_for_notebooks`
    gives it in the course's kernel.

    Raises:
        ValueError: the notebook lacks either tagged cell.
    """
    notebook = json.loads(json.dumps(notebook))
    notebook["metadata"]["kernelspec"] = PYODIDE_KERNELSPEC
    found = set()
    for cell in notebook["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if "lab-validation" in tags:
            found.add("lab-validation")
            cell["source"] = "## How close the model came to the lab\n\n" + validation_text(validation)
        if "lab-inputs" in tags:
            found.add("lab-inputs")
            cell["source"] = ("# The lab run this playground shows (its configuration, measurements and the model's\n"
                              "# predictions per variant), written in by the playground's build.\n"
                              "import json\n\nLAB = json.loads(" + repr(json.dumps(validation)) + ")")
    missing = {"lab-validation", "lab-inputs"} - found
    if missing:
        raise ValueError(f"the playground notebook lacks the cells tagged {sorted(missing)}.")
    return notebook


def _kernel_packages(lock: dict) -> dict[str, dict]:
    """The lock's entries for :data:`KERNEL_ROOTS` and everything they depend on."""
    packages = lock["packages"]
    todo, seen = list(KERNEL_ROOTS), {}
    while todo:
        key = _key(todo.pop())
        if key in seen:
            continue
        if key not in packages:
            raise ValueError(f"pyodide-lock.json has no {key!r}: is this Pyodide {PYODIDE_VERSION}?")
        seen[key] = packages[key]
        todo += packages[key].get("depends", [])
    return seen


def _tree_bytes(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def build_site(out_dir: Path, *, jupyter: Path, notebooks_dir: Path, validation: dict,
               cache_dir: Path) -> dict:
    """Build the JupyterLite site into ``out_dir`` (replaced) and say what it holds.

    Args:
        out_dir: the site's folder, e.g. ``build/playground``.
        jupyter: the ``jupyter`` command of the build tools' venv.
        notebooks_dir: the playground notebooks (``playground/*.ipynb``).
        validation: what ``validation.json`` holds beside the notebooks (the model against the lab).
        cache_dir: downloads are kept here between builds.

    Returns:
        ``{"site_bytes", "site_files", "wheels": [...], "pyodide_version"}``.
    """
    lite = cache_dir / "lite"
    if lite.exists():
        shutil.rmtree(lite)
    static = lite / "static" / "pyodide"
    static.mkdir(parents=True)
    with tarfile.open(fetch_pyodide(cache_dir)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith("package/") and "/" not in member.name[len("package/"):]:
                (static / member.name[len("package/"):]).write_bytes(tar.extractfile(member).read())
    lock = json.loads((static / "pyodide-lock.json").read_text())
    wheel_cache = cache_dir / "wheels"
    wheels: dict[str, Path] = {}
    for key, entry in _kernel_packages(lock).items():
        wheels[key] = download_wheel(entry["name"], entry["version"], wheel_cache)
    simpy_version = metadata.version("simpy")
    wheels["comm"] = download_wheel("comm", COMM_VERSION, wheel_cache)
    wheels["simpy"] = download_wheel("simpy", simpy_version, wheel_cache)
    from raydata_course import __version__

    wheels[COURSE_WHEEL_NAME] = course_wheel(cache_dir / "course-wheel", __version__)
    shipped = {}
    for key, path in wheels.items():
        shipped[key] = static / path.name
        shutil.copy2(path, shipped[key])
    extra = {"comm": {"name": "comm", "version": COMM_VERSION, "imports": ["comm"], "depends": []},
             "simpy": {"name": "simpy", "version": simpy_version, "imports": ["simpy"], "depends": []},
             COURSE_WHEEL_NAME: {"name": COURSE_WHEEL_NAME, "version": __version__, "imports": ["raydata_course"],
                                 "depends": ["simpy"]}}
    (static / "pyodide-lock.json").write_text(json.dumps(shipped_lock(lock, shipped, extra), indent=1))
    preload = ["comm", "simpy", COURSE_WHEEL_NAME]
    config = {"jupyter-lite-schema-version": 0, "jupyter-config-data": {
        "appName": "Streaming Ray Data playground",
        "litePluginSettings": {_PLUGIN: {"disablePyPIFallback": True, "loadPyodideOptions": {"packages": preload}}}}}
    (lite / "jupyter-lite.json").write_text(json.dumps(config, indent=1))
    contents = cache_dir / "contents"
    if contents.exists():
        shutil.rmtree(contents)
    contents.mkdir(parents=True)
    for notebook in sorted(notebooks_dir.glob("*.ipynb")):
        rendered = render_notebook(json.loads(notebook.read_text()), validation)
        (contents / notebook.name).write_text(json.dumps(rendered, indent=1))
    (contents / "validation.json").write_text(json.dumps(validation, indent=1))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    cmd = [str(Path(jupyter).resolve()), "lite", "build", "--lite-dir", str(lite.resolve()),
           "--contents", str(contents.resolve()), "--output-dir", str(out_dir.resolve()), "--no-sourcemaps"]
    proc = subprocess.run(cmd, cwd=lite, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"jupyter lite build failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    site_bytes, site_files = _tree_bytes(out_dir)
    return {"site_bytes": site_bytes, "site_files": site_files, "pyodide_version": PYODIDE_VERSION,
            "wheels": sorted(p.name for p in shipped.values())}
