"""``make student-bundle``: the zip that students get, and the proof that it leaks nothing.

    python -m raydata_grader bundle [--out build/student-bundle.zip]

The zip holds one folder, ``streaming-ray-data/``, built from the two sides of the course by
construction: everything on the student's side and nothing else.

- the whole student package, ``src/raydata_course/`` (it imports nothing from the grader;
  a test proves it), with ``pyproject.toml``, ``requirements.txt``,
  ``requirements-lock.txt`` and ``environment.yml`` to install it;
- ``chapters/`` and ``exercises/`` (nbgrader's release), and ``.pristine/exercises/``, an
  untouched copy of each release that the self-check compares the student's work with;
- a student ``README.md`` and ``Makefile`` (``setup``, ``jupyter``, ``check``, ``lab-quick``).

It never holds ``solutions/``, ``autograder/`` (this package, the hidden-test oracles,
mutants, the nbgrader configuration), ``tests/`` or grading output. :func:`audit_bundle` proves
it after every build: no such path, no module that imports the grader, no solution or
hidden-test marker, and none of the reference solutions', hidden tests', oracles' or mutants'
code lines (:func:`secret_lines`) in any file.
"""

from __future__ import annotations

import ast
import copy
import html
import re
import zipfile
from pathlib import Path

import nbformat

from raydata_course.layout import KERNEL_DISPLAY_NAME
from raydata_grader.mutants import load_mutants
from raydata_grader.paths import instructor_root

__all__ = ["PACKAGE", "SETUP_FILES", "changed_exercises", "build_bundle", "audit_bundle", "secret_lines",
           "find_secrets", "html_text"]

TOP = "streaming-ray-data"
#: The student package, shipped whole.
PACKAGE = "src/raydata_course"
#: The repository files that install it, and nbgrader's settings for the Validate button.
SETUP_FILES = ("pyproject.toml", "requirements.txt", "requirements-lock.txt", "environment.yml", "nbgrader_config.py")
#: Top-level folders that never go to students.
FORBIDDEN_DIRS = ("solutions", "autograder", "tests", "build", "submitted", "autograded", "feedback", ".ci")
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "Judged by the grader, outside")
MIN_SECRET_CHARS = 24
#: The grader's package; no student file may import it.
GRADER_PACKAGE = "raydata_grader"
GRADER_IMPORT = re.compile(rf"^\s*(from|import)\s+{GRADER_PACKAGE}\b", re.M)

STUDENT_MAKEFILE = """# Streaming Ray Data, student edition.
#   make setup        build .venv (Python 3.11) and register the course kernel
#   make jupyter      open JupyterLab here with the course kernel
#   make check A=data01   self-check a saved exercise: structure and visible tests
#   make lab-quick    the training-ingest lab, CI-sized
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
BIN := .venv/bin
STAMP := .venv/.installed-stamp
RUN := PATH="$(CURDIR)/$(BIN):$$PATH"
.PHONY: setup jupyter check lab-quick

$(STAMP): requirements.txt requirements-lock.txt pyproject.toml
\t@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "The course needs Python 3.11, found " + sys.version.split()[0] + ": set PYTHON=/path/to/python3.11")'
\ttest -x $(BIN)/python || $(PYTHON) -m venv .venv
\t$(BIN)/python -m pip install --quiet --upgrade pip
\t$(BIN)/python -m pip install --quiet -r requirements.txt -c requirements-lock.txt
\t$(BIN)/python -m pip install --quiet --no-deps -e .
\t$(BIN)/python -m raydata_course.jupyter --install-kernel
\ttouch $(STAMP)

setup: $(STAMP)

jupyter: $(STAMP)
\t$(RUN) $(BIN)/python -m raydata_course.jupyter $(ARGS)

check: $(STAMP)
\t@test -n "$(A)" || { echo "usage: make check A=data01 (the exercise to check)"; exit 2; }
\t$(RUN) $(BIN)/python -m raydata_course.classroom check exercises/$(A)/$(A).ipynb

lab-quick: $(STAMP)
\t$(RUN) RAYDATA_COURSE_HEADLESS=1 $(BIN)/python -m raydata_course.lab --out build/lab-quick --quick
"""

