"""The pinned environment: one source of versions, honoured everywhere."""

import importlib.util
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]+\])?==([^\s;#]+)$")


def _pins(lines):
    pins = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = PIN.match(line)
        assert match, f"not an exact pin: {raw!r}"
        pins[match.group(1).lower().replace("_", "-")] = (match.group(2) or "", match.group(3))
    return pins


def requirements():
    return _pins((ROOT / "requirements.txt").read_text().splitlines())


def test_requirements_are_exact_pins_of_the_course_stack():
    pins = requirements()
    assert pins["ray"] == ("[data,train]", "2.60.0")
    assert pins["torch"][1] == "2.13.0"
    assert pins["nbgrader"][1] == "0.9.6"
    for name in ("pyarrow", "jupyterlab", "matplotlib", "nbclient", "nbformat", "pytest", "grpcio"):
        assert name in pins, f"{name} must be pinned in requirements.txt"


def test_environment_yml_agrees_with_requirements():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps, "environment.yml must pin python=3.11"
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert "-e ." in pip_section, "environment.yml must install the course package (-e .)"
    assert "-c requirements-lock.txt" in pip_section, "environment.yml must use the lock file"
    assert _pins(pip_section) == requirements(), (
        "environment.yml's pip pins differ from requirements.txt; copy requirements.txt's pins"
    )


def test_every_conda_path_registers_the_kernel_and_removes_slow_optional_as_make_setup_does():
    """environment.yml's instructions, the README's and the student bundle's README name the
    same kernel command as `make setup` and remove the Makefile's SLOW_OPTIONAL."""
    from raydata_grader.bundle import slow_optional, student_file

    package = slow_optional((ROOT / "Makefile").read_text())
    kernel = "python -m raydata_course.jupyter --install-kernel"
    assert f"$(BIN)/python -m raydata_course.jupyter --install-kernel" in (ROOT / "Makefile").read_text()
    for name, text in [("environment.yml", (ROOT / "environment.yml").read_text()),
                       ("README.md", (ROOT / "README.md").read_text()),
                       ("the bundle's README.md", student_file("README.md", ROOT).decode())]:
        assert kernel in text and f"pip uninstall -y {package}" in text, name
        assert "ipykernel install" not in text, f"{name} registers the kernel another way than make setup"


def test_both_packages_depend_only_on_pinned_distributions():
    """Every dependency the student package and the grader name is pinned in requirements.txt
    (the grader's own dependency on the student package aside)."""
    import tomllib

    pins = requirements()
    for pyproject in (ROOT / "pyproject.toml", ROOT / "autograder" / "pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        for dep in project["dependencies"]:
            name = re.split(r"[\[<>=; ]", dep, maxsplit=1)[0].lower().replace("_", "-")
            if name == "raydata-course":
                continue
            assert name in pins, f"{pyproject.relative_to(ROOT)} depends on {name}, which requirements.txt does not pin"


def test_lock_file_contains_every_pin_unchanged():
    lock = _pins((ROOT / "requirements-lock.txt").read_text().splitlines())
    for name, (_, version) in requirements().items():
        assert name in lock, f"{name} is missing from requirements-lock.txt: run `make lock`"
        assert lock[name][1] == version, f"{name}: lock has {lock[name][1]}, requirements.txt {version}"


def test_installed_versions_match_the_pins():
    assert sys.version_info[:2] == (3, 11)
    for name, (_, version) in requirements().items():
        installed = metadata.version(name).split("+")[0]  # torch reports 2.13.0+cpu
        assert installed == version, f"{name} {installed} is installed, but {version} is pinned: run `make setup`"


def test_nbgrader_config_takes_effect():
    """C21: the per-cell timeout must reach the Execute preprocessor nbgrader 0.9.6 uses."""
    from nbgrader.preprocessors import Execute

    from raydata_course.layout import GRADER_CELL_TIMEOUT_S, KERNEL_NAME
    from raydata_grader.course_dir import nbgrader_config
    from nbgrader.preprocessors import SaveAutoGrades

    from raydata_grader.nbgrader_steps import JudgedGrades, LimitOutputSize, StderrToStdout, TrackedExecute

    config = nbgrader_config()
    execute = Execute(config=config)
    assert execute.timeout == GRADER_CELL_TIMEOUT_S == 180
    assert execute.kernel_name == KERNEL_NAME
    assert config.CourseDirectory.source_directory == "solutions"
    assert config.CourseDirectory.release_directory == "exercises"
    assert config.OverwriteCells.add_missing_cells is True
    steps = list(config.Autograde.autograde_preprocessors)
    assert steps.index(TrackedExecute) < steps.index(StderrToStdout) < steps.index(LimitOutputSize) < steps.index(JudgedGrades)
    assert Execute not in steps and SaveAutoGrades not in steps, "grades come from the judge's verdicts only"
    assert TrackedExecute(config=config).timeout == GRADER_CELL_TIMEOUT_S
    assert config.HTMLExporter.sanitize_html is True


def test_course_kernel_is_registered_in_the_venv():
    from jupyter_client.kernelspec import KernelSpecManager

    from raydata_course.layout import KERNEL_NAME

    spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    assert Path(spec.argv[0]).resolve() == Path(sys.executable).resolve(), (
        "the course kernel must run this environment's Python"
    )


def test_the_venv_leaves_out_jsonschemas_slow_iri_checker():
    """`make setup` removes rfc3987-syntax (the Makefile's SLOW_OPTIONAL): `import ray` imports
    jsonschema, which imports that optional package if present, and it builds an Earley grammar at
    import. Without it, importing Ray pulls in neither it nor lark, and jsonschema still validates
    the formats the course's tools use."""
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip(f"runs in the venv `make setup` builds; this is {sys.prefix}")
    assert importlib.util.find_spec("rfc3987_syntax") is None, (
        "rfc3987-syntax is installed: `.venv/bin/python -m pip uninstall rfc3987-syntax` (a venv built "
        "before `make setup` removed it keeps it; the set-up reruns only when the pins change)")
    code = ("import sys, ray, jsonschema; "
            "print('jsonschema' in sys.modules, 'lark' in sys.modules, "
            "jsonschema.FormatChecker().conforms('2026-12-04', 'date'), "
            "jsonschema.FormatChecker().conforms('not a date', 'date'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False", "True", "False"], out.stdout
