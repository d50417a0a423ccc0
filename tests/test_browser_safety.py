"""A hostile submission in a real browser: its feedback page and formgrader run nothing and load nothing.

A grading folder is built inside a temporary copy of the course, through the grader's own store
path and without a kernel: the hostile notebook of ``autograder/fixtures/attack_pages.py``
(``oscar``: markup in markdown cells, attachments, a raw cell, tags) goes through intake
(:func:`raydata_grader.grade._plan`: lint, the inert pass, ``submitted/``), and a job result
whose autograded notebook holds what a hostile kernel sends (an image whose ``width`` and
``height`` metadata carry ``onerror=``, ``filenames`` and ``isolated`` metadata, HTML with
scripts, the raw markdown again) and a stray ``evil.html`` is merged
(:func:`raydata_grader.results.merge_result`); then its feedback page is written
(:func:`raydata_grader.feedback.write_feedback`). Every payload calls ``alert``, fetches
``/api/contents`` (where the instructor's files are) or loads an image from another host.

Chromium (Debian's, driven by Playwright) then opens, recording every dialog and every request:

1. the feedback page, served over HTTP: no dialog, no request but the page itself;
2. a page made from the same hostile notebook *before* the inert pass (nbconvert's classic
   template, sanitizing off) but with the grader's Content-Security-Policy: the markup that
   would run is there, and nothing runs or loads (the second wall); the same page without the
   policy does run it (the check can see a script run);
3. formgrader's page of the submission, served as ``make jupyter GRADING=...`` serves it: no
   dialog, no request to ``/api/contents``, and no request off the server's origin but
   nbgrader's own template's MathJax (which the test aborts); the same page for a submission
   stored as it came runs the payloads (the vector is real).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_output

from support.lab_server import LabServer
from support.pages import Page
from support.static_server import StaticServer
from test_browser import CHROMIUM, CHROMIUM_ARGS, COURSE_PARTS, UI_TIMEOUT_MS, _server_environment

from raydata_course.layout import GRADING_DIR_ENV

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # the grading folder takes nbgrader's release of data01 (about 30 s)
ASSIGNMENT = "data01"
STUDENT, RAW_STUDENT = "mallet", "stored_raw"
#: nbgrader's formgrade template loads MathJax from here itself (``{{ mathjax() }}``, no setting).
TEMPLATE_MATHJAX = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
#: What a hostile kernel sends: every payload alerts, or fetches the instructor's files.
KERNEL_OUTPUTS = [
    new_output("display_data", data={"image/png": PNG, "text/plain": "<an image>"},
               metadata={"image/png": {"width": "1 onerror=alert('rdg-width')",
                                       "height": "1 onload=fetch('/api/contents/autograder')"}}),
    new_output("display_data", data={"image/png": PNG},
               metadata={"height": "2 onerror=alert('rdg-height')", "filenames": {"image/png": "x\" onerror=\"alert(3)"}}),
    new_output("display_data", data={"text/html": "<script>alert('rdg-isolated')</script>"},
               metadata={"text/html": {"isolated": True}}),
    new_output("display_data", data={"text/html": "<img src=x onerror=\"alert('rdg-html')\">"
                                                  "<img src=\"http://127.0.0.2:9/rdg-pixel.png\">"}),
]


def _load_fixture(name: str):
    folder = str(ROOT / "autograder" / "fixtures")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return __import__(name)


def _hostile_autograded(submitted: bytes):
    """The hostile notebook as a kernel would leave it: outputs above under its first code cell."""
    nb = nbformat.reads(submitted.decode(), as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.from_dict(o) for o in KERNEL_OUTPUTS]
    return nb


def _record(student: str, release) -> "GradebookRecord":  # noqa: F821 - imported below
    from nbgrader.utils import is_grade, is_solution

    from raydata_grader.gradebook import GradebookRecord, NotebookRecord

    grades = {c.metadata.nbgrader.grade_id: 0.0 for c in release.cells if is_grade(c)}
    comments = {c.metadata.nbgrader.grade_id: None for c in release.cells if is_solution(c)}
    return GradebookRecord(ASSIGNMENT, student, None, (NotebookRecord(ASSIGNMENT, None, grades, comments),))


@pytest.fixture(scope="module")
def hostile_course(tmp_path_factory):
    """A course copy whose grading folder holds the hostile submission, stored by the grader;
    returns ``(course, grading, raw_pages)``."""
    from raydata_grader.feedback import InertHTMLExporter, write_feedback
    from raydata_grader.grade import GradeOptions, _plan, ensure_course
    from raydata_grader.jobs import JobResult
    from raydata_grader.kit import build_kit
    from raydata_grader.paths import release_notebook
    from raydata_grader.records import Row
    from raydata_grader.results import merge_result
    from raydata_grader.submission_files import Candidate
    from nbconvert import HTMLExporter

    course = tmp_path_factory.mktemp("browser-safety") / "course"
    course.mkdir()
    for name in COURSE_PARTS:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, course / name)
    grading = course / "build" / "grading"
    ensure_course(grading, (ASSIGNMENT,))
    release = nbformat.read(release_notebook(ASSIGNMENT, grading), as_version=4)
    kit = build_kit(grading, ASSIGNMENT)
    attack_pages = _load_fixture("attack_pages")
    from raydata_grader.answers import reference_submission

    hostile = nbformat.writes(attack_pages.oscar(reference_submission(ASSIGNMENT, release_notebook(ASSIGNMENT, grading))))
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    cand = Candidate(STUDENT, ASSIGNMENT, f"{STUDENT}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb", hostile.encode())
    row, planned = _plan(grading, cand, "", hashlib.sha256(cand.data).hexdigest(), kit, release,
                         GradeOptions().limits, when)
    assert row is None, row
    raw = _hostile_autograded(hostile.encode())  # the markdown as the student wrote it, the outputs as sent
    result = JobResult(STUDENT, ASSIGNMENT, "graded", 0.0, {}, [], 1.0, 1.0, "test",
                       autograded={f"{ASSIGNMENT}.ipynb": nbformat.writes(raw).encode(),
                                   "evil.html": b"<script>alert('rdg-stray-file')</script>"},
                       gradebook=_record(STUDENT, release))
    merge_result(grading, planned.job, result)
    write_feedback(grading, Row(STUDENT, ASSIGNMENT, 0.0, kit.max_score, "graded", ""), "", True)

    # the control: a submission stored as it came, as the grader stored it before the inert pass
    target = grading / "autograded" / RAW_STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    target.parent.mkdir(parents=True)
    nbformat.write(raw, target)
    from raydata_grader.gradebook import apply_record

    apply_record(grading, _record(RAW_STUDENT, release))

    pages = course / "build" / "raw-pages"
    pages.mkdir()
    classic = {"template_name": "classic", "sanitize_html": False}
    (pages / "with-csp.html").write_text(InertHTMLExporter(**classic).from_notebook_node(raw)[0])
    (pages / "without-csp.html").write_text(HTMLExporter(**classic).from_notebook_node(raw)[0])
    return course, grading, pages


def test_the_grading_folder_holds_no_active_content(hostile_course):
    course, grading, pages = hostile_course
    assert not (grading / "autograded" / STUDENT / ASSIGNMENT / "evil.html").exists(), "a stray file was stored"
    assert [p.name for p in (grading / "received" / STUDENT / ASSIGNMENT).iterdir()] == [f"{ASSIGNMENT}.ipynb.zip"]
    handlers = Page((pages / "with-csp.html").read_text()).handlers()
    # the width and height strings became attributes: the last onerror= of a tag is the one kept
    assert {("img", "onerror", "alert('rdg-height')"), ("img", "onload", "fetch('/api/contents/autograder')")} <= set(
        handlers), "the control page holds the markup that would run"


class Recorder:
    """Every dialog, request and console line of a browser context's pages, in order.

    ``requests`` is every request a page asked for; ``sent`` those that went to the network
    (Playwright's router sees only those: a request the page's Content-Security-Policy blocks
    never does, and ends in ``requestfailed`` with the failure ``csp``, kept in ``blocked``).
    """

    def __init__(self, context, origin: str):
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.sent: list[str] = []
        self.blocked: list[str] = []
        self.console: list[str] = []
        self.origin = origin
        context.on("request", lambda request: self.requests.append(request.url))
        context.on("requestfailed", lambda request: request.failure == "csp" and self.blocked.append(request.url))
        context.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        self.sent.append(url)
        if url.startswith(self.origin) or url.startswith("data:"):
            route.continue_()
        else:
            route.abort()  # nothing leaves this machine, whatever a page asks for

    def watch(self, page) -> None:
        def dialog(d):
            self.dialogs.append(d.message)
            with contextlib.suppress(Exception):
                d.dismiss()

        page.on("dialog", dialog)
        page.on("console", lambda message: self.console.append(message.text))


def _open(context, recorder: Recorder, url: str, settle_ms: int = 3_000):
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    recorder.watch(page)
    page.goto(url, wait_until="load")
    page.wait_for_timeout(settle_ms)  # handlers of images that fail to load fire after "load"
    return page


@pytest.fixture
def chromium():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright is not installed: `pip install -r requirements.txt` (or deselect: -m 'not browser').")
    if not CHROMIUM.is_file():
        pytest.fail(f"No Chromium at {CHROMIUM}: `apt-get install chromium chromium-driver`, or set "
                    "RAYDATA_COURSE_CHROMIUM (or deselect: -m 'not browser').")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.mark.browser
def test_feedback_page_runs_and_loads_nothing(hostile_course, chromium):
    course, grading, pages = hostile_course
    shutil.copyfile(grading / "feedback" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.html", pages / "feedback.html")
    with StaticServer(pages) as server:
        context = chromium.new_context()
        recorder = Recorder(context, server.url)
        for name in ("feedback.html", "with-csp.html"):
            page = _open(context, recorder, server.url + name)
            assert "rdg" in page.inner_text("body"), f"{name}: the payloads should show, as text"
        assert recorder.dialogs == [], recorder.dialogs
        assert recorder.sent == [server.url + "feedback.html", server.url + "with-csp.html"], recorder.sent
        # what the policy blocked: the templates' MathJax and fonts, and the image from another host
        assert set(recorder.requests) - set(recorder.sent) == set(recorder.blocked), recorder.requests
        assert not [u for u in recorder.blocked if "api/contents" in u], recorder.blocked
        assert not [line for line in recorder.console if "rdg" in line and "Content Security Policy" not in line]
        print("\n[browser-safety] blocked by the pages' policy:", sorted(set(recorder.blocked)))
        # the control: without the policy, the same page runs the payloads and asks for the files
        _open(context, recorder, server.url + "without-csp.html")
        assert "rdg-height" in recorder.dialogs, recorder.dialogs
        assert any("/api/contents/autograder" in u for u in recorder.sent), recorder.sent
        context.close()


@pytest.mark.browser
def test_formgrader_shows_the_submission_and_runs_nothing(hostile_course, chromium, tmp_path):
    from nbgrader.api import Gradebook

    course, grading, _ = hostile_course
    with Gradebook(f"sqlite:///{grading / 'gradebook.db'}") as gb:
        ids = {s: gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, s).id for s in (STUDENT, RAW_STUDENT)}
    env = _server_environment(course, tmp_path / "jupyter")
    env[GRADING_DIR_ENV] = str(grading)
    server = LabServer(course, log_path=tmp_path / "server.log", env=env)
    server.start()
    try:
        context = chromium.new_context()
        recorder = Recorder(context, server.base_url)
        page = _open(context, recorder, server.url(f"formgrader/submissions/{ids[STUDENT]}/"), settle_ms=5_000)
        text = page.inner_text("body")
        assert "alert('rdg-payload-md')" in text and "Student's answer" in text, text[:2000]
        _open(context, recorder, server.url(f"formgrader/manage_submissions/{ASSIGNMENT}"))
        assert recorder.dialogs == [], recorder.dialogs
        assert recorder.blocked == [], "formgrader's pages carry no policy: what they ask for is sent"
        assert not [u for u in recorder.requests if "api/contents" in u or "rdg" in u], recorder.requests
        foreign = [u for u in recorder.requests if not u.startswith(server.base_url)]
        assert [u for u in foreign if not u.startswith(TEMPLATE_MATHJAX)] == [], foreign
        assert not [line for line in recorder.console if "rdg" in line], recorder.console
        # the control: the same submission stored as it came runs its payloads in formgrader
        _open(context, recorder, server.url(f"formgrader/submissions/{ids[RAW_STUDENT]}/"), settle_ms=5_000)
        assert {"rdg-height", "rdg-payload-md"} <= set(recorder.dialogs), recorder.dialogs
        assert any("/api/contents/autograder" in u for u in recorder.sent), recorder.sent
        context.close()
    finally:
        left = server.stop()
    assert not left, left
    print("\n[browser-safety] formgrader's requests:", json.dumps(sorted(set(recorder.sent)), indent=1))
