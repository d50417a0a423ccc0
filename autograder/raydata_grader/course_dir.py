"""nbgrader, configured for the course: configuration, release, autograde and the gradebook.

The course's nbgrader configuration is ``autograder/nbgrader_config.py``: ``solutions/`` is
nbgrader's *source*, ``exercises/`` its *release*, and the course's own preprocessors
(:mod:`raydata_grader.nbgrader_steps`) run in autograde and feedback. Everything here goes
through :class:`nbgrader.apps.NbGraderAPI`, in the course root or in a scratch course folder
(``make course``, the tests, ``make grade``), never by shelling out to ``nbgrader``.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from raydata_course._util import temporary_env
from raydata_course.layout import HEADLESS_ENV
from raydata_grader.paths import (ASSIGNMENTS, instructor_root, nbgrader_config_file, oracles_dir, release_notebook,
                                  source_notebook)
from raydata_grader.scratch import owned_temp_dir, remove_owned

__all__ = [
    "nbgrader_config",
    "nbgrader_api",
    "release",
    "prepare_course_dir",
    "plant_submission",
    "SubmissionScore",
    "autograde",
    "submission_score",
    "ensure_course",
    "assignment_duedate",
]


def nbgrader_config(course_dir: str | os.PathLike | None = None, **overrides: Any):
    """Load ``autograder/nbgrader_config.py``, optionally re-rooted at ``course_dir``.

    Args:
        course_dir: run nbgrader in this folder instead of the course root (its own
            ``solutions/``, ``exercises/``, ``submitted/`` and ``gradebook.db``).
        **overrides: ``"Class.trait"`` keys set on top, e.g. ``{"Execute.timeout": 60}``.

    Returns:
        A ``traitlets.config.Config``.
    """
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    path = nbgrader_config_file()
    config = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    if course_dir is not None:
        course_dir = Path(course_dir).resolve()
        config.CourseDirectory.root = str(course_dir)
        config.CourseDirectory.db_url = f"sqlite:///{course_dir / 'gradebook.db'}"
    extra = Config()
    for key, value in overrides.items():
        cls, trait = key.split(".")
        extra[cls][trait] = value
    config.merge(extra)
    return config


def nbgrader_api(config):
    """Return an :class:`nbgrader.apps.NbGraderAPI` for ``config``, quiet about the exchange."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config)


def release(
    assignments: tuple[str, ...] = ASSIGNMENTS, course_dir: str | os.PathLike | None = None
) -> list[Path]:
    """Regenerate the student release of each assignment with ``nbgrader generate_assignment``.

    Args:
        assignments: assignment ids.
        course_dir: generate inside this folder (which must hold ``solutions/``) instead of
            the course root.

    Returns:
        The release notebooks written.

    Raises:
        RuntimeError: with nbgrader's log, if generation fails.
    """
    config = nbgrader_config(course_dir)
    api = nbgrader_api(config)
    root = Path(config.CourseDirectory.root)
    written = []
    for assignment in assignments:
        result = api.generate_assignment(assignment, force=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed:\n{result.get('log', '')}\n{result.get('error', '')}")
        written.append(release_notebook(assignment, root))
    return written


def prepare_course_dir(course_dir: str | os.PathLike, assignments: tuple[str, ...] = ASSIGNMENTS) -> Path:
    """Make a scratch nbgrader course: copy ``solutions/`` and generate the release there.

    Generating (rather than copying ``exercises/``) also records every assignment and its
    source cells in the scratch gradebook, which ``autograde`` needs.

    Args:
        course_dir: an empty or missing folder.
        assignments: assignment ids to release.

    Returns:
        ``course_dir`` as a :class:`~pathlib.Path`.

    Raises:
        FileExistsError: if ``course_dir`` exists and is not empty.
    """
    folder = Path(course_dir)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} is not empty; give prepare_course_dir a new folder.")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(instructor_root() / "solutions", folder / "solutions")
    release(assignments, course_dir=folder)
    return folder


