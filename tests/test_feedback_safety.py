"""Pages are inert: feedback, the grader's notes, the summary and the grades hold no active
content from a submission (the threat model's property 5).

A tiny nbgrader course of its own (one assignment, a solution cell and a test cell) is
released in ``tmp_path`` with the course's nbgrader configuration; an "autograded" notebook
full of hostile content (scripts and event handlers in outputs, markdown cells and messages,
``javascript:`` links, an SVG with a script, an iframe) is put where nbgrader's
``generate_feedback`` reads it, with a submission in the gradebook, so no kernel and no Ray
run. The pages are checked with Python's own HTML parser, the way a browser tokenizes them:
the only scripts left are nbconvert's template's (MathJax), no tag has an event handler, no
URL is ``javascript:``, and what the student wrote still shows, as text.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from support.pages import TEMPLATE_SCRIPT_SRC, Page, assert_inert
from support.tables import markdown_rows

from raydata_grader.course_dir import nbgrader_api, nbgrader_config
from raydata_grader.feedback import InertMarkdown, _notes_markdown, _plain_feedback, feedback_config, write_feedback
from raydata_grader.records import Row, escape_markdown, read_rows, save_rows
from raydata_grader.summary import summary_markdown

ASSIGNMENT = "ps1"
STUDENT = "eve_o+1@x-y.z"  # odd, but a valid id (intake.STUDENT_ID)

# ------------------------------------------------------------------ hostile content

MARKDOWN_CELL = """# Heading by the student

**bold** and `code <b>` and a table:

| a | b |
|---|---|
| 1 | 2 |

<script>alert('md-script')</script>
<a href="javascript:alert('md-a')">click</a> and <a href=" JaVa&#09;ScRiPt:alert('md-a2')">again</a>
[a link](javascript:alert('md-link')) and ![an image](javascript:alert('md-img'))
<img src=x onerror="alert('md-onerror')"> <svg onload="alert('md-svg')"></svg>
<iframe src="javascript:alert('md-iframe')"></iframe> <form action="javascript:alert('md-form')"><button>go</button></form>
<div style="background:url(javascript:alert('md-style'))" onmouseover="alert('md-hover')">hover</div>

