"""What a student reads: a feedback page per submission, with the grader's notes on top.

A submission nbgrader graded gets nbgrader's own ``generate_feedback`` page, with the hidden
tests hidden (:class:`~raydata_grader.nbgrader_steps.HideHiddenTests`) and the grader's notes
(status, messages, repairs) as its first cell (:class:`~raydata_grader.nbgrader_steps.GraderNotes`).
One nbgrader could not grade (missing, invalid, crashed before grading) gets a short plain page
saying why and what to do.

Pages are inert: nothing a submission wrote (cell outputs, markdown cells, the messages its
code raised) runs when a page is opened. The notebook a page is made from is already inert
(:mod:`raydata_grader.inert` rewrote it when it was stored), and three walls stand behind that,
for a notebook that was not (``nbgrader generate_feedback`` by hand on another course):
nbconvert sanitizes the outputs (``HTMLExporter.sanitize_html``: ``text/html`` and
``text/markdown`` outputs go through its ``clean_html`` filter, JavaScript outputs and widgets
are left out, SVG is shown as an image); :class:`InertMarkdown` renders and cleans markdown
cells, which nbgrader's feedback template renders without that filter; and every page carries
a Content-Security-Policy (:data:`CONTENT_SECURITY_POLICY`, written by
:class:`InertHTMLExporter`) under which a browser runs no script and loads nothing but
``data:`` images. The grader's notes are escaped as they are written
(:func:`~raydata_grader.records.escape_markdown`); the plain page escapes everything it shows
(:func:`html.escape`) and carries the same policy.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

from raydata_grader.course_dir import nbgrader_api, nbgrader_config
from raydata_grader.inert_markup import (MAX_MARKDOWN_CELL_CHARS, MAX_MARKDOWN_NOTEBOOK_CHARS, clean_markup,
                                         inert_markdown, markdown_chars)
from raydata_grader.records import Row, escape_markdown

__all__ = ["write_feedback", "feedback_config", "InertMarkdown", "InertHTMLExporter", "CONTENT_SECURITY_POLICY",
           "with_csp", "inert_markdown", "clean_markup"]

#: Output types shown instead as their ``text/plain`` form when they have one (sanitized HTML
#: loses most of its tags, and scripts and widgets are left out altogether).
RICH_TYPES = ("application/javascript", "application/vnd.jupyter.widget-view+json", "text/html", "text/markdown")
#: The Content-Security-Policy of every page the grader writes: nothing runs, loads or
#: connects (no scripts, frames, objects, forms, fonts or connections), images only from
#: ``data:`` URLs, and the inline styles the templates carry.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                           "font-src 'none'; connect-src 'none'; frame-src 'none'; child-src 'none'; "
                           "object-src 'none'; media-src 'none'; form-action 'none'; base-uri 'none'")
_CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
_HEAD = re.compile(r"<head(?:\s[^>]*)?>", re.IGNORECASE)


def with_csp(page: str) -> str:
    """``page`` (HTML) with :data:`CONTENT_SECURITY_POLICY` as a ``<meta>`` tag, first in its ``<head>``.

    Raises:
        ValueError: if ``page`` has no ``<head>`` tag.

    Examples:
        >>> with_csp("<!DOCTYPE html><html><head><title>t</title></head></html>")[:69]
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy"'
    """
    match = _HEAD.search(page)
    if match is None:
        raise ValueError("the page has no <head> tag for the Content-Security-Policy: it is not a page the grader made")
    return page[:match.end()] + _CSP_META + page[match.end():]


class InertHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter, each page it writes with :data:`CONTENT_SECURITY_POLICY` (:func:`with_csp`).

    nbgrader's ``GenerateFeedback`` exports with the class its ``exporter_class`` names, so
    this puts the policy on every feedback page, whoever runs ``generate_feedback``.
    """

    def from_notebook_node(self, nb, resources=None, **kw):
        output, resources = super().from_notebook_node(nb, resources, **kw)
        return with_csp(output), resources


class InertMarkdown(NbGraderPreprocessor):
    """Feedback preprocessor: markdown cells and rich outputs that cannot run anything.

    nbconvert's ``HTMLExporter.sanitize_html`` cleans outputs, but nbgrader's feedback
    template renders markdown cells (and the grader's comments) without its ``clean_html``
    filter, so a ``<script>`` a student typed into a markdown cell would run. This renders
    each markdown cell and nbgrader comment and cleans it (:func:`inert_markdown`). It also
    shows an output's ``text/plain`` form instead of HTML, markdown, JavaScript or a widget
    (:data:`RICH_TYPES`) when it has one: a sanitized table or chart would lose most of its
    tags (nbconvert keeps few), and scripts are not shown at all. And it HTML-escapes grade
    ids, which the template writes into the page as they are.
    Run it last, after :class:`~raydata_grader.nbgrader_steps.GraderNotes`. (An nbgrader
    preprocessor: nbgrader registers its steps without enabling them, and nbconvert's
    ``Preprocessor`` is disabled by default, so it would silently not run.)
    """

    max_cell_chars = Integer(MAX_MARKDOWN_CELL_CHARS, help="markdown kept per cell, in characters").tag(config=True)
    max_notebook_chars = Integer(MAX_MARKDOWN_NOTEBOOK_CHARS,
                                 help="markdown kept per notebook, in characters").tag(config=True)

    def preprocess(self, nb, resources):
        self._left = self.max_notebook_chars
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        keep = None
        if cell.get("cell_type") == "markdown":
            # Rendering and cleaning grow faster than the text (nested tags): cut it first
            # (:func:`inert_markdown`; the data of images the grader inlined do not count).
            keep = max(min(self.max_cell_chars, self._left), 0)
        info = cell.get("metadata", {}).get("nbgrader")
        if isinstance(info, dict):
            if "grade_id" in info:
                info["grade_id"] = html.escape(str(info["grade_id"]))
            if isinstance(info.get("comment"), str):
                info["comment"] = inert_markdown(info["comment"])
        if cell.get("cell_type") == "markdown":
            cell.source = inert_markdown(cell.source, cell.get("attachments"), keep_chars=keep)
            self._left -= min(markdown_chars(cell.source), keep)
            cell.pop("attachments", None)
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            data = output.get("data")
            if isinstance(data, dict) and "text/plain" in data:
                for kind in RICH_TYPES:
                    data.pop(kind, None)
        return cell, resources


