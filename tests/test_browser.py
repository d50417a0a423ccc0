"""The course in JupyterLab: what nbgrader's extension reads, and a real browser end to end.

A quick test loads the configuration the way nbgrader's formgrader and Validate handlers do
when JupyterLab runs at the course root (``make jupyter``). The browser test walks both
audiences through nbgrader's JupyterLab extension on a temporary copy of the course, served
by the same command line as ``make jupyter`` (``raydata_course.jupyter.lab_command``) on a loopback port
with a token:

1. student: open ``exercises/data02/data02.ipynb``, Run All Cells, press **Validate**: the
   blank release reports failing tests;
2. student: the reference answers are written into the answer cells (contents API), the
   notebook is reloaded from disk, **Validate** reports success;
3. instructor: Nbgrader → Formgrader lists data02 with the two submissions graded by the
   command-line workflow beforehand (reference and blank), and data02's submissions page
   shows their scores (full marks and zero);
4. the server, its kernels and the Ray clusters those kernels started are all stopped.

Screenshots of every step go to ``build/browser/`` (ignored by git), with the server's log.
The browser is Debian's ``chromium`` (``apt-get install chromium chromium-driver``), at
``$RAYDATA_COURSE_CHROMIUM`` or ``/usr/bin/chromium``. Deselect with ``-m "not browser"``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from support.lab_server import LabServer, LabServerError

from raydata_course.jupyter import VALIDATE_KERNEL_ARGUMENTS, lab_environment
from raydata_course.layout import GRADING_DIR_ENV, KERNEL_NAME, TEMP_ROOT_ENV
from raydata_grader.answers import reference_submission
from raydata_grader.course_dir import autograde, plant_submission, release
from raydata_grader.paths import release_notebook

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "build" / "browser"
CHROMIUM = Path(os.environ.get("RAYDATA_COURSE_CHROMIUM", "/usr/bin/chromium"))
# Chromium on a closed network: no background connections, no first-run UI, no sandbox
# (CI containers run as root). Playwright adds --headless and its own profile flags.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# data02: its reference runs in about half the CPU time of data01's (Validate runs it in the
# server, and the fixture also autogrades it).
ASSIGNMENT = "data02"
# What the course copy needs; the package itself is installed (editable) in the venv.
COURSE_PARTS = ("exercises", "solutions", "autograder", "chapters", "nbgrader_config.py")
# Per-step limits. Validate runs the whole notebook in a fresh kernel (ray.init included)
# inside the server; on a busy two-core machine that takes minutes.
UI_TIMEOUT_MS = 60_000
RUN_TIMEOUT_MS = 600_000


# ------------------------------------------------------- what nbgrader's extension reads


def test_nbgrader_extension_finds_the_course_from_the_course_root(monkeypatch):
    from nbgrader.preprocessors import Execute
    from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension
    from nbgrader.server_extensions.validate_assignment.handlers import ValidateAssignmentHandler
    from nbgrader.validator import Validator

    monkeypatch.chdir(ROOT)  # make jupyter starts the server here
    monkeypatch.delenv(GRADING_DIR_ENV, raising=False)
    formgrader = FormgradeExtension().load_config()  # the formgrader extension's own loader
    assert formgrader.CourseDirectory.root == str(ROOT)
    assert formgrader.CourseDirectory.source_directory == "solutions"
    assert formgrader.CourseDirectory.release_directory == "exercises"
    assert formgrader.CourseDirectory.db_url == f"sqlite:///{ROOT / 'gradebook.db'}"

    validate = ValidateAssignmentHandler.load_config(None)  # the Validate button's loader
    execute = Execute(parent=Validator(config=validate))
    assert execute.kernel_name == KERNEL_NAME
    assert execute.extra_arguments == VALIDATE_KERNEL_ARGUMENTS
    # Only Validate's kernels get those arguments; grading keeps nbgrader's defaults.
    assert Execute(config=validate).extra_arguments == []

    monkeypatch.setenv(GRADING_DIR_ENV, str(ROOT / "build" / "grading"))
    moved = FormgradeExtension().load_config()
    assert moved.CourseDirectory.root == str(ROOT / "build" / "grading")
    assert moved.CourseDirectory.db_url == f"sqlite:///{ROOT / 'build' / 'grading' / 'gradebook.db'}"


# ----------------------------------------------------------------------------- the course


@pytest.fixture(scope="module")
def course(tmp_path_factory, ray_cluster):
    """A temporary course with the assignment released and two autograded submissions.

    ``reference`` (the reference answers) and ``blank`` (the release as is) go through the
    command-line workflow's API (``raydata_grader.course_dir``) into the course's gradebook,
    on the session's shared Ray cluster. Returns ``(folder, {student: SubmissionScore})``.
    """
    folder = tmp_path_factory.mktemp("browser") / "course"
    folder.mkdir()
    for name in COURSE_PARTS:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, folder / name)
    # generate_assignment records the assignment and its source cells in the gradebook, which
    # autograde needs; then put the committed release back, so the student opens exactly it.
    release((ASSIGNMENT,), course_dir=folder)
    shutil.rmtree(folder / "exercises")
    shutil.copytree(ROOT / "exercises", folder / "exercises")
    released = release_notebook(ASSIGNMENT, folder)
    scores = {}
    for student, notebook in (
        ("reference", reference_submission(ASSIGNMENT, released)),
        ("blank", nbformat.read(released, as_version=4)),
    ):
        plant_submission(folder, ASSIGNMENT, student, notebook)
        score = autograde(folder, ASSIGNMENT, student, env={"RAY_ADDRESS": ray_cluster.address})
        assert score.success, f"autograde of {student} failed:\n{score.log[-3000:]}"
        scores[student] = score
    assert scores["reference"].score == scores["reference"].max_score > 0
    assert scores["blank"].score == 0
    return folder, scores


def _server_environment(course_dir: Path, home: Path) -> dict[str, str]:
    """The student's environment: no cluster address, private Jupyter dirs.

    Ray's files go under the test session's temp root (``RAYDATA_COURSE_TMPDIR``, set by
    conftest.py), so the session's leftover-process check covers the kernels' clusters too.
    """
    assert os.environ.get(TEMP_ROOT_ENV), "conftest.py sets the session's Ray temp root"
    env = lab_environment()
    env.pop("RAY_ADDRESS", None)
    settings = home / "lab-settings"
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    # No "Would you like to receive official Jupyter news?" toast, no update check.
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env.update(
        RAYDATA_COURSE_ROOT=str(course_dir),
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
    )
    return env


def _course_processes(course_dir: Path) -> list[str]:
    """Live processes whose environment names this course copy (server, kernels, Ray)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("RAYDATA_COURSE_ROOT") == str(course_dir):
                found.append(f"pid {proc.pid}: {' '.join(proc.info['cmdline'] or [])[:160]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


# ---------------------------------------------------------------------------- the browser


class Steps:
    """Times each step, saves its screenshot, and turns a failure into a message that says
    which step failed, with the server log's last lines and a screenshot of the page."""

    def __init__(self, server: LabServer, folder: Path) -> None:
        self.server = server
        self.folder = folder
        self.page = None
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        start = time.monotonic()
        try:
            yield
        except Exception as exc:
            shot = self.folder / f"FAILED_{name}.png"
            with contextlib.suppress(Exception):
                self.page.screenshot(path=str(shot))
            raise AssertionError(
                f"step {name!r} failed after {time.monotonic() - start:.0f} s: "
                f"{type(exc).__name__}: {str(exc)[:2000]}\n(screenshot: {shot})\n"
                f"Last lines of the server log {self.server.log_path}:\n{self.server.log_tail(40)}"
            ) from exc
        self.seconds[name] = round(time.monotonic() - start, 1)

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.folder / f"{name}.png"))


