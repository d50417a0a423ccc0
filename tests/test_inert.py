"""What a student wrote is made inert where it enters the grading folder, and what a notebook
carries is capped before it is parsed.

The hostile notebook here holds each vector found against the stored notebooks: an image whose
display metadata carries markup (nbconvert's classic template writes ``width`` unquoted), a
markdown cell with a ``<script>``, an ``<iframe srcdoc>`` and an image that would load from
another host, attachments that are not images, rich outputs, tags and raw cells with markup,
and notebook metadata. Each test renders what :func:`raydata_grader.inert.inert_notebook`
stores with the templates that show it (nbconvert's classic one, with sanitizing off as a
viewer may have it, and formgrader's own) and reads the pages as a browser tokenizes them.
No kernel runs.
"""

from __future__ import annotations

import base64
import io
import json
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from support.pages import Page

from raydata_grader.inert import GRADER_KEY, InertNotebook, inert_notebook, keep_received, record_cap, recorded_caps
from raydata_grader.inert_markup import MAX_IMAGE_PIXELS, MAX_MARKDOWN_CELL_CHARS, reencode_image
from raydata_grader.notebook_caps import (MAX_ATTACHMENT_BYTES, MAX_JSON_CONTAINERS, MAX_JSON_VALUES,
                                          MAX_NOTEBOOK_CELLS, json_chars, notebook_cap_problem)

ROOT = Path(__file__).resolve().parents[1]


def _png(width: int = 3, height: int = 2, fmt: str = "PNG") -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, fmt)
    return base64.b64encode(out.getvalue()).decode()


NOT_A_PNG = base64.b64encode(b"<script>alert('rdg-bytes')</script>").decode()
MARKDOWN = """# The student's answer

<script>alert('rdg-md-script')</script>

<iframe srcdoc="<script>alert('rdg-srcdoc')</script>"></iframe>

<img src="http://127.0.0.1:9/rdg-pixel.png"> <img src=x onerror="alert('rdg-md-onerror')">

![pasted](attachment:plot.png) ![vector](attachment:plot.svg) ![fake](attachment:fake.png)
"""


def hostile_notebook():
    """A notebook as a hostile kernel and student would leave it for the grader to store."""
    md = new_markdown_cell(MARKDOWN)
    md.attachments = {"plot.png": {"image/png": _png()}, "plot.svg": {"image/svg+xml": base64.b64encode(
        b"<svg onload=\"alert('rdg-svg')\"/>").decode()}, "fake.png": {"image/png": NOT_A_PNG}}
    outputs = [
        new_output("display_data", data={"image/png": _png(), "text/plain": "<Figure>"},
                   metadata={"image/png": {"width": "1 onerror=alert('rdg-width')", "height": 40}}),
        new_output("display_data", data={"image/png": _png()}, metadata={"height": "1 onerror=alert('rdg-height')",
                                                                         "filenames": {"image/png": "x\" onerror=y"}}),
        new_output("display_data", data={"text/html": "<b>table</b><script>alert('rdg-html')</script>"},
                   metadata={"text/html": {"isolated": True}}),
        new_output("display_data", data={"image/png": NOT_A_PNG, "image/svg+xml": "<svg onload=alert(1)/>"}),
        new_output("execute_result", execution_count=2, data={"application/javascript": "alert('rdg-js')"}),
        new_output("error", ename="E" * 5_000, evalue="<script>alert('rdg-evalue')</script>",
                   traceback=["E: <script>alert('rdg-evalue')</script>"]),
    ]
    return new_notebook(cells=[
        md,
        new_code_cell("x = 1", metadata={"tags": ["ok", "t\" onmouseover=\"alert('rdg-tag')"],
                                         "nbgrader": {"grade_id": "answer", "solution": True, "grade": False,
                                                      "locked": False, "schema_version": 3, "x": "<b>"}},
                      outputs=outputs, execution_count=2),
        new_raw_cell("<script>alert('rdg-raw')</script>", metadata={"format": "text/html"}),
    ], metadata={"kernelspec": {"name": "raydata-course", "display_name": "Python (raydata-course)",
                                "language": "python"},
                 "title": "<script>alert('rdg-title')</script>", "widgets": {"application/vnd.jupyter.widget-state+json": {
                     "state": {}, "version_major": 2, "version_minor": 0, "rdg": "<script>"}},
                 GRADER_KEY: {"caps": ["a note a student forged"]}})