STUDENT_README = f"""# Streaming Ray Data: student edition

An executable course on Ray Data pipelines for ML training ingest, pinned to **Ray 2.60.0**.
Read the chapters in order and solve the exercise with the same number.

## Set up (once)

You need Python 3.11 and `make` (Linux or macOS):

```bash
make setup      # builds .venv from requirements.txt (pins in requirements-lock.txt), about 1 GB of wheels,
                # installs the raydata_course package and registers the "{KERNEL_DISPLAY_NAME}" kernel
make jupyter    # opens JupyterLab here with the course kernel
```

With conda instead:

```bash
conda env create -f environment.yml && conda activate streaming-ray-data
python -m raydata_course.jupyter --install-kernel   # registers the course kernel
jupyter lab
```

## Work on an exercise

- `chapters/NN_topic.ipynb` teach; `exercises/dataNN/dataNN.ipynb` are the exercises.
- Write your code where it says `# YOUR CODE HERE` and delete the `raise NotImplementedError()`.
- Each part has a visible test you can run and a hidden test that only the grader runs, on
  other inputs. Do not edit, delete, copy or retype test cells; keep the kernel "{KERNEL_DISPLAY_NAME}".
- **Check before you submit.** Save the notebook, then run in a new cell

  ```python
  import raydata_course.classroom as classroom
  classroom.self_check()
  ```

  or, in a terminal, `make check A=data01`. It checks the saved notebook's structure against
  the exercise as released (kept in `.pristine/`), runs the visible tests in a fresh kernel, and
  tells you what to fix. It cannot show hidden tests: you do not have them.
- The notebook toolbar's **Validate** button runs the visible tests too, as the grader does:
  a test fails only when it raises (Ray's log lines do not count), with the grader's per-cell
  limit (`nbgrader_config.py` here sets this up).
- Terminal commands other than `make` use the course's environment: run them as
  `.venv/bin/python ...`, or `source .venv/bin/activate` first.
- Submit `exercises/dataNN/dataNN.ipynb` as your instructor asks (the folder, or a zip named
  after you holding `dataNN/dataNN.ipynb`).

## The training-ingest lab

`make lab-quick` runs the lab of chapter 6 at CI size on CPU.
"""


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _tree(root: Path, folder: str) -> list[tuple[str, bytes]]:
    base = root / folder
    return [(_rel(p, root), p.read_bytes()) for p in sorted(base.rglob("*"))
            if p.is_file() and p.suffix not in (".pyc", ".pyo")
            and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(base).parts)]


def changed_exercises(root: str | Path | None = None) -> list[str]:
    """The notebooks of ``exercises/`` that differ from a fresh release of ``solutions/``.

    nbgrader generates the release into a scratch folder (:func:`~raydata_grader.course_dir.release`),
    and each notebook is compared with the committed one, outputs stripped. A difference means
    ``exercises/`` is stale, or someone answered or edited an exercise in place.

    Returns:
        Paths relative to ``root`` (empty when ``exercises/`` is current); a release notebook
        that is missing is listed too.
    """
    import shutil
    import tempfile

    from raydata_course.notebooks import strip_outputs
    from raydata_grader.course_dir import release

    root = Path(root or instructor_root())
    changed = []
    with tempfile.TemporaryDirectory(prefix="rdc-release-") as tmp:
        shutil.copytree(root / "solutions", Path(tmp) / "solutions")
        for path in release(course_dir=tmp):
            committed = root / path.relative_to(tmp)
            fresh = nbformat.writes(strip_outputs(nbformat.read(path, as_version=4)))
            if not committed.is_file() or nbformat.writes(nbformat.read(committed, as_version=4)) != fresh:
                changed.append(committed.relative_to(root).as_posix())
    return changed