def _run_menu(page, menu: str, item: str) -> None:
    """Click ``menu`` in JupyterLab's menu bar, then its item labelled ``item``."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(f"^{re.escape(menu)}$")).click()
    label = page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$"))
    page.locator(".lm-Menu-item", has=label).click()


def _run_all(page) -> None:
    """Run All Cells, and press it once more if no cell has started within ``UI_TIMEOUT_MS``.

    Once, on a heavily loaded machine, JupyterLab moved to the last cell and sent nothing: every
    prompt still read ``[ ]`` ten minutes later, the kernel idle and connected. A cell that starts
    shows ``[*]`` (or its count once done), so a second press only follows a run that never began.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    started = page.locator(".jp-NotebookPanel .jp-InputPrompt", has_text=re.compile(r"\[(\*|\d+)\]"))
    for attempt in (1, 2):
        _run_menu(page, "Run", "Run All Cells")
        try:
            started.first.wait_for(state="attached", timeout=UI_TIMEOUT_MS)
            return
        except PlaywrightTimeoutError:
            if attempt == 2:
                raise
            print(f"[browser] Run All Cells started no cell within {UI_TIMEOUT_MS // 1000} s; pressing it again")


def _wait_kernel_idle(page, timeout_ms: int) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#jp-main-statusbar")).to_contain_text(
        f"({KERNEL_NAME}) | Idle", timeout=timeout_ms
    )


