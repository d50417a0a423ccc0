"""Markup a student wrote, made into HTML that cannot run or load anything.

:func:`clean_markup` keeps an allowlist of tags and attributes (bleach, as nbconvert's own
``clean_html`` uses it): no scripts, frames, forms, SVG, styles or event handlers; links to
``http``, ``https`` and ``mailto`` only; images only as ``data:`` URLs, so that no image makes a
request. :func:`reencode_image` decodes an image with Pillow and encodes it again, so what is
kept holds only pixels. :func:`inert_markdown` renders a markdown cell as nbconvert does, cleans
it, re-encodes its images and puts it on one line in a ``<div>``, which Markdown passes through
untouched: every renderer then shows the cleaned HTML, and cleaning it again changes nothing.
:mod:`raydata_grader.inert` uses these on the notebooks the grader stores, and
:class:`raydata_grader.feedback.InertMarkdown` on the pages it writes.
"""

from __future__ import annotations

import base64
import io
import re
import secrets

from raydata_course.units import MiB

__all__ = ["SAFE_TAGS", "IMAGE_FORMATS", "MAX_IMAGE_PIXELS", "MAX_IMAGE_CHARS", "MAX_MARKDOWN_CELL_CHARS",
           "MAX_MARKDOWN_NOTEBOOK_CHARS", "INLINE_IMAGE", "clean_markup", "text_of", "reencode_image", "inert_markdown",
           "inert_markdown_kept", "markdown_chars", "NOT_SHOWN"]

#: Tags a cleaned markdown cell keeps (what Markdown renders to); any other is shown as text.
SAFE_TAGS = frozenset({
    "a", "abbr", "acronym", "b", "blockquote", "br", "caption", "code", "dd", "del", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "span", "strong",
    "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"})
#: Images a cleaned cell may embed as ``data:`` URLs, and what Pillow decodes them as.
IMAGE_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF"}
_DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif)[;,]")
#: What browsers ignore in a URL (so ``java\tscript:`` is ``javascript:``), as bleach strips it.
_URL_BLANKS = re.compile(r"[\x00-\x20\x7f-\xa0\s]+")
#: Markdown kept per cell and per notebook, in characters, before it is rendered (the
#: releases' longest cell is under 2,000; a page of nested tags takes minutes past 100,000).
MAX_MARKDOWN_CELL_CHARS = 20_000
MAX_MARKDOWN_NOTEBOOK_CHARS = 200_000
#: Largest image decoded, in pixels (4096 x 4096), and in bytes as stored (base64).
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_IMAGE_CHARS = 2 * MiB
#: The tag that holds a cleaned markdown cell.
_BLOCK = '<div class="raydata-inert">'
#: An inlined image's ``src`` attribute (bleach writes one space before each attribute).
INLINE_IMAGE = re.compile(r' src="data:(image/(?:png|jpeg|gif));base64,([^"]*)"')


def _allowed_attribute(tag: str, name: str, value: str) -> bool:
    """bleach's attribute filter: layout attributes, and URLs that cannot run or load anything."""
    if name in ("class", "id", "title"):
        return True
    url = _URL_BLANKS.sub("", value or "").lower()
    if tag == "a":
        return name == "href" and not url.startswith("data:")
    if tag == "img":
        if name == "src":
            return bool(_DATA_IMAGE.match(url))
        return name in ("alt", "width", "height")
    if tag in ("th", "td"):
        return name in ("style", "colspan", "rowspan", "align")
    return False


