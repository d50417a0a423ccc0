"""The house's rules, checked on the code: two sides apart, one home per fact, dependencies
pointing one way, and modules that do one job."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "src" / "raydata_course"
GRADER = ROOT / "autograder" / "raydata_grader"


def _modules(package_dir: Path) -> dict[str, Path]:
    """``{dotted module name: path}`` for every module of a package folder."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(path: Path) -> set[str]:
    """Every module name ``path`` imports (absolute names; relative imports resolved)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}: relative import; the course imports absolutely")
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_the_student_package_imports_nothing_from_the_grader():
    for name, path in _modules(STUDENT).items():
        bad = sorted(n for n in _imports(path) if n.split(".")[0] in ("raydata_grader", "autograder"))
        assert not bad, f"{name} imports {bad}: the student package must work without the grader"


def test_every_student_module_imports_with_the_grader_out_of_reach():
    """Import every module of the student package in a fresh Python where ``raydata_grader``
    cannot be imported, as in the student bundle."""
    code = (
        "import importlib, pkgutil, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'raydata_grader':\n"
        "            raise ImportError('the grader is not part of the student bundle')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import raydata_course\n"
        "names = [m.name for m in pkgutil.walk_packages(raydata_course.__path__, 'raydata_course.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) >= 30


def test_the_grader_imports_the_student_package_and_not_the_reverse():
    uses = set()
    for path in _modules(GRADER).values():
        uses |= {n.split(".")[0] for n in _imports(path)}
    assert "raydata_course" in uses


#: Which of our packages each part of the student package may import (DESIGN.md, "Layout").
ALLOWED = {
    "raydata_course.units": set(),
    "raydata_course.layout": set(),
    "raydata_course.ray_threads": set(),
    "raydata_course.sizing": {"raydata_course.layout", "raydata_course.units"},
    "raydata_course._util": set(),
    "raydata_course.tables": set(),
    "raydata_course.show": {"raydata_course.units"},
    "raydata_course.cluster": {"raydata_course", "raydata_course._util", "raydata_course.layout", "raydata_course.units",
                               "raydata_course.ray_threads", "raydata_course.sizing"},
    "raydata_course.data": set(),
    "raydata_course.notebooks": {"raydata_course._util", "raydata_course.layout"},
    "raydata_course.prose": set(),
    "raydata_course.measure": {"raydata_course.units", "raydata_course.measure"},
    "raydata_course.push_split": {"raydata_course.push_split", "raydata_course._util", "raydata_course.measure"},
    "raydata_course.chapters": {"raydata_course.chapters", "raydata_course.measure", "raydata_course.show",
                                "raydata_course.units", "raydata_course.data", "raydata_course.ray_threads"},
    "raydata_course.lab": {"raydata_course", "raydata_course.lab", "raydata_course.measure",
                           "raydata_course.push_split", "raydata_course.units", "raydata_course.tables",
                           "raydata_course.sim"},
    "raydata_course.sim": {"raydata_course.sim", "raydata_course.push_split"},  # its pure rules only (test_sim.py)
    "raydata_course.playground": {"raydata_course", "raydata_course.playground", "raydata_course.lab"},
    "raydata_course.classroom": {"raydata_course.classroom", "raydata_course.layout", "raydata_course.notebooks"},
    "raydata_course.jupyter": {"raydata_course.layout"},
    "raydata_course.hints": {"raydata_course.layout"},
    "raydata_course.judging": {"raydata_course.judging", "raydata_course._util", "raydata_course.chapters",
                               "raydata_course.measure"},
}


def _ours(names: set[str]) -> set[str]:
    """Our packages among ``names``, cut to ``raydata_course.<part>`` (the front door's own
    names, ``raydata_course.setup`` say, count as ``raydata_course``)."""
    found = set()
    for name in names:
        parts = name.split(".")
        if parts[0] != "raydata_course":
            continue
        part = ".".join(parts[:2])
        found.add("raydata_course" if part in FRONT_DOOR else part)
    return found


#: What ``raydata_course`` itself defines (its front door).
FRONT_DOOR = {"raydata_course.__version__", "raydata_course.setup", "raydata_course.shutdown"}


@pytest.mark.parametrize("name,path", sorted(_modules(STUDENT).items()), ids=lambda x: str(x).rsplit("/", 1)[-1])
def test_dependencies_point_one_way(name, path):
    if name == "raydata_course":
        return  # the front door re-exports the cluster's names
    part = ".".join(name.split(".")[:2])
    assert part in ALLOWED, f"{part} is a new part of the student package: say what it may import in ALLOWED"
    extra = _ours(_imports(path)) - ALLOWED[part] - {part}
    assert not extra, f"{name} imports {sorted(extra)}; {part} may import only {sorted(ALLOWED[part])}"


def _definitions(tree: ast.AST, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [t.id for t in targets if isinstance(t, ast.Name) and t.id in names]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            found.append(node.name)
    return found


def test_each_course_fact_has_one_home():
    """``course_root``, the kernel name, the byte units and the environment variables'
    names are defined once, in ``layout`` and ``units``; nothing else spells them."""
    facts = {"course_root", "KERNEL_NAME", "MiB", "GiB", "KiB"}
    homes: dict[str, list[str]] = {f: [] for f in facts}
    literals = []
    files = [*STUDENT.rglob("*.py"), *GRADER.rglob("*.py"), ROOT / "nbgrader_config.py",
             ROOT / "autograder" / "nbgrader_config.py", *(ROOT / "autograder" / "oracles").glob("*.py")]
    for path in files:
        tree = ast.parse(path.read_text())
        rel = str(path.relative_to(ROOT))
        for name in _definitions(tree, facts):
            homes[name].append(rel)
        if path.name == "layout.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                value = node.value
                if value == "raydata-course" or (value.startswith("RAYDATA_COURSE_") and value.isupper()):
                    literals.append(f"{rel}:{node.lineno}: {value!r}")
    assert homes == {"course_root": ["src/raydata_course/layout.py"], "KERNEL_NAME": ["src/raydata_course/layout.py"],
                     "MiB": ["src/raydata_course/units.py"], "GiB": ["src/raydata_course/units.py"],
                     "KiB": ["src/raydata_course/units.py"]}
    assert not literals, "spell these with raydata_course.layout's names:\n" + "\n".join(literals)


#: Modules allowed past about 400 lines, because they do one job (say which).
ONE_JOB = {
    "src/raydata_course/classroom/lint.py": "structure checks and repairs of a submission against its release",
    "autograder/raydata_grader/kernel_sandbox.py": "the graded kernel's sandbox: what it offers, its bounds, its command "
                                                   "line, and the kernel manager that starts the kernel in it",
}


def test_no_module_past_400_lines_does_several_jobs():
    long = {}
    for path in [*STUDENT.rglob("*.py"), *GRADER.rglob("*.py")]:
        rel = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > 420 and rel not in ONE_JOB:
            long[rel] = lines
    assert not long, f"split these along their jobs (or name their one job in ONE_JOB): {long}"