def _classic(nb, **config) -> Page:
    """``nb`` as nbconvert's classic template shows it, sanitizing off (the viewer's choice, not ours)."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="classic", **{"sanitize_html": False, **config})
    return Page(exporter.from_notebook_node(nb)[0])


def _formgrader(nb) -> Page:
    """``nb`` as nbgrader's formgrader renders a submission (its HTMLExporter, its ``formgrade`` template)."""
    import nbgrader.server_extensions.formgrader.handlers as handlers
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="formgrade", extra_template_basedirs=[handlers.template_path])
    resources = {"assignment_id": "data01", "notebook_id": "data01", "submission_id": "1", "index": 0, "total": 1,
                 "base_url": "", "student": "eve", "last_name": None, "first_name": None, "notebook_path": "x"}
    return Page(exporter.from_notebook_node(nb, resources=resources)[0])


def _payloads_run(page: Page) -> list[str]:
    found = [f"{t} {k}" for t, k, v in page.handlers() if "rdg" in v or "alert" in v]
    found += [body[:60] for _, body in page.scripts if "rdg" in body]
    found += [t for t, _ in page.tags if t in ("iframe", "svg", "object", "embed")]
    found += [a.get("src") for t, a in page.tags if t == "img" and not (a.get("src") or "data:").startswith("data:")]
    return found


def test_the_hostile_notebook_runs_scripts_in_the_templates_that_show_it():
    """The vectors are real: stored as they came, the classic and formgrader templates run them."""
    nb = hostile_notebook()
    assert ("img", "onerror", "alert('rdg-width')") in _classic(nb).handlers()
    assert any("rdg-md-script" in body for _, body in _formgrader(nb).scripts)
    assert "iframe" in {t for t, _ in _formgrader(nb).tags}


def test_stored_notebook_is_inert_in_every_template_and_still_readable():
    nb, notes = inert_notebook(hostile_notebook())
    for page in (_classic(nb), _formgrader(nb), _classic(nb, sanitize_html=True)):
        assert _payloads_run(page) == [], _payloads_run(page)
        assert not [u for u in page.urls() if "javascript:" in u or "rdg" in u]
        assert "<script>alert('rdg-md-script')</script>" in page.text  # shown, as text
        assert "<script>alert('rdg-evalue')</script>" in page.text
    cell, code, raw = nb.cells
    # the markdown: headings and images stay, the attached SVG and the fake PNG do not
    page = Page(cell.source)
    images = [a for t, a in page.tags if t == "img"]
    assert [a.get("alt") for a in images] == [None, None, "pasted", "vector", "fake"]
    assert [bool(a.get("src")) for a in images] == [False, False, True, False, False]
    assert "attachments" not in cell
    assert notes == ["1 attachment(s) were not kept (plot.svg): the grader keeps only PNG, JPEG and GIF images "
                     "pasted into markdown cells"]
    # outputs: images with numbers for width and height, everything else as text
    meta = [o.get("metadata") for o in code.outputs]
    assert meta[:2] == [{"image/png": {"height": 40}}, {}]
    assert [sorted(o.get("data", {})) for o in code.outputs] == [
        ["image/png", "text/plain"], ["image/png"], ["text/plain"], ["text/plain"], ["text/plain"], []]
    assert code.outputs[2]["data"]["text/plain"] == "tablealert('rdg-html')"
    assert "image/svg+xml" in code.outputs[3]["data"]["text/plain"]
    assert len(code.outputs[5]["ename"]) == 200
    assert code.metadata == {"tags": ["ok"], "nbgrader": {"grade_id": "answer", "solution": True, "grade": False,
                                                          "locked": False, "schema_version": 3}}
    assert raw.metadata == {} and "<script>" not in raw.source
    assert set(nb.metadata) == {"kernelspec"}, "the title, widget state and a forged grader note are gone"
    nbformat.validate(nb)


@pytest.mark.parametrize("name", ["hostile", "exercises", "chapters"])
def test_inert_twice_is_inert_once(name):
    """Every stored notebook is its own inert form (the real markdown too: tables, code, lists)."""
    notebooks = [hostile_notebook()] if name == "hostile" else [
        nbformat.read(p, as_version=4) for p in sorted((ROOT / name).glob("**/*.ipynb"))]
    for nb in notebooks:
        once, _ = inert_notebook(nb)
        twice, _ = inert_notebook(once)
        assert nbformat.writes(twice) == nbformat.writes(once)


def test_images_are_decoded_and_encoded_again_or_dropped():
    png = _png(5, 4)
    again = reencode_image("image/png", png)
    assert again is not None and base64.b64decode(again).startswith(b"\x89PNG")
    assert reencode_image("image/jpeg", _png(5, 4, "JPEG")) is not None
    assert reencode_image("image/gif", _png(5, 4, "GIF")) is not None
    assert reencode_image("image/png", NOT_A_PNG) is None
    assert reencode_image("image/jpeg", png) is None, "the decoder is chosen by the type, not by the bytes"
    assert reencode_image("image/svg+xml", png) is None
    side = int(MAX_IMAGE_PIXELS ** 0.5) + 1
    assert reencode_image("image/png", _png(side, side)) is None, "past the pixel limit"