def build_bundle(out: str | Path, root: str | Path | None = None) -> Path:
    """Write the student zip to ``out`` and audit it.

    Raises:
        RuntimeError: if ``exercises/`` is not the current release of ``solutions/`` (see
            :func:`changed_exercises`), or the audit finds anything that must not reach students.
    """
    root = Path(root or instructor_root())
    out = Path(out)
    stale = changed_exercises(root)
    if stale:
        raise RuntimeError(
            "exercises/ is not nbgrader's release of solutions/ (answered or edited by hand?): "
            f"{', '.join(stale)}. Run `make release` (or `git checkout exercises/`) and build again."
        )
    files: list[tuple[str, bytes]] = [
        ("README.md", STUDENT_README.encode()),
        ("Makefile", STUDENT_MAKEFILE.encode()),
    ]
    for name in SETUP_FILES:
        if (root / name).is_file():
            files.append((name, (root / name).read_bytes()))
    files += _tree(root, "chapters")
    exercises = _tree(root, "exercises")
    files += exercises
    files += [(f".pristine/{name}", data) for name, data in exercises if name.endswith(".ipynb")]
    files += _tree(root, PACKAGE)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            info = zipfile.ZipInfo(f"{TOP}/{name}", date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16  # -rw-r--r-- when unpacked
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    leaks = audit_bundle(tmp, root)
    if leaks:
        tmp.unlink()
        raise RuntimeError("the student bundle would leak grader material:\n  " + "\n  ".join(leaks[:20]))
    tmp.replace(out)
    return out


# ------------------------------------------------------------------------------ audit


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _code_lines(source: str) -> set[str]:
    """Code lines of a Python source, without docstrings, comments, imports or message strings."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    skip: set[int] = set()
    if tree is not None:
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                skip.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    for number, line in enumerate(source.splitlines(), 1):
        text = _norm(line)
        if number in skip or len(text) < MIN_SECRET_CHARS or text.startswith(("#", "import ", "from ", '"', "'", 'f"', "f'", ")", "]")):
            continue
        lines.add(text)
    return lines


def _without_hidden_tests(nb):
    """A copy of ``nb`` with its hidden-test blocks removed by nbgrader's ``ClearHiddenTests``."""
    from nbgrader.preprocessors import ClearHiddenTests

    cleared = copy.deepcopy(nb)
    ClearHiddenTests(enforce_metadata=False).preprocess(cleared, {})
    return cleared


def public_lines(root: str | Path | None = None) -> set[str]:
    """Every line that students have by design: the chapters, the releases, the public package.

    All their lines count, prose and docstrings included: a chapter may show a line in
    markdown, a module in a doctest.
    """
    root = Path(root or instructor_root())
    lines: set[str] = set()
    for nb_path in [*sorted((root / "chapters").glob("*.ipynb")), *sorted((root / "exercises").glob("*/*.ipynb"))]:
        for cell in nbformat.read(nb_path, as_version=4).cells:
            lines |= {_norm(ln) for ln in cell.source.splitlines()}
    for module in sorted((root / PACKAGE).rglob("*.py")):
        lines |= {_norm(ln) for ln in module.read_text().splitlines()}
    return lines


def secret_lines(root: str | Path | None = None, *, include_solutions: bool = True) -> dict[str, set[str]]:
    """Code lines that must never reach a student, by origin.

    - ``hidden``: code in the hidden-test blocks of every source notebook (the blocks hold
      only a comment now that the judge holds the checks; a block with code is still caught);
    - ``oracles``: the code lines of ``autograder/oracles/*.py`` (not their messages, which
      are written for students);
    - ``solutions`` (when ``include_solutions``): the reference solutions' lines that the
      release does not show, and the mutants' answer lines.

    Lines are whitespace-normalised and at least ``MIN_SECRET_CHARS`` long; imports, comments,
    docstrings and string-only lines are left out, and so is every line that students have
    by design (:func:`public_lines`: a chapter may well contain ``wine = load_wine_table()``).
    """
    root = Path(root or instructor_root())
    secrets: dict[str, set[str]] = {"hidden": set(), "oracles": set(), "solutions": set()}
    for oracle in sorted((root / "autograder" / "oracles").glob("*.py")):
        secrets["oracles"] |= _code_lines(oracle.read_text())
    for src in sorted((root / "solutions").glob("*/*.ipynb")):
        nb = nbformat.read(src, as_version=4)
        release_path = root / "exercises" / src.parent.name / src.name
        released = set()
        if release_path.is_file():
            for cell in nbformat.read(release_path, as_version=4).cells:
                released |= {_norm(ln) for ln in cell.source.splitlines()}
        for cell, cleared in zip(nb.cells, _without_hidden_tests(nb).cells):
            if cell.cell_type != "code":
                continue
            kept = set(cleared.source.splitlines())
            secrets["hidden"] |= _code_lines("\n".join(ln for ln in cell.source.splitlines() if ln not in kept))
            if include_solutions:  # what the release does not show of the rest: the solution
                secrets["solutions"] |= _code_lines(cleared.source) - released
        if include_solutions:
            for mutant in load_mutants(src.parent.name, root):
                for code in mutant.answers.values():
                    secrets["solutions"] |= _code_lines(code) - released
    public = "\n".join(public_lines(root))
    secrets = {origin: {ln for ln in lines if ln not in public} for origin, lines in secrets.items()}
    if not include_solutions:
        secrets.pop("solutions")
    return secrets


def html_text(page: str) -> str:
    """The visible text of an HTML page (tags removed, entities decoded)."""
    page = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", page)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def find_secrets(text: str, secrets: dict[str, set[str]], markers: tuple[str, ...] = MARKERS) -> list[str]:
    """Every marker and secret line found in ``text``, as ``"origin: line"`` strings."""
    flat = _norm(text)
    found = [f"marker: {m}" for m in markers if m in text]
    for origin, lines in secrets.items():
        found += [f"{origin}: {line}" for line in sorted(lines) if line in flat]
    return found


def audit_bundle(zip_path: str | Path, root: str | Path | None = None) -> list[str]:
    """Everything in the zip that must not reach students (empty when the bundle is clean)."""
    secrets = secret_lines(root)
    leaks = []
    with zipfile.ZipFile(zip_path) as z:
        for name in z.namelist():
            rel = name.split("/", 1)[1] if "/" in name else name
            parts = rel.split("/")
            if parts[0] in FORBIDDEN_DIRS:
                leaks.append(f"{rel}: a grader-only folder")
                continue
            data = z.read(name)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if rel.endswith(".py") and GRADER_IMPORT.search(text):
                leaks.append(f"{rel}: imports the grader ({GRADER_PACKAGE})")
            leaks += [f"{rel}: {hit}" for hit in find_secrets(text, secrets)]
    return leaks
