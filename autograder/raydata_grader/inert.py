"""What a student wrote, made inert once, where it enters the grading folder.

A submitted notebook, and every output its kernel sends, is hostile data, and the grading
folder is browsed with tools that render it: nbgrader's feedback pages, formgrader (on the
Jupyter server's origin, with the instructor's session), JupyterLab. Some of those templates
write fields into HTML without quoting them (nbconvert's classic template writes an image's
``width`` metadata as ``width={{ width }}``), and some render markdown without a sanitizer.
So nothing is left to the viewer: every notebook the grader stores (``submitted/`` at intake,
``autograded/`` when a result is merged, and nbgrader's own autograde, through
:class:`InertNotebook`) is rewritten by :func:`inert_notebook` into a notebook that holds only
data a viewer shows as it is:

- **markdown cells** are rendered as nbconvert renders them and cleaned with bleach
  (:mod:`raydata_grader.inert_markup`: an allowlist of tags and attributes, no scripts, frames,
  forms, event handlers or styles, links to ``http``, ``https`` and ``mailto`` only, images only
  as ``data:`` URLs); the cleaned HTML is the cell's new source, capped at
  :data:`~raydata_grader.inert_markup.MAX_MARKDOWN_CELL_CHARS` per cell and
  :data:`~raydata_grader.inert_markup.MAX_MARKDOWN_NOTEBOOK_CHARS` per notebook before it is
  rendered (nested tags make rendering grow faster than the text);
- **images** in markdown (attachments and ``data:`` URLs) are decoded by Pillow and encoded
  again (PNG, JPEG and GIF only), and inlined as ``data:`` URLs, at most
  :data:`~raydata_grader.inert_markup.MAX_IMAGE_CHARS` per notebook; the cell keeps no
  ``attachments``. Anything else attached is dropped, and the submission's row says so;
- **outputs** keep ``text/plain`` and re-encoded PNG, JPEG and GIF images; HTML, Markdown,
  LaTeX, JSON, SVG, JavaScript and widgets are shown as their ``text/plain`` form (or their
  text, or a note). Output metadata keeps only each image's ``width`` and ``height`` as numbers
  and ``unconfined`` as true or false; error outputs keep ``ename`` (cut to
  :data:`MAX_ENAME_CHARS`), ``evalue`` and ``traceback`` as text;
- **cell metadata** keeps nbgrader's fields with their types, tags made of letters, digits and
  ``_.:-``, and Jupyter's booleans; **raw cells** are cleaned like markup and lose their
  format; **notebook metadata** keeps the kernelspec, the language info (as short text) and
  the grader's own notes on the caps it applied (:data:`GRADER_KEY`, only where the grader
  wrote them).

The result passes nbformat's schema. Doing it again changes nothing. The submitted file itself
is kept byte for byte inside a zip (:func:`keep_received`), which no viewer renders.
"""

from __future__ import annotations

import math
import re
import secrets
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from raydata_grader.inert_markup import (IMAGE_FORMATS, MAX_IMAGE_CHARS, MAX_MARKDOWN_CELL_CHARS,
                                         MAX_MARKDOWN_NOTEBOOK_CHARS, clean_markup, inert_markdown_kept, markdown_chars,
                                         reencode_image, text_of)

__all__ = ["inert_notebook", "InertNotebook", "record_cap", "recorded_caps", "keep_received", "GRADER_KEY",
           "MAX_ENAME_CHARS"]

#: Longest exception name kept.
MAX_ENAME_CHARS = 200
#: Where the grader's own notes live in a notebook's metadata (what it cut, and why).
GRADER_KEY = "raydata_grader"
_MAX_NOTES, _MAX_NOTE_CHARS = 10, 1_000
_TAG_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_GRADE_ID = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")

# ------------------------------------------------------------------------------------ outputs


def _text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return ""


def _number(value) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value if 0 < value <= 100_000 else None