def _notes(row: Row) -> list[str]:
    """The row's findings, one sentence each (rows of earlier runs kept only the message)."""
    return [n for n in row.notes if n] or ([row.message] if row.message else [])


def _notes_markdown(row: Row, note: str) -> str:
    """The grader's notes on ``row`` as Markdown, every text from the row escaped (:func:`escape_markdown`).

    Args:
        row: the submission's row (its messages may hold what the student's code raised).
        note: one more line (may be empty).

    Returns:
        A heading, the status and score (points), and a list of findings and repairs.
    """
    md = escape_markdown
    lines = [f"### Grader's notes: {md(row.assignment)}, {md(row.student)}", "",
             f"**Status: {md(row.status)}** · score {row.score:g} / {row.max_score:g}", ""]
    if note:
        lines += [f"- {md(note)}"]
    lines += [f"- {md(msg)}" for msg in _notes(row)]
    if row.repairs:
        lines += ["", "Repairs made before grading (the grader restores the exercise's structure; "
                  "avoid these next time):", ""]
        lines += [f"- {md(r)}" for r in row.repairs]
    return "\n".join(lines) + "\n"


def _plain_feedback(row: Row) -> str:
    """A plain HTML page for ``row``: status, score (points), findings and repairs, all escaped."""
    e = html.escape
    items = "".join(f"<li>{e(m)}</li>" for m in _notes(row))
    repairs = "".join(f"<li>{e(r)}</li>" for r in row.repairs)
    return (f"<!DOCTYPE html><html><head>{_CSP_META}<meta charset='utf-8'><title>{e(row.assignment)} feedback</title></head>"
            f"<body><h1>{e(row.assignment)}: {e(row.student)}</h1>"
            f"<p><b>Status: {e(row.status)}</b>, score {e(f'{row.score:g}')} / {e(f'{row.max_score:g}')}</p>"
            f"<ul>{items}</ul>"
            + (f"<p>Repairs made before grading:</p><ul>{repairs}</ul>" if repairs else "")
            + "<p>Fix the problem, restart the kernel, run all cells, save, and submit again.</p></body></html>\n")


def feedback_config(out: Path):
    """The nbgrader configuration ``write_feedback`` runs ``generate_feedback`` with, in ``out``.

    nbgrader's preprocessors and the course's (hidden tests hidden, the grader's notes from
    ``<out>/notes`` on top, :class:`InertMarkdown` last), ``HTMLExporter.sanitize_html`` on,
    and :class:`InertHTMLExporter` (the page's Content-Security-Policy): nbgrader's
    ``GenerateFeedback`` exports with its ``exporter_class``, configured from the
    ``HTMLExporter`` section.

    Returns:
        A ``traitlets.config.Config``.
    """
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import GetGrades

    from raydata_grader.nbgrader_steps import GraderNotes, HideHiddenTests

    return nbgrader_config(out, **{
        "GenerateFeedback.preprocessors": [GetGrades, CSSHTMLHeaderPreprocessor, HideHiddenTests, GraderNotes,
                                           InertMarkdown],
        "GraderNotes.notes_directory": str(out / "notes"),
        "GenerateFeedback.exporter_class": InertHTMLExporter,
        "HTMLExporter.sanitize_html": True})


def write_feedback(out: Path, row: Row, note: str, graded_by_nbgrader: bool) -> Path:
    """Write ``<out>/feedback/<key>/<assignment>/<assignment>.html`` for ``row``; return it.

    ``<key>`` is the student's folder key (:attr:`~raydata_grader.records.Row.key`), which is
    also their id in nbgrader's gradebook; the page names the student as ``row.student``. Also
    writes the grader's notes, ``<out>/notes/<key>/<assignment>.md`` (escaped Markdown, the
    first cell of nbgrader's page).

    Args:
        out: the grading folder (an nbgrader course).
        row: the submission's row.
        note: one more line for the notes (may be empty).
        graded_by_nbgrader: nbgrader autograded it, so its own feedback page can be made
            (:func:`feedback_config`); if that fails, or for False, a plain page is written instead.
    """
    target_dir = out / "feedback" / row.key / row.assignment
    target = target_dir / f"{row.assignment}.html"
    notes_path = out / "notes" / row.key / f"{row.assignment}.md"
    notes_path.parent.mkdir(parents=True, exist_ok=True)
    notes_path.write_text(_notes_markdown(row, note))
    if target_dir.exists():
        shutil.rmtree(target_dir)
    if graded_by_nbgrader:
        result = nbgrader_api(feedback_config(out)).generate_feedback(row.assignment, row.key, force=True)
        if result.get("success") and target.is_file():
            return target
    target_dir.mkdir(parents=True, exist_ok=True)
    target.write_text(_plain_feedback(row))
    return target