def test_markdown_is_capped_to_what_is_stored_and_says_so():
    """What is stored fits the caps (rendering adds tags, so less source is kept), and so a
    second pass keeps it whole: nested tags, and a notebook whose markdown runs out."""
    from raydata_grader.inert_markup import MAX_MARKDOWN_NOTEBOOK_CHARS, NOT_SHOWN, markdown_chars

    big = new_markdown_cell("<div>" * 60_000)
    cells = [big] + [new_markdown_cell(("*word* " * 3_000)[:19_000]) for _ in range(12)] + [new_markdown_cell("end")]
    nb, notes = inert_notebook(new_notebook(cells=cells))
    stored = [markdown_chars(c.source) for c in nb.cells if c.source != NOT_SHOWN]
    assert max(stored) <= MAX_MARKDOWN_CELL_CHARS and sum(stored) <= MAX_MARKDOWN_NOTEBOOK_CHARS, stored
    assert "more characters of this cell are not shown" in nb.cells[0].source
    assert nb.cells[-1].source == NOT_SHOWN, "the notebook's markdown ran out before its last cell"
    [note] = notes
    cut = int(note.split()[0].replace(",", ""))
    assert 5 * 60_000 - MAX_MARKDOWN_CELL_CHARS < cut < 5 * 60_000 + 12 * 19_000 + 3, note
    assert note.endswith("characters of markdown were not kept (the grader keeps 20,000 per cell and 200,000 "
                         "per notebook)")
    again, notes_again = inert_notebook(nb)
    assert nbformat.writes(again) == nbformat.writes(nb) and notes_again == []


def test_grader_notes_stay_only_where_the_grader_runs():
    nb = hostile_notebook()
    assert GRADER_KEY not in inert_notebook(nb)[0].metadata
    nb.metadata.pop(GRADER_KEY)
    record_cap(nb, "12 characters of output were cut")
    kept, _ = InertNotebook().preprocess(nb, {})
    assert recorded_caps(kept.metadata) == ["12 characters of output were cut"]
    assert recorded_caps(nbformat.writes(kept).encode()) == ["12 characters of output were cut"]
    assert recorded_caps(b"not a notebook") == []


def test_received_copy_is_a_zip_of_the_exact_bytes(tmp_path):
    data = nbformat.writes(hostile_notebook()).encode() + b"\n\xff trailing"
    path = keep_received(tmp_path / "received" / "eve" / "data01", "../../odd name.ipynb", data)
    assert path.name == "odd name.ipynb.zip" and path.parent == tmp_path / "received" / "eve" / "data01"
    with zipfile.ZipFile(path) as archive:
        assert archive.namelist() == ["odd name.ipynb"] and archive.read("odd name.ipynb") == data
    assert list(path.parent.iterdir()) == [path]


# ---------------------------------------------------------------------------- intake caps


def _notebook_bytes(cells: list, **extra) -> bytes:
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5, **extra}).encode()


def test_the_releases_are_well_inside_every_cap():
    for path in sorted((ROOT / "exercises").glob("data0*/data0*.ipynb")):
        assert notebook_cap_problem(path.read_bytes()) is None, path


@pytest.mark.parametrize("make, cap", [
    (lambda: _notebook_bytes([{"cell_type": "raw", "metadata": {}, "source": ""}] * 50_000), "cells"),
    (lambda: _notebook_bytes([{"cell_type": "markdown", "metadata": {}, "source": "![x](attachment:x.png)",
                               "attachments": {"x.png": {"image/png": "A" * (9 * 2**20)}}}]), "attachments"),
    (lambda: _notebook_bytes([{"cell_type": "code", "metadata": {"x": ["ab"] * 1_200_000}, "source": "",
                               "outputs": [], "execution_count": None}]), "JSON values"),
    (lambda: _notebook_bytes([{"cell_type": "code", "metadata": {"x": [{}] * 300_000}, "source": "",
                               "outputs": [], "execution_count": None}]), "JSON objects and lists"),
], ids=["50,000 cells", "9 MiB attachment", "1.2 million strings", "300,000 objects"])
def test_intake_caps_name_the_cap_and_how_far_over(make, cap):
    data = make()
    start = time.monotonic()
    problem = notebook_cap_problem(data)
    assert problem is not None and cap in problem and " over the limit of " in problem, problem
    assert time.monotonic() - start < 10, "the check itself must stay cheap"
    if cap == "cells":
        assert problem.startswith(f"it holds 50,000 cells, {50_000 - MAX_NOTEBOOK_CELLS:,} over the limit of 1,000")
    if cap == "attachments":
        assert f"{MAX_ATTACHMENT_BYTES / 2**20:.1f} MiB per notebook" in problem
    assert str(f"{MAX_JSON_VALUES:,}") in problem or cap != "JSON values"
    assert str(f"{MAX_JSON_CONTAINERS:,}") in problem or cap != "JSON objects and lists"


