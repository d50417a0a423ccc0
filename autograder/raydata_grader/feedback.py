"""What a student reads: a feedback page per submission, with the grader's notes on top.

A submission nbgrader graded gets nbgrader's own ``generate_feedback`` page, with the hidden
tests hidden (:class:`~raydata_grader.nbgrader_steps.HideHiddenTests`) and the grader's notes
(status, messages, repairs) as its first cell (:class:`~raydata_grader.nbgrader_steps.GraderNotes`).
One nbgrader could not grade (missing, invalid, crashed before grading) gets a short plain page
saying why and what to do.

Pages are inert: nothing a submission wrote (cell outputs, markdown cells, the messages its
code raised) runs when a page is opened. nbconvert sanitizes the outputs
(``HTMLExporter.sanitize_html``: ``text/html`` and ``text/markdown`` outputs go through its
``clean_html`` filter, JavaScript outputs and widgets are left out, SVG is shown as an image);
nbgrader's feedback template renders markdown cells itself, without that filter, so
:class:`InertMarkdown` renders and cleans them first. The grader's notes are escaped as they
are written (:func:`~raydata_grader.records.escape_markdown`); the plain page escapes
everything it shows (:func:`html.escape`).
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

from raydata_grader.course_dir import nbgrader_api, nbgrader_config
from raydata_grader.records import Row, escape_markdown

__all__ = ["write_feedback", "feedback_config", "InertMarkdown", "inert_markdown", "clean_markup"]

#: Tags a cleaned markdown cell keeps (what Markdown renders to); any other is shown as text.
SAFE_TAGS = frozenset({
    "a", "abbr", "acronym", "b", "blockquote", "br", "caption", "code", "dd", "del", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "span", "strong",
    "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"})
#: Images a cleaned cell may embed as ``data:`` URLs (raster only; attachments, pasted images).
_DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif|webp)[;,]")
#: What browsers ignore in a URL (so ``java\tscript:`` is ``javascript:``), as bleach strips it.
_URL_BLANKS = re.compile(r"[\x00-\x20\x7f-\xa0\s]+")
#: Output types shown instead as their ``text/plain`` form when they have one (sanitized HTML
#: loses most of its tags, and scripts and widgets are left out altogether).
RICH_TYPES = ("application/javascript", "application/vnd.jupyter.widget-view+json", "text/html", "text/markdown")


def _allowed_attribute(tag: str, name: str, value: str) -> bool:
    """bleach's attribute filter: layout attributes, and URLs that cannot run anything."""
    if name in ("class", "id", "title"):
        return True
    url = _URL_BLANKS.sub("", value or "").lower()
    if tag == "a":
        return name == "href" and not url.startswith("data:")
    if tag == "img":
        if name == "src":
            return not url.startswith("data:") or bool(_DATA_IMAGE.match(url))
        return name in ("alt", "width", "height")
    if tag in ("th", "td"):
        return name in ("style", "colspan", "rowspan", "align")
    return False


def clean_markup(markup: str) -> str:
    """``markup`` (HTML) with only :data:`SAFE_TAGS`, harmless attributes and safe URLs left.

    Other tags (``script``, ``iframe``, ``svg``, ``style``...) are escaped, so they show as
    text; event handlers (``onerror=``) and ``style`` (but a table cell's ``text-align``) are
    dropped; links keep only ``http``, ``https``, ``mailto`` and relative URLs, images also
    ``data:`` PNG, JPEG, GIF or WebP. Uses bleach, as nbconvert's own ``clean_html`` does.

    Examples:
        >>> clean_markup('<p onclick="x()">hi <a href="javascript:alert(1)">a</a></p><script>alert(1)</script>')
        '<p>hi <a>a</a></p>&lt;script&gt;alert(1)&lt;/script&gt;'
    """
    import bleach

    kwargs = {}
    try:
        from bleach.css_sanitizer import CSSSanitizer

        kwargs["css_sanitizer"] = CSSSanitizer(allowed_css_properties=["text-align"])
    except ImportError:  # tinycss2 missing: bleach then drops every style attribute
        pass
    return bleach.clean(markup, tags=SAFE_TAGS, attributes=_allowed_attribute,
                        protocols=["http", "https", "mailto", "data"], strip=False, strip_comments=True, **kwargs)


