"""The course's nbgrader preprocessors (``autograder/nbgrader_config.py`` lists them).

In autograde:

- :class:`RejectGraderAccess`, before ``Execute``: an answer cell that reaches for the
  hidden-test machinery is not run;
- :class:`TrackedExecute` is nbgrader's ``Execute`` that records which cell it is running, so
  that when a kernel dies (``os._exit``, a segfault, the memory watchdog) the grader can say
  which cell killed it;
- :class:`StderrToStdout`, after ``Execute``: a grade cell fails only when it raises, not
  when Ray logs to stderr;
- :class:`LimitOutputSize` caps each cell's output in characters. nbgrader's ``LimitOutput``
  counts *lines*, so ``print("x" * 50_000_000)`` keeps all 50 MB and the feedback page with it.

In feedback:

- :class:`HideHiddenTests` removes the hidden-test blocks with nbgrader's own
  ``ClearHiddenTests``. nbgrader puts the instructor's cells back into the autograded
  notebook, hidden tests included, and ``generate_feedback`` renders them (nbgrader #917,
  #1363). This keeps the result of each hidden test (its ``AssertionError`` message, which the
  oracle writes for the student) and drops its code, traceback and printed output;
- :class:`GraderNotes` puts the grader's notes for a submission (status, repairs) at the top
  of its feedback page.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests, Execute, NbGraderPreprocessor
from nbgrader.utils import is_solution
from traitlets import Bool, Integer, Unicode

from raydata_course.layout import PROGRESS_ENV

__all__ = ["GRADER_ACCESS_PATTERN", "RejectGraderAccess", "TrackedExecute", "StderrToStdout", "LimitOutputSize",
           "HideHiddenTests", "GraderNotes"]

#: What an answer cell may not mention: the hidden-test machinery and where it lives.
GRADER_ACCESS_PATTERN = (r"hidden_check|raydata_grader|RAYDATA_COURSE_ORACLES|ORACLES_ENV|autograder[/.\\]oracles"
                         r"|_raydata_course_oracle")
#: What a hidden test's source becomes in feedback.
HIDDEN_PLACEHOLDER = "# Hidden test: it runs only in the grader, on inputs you have not seen. Its result is below."


class RejectGraderAccess(NbGraderPreprocessor):
    """nbgrader preprocessor: an answer cell that reaches for the grader is not run.

    Hidden tests run in the student's kernel, so an answer cell could replace
    ``hidden_check`` or read the oracle files. The hidden cells reload the loader before they
    call it, and this preprocessor, run before ``Execute``, replaces any answer cell that
    mentions the machinery (see :data:`GRADER_ACCESS_PATTERN`) with a ``raise`` that says
    why. The original source is kept in the cell's metadata
    (``raydata_course.rejected_source``), so nothing is lost.

    Examples:
        >>> cell = nbformat.v4.new_code_cell("import raydata_grader.hidden as h; h.hidden_check = print",
        ...                                  metadata={"nbgrader": {"solution": True}})
        >>> RejectGraderAccess().preprocess_cell(cell, {}, 0)[0].source.startswith("raise RuntimeError")
        True
        >>> cell.metadata["raydata_course"]["rejected_source"][:6]
        'import'
    """

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.get("cell_type") == "code" and is_solution(cell):
            match = re.search(GRADER_ACCESS_PATTERN, cell.get("source", ""))
            if match:
                cell.metadata.setdefault("raydata_course", {})["rejected_source"] = cell.source
                cell.source = (
                    "raise RuntimeError(\"The grader did not run this answer cell: it refers to "
                    f"{match.group(0)!r}, part of the hidden-test machinery. Answer cells may not touch the "
                    "grader; remove that line and submit again.\")"
                )
        return cell, resources


class StderrToStdout(NbGraderPreprocessor):
    """nbgrader preprocessor: a grade cell fails only when it raises, not when it logs.

    nbgrader 0.9.6 scores a code grade cell 0 when *any* output is on stderr
    (``nbgrader/utils.py``, ``determine_grade``). Ray writes its INFO log lines ("Starting
    execution of Dataset ...") and forwarded worker logs to stderr, so a correct answer would
    score 0. Run after ``Execute``, this relabels stderr stream outputs as stdout, keeping
    their text for the feedback. Exceptions (``error`` outputs) still fail the cell.

    Examples:
        >>> cell = nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("stream", name="stderr", text="x")])
        >>> StderrToStdout().preprocess_cell(cell, {}, 0)[0].outputs[0]["name"]
        'stdout'
    """

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.get("cell_type") == "code":
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
        return cell, resources


class TrackedExecute(Execute):
    """nbgrader's ``Execute``, writing ``{"index", "grade_id", "started_s"}`` before each cell.

    The file is ``$RAYDATA_COURSE_PROGRESS`` (:data:`raydata_course.layout.PROGRESS_ENV`) (nothing is written when it is unset). It is
    rewritten atomically, so a reader never sees half a record.
    """

    def preprocess_cell(self, cell, resources, index):
        path = os.environ.get(PROGRESS_ENV)
        if path:
            record = {"index": index, "grade_id": cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"),
                      "started_s": time.time()}
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, path)
        return super().preprocess_cell(cell, resources, index)


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... output truncated by the grader ({len(text):,} characters in all) ...\n"


class LimitOutputSize(NbGraderPreprocessor):
    """Cap each code cell's output at ``max_chars`` characters (streams, results, errors).

    Rich outputs (images, HTML) larger than ``max_chars`` are replaced by a one-line note.
    """

    max_chars = Integer(20_000, help="largest output, in characters, kept per cell").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.get("cell_type") != "code":
            return cell, resources
        budget = self.max_chars
        kept = []
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":
                if budget <= 0:
                    continue
                text = output.get("text", "")
                output["text"] = _truncate(text, budget)
                budget -= len(output["text"])
            elif kind in ("display_data", "execute_result"):
                size = sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in output.get("data", {}).values())
                if size > self.max_chars:
                    output["data"] = {"text/plain": f"[an output of {size:,} characters was removed by the grader]"}
            elif kind == "error":
                output["evalue"] = _truncate(str(output.get("evalue", "")), self.max_chars)
                output["traceback"] = [_truncate(line, self.max_chars) for line in output.get("traceback", [])]
            kept.append(output)
        cell["outputs"] = kept
        return cell, resources


class HideHiddenTests(ClearHiddenTests):
    """Feedback preprocessor: no hidden-test code, traceback or printed output in feedback.

    nbgrader's ``ClearHiddenTests`` removes each hidden-test block from the cell's source; a
    placeholder line says where it was. Of the cell's outputs, only the error stays, cut to
    its one-line message (the oracle's words for the student). A malformed block (a
    ``BEGIN HIDDEN TESTS`` a student typed into a cell, unclosed or nested) hides everything
    from its first line on, instead of failing the feedback.

    Examples:
        >>> cell = nbformat.v4.new_code_cell(
        ...     "# part A\\n### BEGIN HIDDEN TESTS\\ncheck(f)\\n### END HIDDEN TESTS",
        ...     metadata={"nbgrader": {"grade": True, "grade_id": "a_hidden", "points": 1}},
        ...     outputs=[nbformat.v4.new_output("stream", name="stdout", text="plan"),
        ...              nbformat.v4.new_output("error", ename="AssertionError", evalue="On a big dataset, ...",
        ...                                     traceback=["----> 3 check(f)"])])
        >>> cell = HideHiddenTests().preprocess_cell(cell, {}, 0)[0]
        >>> "check(f)" in cell.source, [o["output_type"] for o in cell.outputs]
        (False, ['error'])
        >>> cell.outputs[0]["traceback"]
        ['AssertionError: On a big dataset, ...']
    """

    enforce_metadata = Bool(False, help="a hidden block in a non-grade cell is hidden too, not an error").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.get("cell_type") != "code":
            return cell, resources
        try:
            removed = self._remove_hidden_test_region(cell)
        except RuntimeError:  # unclosed or nested: hide from the first marker on
            lines = cell.source.split("\n")
            first = next(i for i, line in enumerate(lines) if self.begin_test_delimeter in line)
            cell.source, removed = "\n".join(lines[:first]), True
        if not removed:
            return cell, resources
        cell.source = cell.source.rstrip("\n") + "\n" + HIDDEN_PLACEHOLDER
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        for output in errors:
            output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        cell.outputs = errors
        return cell, resources


class GraderNotes(NbGraderPreprocessor):
    """Feedback preprocessor: the grader's notes on a submission, as the page's first cell.

    The notes are ``<notes_directory>/<student>/<assignment>.md``; nothing is added when
    ``notes_directory`` is empty or the file is missing.
    """

    notes_directory = Unicode("", help="folder of <student>/<assignment>.md notes").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        if self.notes_directory and info.get("student") and info.get("assignment"):
            path = Path(self.notes_directory, info["student"], f"{info['assignment']}.md")
            if path.is_file():
                text = path.read_text()
                nb.cells.insert(0, nbformat.v4.new_markdown_cell(text))
        return nb, resources