def clean_markup(markup: str) -> str:
    """``markup`` (HTML) with only :data:`SAFE_TAGS`, harmless attributes and safe URLs left.

    Other tags (``script``, ``iframe``, ``svg``, ``style``...) are escaped, so they show as
    text; event handlers (``onerror=``) and ``style`` (but a table cell's ``text-align``) are
    dropped; links keep only ``http``, ``https``, ``mailto`` and relative URLs, images only
    ``data:`` PNG, JPEG or GIF (an image from anywhere else would be a request leaving the
    page). Uses bleach, as nbconvert's own ``clean_html`` does.

    Examples:
        >>> clean_markup('<p onclick="x()">hi <a href="javascript:alert(1)">a</a></p><script>alert(1)</script>')
        '<p>hi <a>a</a></p>&lt;script&gt;alert(1)&lt;/script&gt;'
        >>> clean_markup('<img src="https://example.org/pixel.png" alt="x">')
        '<img alt="x">'
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


def text_of(markup: str) -> str:
    """The text a browser would show for ``markup``, without any tag."""
    import html

    import bleach

    return html.unescape(bleach.clean(markup, tags=set(), strip=True, strip_comments=True))


def reencode_image(mime: str, data: str) -> str | None:
    """``data`` (base64), decoded as ``mime`` by Pillow and encoded again; None if it is not such an image.

    Only PNG, JPEG and GIF (:data:`IMAGE_FORMATS`, the decoder chosen by ``mime``, not by the
    bytes) up to :data:`MAX_IMAGE_PIXELS` pixels and :data:`MAX_IMAGE_CHARS` characters; a GIF
    keeps its first frame. What comes back holds only the pixels.

    Returns:
        The new image, base64, or None.
    """
    from PIL import Image

    fmt = IMAGE_FORMATS.get(mime)
    if fmt is None or not isinstance(data, str) or len(data) > MAX_IMAGE_CHARS:
        return None
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
        with Image.open(io.BytesIO(raw), formats=[fmt]) as image:
            if image.width * image.height > MAX_IMAGE_PIXELS:
                return None
            image.load()
            if fmt == "JPEG" and image.mode not in ("L", "RGB", "CMYK"):
                image = image.convert("RGB")
            out = io.BytesIO()
            try:
                image.save(out, fmt)
            except (OSError, ValueError):  # a mode the format cannot write
                out = io.BytesIO()
                image.convert("RGBA" if fmt != "JPEG" else "RGB").save(out, fmt)
        return base64.b64encode(out.getvalue()).decode("ascii")
    except Exception:  # noqa: BLE001 - any image Pillow cannot decode is not kept
        return None


class _Attachments(dict):
    """A cell's attachments for nbconvert's renderer: an unknown name is an empty image, not an error."""

    def __contains__(self, name) -> bool:
        return True

    def __missing__(self, name):
        return {"image/png": ""}


def _render_markdown(source: str, attachments: dict | None = None) -> str:
    """``source`` rendered the way nbconvert's HTML exporter renders a markdown cell."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    renderer = IPythonRenderer(escape=False, attachments=_Attachments(attachments or {}), embed_images=False, path="")
    return MarkdownWithMath(renderer=renderer).render(source)


def _set_aside(source: str, nonce: str) -> tuple[str, list[str]]:
    """``source`` with each inlined image's data replaced by a short token, and those data in order."""
    stash: list[str] = []

    def token(match: re.Match) -> str:
        stash.append(match.group(2))
        return f' src="data:{match.group(1)};base64,rdg{nonce}i{len(stash) - 1}"'

    return INLINE_IMAGE.sub(token, source), stash


def markdown_chars(source: str) -> int:
    """Characters of a markdown cell's ``source`` that count against the caps: its images' data do not."""
    return len(_set_aside(source, "00000000")[0])


#: What a markdown cell becomes when not even a note on what was cut fits in what is left of
#: the notebook's markdown (a stored cell that is exactly this stays as it is).
NOT_SHOWN = (_BLOCK + "<p><em>[this cell is not shown: the notebook's markdown is over the grader's limit]</em></p>"
             "</div>")


def inert_markdown(source: str, attachments: dict | None = None, *, keep_chars: int | None = None,
                   images: list[int] | None = None) -> str:
    """Markdown that any renderer shows as the cleaned HTML of ``source`` (:func:`inert_markdown_kept`)."""
    return inert_markdown_kept(source, attachments, keep_chars=keep_chars, images=images)[0]


