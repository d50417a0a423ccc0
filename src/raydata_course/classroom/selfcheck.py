"""The student self-check: is my saved exercise notebook ready to submit?

From the exercise notebook itself (save it first)::

    import raydata_course.classroom as classroom
    classroom.self_check()

or from a terminal: ``python -m raydata_course.classroom check exercises/data01/data01.ipynb``.

It does two things to the **saved** file, never to the notebook open in your browser:

1. **Structure.** It compares your notebook with the exercise as it was released, using the
   same checks as the grader (:mod:`raydata_course.classroom.lint`): deleted, duplicated or
   edited test cells, an answer cell turned into markdown, another kernel. The grader repairs
   these, but a repair can cost you points (a deleted answer cell comes back empty), so fix
   them yourself.
2. **Visible tests.** It runs a copy of the notebook top to bottom in a fresh kernel (as the
   grader does, with the same 180 s per-cell limit) and reports each visible test. Hidden
   tests are not in your copy of the exercise; they run only in the course's grader, so the
   self-check can neither run nor show them. It lists them with their points.

Where the released exercise comes from, for the structure check: ``.pristine/exercises/`` in
the student bundle, else the last git commit of ``exercises/`` in a course checkout, else
``exercises/<id>/<id>.ipynb`` when you are checking a copy kept elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from raydata_course.classroom.lint import grade_id, lint_notebook
from raydata_course.layout import (
    ASSIGNMENT_GLOB,
    GRADER_CELL_TIMEOUT_S,
    HEADLESS_ENV,
    KERNEL_NAME,
    SELF_CHECK_ENV,
    CourseRootNotFound,
    course_root,
    exercise_notebook,
)
from raydata_course.notebooks import cell_errors, execute_notebook

__all__ = ["SelfCheckReport", "self_check", "find_release", "run_copy"]


@dataclass
class SelfCheckReport:
    """What the self-check found.

    Attributes:
        notebook: the checked file.
        assignment: its assignment id.
        structure: structural problems, one sentence each (the grader would repair them).
        visible: ``{grade_id: message}`` per visible test; the message is ``"passed"`` or the
            error the test raised.
        hidden: ``{grade_id: points}`` per hidden test (not run here).
        unanswered: answer cells that still raise ``NotImplementedError``.
        errors: problems that stopped the check (an unreadable file, a kernel that died).
        ran: whether the visible tests were run.
    """

    notebook: str
    assignment: str
    structure: list[str] = field(default_factory=list)
    visible: dict[str, str] = field(default_factory=dict)
    hidden: dict[str, float] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ran: bool = False

    @property
    def ok(self) -> bool:
        """True when the structure is intact, nothing failed, and every visible test passed."""
        return not self.structure and not self.errors and all(m == "passed" for m in self.visible.values())

    @property
    def ready(self) -> bool:
        """True when :attr:`ok` and every answer cell is answered: ready to submit."""
        return self.ok and not self.unanswered

    def __str__(self) -> str:
        lines = [f"Self-check of {self.notebook} ({self.assignment})"]
        for e in self.errors:
            lines.append(f"  ERROR  {e}")
        if self.structure:
            lines.append("  Structure: the grader will repair these, but fix them yourself (a repair can cost points):")
            lines += [f"    - {s}" for s in self.structure]
        elif not self.errors:
            lines.append("  Structure: intact.")
        if self.ran:
            passed = sum(m == "passed" for m in self.visible.values())
            lines.append(f"  Visible tests: {passed} of {len(self.visible)} passed.")
            for gid, msg in self.visible.items():
                lines.append(f"    {'ok  ' if msg == 'passed' else 'FAIL'} {gid}" + ("" if msg == "passed" else f": {msg}"))
        for gid in self.unanswered:
            lines.append(f"  Not answered yet: {gid} still raises NotImplementedError.")
        if self.hidden:
            total = sum(self.hidden.values())
            lines.append(f"  Hidden tests ({total:g} points: {', '.join(self.hidden)}) run only in the grader, on other inputs.")
        lines.append("  Ready to submit." if self.ready else "  Not ready yet: see above.")
        return "\n".join(lines)


def find_release(assignment: str, notebook: Path):
    """The released exercise notebook to compare ``notebook`` with, and where it came from.

    Returns:
        ``(notebook_node, origin)``, or ``(None, reason)`` when no pristine copy is found.
    """
    try:
        root = course_root(notebook.resolve().parent, needs=("exercises",))
    except CourseRootNotFound:
        return None, "no course folder (with exercises/) above the notebook"
    rel = Path("exercises") / assignment / f"{assignment}.ipynb"
    pristine = root / ".pristine" / rel
    if pristine.is_file():
        return nbformat.read(pristine, as_version=4), str(pristine)
    try:
        text = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{rel.as_posix()}"], capture_output=True,
                              text=True, timeout=20, check=True).stdout
        return nbformat.reads(text, as_version=4), f"git HEAD:{rel.as_posix()}"
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    release = root / rel
    if release.is_file() and release.resolve() != notebook.resolve():
        return nbformat.read(release, as_version=4), str(release)
    return None, "no unmodified copy of the released exercise was found"


def _is_hidden(cell) -> bool:
    from nbgrader.utils import is_grade  # here, not at the top: nbgrader is slow to import

    code = [ln for ln in cell.get("source", "").splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return is_grade(cell) and not code


def _kernel_name(nb) -> str:
    from jupyter_client.kernelspec import KernelSpecManager

    names = KernelSpecManager().find_kernel_specs()
    for name in (KERNEL_NAME, (nb.metadata.get("kernelspec") or {}).get("name"), "python3"):
        if name and name in names:
            return name
    return "python3"


def run_copy(notebook_path: str, result_path: str, kernel_name: str, cwd: str | None = None) -> int:
    """Execute a notebook copy in a fresh kernel started in ``cwd``; write its errors as JSON.

    Every cell runs, whether or not an earlier one raised, with the grader's per-cell limit
    (:func:`raydata_course.notebooks.execute_notebook` with ``allow_errors``). The JSON holds
    ``errors`` (``{cell index: [ename, evalue]}``, the first error per cell), ``died`` (the
    message when the kernel died, else None) and ``last_executed``.
    """
    run = execute_notebook(notebook_path, cell_timeout_s=GRADER_CELL_TIMEOUT_S, kernel_name=kernel_name, cwd=cwd,
                           allow_errors=True)
    errors = {str(e.index): [e.ename, e.evalue] for e in cell_errors(run.notebook)}
    died = run.error if run.kernel_died else None
    Path(result_path).write_text(json.dumps({"errors": errors, "died": died, "last_executed": run.last_executed}))
    return 0


def self_check(assignment: str | None = None, notebook: str | os.PathLike | None = None, *, run: bool = True,
               verbose: bool = True) -> SelfCheckReport:
    """Check a saved exercise notebook's structure and run its visible tests.

    Args:
        assignment: the exercise id, e.g. ``"data01"``; default: from the notebook's name.
        notebook: the saved notebook; default: the notebook this kernel belongs to (Jupyter
            sets ``JPY_SESSION_NAME``), else ``<assignment>.ipynb`` here or in
            ``exercises/<assignment>/``.
        run: run the visible tests (tens of seconds: a fresh kernel starts Ray); False checks
            the structure only.
        verbose: print the report.

    Returns:
        A :class:`SelfCheckReport`; ``report.ok`` tells whether it is ready to submit.

    Raises:
        FileNotFoundError: if the notebook cannot be found.
    """
    from nbgrader.utils import is_grade, is_solution  # here, not at the top: nbgrader is slow to import

    if os.environ.get(SELF_CHECK_ENV):
        report = SelfCheckReport(str(notebook or ""), assignment or "", errors=[])
        print("self_check() skipped: this is the self-check's own run of your notebook.")
        return report
    path = _locate(assignment, notebook)
    assignment = assignment or path.stem
    report = SelfCheckReport(str(path), assignment)
    release, origin = find_release(assignment, path)
    raw = path.read_bytes()
    if release is None:
        report.errors.append(f"cannot check the structure: {origin}")
        try:
            nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        except Exception as exc:
            report.errors.append(f"the file is not a readable notebook ({type(exc).__name__})")
            return _done(report, verbose)
    else:
        lint = lint_notebook(raw, release)
        if lint.status == "invalid":
            report.errors += lint.problems
            return _done(report, verbose)
        report.structure = list(lint.repairs)
        nb = lint.notebook
    report.unanswered = [grade_id(c) for c in nb.cells if is_solution(c) and "raise NotImplementedError()" in c.get("source", "")]
    report.hidden = {grade_id(c): float(c.metadata["nbgrader"].get("points", 0)) for c in nb.cells if _is_hidden(c)}
    if not run:
        return _done(report, verbose)
    with tempfile.TemporaryDirectory(prefix="selfcheck-") as tmp:
        copy_path = Path(tmp) / path.name
        nbformat.write(nb, copy_path)
        # the copy runs next to the original, so relative paths behave as in the student's notebook
        env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}
        env[SELF_CHECK_ENV] = "1"
        env.setdefault(HEADLESS_ENV, "1")
        try:
            import ray

            if ray.is_initialized():  # connect to this kernel's cluster instead of starting another
                env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
        except ImportError:
            pass
        result_path = Path(tmp) / "result.json"
        runner = [sys.executable, "-c",
                  "import sys; from raydata_course.classroom.selfcheck import run_copy; "
                  "sys.exit(run_copy(*sys.argv[1:5]))",
                  str(copy_path), str(result_path), _kernel_name(nb), str(path.resolve().parent)]
        if verbose:
            print(f"Running a copy of {path.name} in a fresh kernel (visible tests only)...", flush=True)
        proc = subprocess.run(runner, cwd=str(path.parent), env=env, capture_output=True, text=True)
        try:
            result = json.loads(result_path.read_text())
        except (OSError, ValueError):
            report.errors.append("the notebook could not be run: " + (proc.stderr.strip().splitlines() or ["unknown error"])[-1])
            return _done(report, verbose)
    report.ran = True
    if result.get("died"):
        report.errors.append(f"the kernel died after cell {result['last_executed'] + 1} ({result['died'][:200]})")
    errors = result.get("errors", {})
    for index, cell in enumerate(nb.cells):
        if is_grade(cell) and not _is_hidden(cell):
            err = errors.get(str(index))
            report.visible[grade_id(cell)] = "passed" if not err else f"{err[0]}: {err[1]}"
    return _done(report, verbose)


def _done(report: SelfCheckReport, verbose: bool) -> SelfCheckReport:
    if verbose:
        print(report)
    return report


def _locate(assignment: str | None, notebook) -> Path:
    if notebook:
        path = Path(notebook)
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; give the path of your saved exercise notebook")
        return path
    session = os.environ.get("JPY_SESSION_NAME")
    if session and session.endswith(".ipynb") and Path(session).is_file():
        if assignment is None or Path(session).stem == assignment:
            return Path(session)
    if assignment is None:
        here = sorted(Path.cwd().glob(f"{ASSIGNMENT_GLOB}.ipynb"))
        if len(here) == 1:
            return here[0]
        raise FileNotFoundError("cannot tell which notebook to check: call self_check(\"data01\") with your exercise's id")
    if (Path.cwd() / f"{assignment}.ipynb").is_file():
        return Path.cwd() / f"{assignment}.ipynb"
    try:
        candidate = exercise_notebook(assignment, course_root())
    except (CourseRootNotFound, ValueError):
        candidate = None
    if candidate is not None and candidate.is_file():
        return candidate
    raise FileNotFoundError(f"cannot find {assignment}.ipynb here or in exercises/{assignment}/; pass notebook=<path>")