def _image_metadata(metadata: dict, mime: str) -> dict:
    """What an image's display metadata keeps: ``width`` and ``height`` as numbers, ``unconfined`` as a boolean."""
    own = metadata.get(mime) if isinstance(metadata.get(mime), dict) else {}
    kept = {}
    for key in ("width", "height"):
        value = _number(own.get(key, metadata.get(key)))
        if value is not None:
            kept[key] = value
    if isinstance(own.get("unconfined"), bool):
        kept["unconfined"] = own["unconfined"]
    return kept


def _inert_output(output) -> nbformat.NotebookNode:
    kind = output.get("output_type")
    if kind == "stream":
        name = output.get("name") if output.get("name") in ("stdout", "stderr") else "stdout"
        return nbformat.v4.new_output("stream", name=name, text=_text(output.get("text")))
    if kind == "error":
        traceback = output.get("traceback")
        return nbformat.v4.new_output("error", ename=str(output.get("ename", ""))[:MAX_ENAME_CHARS],
                                      evalue=_text(output.get("evalue")) or str(output.get("evalue", "")),
                                      traceback=[_text(line) for line in traceback] if isinstance(traceback, list) else [])
    if kind not in ("display_data", "execute_result"):
        return nbformat.v4.new_output("stream", name="stdout", text=f"[an output the grader does not show ({str(kind)[:40]!r})]\n")
    data = output.get("data") if isinstance(output.get("data"), dict) else {}
    metadata = output.get("metadata") if isinstance(output.get("metadata"), dict) else {}
    kept, kept_meta = {}, {}
    for mime in IMAGE_FORMATS:
        image = reencode_image(mime, _text(data.get(mime))) if mime in data else None
        if image is not None:
            kept[mime] = image
            if _image_metadata(metadata, mime):
                kept_meta[mime] = _image_metadata(metadata, mime)
    if "text/plain" in data:
        kept["text/plain"] = _text(data["text/plain"])
    elif "text/html" in data:
        kept["text/plain"] = text_of(_text(data["text/html"]))
    elif "text/markdown" in data or "text/latex" in data:
        kept["text/plain"] = _text(data.get("text/markdown", data.get("text/latex")))
    elif not kept:
        kinds = ", ".join(sorted(str(k)[:60] for k in data)[:5]) or "nothing"
        kept["text/plain"] = f"[an output the grader does not show: {kinds}]"
    if kind == "execute_result":
        count = output.get("execution_count")
        count = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None
        return nbformat.v4.new_output("execute_result", data=kept, metadata=kept_meta, execution_count=count)
    return nbformat.v4.new_output("display_data", data=kept, metadata=kept_meta)


# ------------------------------------------------------------------------------ cells, notebook


def _nbgrader_metadata(value) -> dict | None:
    """nbgrader's cell metadata with its fields' types, or None when it is not nbgrader's."""
    if not isinstance(value, dict) or not isinstance(value.get("grade_id"), str) or not _GRADE_ID.match(value["grade_id"]):
        return None
    kept = {"grade_id": value["grade_id"]}
    for key in ("grade", "solution", "locked", "task"):
        if isinstance(value.get(key), bool):
            kept[key] = value[key]
    if _number(value.get("points")) is not None or value.get("points") == 0:
        kept["points"] = value["points"]
    if isinstance(value.get("schema_version"), int) and not isinstance(value["schema_version"], bool):
        kept["schema_version"] = value["schema_version"]
    if value.get("cell_type") in ("code", "markdown"):
        kept["cell_type"] = value["cell_type"]
    if isinstance(value.get("checksum"), str) and re.fullmatch(r"[0-9a-f]{1,128}", value["checksum"]):
        kept["checksum"] = value["checksum"]
    return kept


