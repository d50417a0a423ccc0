"""``make student-bundle``: the zip that students get (grader only).

    python -m raydata_course.bundle [--out build/student-bundle.zip]

The zip holds one folder, ``streaming-ray-data/``, with:

- ``README.md``: set-up and working instructions for students;
- ``requirements.txt``, ``requirements-lock.txt``, ``environment.yml``, ``pyproject.toml`` and
  a student ``Makefile`` (``setup``, ``jupyter``, ``check``, ``lab-quick``);
- ``chapters/`` and ``exercises/`` (the nbgrader release), and ``.pristine/exercises/``, an
  untouched copy of each release that the self-check compares the student's work with;
- ``src/raydata_course/`` without its grader-only modules (:data:`GRADER_ONLY`).
  ``raydata_course.grading`` is replaced by a student edition that keeps only
  ``course_root`` and ``KERNEL_NAME``.

It never holds ``solutions/``, ``autograder/`` (hidden-test oracles, mutants, the nbgrader
configuration), ``tests/`` or grading output. :func:`audit_bundle` proves it after every
build: no such path, no solution or hidden-test marker, and none of the reference solutions',
hidden tests', oracles' or mutants' code lines (:func:`secret_lines`) in any file.
"""

from __future__ import annotations

import argparse
import ast
import html
import re
import sys
import zipfile
from pathlib import Path

import nbformat

from raydata_course import grading

__all__ = ["GRADER_ONLY", "build_bundle", "audit_bundle", "secret_lines", "find_secrets", "html_text"]

TOP = "streaming-ray-data"
#: Package modules that only the grader uses (paths under ``src/raydata_course/``).
GRADER_ONLY = (
    "grading.py",
    "course.py",
    "release.py",
    "bundle.py",
    "classroom/grade.py",
    "classroom/sandbox.py",
    "classroom/preprocessors.py",
)
#: Top-level folders that never go to students.
FORBIDDEN_DIRS = ("solutions", "autograder", "tests", "build", "submitted", "autograded", "feedback", ".ci")
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "hidden_check(")
MIN_SECRET_CHARS = 24

STUDENT_GRADING = '''"""Course helpers for notebooks (student edition).

The instructor's edition of this module holds the grading machinery, which stays with the
grader. Notebooks use only :func:`course_root` and :data:`KERNEL_NAME`.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["KERNEL_NAME", "course_root"]

#: The Jupyter kernel the course registers in its virtual environment.
KERNEL_NAME = "raydata-course"


def course_root() -> Path:
    """Return the course folder (the one holding ``chapters/`` and ``exercises/``).

    ``$RAYDATA_COURSE_ROOT`` wins; otherwise the folder this package is installed from
    (editable install), then the current folder and its parents.

    Raises:
        FileNotFoundError: if no such folder is found.
    """
    candidates = [Path(os.environ["RAYDATA_COURSE_ROOT"])] if os.environ.get("RAYDATA_COURSE_ROOT") else []
    here = Path.cwd().resolve()
    candidates += [Path(__file__).resolve().parents[2], here, *here.parents]
    for root in candidates:
        if (root / "chapters").is_dir() and (root / "exercises").is_dir():
            return root
    raise FileNotFoundError("Could not find the course folder (with chapters/ and exercises/); run from inside it "
                            "or set RAYDATA_COURSE_ROOT.")
'''

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
\ttest -x $(BIN)/python || $(PYTHON) -m venv .venv
\t$(BIN)/python -m pip install --quiet --upgrade pip
\t$(BIN)/python -m pip install --quiet -r requirements.txt -c requirements-lock.txt
\t$(BIN)/python -m pip install --quiet --no-deps -e .
\t$(BIN)/python -m ipykernel install --sys-prefix --name raydata-course --display-name "Python (raydata-course)"
\ttouch $(STAMP)

setup: $(STAMP)

jupyter: $(STAMP)
\t$(RUN) $(BIN)/jupyter lab --notebook-dir=$(CURDIR) --MappingKernelManager.default_kernel_name=raydata-course

check: $(STAMP)
\t$(RUN) $(BIN)/python -m raydata_course.classroom check exercises/$(A)/$(A).ipynb

lab-quick: $(STAMP)
\t$(RUN) RAYDATA_COURSE_HEADLESS=1 $(BIN)/python -m raydata_course.lab --out build/lab-quick --quick
"""

STUDENT_README = """# Streaming Ray Data: student edition

An executable course on Ray Data pipelines for ML training ingest, pinned to **Ray 2.60.0**.
Read the chapters in order and solve the exercise with the same number.

## Set up (once)

You need Python 3.11 and `make` (Linux or macOS):

```bash
make setup      # builds .venv from requirements.txt (pins in requirements-lock.txt), about 1 GB of wheels,
                # installs the raydata_course package and registers the "Python (raydata-course)" kernel
make jupyter    # opens JupyterLab here with the course kernel
```

With conda instead:

```bash
conda env create -f environment.yml && conda activate streaming-ray-data
python -m ipykernel install --sys-prefix --name raydata-course --display-name "Python (raydata-course)"
jupyter lab
```

## Work on an exercise

- `chapters/NN_topic.ipynb` teach; `exercises/dataNN/dataNN.ipynb` are the exercises.
- Write your code where it says `# YOUR CODE HERE` and delete the `raise NotImplementedError()`.
- Each part has a visible test you can run and a hidden test that only the grader runs, on
  other inputs. Do not edit, delete, copy or retype test cells; keep the kernel "Python (raydata-course)".
