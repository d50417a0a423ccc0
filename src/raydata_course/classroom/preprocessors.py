"""nbgrader preprocessors for grading a class (grader only; not in the student bundle).

- :class:`TrackedExecute` is nbgrader's ``Execute`` that records which cell it is running, so
  that when a kernel dies (``os._exit``, a segfault, the memory watchdog) the grader can say
  which cell killed it.
- :class:`LimitOutputSize` caps each cell's output in characters. nbgrader's ``LimitOutput``
  counts *lines*, so ``print("x" * 50_000_000)`` keeps all 50 MB and the feedback page with it.
- :class:`HideHiddenTests` removes the hidden-test blocks from feedback. nbgrader puts the
  instructor's cells back into the autograded notebook, hidden tests included, and
  ``generate_feedback`` renders them (nbgrader #917, #1363). This keeps the result of each
  hidden test (its ``AssertionError`` message, which the oracle writes for the student) and
  drops its code, traceback and printed output.
- :class:`GraderNotes` puts the grader's notes for a submission (status, repairs) at the top
  of its feedback page.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import nbformat
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Integer, Unicode

__all__ = ["PROGRESS_ENV", "TrackedExecute", "LimitOutputSize", "HideHiddenTests", "GraderNotes", "hide_hidden_tests"]

#: Environment variable naming the file where :class:`TrackedExecute` records progress.
PROGRESS_ENV = "RAYDATA_COURSE_PROGRESS"

BEGIN_HIDDEN = "BEGIN HIDDEN TESTS"
END_HIDDEN = "END HIDDEN TESTS"
HIDDEN_PLACEHOLDER = "# Hidden test: it runs only in the grader, on inputs you have not seen. Its result is below."


class TrackedExecute(Execute):
    """nbgrader's ``Execute``, writing ``{"index", "grade_id", "started_s"}`` before each cell.

    The file is ``$RAYDATA_COURSE_PROGRESS`` (nothing is written when it is unset). It is
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


def _strip_hidden_block(source: str) -> tuple[str, bool]:
    out, inside, removed = [], False, False
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line:
            inside, removed = True, True
            out.append(HIDDEN_PLACEHOLDER)
            continue
        if END_HIDDEN in line:
            inside = False
            continue
        if not inside:
            out.append(line)
    return "\n".join(out), removed


def hide_hidden_tests(cell) -> bool:
    """Remove a cell's hidden-test block and everything it printed; keep its error message.

    Returns:
        True if the cell had a hidden-test block.

    Examples:
        >>> cell = {"cell_type": "code", "source": "# part A\\n### BEGIN HIDDEN TESTS\\ncheck(f)\\n### END HIDDEN TESTS",
        ...         "outputs": [{"output_type": "stream", "name": "stdout", "text": "plan"},
        ...                     {"output_type": "error", "ename": "AssertionError", "evalue": "On a big dataset, ...",
        ...                      "traceback": ["----> 3 check(f)"]}]}
        >>> hide_hidden_tests(cell)
        True
        >>> "check(f)" in cell["source"], [o["output_type"] for o in cell["outputs"]]
        (False, ['error'])
        >>> cell["outputs"][0]["traceback"]
        ['AssertionError: On a big dataset, ...']
    """
    if cell.get("cell_type") != "code":
        return False
    source, removed = _strip_hidden_block(cell.get("source", ""))
    if not removed:
        return False
    cell["source"] = source
    outputs = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
            outputs.append(output)
    cell["outputs"] = outputs
    return True


class HideHiddenTests(NbGraderPreprocessor):
    """Feedback preprocessor: no hidden-test code, traceback or printed output in feedback."""

    def preprocess_cell(self, cell, resources, index):
        hide_hidden_tests(cell)
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