def _cell_metadata(meta, cell_type: str) -> dict:
    meta = meta if isinstance(meta, dict) else {}
    kept: dict = {}
    nbg = _nbgrader_metadata(meta.get("nbgrader"))
    if nbg is not None:
        kept["nbgrader"] = nbg
    if cell_type == "raw":
        return kept
    tags = meta.get("tags")
    if isinstance(tags, list):
        kept["tags"] = [t for t in tags if isinstance(t, str) and _TAG_NAME.match(t)][:50]
    for key in ("deletable", "editable", "collapsed"):
        if isinstance(meta.get(key), bool):
            kept[key] = meta[key]
    if isinstance(meta.get("scrolled"), bool) or meta.get("scrolled") == "auto":
        kept["scrolled"] = meta["scrolled"]
    jupyter = meta.get("jupyter")
    if isinstance(jupyter, dict):
        flags = {k: jupyter[k] for k in ("source_hidden", "outputs_hidden") if isinstance(jupyter.get(k), bool)}
        if flags:
            kept["jupyter"] = flags
    return kept


def _short(value, limit: int = 100) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _notebook_metadata(meta, keep_grader_notes: bool) -> dict:
    meta = meta if isinstance(meta, dict) else {}
    kept: dict = {}
    spec = meta.get("kernelspec")
    if isinstance(spec, dict) and _short(spec.get("name")) and _short(spec.get("display_name")) is not None:
        kept["kernelspec"] = {k: _short(spec.get(k)) for k in ("name", "display_name", "language")
                              if _short(spec.get(k)) is not None}
    info = meta.get("language_info")
    if isinstance(info, dict) and _short(info.get("name")):
        keys = ("name", "version", "mimetype", "file_extension", "pygments_lexer", "nbconvert_exporter")
        kept["language_info"] = {k: _short(info[k]) for k in keys if _short(info.get(k)) is not None}
        mode = info.get("codemirror_mode")
        if _short(mode):
            kept["language_info"]["codemirror_mode"] = _short(mode)
        elif isinstance(mode, dict) and _short(mode.get("name")):
            kept["language_info"]["codemirror_mode"] = {"name": _short(mode["name"])} | (
                {"version": mode["version"]} if isinstance(mode.get("version"), int) else {})
    notes = recorded_caps(meta) if keep_grader_notes else []
    if notes:
        kept[GRADER_KEY] = {"caps": notes}
    return kept


def inert_notebook(nb, *, keep_grader_notes: bool = False) -> tuple[nbformat.NotebookNode, list[str]]:
    """A copy of ``nb`` (nbformat v4) that holds nothing a viewer would run (see the module docstring).

    Args:
        nb: the notebook (a submitted one after lint, or an autograded one).
        keep_grader_notes: keep the grader's notes on its caps in the notebook's metadata
            (:data:`GRADER_KEY`): True for a notebook the grader ran; False at intake, where a
            student could have written them.

    Returns:
        ``(notebook, notes)``: the new notebook, which passes nbformat's schema, and what was
        cut or dropped, one sentence each for the student.

    Raises:
        nbformat.ValidationError: if the result does not pass the schema (a bug here, not
            the student's).
    """
    out = nbformat.v4.new_notebook(metadata=_notebook_metadata(nb.get("metadata"), keep_grader_notes))
    markdown_left, images_left, cut, dropped = MAX_MARKDOWN_NOTEBOOK_CHARS, [MAX_IMAGE_CHARS], 0, []
    taken: set[str] = set()
    for cell in nb.get("cells", []):
        kind = cell.get("cell_type")
        source = _text(cell.get("source"))
        meta = _cell_metadata(cell.get("metadata"), kind)
        if kind == "markdown":
            keep = max(min(MAX_MARKDOWN_CELL_CHARS, markdown_left), 0)
            attachments = cell.get("attachments") if isinstance(cell.get("attachments"), dict) else {}
            for name, bundle in attachments.items():
                if not (isinstance(bundle, dict) and any(m in IMAGE_FORMATS for m in bundle)):
                    dropped.append(str(name)[:80])
            stored, kept = inert_markdown_kept(source, attachments, keep_chars=keep, images=images_left)
            cut += max(markdown_chars(source) - kept, 0)
            markdown_left -= min(markdown_chars(stored), keep)  # what is stored counts: so a second pass keeps it
            new = nbformat.v4.new_markdown_cell(stored, metadata=meta)
        elif kind == "code":
            count = cell.get("execution_count")
            new = nbformat.v4.new_code_cell(source, metadata=meta, outputs=[_inert_output(o) for o in cell.get(
                "outputs", []) if isinstance(o, dict)], execution_count=count if isinstance(count, int)
                and not isinstance(count, bool) and count >= 0 else None)
        else:
            new = nbformat.v4.new_raw_cell(clean_markup(source), metadata=meta)
        cid = cell.get("id")
        new["id"] = cid if isinstance(cid, str) and _CELL_ID.match(cid) and cid not in taken else secrets.token_hex(4)
        taken.add(new["id"])
        out.cells.append(new)
    nbformat.validate(out)
    notes = []
    if cut:
        notes.append(f"{cut:,} characters of markdown were not kept (the grader keeps {MAX_MARKDOWN_CELL_CHARS:,} per "
                     f"cell and {MAX_MARKDOWN_NOTEBOOK_CHARS:,} per notebook)")
    if dropped:
        notes.append(f"{len(dropped)} attachment(s) were not kept ({', '.join(dropped[:5])}): the grader keeps only "
                     "PNG, JPEG and GIF images pasted into markdown cells")
    return out, notes