def _wait_kernel_connected(server: LabServer, timeout_ms: int) -> None:
    """Wait until the server reports one kernel, idle, with the page's websocket attached
    (the status bar can say Idle before the kernel has answered)."""
    deadline = time.monotonic() + timeout_ms / 1000
    kernels = []
    while time.monotonic() < deadline:
        kernels = server.api("GET", "api/kernels")
        if kernels and all(k["execution_state"] == "idle" and k["connections"] > 0 for k in kernels):
            return
        time.sleep(0.5)
    raise TimeoutError(f"the notebook's kernel did not become idle and connected: {kernels}")


def _validate(page, timeout_ms: int):
    """Press the notebook toolbar's Validate button; return the results dialog's message."""
    page.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True).click()
    message = page.locator(".jp-Dialog #validation-message")
    message.wait_for(timeout=timeout_ms)
    return message


def _close_dialog(page) -> None:
    page.locator(".jp-Dialog .jp-mod-accept").first.click()
    page.locator(".jp-Dialog").wait_for(state="detached", timeout=UI_TIMEOUT_MS)


@pytest.mark.slow
@pytest.mark.browser
def test_validate_and_formgrader_in_jupyterlab(course, tmp_path):
    course_dir, scores = course
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.fail("Playwright is not installed: `pip install -r requirements.txt` "
                    "(or deselect: -m 'not browser').")
    if not CHROMIUM.is_file():
        pytest.fail(f"No Chromium at {CHROMIUM}: `apt-get install chromium chromium-driver`, or set "
                    "RAYDATA_COURSE_CHROMIUM (or deselect: -m 'not browser').")
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    server = LabServer(course_dir, log_path=ARTIFACTS / "server.log",
                       env=_server_environment(course_dir, tmp_path / "jupyter"))
    steps = Steps(server, ARTIFACTS)
    notebook_path = f"exercises/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    killed: list[str] = []
    try:
        with steps("server"):
            try:
                server.start()
            except LabServerError as exc:
                pytest.fail(f"The JupyterLab server did not come up: {exc}")
        with sync_playwright() as playwright:
            with steps("browser"):
                try:
                    context = playwright.chromium.launch_persistent_context(
                        str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM),
                        headless=True, args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 800},
                    )
                except PlaywrightError as exc:
                    pytest.fail(f"The browser (Chromium at {CHROMIUM}) did not start: {exc}\n"
                                f"Last lines of the server log:\n{server.log_tail(20)}")
                page = steps.page = context.new_page()
                page.set_default_timeout(UI_TIMEOUT_MS)

            # -- student: the blank release ---------------------------------------------------
            with steps("open_notebook"):
                page.goto(server.url(f"lab/tree/{notebook_path}"))
                page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
                _wait_kernel_idle(page, RUN_TIMEOUT_MS)
                expect(page.locator(".jp-NotebookPanel-toolbar")).to_contain_text("Validate")
            with steps("run_all_blank"):
                _wait_kernel_connected(server, RUN_TIMEOUT_MS)
                _run_all(page)
                # Run All stops at the first cell that raises: Part A's visible test, which
                # calls the unanswered function (anything else, e.g. Ray not starting, fails here).
                error = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                                     has_text=re.compile(r"\w+(Error|Exception)")).first
                error.wait_for(timeout=RUN_TIMEOUT_MS)
                _wait_kernel_idle(page, RUN_TIMEOUT_MS)
                error.scroll_into_view_if_needed()
                # text_content, not inner_text: JupyterLab may not render an output scrolled out
                # of view (data02's first error is inside Ray's traceback of the failed task).
                first_error = error.text_content() or ""
                assert "NotImplementedError" in first_error, (
                    "the first error of Run All is not the unanswered exercise's:\n" + first_error[-3000:]
                )
                steps.shot("01_student_run_all_blank")
            with steps("validate_blank"):
                message = _validate(page, RUN_TIMEOUT_MS)
                expect(message).to_have_class(re.compile(r"\bvalidation-failed\b"))
                expect(message).to_contain_text("The following cell failed")
                steps.shot("02_student_validate_blank_fails")
                _close_dialog(page)
                # The student stops the kernel (and with it the Ray cluster the notebook started).
                _run_menu(page, "Kernel", "Shut Down Kernel")
                with contextlib.suppress(PlaywrightError):  # JupyterLab may ask to confirm
                    page.locator(".jp-Dialog .jp-mod-accept").click(timeout=5_000)

            # -- student: the reference answers ---------------------------------------------
            with steps("fill_answers"):
                # The committed release with the reference answers (no outputs of the blank run).
                answered = reference_submission(ASSIGNMENT, ROOT / notebook_path)
                server.api("PUT", f"api/contents/{notebook_path}",
                           {"type": "notebook", "format": "json", "content": answered})
                _run_menu(page, "File", "Reload Notebook from Disk")
                with contextlib.suppress(PlaywrightError):  # asked only if the tab has unsaved edits
                    page.locator(".jp-Dialog .jp-mod-accept").click(timeout=5_000)
                answer = page.locator(".jp-Cell", has_text="def phenol_ratio").first
                expect(answer).to_contain_text("np.divide(batch[\"flavanoids\"]")
                expect(answer).not_to_contain_text("NotImplementedError")
                answer.scroll_into_view_if_needed()
            with steps("validate_answers"):
                message = _validate(page, RUN_TIMEOUT_MS)
                expect(message).to_have_class(re.compile(r"\bvalidation-success\b"))
                expect(message).to_contain_text("Success! Your notebook passes all the tests.")
                steps.shot("03_student_validate_answers_succeeds")
                _close_dialog(page)

            # -- instructor: formgrader -------------------------------------------------------
            with steps("formgrader"):
                _run_menu(page, "Nbgrader", "Formgrader")
                frame = page.frame_locator("iframe[src*='formgrader']")
                row = frame.locator("tr", has=frame.locator("td.name", has_text=ASSIGNMENT))
                expect(row.locator(".num-submissions")).to_have_text(str(len(scores)))
                steps.shot("04_instructor_formgrader_assignments")
                row.locator(".num-submissions a").click()
                for student, score in scores.items():
                    student_row = frame.locator("tr", has=frame.locator(".student-id", has_text=student))
                    expect(student_row.locator(".score")).to_have_text(
                        f"{score.score:g} / {score.max_score:g}"
                    )
                steps.shot("05_instructor_formgrader_scores")
            context.close()
    finally:
        killed = server.stop()
        (ARTIFACTS / "timings.json").write_text(json.dumps(steps.seconds, indent=1))
        print("\n[browser] step seconds:", steps.seconds)
    assert not killed, "processes outlived the JupyterLab server and were killed:\n" + "\n".join(killed)
    deadline = time.monotonic() + 20
    while (left := _course_processes(course_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, "processes of the course copy are still running:\n" + "\n".join(left)