def inert_markdown_kept(source: str, attachments: dict | None = None, *, keep_chars: int | None = None,
                        images: list[int] | None = None) -> tuple[str, int]:
    """Markdown that any renderer shows as the cleaned HTML of ``source``, and how much of ``source`` it shows.

    ``source`` is rendered as nbconvert would (math left to MathJax), cleaned with
    :func:`clean_markup`, its images re-encoded (:func:`reencode_image`; one that is not an
    image, or past ``images``, is removed), and put on one line in a ``<div>`` (its line
    breaks as ``&#10;`` in ``<pre>``, as spaces elsewhere), which Markdown passes through
    untouched as an HTML block: so the result, rendered and cleaned again, is itself. The
    result holds at most ``keep_chars`` (:func:`markdown_chars`: inlined images' data do not
    count): ``source`` is cut until it fits, and a note says how much more there was; where not
    even the note fits, the result is :data:`NOT_SHOWN`. Should this Markdown renderer not pass
    the block through unchanged, the cell's text is shown escaped instead
    (:func:`~raydata_grader.records.escape_markdown`, one line per line).

    Args:
        source: a markdown cell's source.
        attachments: the cell's attachments, for ``attachment:`` images (only PNG, JPEG and GIF used).
        keep_chars: most characters of the result; None: no limit.
        images: ``[characters left]`` for images (as base64) in this cell and later ones, lowered
            as images are kept; None: no limit.

    Returns:
        ``(new source, characters of source kept)`` (:func:`markdown_chars` characters).
    """
    from raydata_grader.records import escape_markdown

    if source == NOT_SHOWN:
        return source, markdown_chars(source)
    nonce = secrets.token_hex(4)
    body, stash = _set_aside(source, nonce)
    usable = {name: {m: v for m, v in bundle.items() if m in IMAGE_FORMATS and isinstance(v, str)}
              for name, bundle in (attachments or {}).items() if isinstance(bundle, dict)}
    usable = {k: v for k, v in usable.items() if v}
    limit = len(body) if keep_chars is None else min(len(body), keep_chars)
    for _ in range(8):  # rendering adds tags: cut the source until the result fits
        cut = _capped_markdown(body, limit)
        block = _one_line(clean_markup(_render_markdown(cut, usable)).strip())
        block = block if block.startswith(_BLOCK) and block.endswith("</div>") else _BLOCK + block + "</div>"
        size = markdown_chars(block)
        if keep_chars is None or size <= keep_chars:
            break
        if limit == 0:
            return NOT_SHOWN, 0
        limit = max(0, min(limit - 1, limit * keep_chars // size))
    else:
        return NOT_SHOWN, 0
    bare = INLINE_IMAGE.sub("", block)
    if _render_markdown(bare).strip() != bare:
        text = INLINE_IMAGE.sub("", cut)
        return "\n\n".join(escape_markdown(line) for line in text.splitlines() if line.strip()), limit

    def restore(match: re.Match) -> str:
        mime, payload = match.group(1), match.group(2)
        token = re.fullmatch(f"rdg{nonce}i(\\d+)", payload)
        image = reencode_image(mime, stash[int(token.group(1))] if token else payload)
        if image is None or (images is not None and len(image) > images[0]):
            return ""
        if images is not None:
            images[0] -= len(image)
        return f' src="data:{mime};base64,{image}"'

    return INLINE_IMAGE.sub(restore, block), limit


_PRE = re.compile(r"(<pre\b.*?</pre>)", re.DOTALL | re.IGNORECASE)
_BREAK = re.compile(r"\r\n?|\n")


def _one_line(markup: str) -> str:
    """``markup`` on one line: line breaks kept as ``&#10;`` inside ``<pre>``, where they show, and
    spaces elsewhere, where HTML shows them as spaces (a character reference between table tags
    would not parse back the same)."""
    return "".join(_BREAK.sub("&#10;" if part.lower().startswith("<pre") else " ", part)
                   for part in _PRE.split(markup))


def _capped_markdown(source: str, keep: int) -> str:
    """``source`` cut to ``keep`` characters, with a note on how many more there were."""
    if len(source) <= keep:
        return source
    return source[:keep] + f"\n\n*[{len(source) - keep:,} more characters of this cell are not shown]*"
