"""How much output a graded notebook keeps: every field counted, and what was cut, noted.

:class:`LimitOutputSize` is the autograde step that caps each code cell's output in
characters, and the notebook's (nbgrader's ``LimitOutput`` counts *lines*, so
``print("x" * 50_000_000)`` keeps all 50 MB). Every field of an output counts
(:func:`output_chars`): a stream's text, a rich output's data *and metadata*, an error's name,
value and traceback. What it cut is noted in the notebook's metadata
(:func:`raydata_grader.inert.record_cap`), and the grader puts that note in the submission's
row. :class:`raydata_grader.nbgrader_steps.TrackedExecute` caps output earlier, while it
collects it, with the same count, and cuts an error over its cap to :data:`SHRUNK_ERROR`.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

from raydata_grader.inert import record_cap
from raydata_grader.notebook_caps import json_chars

__all__ = ["LimitOutputSize", "SHRUNK_ERROR", "output_chars", "shrunk_error"]

#: What of a cell's error is kept when it is over the per-cell cap: the error still shows (a cell
#: that raised stays one that raised), cut to these sizes, in characters.
SHRUNK_ERROR = {"ename": 200, "evalue": 2_000, "traceback_lines": 5, "line": 2_000}


def output_chars(content: dict, limit: int | None = None) -> int:
    """Characters an output's message content will take in the notebook: every field (text,
    data, metadata, ``ename``, ``evalue``, ``traceback``), counted until past ``limit``."""
    return json_chars(content, limit)


def shrunk_error(content: dict) -> dict:
    """An error message's content cut to :data:`SHRUNK_ERROR` (its last traceback lines kept)."""
    traceback = content.get("traceback") if isinstance(content.get("traceback"), list) else []
    return {"ename": str(content.get("ename", ""))[:SHRUNK_ERROR["ename"]],
            "evalue": str(content.get("evalue", ""))[:SHRUNK_ERROR["evalue"]],
            "traceback": [str(line)[:SHRUNK_ERROR["line"]] for line in traceback[-SHRUNK_ERROR["traceback_lines"]:]]}


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... output truncated by the grader ({len(text):,} characters in all) ...\n"


class LimitOutputSize(NbGraderPreprocessor):
    """Cap each code cell's output at ``max_chars`` characters, and the notebook's at ``max_notebook_chars``.

    Every field counts: a stream's text, a rich output's data and metadata, an error's name,
    value and traceback. Streams and error texts are cut (an error's name to 200 characters);
    rich outputs (images, HTML) larger than what is left are replaced by a one-line note. Once
    the notebook's budget is spent, later cells keep only a note (the judge's verdicts,
    appended last, always stay). What was cut is noted in the notebook's metadata for the
    grader (:func:`raydata_grader.inert.record_cap`).
    """

    max_chars = Integer(20_000, help="largest output, in characters, kept per cell").tag(config=True)
    max_notebook_chars = Integer(200_000, help="output, in characters, kept per notebook").tag(config=True)

    def preprocess(self, nb, resources):
        from raydata_grader.nbgrader_steps import _verdict_outputs  # the judge's lines: that module's to know

        self._verdict_outputs = _verdict_outputs
        self._left = self.max_notebook_chars
        self._cut = 0
        nb, resources = super().preprocess(nb, resources)
        if self._cut:
            record_cap(nb, f"{self._cut:,} characters of output were cut from the graded notebook (it keeps at most "
                           f"{self.max_chars:,} per cell and {self.max_notebook_chars:,} per notebook)")
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if cell.get("cell_type") != "code":
            return cell, resources
        budget = min(self.max_chars, max(self._left, 0))
        used, kept = 0, []
        outputs = cell.get("outputs", [])
        last_error = max((i for i, o in enumerate(outputs) if o.get("output_type") == "error"), default=-1)
        verdict = self._verdict_outputs(outputs)
        for i, output in enumerate(outputs):
            kind = output.get("output_type")
            before = output_chars(output)
            if kind == "stream":
                if i in verdict:
                    kept.append(output)  # the verdict and its note, which the grader appended last
                    continue
                if used >= budget:
                    self._cut += before
                    continue
                output["text"] = _truncate(output.get("text", ""), budget - used)
                used += len(output["text"])
            elif kind in ("display_data", "execute_result"):
                size = output_chars(output.get("data", {})) + output_chars(output.get("metadata", {}))
                if used + size > budget:
                    output["data"] = {"text/plain": f"[an output of {size:,} characters was removed by the grader]"}
                    output["metadata"] = {}
                else:
                    used += size
            elif kind == "error":
                # The last error stays whatever the budget (the judge's verdict, or the error that
                # ended the cell); earlier ones (a kernel may publish many) count like any output.
                output["ename"] = str(output.get("ename", ""))[:SHRUNK_ERROR["ename"]]
                output["evalue"] = _truncate(str(output.get("evalue", "")), self.max_chars)
                traceback = [_truncate(str(line), self.max_chars) for line in output.get("traceback", [])][-50:]
                while len(traceback) > 1 and sum(map(len, traceback)) > self.max_chars:
                    traceback.pop(0)  # the innermost frames, where the error was raised, stay
                output["traceback"] = traceback
                size = len(output["ename"]) + len(output["evalue"]) + sum(len(line) for line in output["traceback"])
                if i != last_error and used + size > budget:
                    self._cut += before
                    continue
                used += size
            self._cut += max(before - output_chars(output), 0)
            kept.append(output)
        self._left -= used
        cell["outputs"] = kept
        return cell, resources