def record_cap(nb, note: str) -> None:
    """Add the grader's ``note`` on a cap it applied to ``nb``'s metadata (:data:`GRADER_KEY`)."""
    record = nb.setdefault("metadata", nbformat.NotebookNode()).setdefault(GRADER_KEY, {"caps": []})
    record.setdefault("caps", []).append(note[:_MAX_NOTE_CHARS])


def recorded_caps(source) -> list[str]:
    """The grader's notes on the caps it applied, from a notebook's metadata (a dict) or file (bytes).

    Returns:
        At most 10 notes of at most 1,000 characters; an empty list when there are none or
        the file cannot be read.
    """
    if isinstance(source, (bytes, str)):
        import json

        try:
            source = json.loads(source).get("metadata", {})
        except Exception:  # noqa: BLE001 - a file that is not a notebook has no notes
            return []
    record = source.get(GRADER_KEY) if isinstance(source, dict) else None
    caps = record.get("caps") if isinstance(record, dict) else None
    return [n[:_MAX_NOTE_CHARS] for n in caps if isinstance(n, str)][:_MAX_NOTES] if isinstance(caps, list) else []


class InertNotebook(NbGraderPreprocessor):
    """Autograde preprocessor, the last: the autograded notebook nbgrader writes is :func:`inert_notebook`'s.

    nbgrader writes what its preprocessors return, so every way of autograding (``make grade``,
    ``nbgrader autograde`` by hand, formgrader's buttons) stores an inert notebook; the
    grader's notes on its caps stay. (An nbgrader preprocessor: nbconvert's are disabled by default.)
    """

    def preprocess(self, nb, resources):
        new, _ = inert_notebook(nb, keep_grader_notes=True)
        return new, resources


def keep_received(folder: Path, name: str, data: bytes) -> Path:
    """Keep a submitted file byte for byte, for the record, where no viewer renders it: ``<folder>/<name>.zip``.

    A notebook file left as it was submitted would open, active content and all, in
    JupyterLab or a browser; inside a zip, nothing shows it until someone unpacks it.

    Args:
        folder: where to keep it (created; emptied first).
        name: the submitted file's name (only its last part is used).
        data: its bytes.

    Returns:
        The zip's path.
    """
    import shutil
    import zipfile

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    member = Path(name).name or "submission.ipynb"
    target = folder / f"{member}.zip"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, data)
    return target