def plant_submission(
    course_dir: str | os.PathLike, assignment: str, student: str, notebook
) -> Path:
    """Put ``notebook`` (an nbformat notebook or a path) where nbgrader expects a submission.

    Returns:
        ``<course_dir>/submitted/<student>/<assignment>/<assignment>.ipynb``.
    """
    target = Path(course_dir) / "submitted" / student / assignment / f"{assignment}.ipynb"
    if target.parent.exists():
        shutil.rmtree(target.parent)
    target.parent.mkdir(parents=True)
    if isinstance(notebook, (str, os.PathLike)):
        shutil.copyfile(notebook, target)
    else:
        nbformat.write(notebook, target)
    return target


@dataclass
class SubmissionScore:
    """Scores of one autograded submission, read from nbgrader's gradebook.

    Attributes:
        assignment: assignment id.
        student: student id.
        score: points earned.
        max_score: points available.
        cells: ``{grade_id: (score, max_score)}`` for every grade cell.
        success: whether ``nbgrader autograde`` completed.
        log: nbgrader's captured log.
        verdicts: the judge's verdict per grade cell (:meth:`raydata_grader.judge.Verdict.to_json`).
        sandbox: how the kernel was confined: ``level`` (``root``, ``user`` or ``none``), the
            grader's folder for it (``base_dir``, removed afterwards), and in a sandbox its
            ``cgroup_dirs`` (removed afterwards), ``peak_memory_bytes``, ``oom_kills``,
            ``kernel_cpu_seconds`` (CPU the cgroup used, None without CPU accounting) and
            ``leftovers_killed`` (processes still in its cgroup when it ended, killed).
    """

    assignment: str
    student: str
    score: float
    max_score: float
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)
    success: bool = True
    log: str = ""
    verdicts: dict[str, dict] = field(default_factory=dict)
    sandbox: dict[str, Any] = field(default_factory=dict)


def autograde(
    course_dir: str | os.PathLike,
    assignment: str,
    student: str,
    *,
    sandbox=None,
    limits=None,
    env: dict[str, str] | None = None,
    log=None,
    oracles: str | os.PathLike | None = None,
    **overrides: Any,
) -> SubmissionScore:
    """Autograde one planted submission with a judge, in a sandbox when asked, and read its scores.

    The judge (:mod:`raydata_grader.judge`) runs in this process and holds the oracles of
    ``autograder/oracles/<assignment>.py``; the kernel reaches it through a Unix socket in a
    folder of its own under ``/tmp``.

    Args:
        course_dir: the course folder holding ``solutions/``, ``submitted/`` and the gradebook.
        assignment: assignment id.
        student: student id (a folder under ``submitted/``).
        sandbox: a :class:`~raydata_grader.kernel_sandbox.SandboxSupport` to run the kernel in
            a sandbox (:func:`raydata_grader.kernel_sandbox.probe`); None runs it as an
            ordinary local kernel, for notebooks the instructor trusts (reference answers).
        limits: the sandbox's :class:`~raydata_grader.kernel_sandbox.SandboxLimits`.
        env: extra environment for an unsandboxed kernel, e.g. ``{"RAY_ADDRESS": addr}`` to
            grade on a running cluster instead of starting one per notebook.
        log: called with one line per verdict (default: nowhere).
        oracles: the folder holding ``<assignment>.py`` (default: the checkout's
            ``autograder/oracles/``; a grading job passes the copy it brought along).
        **overrides: nbgrader config overrides, see :func:`nbgrader_config`.

    Returns:
        A :class:`SubmissionScore`. ``success`` is False when nbgrader could not grade the
        notebook; the score is then 0 and ``log`` says why.

    Raises:
        ValueError: if ``env`` is given with a sandbox (a sandboxed kernel reaches nothing
            outside it).
        FileNotFoundError: if the assignment has no oracle module.
    """
    import contextlib

    from raydata_grader.judge import Judge, judging, load_checks

    if sandbox is not None and env:
        raise ValueError(f"a sandboxed kernel gets no environment from the grader (asked for {sorted(env)}): "
                         "it starts its own Ray runtime and reaches nothing outside its sandbox")
    course_dir = Path(course_dir).resolve()
    folder = Path(oracles) if oracles is not None else oracles_dir()
    if not (folder / f"{assignment}.py").is_file():
        raise FileNotFoundError(f"no oracle module {folder / f'{assignment}.py'}: every assignment needs one")
    base = owned_temp_dir()
    info: dict[str, Any] = {"level": sandbox.level if sandbox is not None else "none", "base_dir": str(base)}
    try:
        judge_dir = base / "judge"
        judge_dir.mkdir(mode=0o755)
        # The checks load (and warm up: torch, course tables, the oracle's model) while the kernel starts.
        judge = Judge(lambda: load_checks(assignment, folder, warm=True), judge_dir / "judge.sock", log=log)
        extra: dict[str, Any] = {}
        with contextlib.ExitStack() as stack:
            if sandbox is not None:
                from raydata_grader.kernel_sandbox import KernelJail, SandboxLimits

                jail = stack.enter_context(KernelJail(
                    sandbox, limits or SandboxLimits(), base / "kernel",
                    readonly=[str(release_notebook(assignment, course_dir).parent)], judge_dir=str(judge_dir)))
                extra = {"TrackedExecute.sandboxed": True,
                         "SandboxedKernelManager.jail_prefix": jail.wrap([]),
                         "SandboxedKernelManager.ipc_dir": str(jail.ipc_dir),
                         "SandboxedKernelManager.sandbox_uid": jail.uid if sandbox.level == "root" else -1}
                info["cgroup_dirs"], info["uid"] = [str(d) for d in jail.cgroup_dirs], jail.uid
                from raydata_grader.outside import SandboxView

                judge.outside = SandboxView(jail.cgroup_dirs)  # what the checks observe from here
                stack.callback(lambda: info.update(peak_memory_bytes=jail.peak_memory_bytes, oom_kills=jail.oom_kills,
                                                   cgroups=sandbox.cgroups, kernel_cpu_seconds=jail.cpu_seconds))
                stack.callback(lambda: info.update(leftovers_killed=jail.stop()))
            stack.enter_context(judging(judge))
            config = nbgrader_config(course_dir, **{**extra, **overrides})
            api = nbgrader_api(config)
            with temporary_env({HEADLESS_ENV: "1", **(env or {})}):
                result = api.autograde(assignment, student, force=True)
    finally:
        remove_owned(base)
    verdicts = {gid: v.to_json() for gid, v in judge.verdicts.items()}
    log_text = (result.get("log") or "") + (result.get("error") or "")
    if not result["success"]:
        return SubmissionScore(assignment, student, 0.0, 0.0, {}, False, log_text, verdicts, info)
    score = submission_score(course_dir, assignment, student, log=log_text)
    score.verdicts, score.sandbox = verdicts, info
    return score