def _render_markdown(source: str, attachments: dict | None = None) -> str:
    """``source`` rendered the way nbconvert's HTML exporter renders a markdown cell."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    renderer = IPythonRenderer(escape=False, attachments=attachments or {}, embed_images=False, path="")
    return MarkdownWithMath(renderer=renderer).render(source)


def inert_markdown(source: str, attachments: dict | None = None) -> str:
    """Markdown that nbgrader's template renders into the cleaned HTML of ``source``.

    ``source`` is rendered as nbconvert would (math left to MathJax), cleaned with
    :func:`clean_markup`, and put on one line in a ``<div>`` (its line breaks as ``&#10;``),
    which Markdown passes through untouched as an HTML block. Should this Markdown renderer
    not pass it through unchanged, the cell's text is shown escaped instead
    (:func:`~raydata_grader.records.escape_markdown`, one line per line).

    Args:
        source: a markdown cell's source.
        attachments: the cell's attachments, for ``attachment:`` images.

    Returns:
        The new source.
    """
    cleaned = clean_markup(_render_markdown(source, attachments))
    block = '<div class="raydata-inert">' + re.sub(r"\r\n?|\n", "&#10;", cleaned.strip()) + "</div>"
    if _render_markdown(block).strip() == block:
        return block
    return "\n\n".join(escape_markdown(line) for line in source.splitlines() if line.strip())


#: Markdown shown per cell and per notebook in feedback, in characters (the releases' longest
#: cell is under 2,000; a page of nested tags takes minutes to render past 100,000).
MAX_MARKDOWN_CELL_CHARS = 20_000
MAX_MARKDOWN_NOTEBOOK_CHARS = 200_000


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
        if cell.get("cell_type") == "markdown":
            # Rendering and cleaning grow faster than the text (nested tags): cap it first.
            keep = max(min(self.max_cell_chars, self._left), 0)
            if len(cell.source) > keep:
                cell.source = (cell.source[:keep] + f"\n\n*[{len(cell.source) - keep:,} more characters of this "
                               "cell are not shown]*")
            self._left -= min(len(cell.source), keep)
        info = cell.get("metadata", {}).get("nbgrader")
        if isinstance(info, dict):
            if "grade_id" in info:
                info["grade_id"] = html.escape(str(info["grade_id"]))
            if isinstance(info.get("comment"), str):
                info["comment"] = inert_markdown(info["comment"])
        if cell.get("cell_type") == "markdown":
            cell.source = inert_markdown(cell.source, cell.get("attachments"))
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
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(row.assignment)} feedback</title></head>"
            f"<body><h1>{e(row.assignment)}: {e(row.student)}</h1>"
            f"<p><b>Status: {e(row.status)}</b>, score {e(f'{row.score:g}')} / {e(f'{row.max_score:g}')}</p>"
            f"<ul>{items}</ul>"
            + (f"<p>Repairs made before grading:</p><ul>{repairs}</ul>" if repairs else "")
            + "<p>Fix the problem, restart the kernel, run all cells, save, and submit again.</p></body></html>\n")


def feedback_config(out: Path):
    """The nbgrader configuration ``write_feedback`` runs ``generate_feedback`` with, in ``out``.

    nbgrader's preprocessors and the course's (hidden tests hidden, the grader's notes from
    ``<out>/notes`` on top, :class:`InertMarkdown` last), and ``HTMLExporter.sanitize_html``
    on: nbgrader's ``GenerateFeedback`` exports with an ``HTMLExporter`` configured from the
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