![a dot](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC)
![not a png](data:image/png;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) [safe](https://example.org/page)
"""
SVG = ('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(\'svg-onload\')">'
       '<script>alert(\'svg-script\')</script><circle r="4"/></svg>')
OUTPUTS = [
    new_output("stream", name="stdout", text="</pre><script>alert('stream')</script>\n"),
    new_output("display_data", data={"text/html": "<script>alert('out-html')</script><img src=x onerror=alert('out-img')>"}),
    new_output("display_data", data={"image/svg+xml": SVG}),
    new_output("display_data", data={"text/markdown": "[md](javascript:alert('out-md'))<script>alert('out-md2')</script>"}),
    new_output("display_data", data={"application/javascript": "alert('out-js')", "text/plain": "<IPython.Javascript>"}),
    new_output("execute_result", execution_count=3,
               data={"text/html": "<iframe src=\"javascript:alert('out-iframe')\"></iframe>", "text/plain": "<IFrame at 0x1>"}),
    new_output("execute_result", execution_count=4,
               data={"text/html": "<iframe srcdoc=\"<script>alert('out-srcdoc')</script>\"></iframe>"}),
    new_output("error", ename="ValueError", evalue="<script>alert('evalue')</script>",
               traceback=["ValueError: <script>alert('traceback')</script>"]),
]
MESSAGES = [
    "part_a_hidden failed: <script>alert('note')</script>",
    "see [the docs](javascript:alert('note-link')) ![x](javascript:alert('note-img'))",
    "a | b | c\n# not a heading\n<img src=x onerror=alert('note-onerror')>\n    not code",
]
REPAIRS = ["cell `answer` was edited: <b onmouseover=alert('repair')>x</b>"]

# ------------------------------------------------------------------- a tiny course


def _course(out: Path) -> Path:
    """Release ``ps1`` in ``out`` and plant a graded, hostile submission of :data:`STUDENT`."""
    from nbgrader.api import Gradebook

    source = new_notebook(cells=[
        new_markdown_cell("# ps1\n\nWrite `f`."),
        new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION",
                      metadata={"nbgrader": {"solution": True, "grade": False, "locked": False,
                                             "grade_id": "answer", "schema_version": 3}}),
        new_code_cell("assert f() == 1",
                      metadata={"nbgrader": {"solution": False, "grade": True, "locked": True, "points": 1,
                                             "grade_id": "check", "schema_version": 3}}),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = out / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(source, path)
    result = nbgrader_api(nbgrader_config(out)).generate_assignment(ASSIGNMENT, force=True)
    assert result["success"], result.get("log")
    with Gradebook(f"sqlite:///{out.resolve() / 'gradebook.db'}") as gb:
        gb.update_or_create_student(STUDENT)
        gb.add_submission(ASSIGNMENT, STUDENT)
    nb = nbformat.read(out / "exercises" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    nb.cells[1].source = "def f():\n    return 1  # </pre><script>alert('source')</script>"
    nb.cells[1].outputs = list(OUTPUTS)
    nb.cells.append(new_markdown_cell(MARKDOWN_CELL))
    nb.cells.append(new_code_cell("x = 1", metadata={"tags": ["t\" onmouseover=\"alert('tag')"]}))
    for folder in ("submitted", "autograded"):
        target = out / folder / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        target.parent.mkdir(parents=True)
        nbformat.write(nb, target)
    return out


def _alembic_head() -> str:
    """The gradebook schema's version, as nbgrader's ``get_alembic_version`` finds it, in this process.

    nbgrader runs ``alembic heads`` for a new gradebook: a second Python that imports nbgrader
    (5 s and more); this reads the same migration scripts here, where nbgrader is imported."""
    import nbgrader
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(nbgrader.__file__).parent / "alembic"))
    return ScriptDirectory.from_config(config).get_current_head()


@pytest.fixture(scope="module")
def built_course(tmp_path_factory):
    import nbgrader.api

    bin_dir = str(Path(sys.executable).parent)  # where nbgrader looks for `alembic`, if it still does
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))
        mp.setattr(nbgrader.api, "get_alembic_version", _alembic_head, raising=False)
        return _course(tmp_path_factory.mktemp("feedback") / "course")


@pytest.fixture
def course(built_course, tmp_path):
    """A copy of the course of :func:`_course` for one test (its gradebook comes along)."""
    return Path(shutil.copytree(built_course, tmp_path / "course"))


def _row(**kw) -> Row:
    fields = dict(student=STUDENT, assignment=ASSIGNMENT, score=1.0, max_score=1.0, status="graded",
                  message="; ".join(MESSAGES), notes=list(MESSAGES), repairs=list(REPAIRS))
    return Row(**{**fields, **kw})


def _feedback(course: Path, **overrides) -> Page:
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import GetGrades

    config = nbgrader_config(course, **{"GenerateFeedback.preprocessors": [GetGrades, CSSHTMLHeaderPreprocessor],
                                        **overrides})
    result = nbgrader_api(config).generate_feedback(ASSIGNMENT, STUDENT, force=True)
    assert result["success"], result.get("log")
    return Page((course / "feedback" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text())


def assert_content_security_policy(page: Page) -> None:
    """The page's first tag in its head is the grader's Content-Security-Policy: nothing runs or loads."""
    from raydata_grader.feedback import CONTENT_SECURITY_POLICY

    head = [i for i, (t, _) in enumerate(page.tags) if t == "head"]
    assert head, "no <head>"
    tag, attrs = page.tags[head[0] + 1]
    assert tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy", page.tags[head[0] + 1]
    policy = {d.split()[0]: d.split()[1:] for d in attrs["content"].split(";") if d.strip()}
    assert attrs["content"] == CONTENT_SECURITY_POLICY
    assert policy["default-src"] == policy["script-src"] == policy["connect-src"] == policy["frame-src"] == ["'none'"]
    assert policy["img-src"] == ["data:"] and policy["style-src"] == ["'unsafe-inline'"]


# ----------------------------------------------------------------------------- tests


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's add_submission
def test_feedback_page_is_inert_and_still_readable(course):
    path = write_feedback(course, _row(), "graded in 3 s <script>alert('extra')</script>", True)
    text = path.read_text()
    page = Page(text)
    assert_content_security_policy(page)
    assert "Grader's notes" in page.text and "Test cell" in page.text, "not nbgrader's page: the plain one"
    assert_inert(page)
    assert len([a for a, _ in page.scripts if (a.get("src") or "").startswith(TEMPLATE_SCRIPT_SRC)]) == 1
    # what the student wrote shows as text: markdown cell, outputs, error, notes
    for shown in ("<script>alert('md-script')</script>", "<script>alert('out-html')</script>",
                  "<script>alert('traceback')</script>", "</pre><script>alert('source')</script>",
                  "<script>alert('stream')</script>", "<script>alert('note')</script>",
                  "<iframe srcdoc=", "<IFrame at 0x1>", "<IPython.Javascript>", "<script>alert('extra')</script>",
                  "a | b | c # not a heading", "cell `answer` was edited", "[the docs](javascript:alert('note-link'))"):
        assert shown in page.text, shown
    assert "alert('out-js')" not in text and "alert('out-iframe')" not in text  # their text/plain is shown instead
    # the markdown still renders: heading, bold, code, table, a safe link and a data: image
    tags = {t for t, _ in page.tags}
    assert {"h1", "strong", "code", "table", "th", "td"} <= tags
    assert ("a", "https://example.org/page") in [(t, a.get("href")) for t, a in page.tags]
    assert any(t == "img" and (a.get("src") or "").startswith("data:image/png") for t, a in page.tags)
    # SVG output: an <img> of the SVG (a browser runs no script in it), never inline <svg>
    assert any(t == "img" and (a.get("src") or "").startswith("data:image/svg+xml;base64,") for t, a in page.tags)
    # the notes file itself is escaped Markdown
    notes = (course / "notes" / STUDENT / f"{ASSIGNMENT}.md").read_text()
    assert "<" not in notes and not re.search(r"(?<!\\)\]\(", notes) and "&lt;script&gt;" in notes


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_sanitize_html_takes_effect_and_markdown_cells_need_inert_markdown(course):
    # nbgrader's defaults (the course's configuration turns sanitizing on; turned off here):
    # the hostile outputs and markdown run (the checks can see it)
    raw = _feedback(course, **{"HTMLExporter.sanitize_html": False})
    assert any("alert('out-html')" in body for _, body in raw.scripts)
    assert any("alert('md-script')" in body for _, body in raw.scripts)
    # HTMLExporter.sanitize_html alone, read by GenerateFeedback's exporter: outputs are clean,
    # but nbgrader's template renders markdown cells without nbconvert's clean_html
    sanitized = _feedback(course, **{"HTMLExporter.sanitize_html": True})
    assert not any("alert('out-html')" in body for _, body in sanitized.scripts)
    assert "<script>alert('out-html')</script>" in sanitized.text
    assert any("alert('md-script')" in body for _, body in sanitized.scripts)
    # write_feedback's configuration, and the course's nbgrader configuration: both
    assert nbgrader_config(course).HTMLExporter.sanitize_html is True
    assert InertMarkdown in nbgrader_config(course).GenerateFeedback.preprocessors
    config = feedback_config(course)
    assert config.HTMLExporter.sanitize_html is True and InertMarkdown in config.GenerateFeedback.preprocessors
    assert_inert(Page(write_feedback(course, _row(), "", True).read_text()))
    # the policy is on every page nbgrader's generate_feedback writes with the course's configuration
    assert_content_security_policy(sanitized)


def test_markdown_is_capped_before_it_is_rendered():
    """Nested tags make rendering and cleaning grow faster than the text (300,000 characters of
    ``<div>`` took minutes): every markdown cell, and the notebook's markdown in all, is cut first."""
    from raydata_grader.feedback import MAX_MARKDOWN_CELL_CHARS, MAX_MARKDOWN_NOTEBOOK_CHARS
    from raydata_grader.inert_markup import NOT_SHOWN

    nb = new_notebook(cells=[new_markdown_cell("<div>" * 60_000)]
                      + [new_markdown_cell("x" * MAX_MARKDOWN_CELL_CHARS) for _ in range(12)]
                      + [new_markdown_cell("*last words*")])
    nb, _ = InertMarkdown().preprocess(nb, {})
    lengths = [len(c.source) for c in nb.cells]  # rendered and escaped: a few times the text kept
    assert max(lengths) < 3 * MAX_MARKDOWN_CELL_CHARS, lengths
    assert sum(lengths) < 3 * MAX_MARKDOWN_NOTEBOOK_CHARS, sum(lengths)
    assert lengths[-2] < 1_000, "the notebook's budget was spent: later cells keep only the note"
    assert "more characters of this cell are not shown" in nb.cells[0].source
    assert nb.cells[-1].source == NOT_SHOWN  # the notebook's budget is spent by then


def test_error_outputs_count_against_the_notebooks_output_cap():
    """A kernel can publish many error messages in one cell: they count like any output, and
    only each cell's last error (the judge's verdict, or what ended the cell) always stays."""
    from raydata_grader.nbgrader_steps import LimitOutputSize

    def error(text):
        return new_output("error", ename="RuntimeError", evalue=text, traceback=[text, text])

    cells = [new_code_cell("pass", outputs=[error("rdg " * 25_000) for _ in range(30)]
                           + [error("the verdict")]) for _ in range(10)]
    nb, _ = LimitOutputSize(max_chars=20_000, max_notebook_chars=200_000).preprocess(new_notebook(cells=cells), {})
    total = sum(len(o["evalue"]) + sum(map(len, o["traceback"])) for c in nb.cells for o in c.outputs)
    assert total <= 200_000 + 10 * 20_000 * 2, total
    assert all(c.outputs[-1]["evalue"] == "the verdict" for c in nb.cells)
    assert all(len(c.outputs) < 5 for c in nb.cells), [len(c.outputs) for c in nb.cells]


def test_plain_feedback_escapes_every_field():
    row = _row(status="graded<b onmouseover=alert('status')>", student="eve", assignment="ps1<i onclick=x>")
    page = Page(_plain_feedback(row))
    assert_inert(page)
    assert_content_security_policy(page)
    assert page.scripts == [] and page.handlers() == []
    assert "Status: graded<b onmouseover=alert('status')>" in page.text and "ps1<i onclick=x>" in page.text
    assert "<script>alert('note')</script>" in page.text and "cell `answer` was edited" in page.text


def test_notes_markdown_renders_as_text():
    from nbconvert.filters.markdown import markdown2html

    text = _notes_markdown(_row(), "[x](javascript:alert('n'))")
    page = Page(markdown2html(text))
    assert [t for t, _ in page.tags if t in ("script", "img", "iframe", "h1", "h2", "pre", "table")] == []
    assert page.links() == []
    assert len([t for t, _ in page.tags if t == "li"]) == 1 + len(MESSAGES) + len(REPAIRS)
    for shown in MESSAGES[:2] + ["a | b | c # not a heading <img src=x onerror=alert('note-onerror')> not code"]:
        assert shown in page.text, shown


def test_escape_markdown_renders_as_its_text():
    from nbconvert.filters.markdown import markdown2html

    for text in ["<b>x</b> & y", "*a* _b_ __c__ `d` ~~e~~", "# h", "- item", "+ item", "1. item", "3) item",
                 "[l](javascript:x) ![i](y)", "back\\slash \\*", "add_bands_hidden", "a\nb"]:
        page = Page(markdown2html(escape_markdown(text)))
        assert [t for t, _ in page.tags] == ["p"], (text, page.tags)
        assert page.text.strip() == " ".join(text.split()), text


def test_summary_cells_cannot_break_their_table_or_inject_markup():
    from nbconvert.filters.markdown import markdown2html

    rows = {(s, "data02"): Row(s, "data02", 0.0, 12.0, "crashed", m) for s, m in [
        ("a_b", "boom | and | pipes\n| x | y |\n|---|---|"),
        ("c", "<script>alert('summary')</script> [x](javascript:alert(1)) `code`"),
    ]}
    summary = summary_markdown(rows)
    table = [r for r in markdown_rows(summary) if len(r) == 5 and r[1] == "data02"]
    assert [r[0] for r in table] == ["a_b", "c"]
    assert table[0][4] == "boom | and | pipes | x | y | |---|---|"
    assert "&lt;script&gt;" in table[1][4] and "\\[x\\]" in table[1][4]
    lines = [ln for ln in summary.splitlines() if ln.startswith("|")]
    assert all(ln.endswith("|") for ln in lines) and len(lines) == 3 + 3 + 4
    page = Page(markdown2html(summary))
    assert [t for t, _ in page.tags if t in ("script", "img", "code")] == [] and page.links() == []
    assert "<script>alert('summary')</script>" in page.text


def test_grades_csv_guards_against_formulas_and_json_keeps_the_text(tmp_path):
    messages = ['=HYPERLINK("http://evil.example","click")', "+1", "-2 points", "@SUM(A1)", "\tx", "\rx", "ok",
                "lone \ud800 surrogate"]
    rows = {(f"s{i}", "data01"): Row(f"s{i}", "data01", -1.5 if i == 0 else 3.0, 12.0, "graded", m,
                                     repairs=["<script>alert('log')</script> # h"])
            for i, m in enumerate(messages)}
    save_rows(tmp_path, rows)
    with open(tmp_path / "grades.csv", newline="") as f:
        written = {r["student"]: r for r in csv.DictReader(f)}
    assert [written[f"s{i}"]["message"] for i in range(len(messages))] == [
        "'" + m for m in messages[:6]] + ["ok", "lone \\ud800 surrogate"]
    assert written["s0"]["score"] == "-1.5" and written["s1"]["max_score"] == "12"  # numbers stay numbers
    assert {k: r.message for k, r in read_rows(tmp_path).items()} == {k: r.message for k, r in rows.items()}
    log = (tmp_path / "repairs" / "s0.md").read_text()
    assert "<script>" not in log and "&lt;script&gt;" in log and "\n# h" not in log


@pytest.mark.parametrize("content", [
    b"{not json", b"\xff\xfe", b"[]", b'{"rows": {}}', b'{"rows": [1]}',
    b'{"rows": [{"student": "a", "assignment": "data01"}]}',
    b'{"rows": [{"student": "a", "assignment": "data01", "score": "12", "max_score": 12, "status": "graded", "message": ""}]}',
    b'{"rows": [{"student": "a", "assignment": "data01", "score": NaN, "max_score": 12, "status": "graded", "message": ""}]}',
    b'{"rows": [{"student": "a", "assignment": "data01", "score": 1, "max_score": 12, "status": "graded", "message": "", "x": 1}]}',
    b'{"rows": [{"student": "../a", "assignment": "data01", "score": 1, "max_score": 12, "status": "graded", "message": ""}]}',
    b'{"rows": [{"student": "a", "assignment": "data01", "score": 1, "max_score": 12, "status": "hacked", "message": ""}]}',
    b'{"rows": [{"student": "a", "assignment": "data01", "score": 1, "max_score": 12, "status": "graded", "message": "",'
    b' "cells": {"c": [1]}}]}',
    b'{"rows": [{"student": "a", "assignment": "data01", "score": 1, "max_score": 12, "status": "graded", "message": "",'
    b' "repairs": "one"}]}',
], ids=lambda c: c[:40].decode("latin-1"))
def test_read_rows_says_what_to_do_with_a_corrupt_grades_json(tmp_path, content):
    (tmp_path / "grades.json").write_bytes(content)
    with pytest.raises(ValueError, match=r"grades\.json.*delete it and grade again with --force"):
        read_rows(tmp_path)


def test_read_rows_reads_what_save_rows_wrote_and_rows_of_earlier_runs(tmp_path):
    rows = {("a", "data01"): Row("a", "data01", 3, 12, "repaired", "m", cells={"c": [1, 2]}, repairs=["r"], notes=["n"])}
    save_rows(tmp_path, rows)
    assert read_rows(tmp_path) == rows
    old = {"rows": [{"student": "a", "assignment": "data01", "score": 3, "max_score": 12, "status": "graded",
                     "message": "m"}]}  # no notes, cells... (an earlier grader's file)
    (tmp_path / "grades.json").write_text(json.dumps(old))
    assert read_rows(tmp_path)[("a", "data01")].notes == []


def test_a_passing_checks_note_survives_the_output_cap_and_feedback_but_a_forged_one_does_not():
    """The grader appends the verdict and its note after the cell ran; what the student's code
    printed comes before them, so a printed "Hidden test passed." never carries a note along."""
    from raydata_grader.nbgrader_steps import HIDDEN_PASSED, NOTE_PREFIX, HideHiddenTests, LimitOutputSize

    def stream(text):
        return new_output("stream", name="stdout", text=text)

    note = f"{NOTE_PREFIX}the store peaked at 120 MiB above its baseline, 72 MiB under the allowance.\n"
    hidden = "# hidden\n### BEGIN HIDDEN TESTS\n# judged\n### END HIDDEN TESTS"
    meta = {"nbgrader": {"grade": True, "grade_id": "x_hidden", "points": 2}}
    forged = [new_output("display_data", data={"text/plain": "x"}), stream(HIDDEN_PASSED), stream(note)] * 200
    cells = [new_code_cell(hidden, metadata=meta, outputs=[stream("y" * 50_000), stream(HIDDEN_PASSED), stream(note)]),
             new_code_cell(hidden, metadata=meta, outputs=[stream(HIDDEN_PASSED + "forged"), stream(note + "z" * 5000)]),
             new_code_cell("x = 1", outputs=[*forged, stream("the end")])]
    nb, _ = LimitOutputSize(max_chars=1_000, max_notebook_chars=1_000).preprocess(new_notebook(cells=cells), {})
    assert [o["text"] for o in nb.cells[0].outputs][-2:] == [HIDDEN_PASSED, note]
    # forged verdicts and notes in the middle of a cell count against the cap like any output
    assert sum(len(o.get("text", "")) for o in nb.cells[2].outputs) <= 1_000, len(nb.cells[2].outputs)
    for cell in nb.cells:
        HideHiddenTests().preprocess_cell(cell, {}, 0)
    assert [o["text"] for o in nb.cells[0].outputs] == [HIDDEN_PASSED, note]
    assert nb.cells[1].outputs == []