def submission_score(course_dir: str | os.PathLike, assignment: str, student: str, log: str = "") -> SubmissionScore:
    """Read one submission's total and per-cell scores from ``<course_dir>/gradebook.db``."""
    from nbgrader.api import Gradebook

    url = f"sqlite:///{Path(course_dir).resolve() / 'gradebook.db'}"
    with Gradebook(url) as gb:
        sub = gb.find_submission(assignment, student)
        cells = {
            g.name: (float(g.score), float(g.max_score)) for nb in sub.notebooks for g in nb.grades
        }
        return SubmissionScore(assignment, student, float(sub.score), float(sub.max_score), cells, True, log)


def ensure_course(out: Path, assignments: tuple[str, ...]) -> None:
    """Make ``out`` an nbgrader course holding the current source and release of ``assignments``
    (a grading run's folder, :func:`raydata_grader.grade.grade_class`).

    The first run copies ``solutions/<id>/`` and generates the release (which creates the
    gradebook). Later runs keep the gradebook and regenerate only an assignment whose source
    changed.
    """
    out.mkdir(parents=True, exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):  # nbgrader runs `alembic` for a new gradebook
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    stale = []
    for assignment in assignments:
        src = source_notebook(assignment).parent
        dst = out / "solutions" / assignment
        same = dst.is_dir() and all(
            (dst / p.relative_to(src)).is_file() and (dst / p.relative_to(src)).read_bytes() == p.read_bytes()
            for p in src.rglob("*") if p.is_file())
        if not same:
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        if not same or not release_notebook(assignment, out).is_file() or not (out / "gradebook.db").is_file():
            stale.append(assignment)
    if stale:
        release(tuple(stale), course_dir=out)


def assignment_duedate(out: Path, assignment: str) -> str | None:
    """The assignment's due date in the gradebook of the course folder ``out`` (ISO 8601, UTC), or None if none is set."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        try:
            due = gb.find_assignment(assignment).duedate
        except MissingEntry:
            return None
        return due.isoformat() if due is not None else None