def test_strings_that_look_like_structure_are_not_counted():
    text = '{"x": [' + ",".join(['"{[,]}\\" {,[ \\\\"'] * 10) + "]}"
    assert json.loads(text)  # valid JSON, full of braces and commas inside its strings
    cells = [{"cell_type": "code", "metadata": {}, "source": "{[" * 300_000, "outputs": [], "execution_count": None}]
    assert notebook_cap_problem(_notebook_bytes(cells)) is None


def test_json_chars_counts_every_field_and_stops_past_its_limit():
    content = {"data": {"text/plain": "x"}, "metadata": {"image/png": {"width": "y" * 1000}}}
    assert json_chars(content) > 1000
    assert json_chars({"ename": "E" * 5_000, "evalue": "", "traceback": []}) > 5_000
    many_keys, many_items = {"k": {str(i): "z" for i in range(2_000_000)}}, {"k": ["z" * 50] * 2_000_000}
    start = time.monotonic()
    assert json_chars(many_keys, limit=100) in range(101, 200)
    assert json_chars(many_items, limit=100) > 100
    assert time.monotonic() - start < 0.5, "counting stops once past the limit"


# ------------------------------------------------------------------------ output caps


def _executor(cell_chars: int, notebook_chars: int):
    from raydata_grader.nbgrader_steps import TrackedExecute

    ex = TrackedExecute(collect_cell_chars=cell_chars, collect_notebook_chars=notebook_chars)
    ex.nb = new_notebook(cells=[new_code_cell("x")])
    ex.clear_before_next_output = False
    return ex


def _msg(kind: str, content: dict) -> dict:
    return {"msg_type": kind, "content": content, "header": {"msg_type": kind}, "parent_header": {}, "metadata": {}}


def test_collecting_counts_metadata_and_error_names():
    ex = _executor(10_000, 50_000)
    outs: list = []
    ex.output(outs, _msg("display_data", {"data": {"text/plain": "hi"}, "metadata": {"x": "m" * 20_000}}), None, 0)
    ex.output(outs, _msg("display_data", {"data": {"text/plain": "kept"}, "metadata": {}}), None, 0)
    huge = {"ename": "E" * 30_000, "evalue": "v", "traceback": ["t"] * 9}
    ex.output(outs, _msg("error", dict(huge)), None, 0)
    assert [o["data"]["text/plain"] for o in outs] == ["kept"]
    assert ex._dropped[0] > 50_000
    # nbgrader adds the execute reply's error when no output has its name: it comes cut, so the
    # cell that raised still shows it raised, and its 30,000-character name is not kept
    cell = new_code_cell("x", outputs=list(outs))
    ex.on_cell_executed(cell=cell, cell_index=0, execute_reply={"content": {"status": "error", **huge}})
    assert [(len(o["ename"]), len(o["traceback"])) for o in cell.outputs if o["output_type"] == "error"] == [(200, 5)]
    small = new_code_cell("x", outputs=[new_output("error", ename="ValueError", evalue="v", traceback=["t"])])
    ex.on_cell_executed(cell=small, cell_index=0, execute_reply={"content": {
        "status": "error", "ename": "ValueError", "evalue": "v", "traceback": ["t"]}})
    assert len(small.outputs) == 1, "an error within the cap is nbgrader's as it was"


def test_output_size_limit_counts_metadata_and_records_what_it_cut():
    from raydata_grader.nbgrader_steps import LimitOutputSize

    cells = [new_code_cell("x", outputs=[
        new_output("display_data", data={"text/plain": "small"}, metadata={"x": "m" * 50_000}),
        new_output("error", ename="E" * 10_000, evalue="v", traceback=["t"])])]
    nb, _ = LimitOutputSize(max_chars=20_000, max_notebook_chars=200_000).preprocess(new_notebook(cells=cells), {})
    shown, error = nb.cells[0].outputs
    assert shown["metadata"] == {} and "was removed by the grader" in shown["data"]["text/plain"]
    assert len(error["ename"]) == 200
    [note] = recorded_caps(nb.metadata)
    assert note.startswith("59,") and "characters of output were cut from the graded notebook" in note, note
