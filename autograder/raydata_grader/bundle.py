"""``make student-bundle``: the zip that students get, and the proof that it leaks nothing.

    python -m raydata_grader bundle [--out build/student-bundle.zip] [--site build/playground]

The zip holds one folder, ``streaming-ray-data/``, built from the two sides of the course by
construction: everything on the student's side and nothing else.

- the whole student package, ``src/raydata_course/`` (it imports nothing from the grader;
  a test proves it), with ``pyproject.toml``, ``requirements.txt``,
  ``requirements-lock.txt`` and ``environment.yml`` to install it;
- ``chapters/`` and ``exercises/`` (nbgrader's release), and ``.pristine/exercises/``, an
  untouched copy of each release that the self-check compares the student's work with;
- ``playground/`` as in the course (the playground notebooks the chapters link, and the lab run
  they are checked against), with the built JupyterLite site in ``playground/site/``;
- a student ``README.md`` and ``Makefile`` (``setup``, ``jupyter``, ``check``, ``lab``,
  ``lab-quick``, ``playground``), from ``student_edition/``, with the course's values filled
  in (its kernel's name, the optional package its set-up removes).

Every link and make command its notebooks and README name must be in the bundle
(:mod:`raydata_grader.bundle_refs`), or it is not written.

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
from raydata_grader.bundle_refs import broken_references, makefile_targets
from raydata_grader.mutants import load_mutants
from raydata_grader.paths import instructor_root

__all__ = ["PACKAGE", "SETUP_FILES", "SITE_DIR", "changed_exercises", "build_bundle", "audit_bundle", "secret_lines",
           "find_secrets", "html_text", "slow_optional", "student_file", "check_site"]

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

#: Where the student edition's Makefile and README come from (``@NAME@`` marks a value filled in).
STUDENT_EDITION = Path(__file__).resolve().parent / "student_edition"
#: Where the built playground site goes in the bundle; its sources stay in ``playground/``.
SITE_DIR = "playground/site"
#: The course's own build of the site (``make playground``).
DEFAULT_SITE = Path("build") / "playground"
_SLOW_OPTIONAL = re.compile(r"^SLOW_OPTIONAL\s*:?=\s*(.+?)\s*$", re.M)
#: the lines around the part of the course's Makefile the student edition takes as it is
_LAB_BEGIN, _LAB_END = "# >>> the lab", "# <<< the lab"


def slow_optional(makefile: str) -> str:
    """The packages the course's Makefile removes after installing (its ``SLOW_OPTIONAL``).

    Raises:
        ValueError: the Makefile sets no ``SLOW_OPTIONAL``.
    """
    match = _SLOW_OPTIONAL.search(makefile)
    if not match:
        raise ValueError("the course's Makefile sets no SLOW_OPTIONAL: the student set-up would not know what to remove.")
    return match.group(1)


def lab_rules(makefile: str) -> str:
    """The part of the course's Makefile that runs the lab (``make lab``, ``QUICK=``, ``RAY=``),
    between its ``# >>> the lab`` and ``# <<< the lab`` lines, markers included: the student
    edition's Makefile takes it as it is, so the two run the lab one way.

    Raises:
        ValueError: the Makefile lacks either marker.
    """
    start, end = makefile.find(_LAB_BEGIN), makefile.find(_LAB_END)
    if start < 0 or end < start:
        raise ValueError(f"the course's Makefile has no '{_LAB_BEGIN}' ... '{_LAB_END}' part: the student edition "
                         "would have no lab.")
    return makefile[start:end + len(_LAB_END)]


def student_file(name: str, root: Path) -> bytes:
    """The student edition's ``Makefile`` or ``README.md``, with the course's values filled in."""
    makefile = (root / "Makefile").read_text()
    values = {"@KERNEL_DISPLAY_NAME@": KERNEL_DISPLAY_NAME, "@SLOW_OPTIONAL@": slow_optional(makefile),
              "@LAB_RULES@": lab_rules(makefile)}
    text = (STUDENT_EDITION / name).read_text()
    for key, value in values.items():
        text = text.replace(key, value)
    left = sorted(set(re.findall(r"@[A-Z_]+@", text)))
    if left:
        raise ValueError(f"student_edition/{name} has no value for {', '.join(left)}.")
    return text.encode()


def check_site(site: Path, notebooks: list[str]) -> None:
    """Raise FileNotFoundError, in one line, unless ``site`` is a built playground holding every
    playground notebook (``files/<name>``)."""
    needed = ["index.html", "lab/index.html", "jupyter-lite.json", *(f"files/{name}" for name in notebooks)]
    missing = [name for name in needed if not (site / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"the student bundle ships the browser playground, but {site} lacks {', '.join(missing[:4])}: "
            "build it first with `make playground` (the first build needs PyPI and the npm registry).")


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _tree(root: Path, folder: str, *, skip: tuple[str, ...] = ()) -> list[tuple[str, bytes]]:
    base = root / folder
    return [(_rel(p, root), p.read_bytes()) for p in sorted(base.rglob("*"))
            if p.is_file() and p.suffix not in (".pyc", ".pyo") and not _rel(p, root).startswith(skip)
            and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(base).parts)]


def _site_files(site: Path) -> list[tuple[str, bytes]]:
    return [(f"{SITE_DIR}/{_rel(p, site)}", p.read_bytes()) for p in sorted(site.rglob("*")) if p.is_file()]


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


def build_bundle(out: str | Path, root: str | Path | None = None, *, site: str | Path | None = None) -> Path:
    """Write the student zip to ``out``, check that it holds what it names, and audit it.

    Args:
        out: the zip to write.
        root: the course; default the instructor's checkout.
        site: the built playground (``make playground``), shipped as ``playground/site/``;
            default ``<root>/build/playground``.

    Raises:
        FileNotFoundError: ``site`` is not a built playground holding every playground notebook.
        RuntimeError: if ``exercises/`` is not the current release of ``solutions/`` (see
            :func:`changed_exercises`), a bundled notebook or the README names a file or a make
            target the bundle lacks (:func:`~raydata_grader.bundle_refs.broken_references`), or
            the audit finds anything that must not reach students.
    """
    root = Path(root or instructor_root())
    out = Path(out)
    site = Path(site) if site is not None else root / DEFAULT_SITE
    check_site(site, sorted(p.name for p in (root / "playground").glob("*.ipynb")))
    stale = changed_exercises(root)
    if stale:
        raise RuntimeError(
            "exercises/ is not nbgrader's release of solutions/ (answered or edited by hand?): "
            f"{', '.join(stale)}. Run `make release` (or `git checkout exercises/`) and build again."
        )
    files: list[tuple[str, bytes]] = [
        ("README.md", student_file("README.md", root)),
        ("Makefile", student_file("Makefile", root)),
    ]
    for name in SETUP_FILES:
        if (root / name).is_file():
            files.append((name, (root / name).read_bytes()))
    files += _tree(root, "chapters")
    exercises = _tree(root, "exercises")
    files += exercises
    files += [(f".pristine/{name}", data) for name, data in exercises if name.endswith(".ipynb")]
    files += _tree(root, PACKAGE)
    files += _tree(root, "playground", skip=(SITE_DIR,)) + _site_files(site)
    contents = dict(files)
    broken = broken_references(contents, lambda name: contents[name].decode(), skip=(f"{SITE_DIR}/",),
                               other_targets=makefile_targets((root / "Makefile").read_text()))
    if broken:
        raise RuntimeError("the student bundle names what it does not hold:\n  " + "\n  ".join(broken))
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