- **Check before you submit.** Save the notebook, then run in a new cell

  ```python
  import raydata_course.classroom as classroom
  classroom.self_check()
  ```

  or, in a terminal, `make check A=data01`. It checks the saved notebook's structure against
  the exercise as released (kept in `.pristine/`), runs the visible tests in a fresh kernel, and
  tells you what to fix. It cannot show hidden tests: you do not have them.
- Submit `exercises/dataNN/dataNN.ipynb` as your instructor asks (the folder, or a zip named
  after you holding `dataNN/dataNN.ipynb`).

## The training-ingest lab

`make lab-quick` runs the lab of chapter 6 at CI size on CPU.
"""


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _package_files(root: Path) -> list[tuple[str, bytes]]:
    pkg = root / "src" / "raydata_course"
    files = []
    for path in sorted(pkg.rglob("*")):
        rel = _rel(path, pkg)
        if not path.is_file() or "__pycache__" in path.parts or rel.endswith((".pyc", ".pyo")):
            continue
        if rel in GRADER_ONLY:
            continue
        files.append((f"src/raydata_course/{rel}", path.read_bytes()))
    files.append(("src/raydata_course/grading.py", STUDENT_GRADING.encode()))
    return files


def _tree(root: Path, folder: str) -> list[tuple[str, bytes]]:
    base = root / folder
    return [(_rel(p, root), p.read_bytes()) for p in sorted(base.rglob("*"))
            if p.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(base).parts)]


def build_bundle(out: str | Path, root: str | Path | None = None) -> Path:
    """Write the student zip to ``out`` and audit it.

    Raises:
        RuntimeError: if the audit finds anything that must not reach students.
    """
    root = Path(root or grading.course_root())
    out = Path(out)
    files: list[tuple[str, bytes]] = [
        ("README.md", STUDENT_README.encode()),
        ("Makefile", STUDENT_MAKEFILE.encode()),
    ]
    for name in ("requirements.txt", "requirements-lock.txt", "environment.yml", "pyproject.toml"):
        if (root / name).is_file():
            files.append((name, (root / name).read_bytes()))
    files += _tree(root, "chapters")
    exercises = _tree(root, "exercises")
    files += exercises
    files += [(f".pristine/{name}", data) for name, data in exercises if name.endswith(".ipynb")]
    files += _package_files(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            z.writestr(f"{TOP}/{name}", data)
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


def _between(source: str, begin: str, end: str) -> str:
    out, inside = [], False
    for line in source.splitlines():
        if begin in line:
            inside = True
        elif end in line:
            inside = False
        elif inside:
            out.append(line)
    return "\n".join(out)


def public_lines(root: str | Path | None = None) -> set[str]:
    """Every line that students have by design: the chapters, the releases, the public package.

    All their lines count, prose and docstrings included: a chapter may show a line in
    markdown, a module in a doctest.
    """
    root = Path(root or grading.course_root())
    lines: set[str] = set()
    for nb_path in [*sorted((root / "chapters").glob("*.ipynb")), *sorted((root / "exercises").glob("*/*.ipynb"))]:
        for cell in nbformat.read(nb_path, as_version=4).cells:
            lines |= {_norm(ln) for ln in cell.source.splitlines()}
    pkg = root / "src" / "raydata_course"
    for module in sorted(pkg.rglob("*.py")):
        if module.relative_to(pkg).as_posix() not in GRADER_ONLY:
            lines |= {_norm(ln) for ln in module.read_text().splitlines()}
    return lines


def secret_lines(root: str | Path | None = None, *, include_solutions: bool = True) -> dict[str, set[str]]:
    """Code lines that must never reach a student, by origin.

    - ``hidden``: the hidden-test blocks of every source notebook;
    - ``oracles``: the code lines of ``autograder/oracles/*.py`` (not their messages, which
      are written for students);
    - ``solutions`` (when ``include_solutions``): the reference solutions' lines that the
      release does not show, and the mutants' answer lines.

    Lines are whitespace-normalised and at least ``MIN_SECRET_CHARS`` long; imports, comments,
    docstrings and string-only lines are left out, and so is every line that students have
    by design (:func:`public_lines`: a chapter may well contain ``wine = load_wine_table()``).
    """
    root = Path(root or grading.course_root())
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
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            secrets["hidden"] |= {ln for ln in _code_lines(_between(cell.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))}
            if include_solutions:
                secrets["solutions"] |= _code_lines(_between(cell.source, "BEGIN SOLUTION", "END SOLUTION")) - released
        if include_solutions:
            for mutant in grading.load_mutants(src.parent.name, root):
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
            if rel.startswith("src/raydata_course/") and rel[len("src/raydata_course/"):] in GRADER_ONLY \
                    and rel != "src/raydata_course/grading.py":
                leaks.append(f"{rel}: a grader-only module")
                continue
            data = z.read(name)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if rel == "src/raydata_course/grading.py" and text != STUDENT_GRADING:
                leaks.append(f"{rel}: not the student edition")
            leaks += [f"{rel}: {hit}" for hit in find_secrets(text, secrets)]
    return leaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the student bundle (a zip) and prove it holds no grader material.")
    parser.add_argument("--out", default="build/student-bundle.zip")
    args = parser.parse_args(argv)
    path = build_bundle(args.out)
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    print(f"[student-bundle] wrote {path} ({path.stat().st_size / 1024**2:.1f} MiB, {len(names)} files); audit clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
