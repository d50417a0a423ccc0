"""The course's nbgrader preprocessors (``autograder/nbgrader_config.py`` lists them).

In autograde:

- :class:`TrackedExecute` is nbgrader's ``Execute``, with four jobs more. It starts the kernel
  in its sandbox (:class:`raydata_grader.kernel_sandbox.SandboxedKernelManager`) when the
  grader asks for one; it records which cell it is running, so that when a kernel dies
  (``os._exit``, a segfault, the memory limit) the grader can say which cell killed it; it
  caps output while it collects it, per cell and per notebook, every field counted (metadata,
  error names and tracebacks too), so that a kernel cannot fill the grader's memory; and
  after each grade cell it has the kernel serve that cell's check to
  the judge (:mod:`raydata_grader.judge`), and shows the verdict under the cell;
- :class:`StderrToStdout`, after ``Execute``: Ray's log lines on stderr are not failures;
- :class:`~raydata_grader.output_caps.LimitOutputSize` (:mod:`raydata_grader.output_caps`,
  importable from here) caps each cell's output in characters, and the notebook's. nbgrader's
  ``LimitOutput`` counts *lines*, so ``print("x" * 50_000_000)`` keeps all 50 MB. It and
  ``TrackedExecute`` note what they cut in the notebook's metadata
  (:func:`raydata_grader.inert.record_cap`), and the grader puts that in the submission's row;
- :class:`JudgedGrades` is nbgrader's ``SaveAutoGrades`` with the score of every grade cell
  taken from the judge's verdict, never from what the kernel printed or raised: a cell
  scores its points when the judge passed it and the cell itself raised no error.

In feedback:

- :class:`HideHiddenTests` removes the hidden-test blocks with nbgrader's own
  ``ClearHiddenTests``, and of a hidden test's outputs keeps only the judge's verdict;
- :class:`GraderNotes` puts the grader's notes for a submission (status, repairs) at the top
  of its feedback page.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests, Execute, NbGraderPreprocessor, SaveAutoGrades
from nbclient.exceptions import DeadKernelError
from nbgrader.utils import is_grade
from traitlets import Bool, Integer, Unicode

from raydata_course.layout import PROGRESS_ENV
from raydata_grader.inert import GRADER_KEY, record_cap
from raydata_grader.outcome import where_running
from raydata_grader.output_caps import LimitOutputSize, output_chars as _output_chars, shrunk_error as _shrunk_error

__all__ = ["TrackedExecute", "StderrToStdout", "LimitOutputSize", "JudgedGrades", "HideHiddenTests", "GraderNotes",
           "HIDDEN_PASSED", "NOTE_PREFIX", "NOTE_PREFIXES"]

#: What a hidden test's source becomes in feedback.
HIDDEN_PLACEHOLDER = "# Hidden test: the grader ran it outside your kernel, on inputs you have not seen. Its result is below."
#: The line under a hidden test the judge passed.
HIDDEN_PASSED = "Hidden test passed.\n"
#: What starts the line, right after the verdict, that carries a passing check's note whose
#: figures the judge measured outside the kernel (``Verdict.note_source == "observed"``).
NOTE_PREFIX = "The grader measured: "
#: The line's start for each source of a note: a figure the notebook's own process computed
#: is never said to be the grader's measurement.
NOTE_PREFIXES = {"observed": NOTE_PREFIX, "reported": "Your notebook reported: ", "": "The grader's note: "}
#: The grader's line that has the kernel serve one cell's check to the judge.
JUDGE_LINE = ("import raydata_course.judging.kernel as _raydata_judge; "
              "_raydata_judge.serve({socket!r}, {nonce!r}); del _raydata_judge")


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


def _is_hidden(cell) -> bool:
    return "BEGIN HIDDEN TESTS" in cell.get("source", "")


class TrackedExecute(Execute):
    """nbgrader's ``Execute``, sandboxed, tracked, capped and judged (see the module docstring).

    The instructor's own set-up and tear-down cells get :attr:`instructor_cell_timeout` (they
    start Ray, which on a busy machine can take longer than a student's cell may). Before each
    cell it writes ``{"index", "grade_id", "started_s", "judging"}`` to
    ``$RAYDATA_COURSE_PROGRESS`` (:data:`raydata_course.layout.PROGRESS_ENV`), atomically.
    After a grade cell, when a judge is active (:func:`raydata_grader.judge.active_judge`),
    it runs :data:`JUDGE_LINE` in the kernel (with the same per-cell limit) and appends the
    verdict to the cell's outputs: the judge's message as an ``AssertionError`` when it
    failed, :data:`HIDDEN_PASSED` under a hidden test it passed. What the kernel printed
    while it served the judge is dropped (it may show the hidden inputs' plans).
    """

    sandboxed = Bool(False, help="start the kernel with SandboxedKernelManager").tag(config=True)
    instructor_cell_timeout = Integer(
        600, help="per-cell limit, in seconds, for the instructor's read-only code cells that earn no points (set-up: "
                  "a fresh Ray runtime can take minutes to start on a busy machine); the larger of this and "
                  "Execute.timeout applies").tag(config=True)
    collect_cell_chars = Integer(1_000_000, help="output collected per cell, in characters").tag(config=True)
    collect_notebook_chars = Integer(8_000_000, help="output collected per notebook, in characters").tag(config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.sandboxed:
            from raydata_grader.kernel_sandbox import SandboxedKernelManager

            self.kernel_manager_class = SandboxedKernelManager
        self._collected: dict[int, int] = defaultdict(int)
        self._dropped: dict[int, int] = defaultdict(int)
        self._collected_total = 0

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        meta = (cell or {}).get("metadata", {}).get("nbgrader", {})
        if timeout and meta.get("locked") and not meta.get("grade") and not meta.get("solution"):
            return max(timeout, self.instructor_cell_timeout)
        return timeout

    # -- output caps while collecting
    def _admit(self, content: dict, cell_index: int) -> bool:
        room = min(self.collect_cell_chars - self._collected[cell_index],
                   self.collect_notebook_chars - self._collected_total)
        size = _output_chars(content, limit=max(room, 0))
        if size > room:
            self._dropped[cell_index] += _output_chars(content)
            return False
        self._collected[cell_index] += size
        self._collected_total += size
        return True

    def output(self, outs, msg, display_id, cell_index):
        if msg.get("msg_type") in ("stream", "display_data", "execute_result", "error"):
            if not self._admit(msg.get("content") if isinstance(msg.get("content"), dict) else {}, cell_index):
                return None
        return super().output(outs, msg, display_id, cell_index)

    def on_cell_executed(self, **kwargs):
        """nbgrader's hook, which adds the execute reply's error to the cell when no output of the
        cell has its name: over the per-cell cap, that error comes cut
        (:data:`~raydata_grader.output_caps.SHRUNK_ERROR`)."""
        content = (kwargs.get("execute_reply") or {}).get("content")
        if isinstance(content, dict) and content.get("status") == "error":
            fields = {k: content.get(k) for k in ("ename", "evalue", "traceback")}
            if _output_chars(fields, limit=self.collect_cell_chars) > self.collect_cell_chars:
                content.update(_shrunk_error(fields))
        return super().on_cell_executed(**kwargs)

    def _update_display_id(self, display_id, msg):
        if not self._admit(msg.get("content") or {}, -1):
            return
        try:
            super()._update_display_id(display_id, msg)
        except (IndexError, KeyError):  # a display id that points at nothing the grader kept
            pass

    # -- judging
    def preprocess(self, nb, resources, km=None):
        """Execute ``nb`` with a judge: the grader's (:func:`raydata_grader.judge.active_judge`),
        or, under nbgrader's own ``autograde`` command, one of its own (no sandbox then).

        The verdicts go to ``resources["raydata_grader"]["verdicts"]`` for :class:`JudgedGrades`.
        """
        import contextlib
        import tempfile

        from raydata_grader.judge import Judge, active_judge, judging, load_checks
        from raydata_grader.paths import oracles_dir

        with contextlib.ExitStack() as stack:
            judge = active_judge()
            if judge is None:
                assignment = resources.get("nbgrader", {}).get("assignment")
                folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="rdg-judge-"))
                judge = stack.enter_context(judging(Judge(load_checks(assignment, oracles_dir()),
                                                          Path(folder) / "judge.sock", log=self.log.info)))
                self.log.warning("No grading run is active: judging %s with a judge of this process and an "
                                 "unsandboxed kernel. Grade students' submissions with `make grade`.", assignment)
            resources.setdefault("raydata_grader", {})["verdicts"] = judge.verdicts
            self._judge_now = judge
            self._died_at = None
            nb.get("metadata", {}).pop(GRADER_KEY, None)  # only the grader writes its notes
            nb, resources = super().preprocess(nb, resources, km)
            dropped = sum(self._dropped.values())
            if dropped:
                record_cap(nb, f"{dropped:,} characters of output were dropped while the notebook ran (the grader "
                               f"collects at most {self.collect_cell_chars:,} per cell and "
                               f"{self.collect_notebook_chars:,} per notebook, metadata and error fields included)")
            return nb, resources

    # -- tracking and judging
    def _progress(self, index: int, cell, judging: bool) -> None:
        path = os.environ.get(PROGRESS_ENV)
        if path:
            record = {"index": index, "grade_id": cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"),
                      "started_s": time.time(), "judging": judging}
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, path)

    def _after_every_grade_cell(self, index: int) -> bool:
        """Whether every grade cell of the notebook comes before cell ``index`` (and so has
        been run and judged by the time cell ``index`` runs)."""
        return all(i < index for i, c in enumerate(self.nb.cells) if c.get("cell_type") == "code" and is_grade(c))

    def preprocess_cell(self, cell, resources, index):
        if getattr(self, "_died_at", None) is not None:
            if cell.get("cell_type") != "code":
                return cell, resources
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=(
                f"(not run: the kernel died in {self._died_at}, after every graded cell)\n"))]
            return cell, resources
        self._progress(index, cell, False)
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            if not self._after_every_grade_cell(index):
                raise  # grade cells were still to run: nothing is graded (outcome.py says where)
            # Every grade cell has its verdict already, in this process: a kernel that dies in
            # the cells after them (Ray's shutdown in the tear-down, or anything a submission
            # left running) changes no grade, so the grades stand and the death is noted.
            self._died_at = where_running({"index": index,
                                           "grade_id": cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")})
            cell.outputs = list(cell.get("outputs", [])) + [nbformat.v4.new_output(
                "stream", name="stdout", text=f"\n(the kernel died while this cell ran, after every graded cell: "
                                              "the grades stand)\n")]
            record_cap(self.nb, f"the kernel died while running {self._died_at}, after every graded cell had been "
                                "run and judged: the grades stand; nothing after it ran")
            self.log.warning("The kernel died in %s, after every graded cell: the grades stand.", self._died_at)
            return cell, resources
        if self._dropped.get(index):
            cell.outputs.append(nbformat.v4.new_output(
                "stream", name="stdout",
                text=f"\n... {self._dropped[index]:,} characters of output were dropped by the grader ...\n"))
        judge = getattr(self, "_judge_now", None)
        if judge is not None and cell.get("cell_type") == "code" and is_grade(cell):
            self._progress(index, cell, True)
            self._judge(judge, cell, index)
        return cell, resources

    def _judge(self, judge, cell, index) -> None:
        gid = cell.metadata["nbgrader"]["grade_id"]
        raised = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        session = judge.open(gid, timeout_s=float(self.timeout or 600))
        line = nbformat.v4.new_code_cell(JUDGE_LINE.format(socket=str(judge.socket_path), nonce=session.nonce))
        try:
            self.execute_cell(line, index, store_history=False)
        finally:
            self.nb["cells"][index] = cell  # nbclient stores the cell it ran at this index
            verdict = judge.close(session)
            verdict.cell_raised = raised
        if raised:
            return  # the cell's own error says what failed, and the cell scores 0 (JudgedGrades)
        if not verdict.passed:
            cell.outputs.append(nbformat.v4.new_output(
                "error", ename="AssertionError", evalue=verdict.message,
                traceback=[f"AssertionError: {verdict.message}"]))
        else:
            if _is_hidden(cell):
                cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=HIDDEN_PASSED))
            if verdict.message:  # a passing check's note (a margin), labelled with where its figures come from
                prefix = NOTE_PREFIXES.get(verdict.note_source, NOTE_PREFIXES[""])
                cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=f"{prefix}{verdict.message}\n"))


class JudgedGrades(SaveAutoGrades):
    """nbgrader's ``SaveAutoGrades``, scoring each grade cell from the judge's verdict.

    A grade cell earns its points when the judge passed it and the cell raised no error
    itself (a visible test that fails in the notebook fails). A cell without a verdict (the
    kernel died before it, or no judge ran) scores 0. Nothing the kernel printed, raised or
    wrote can raise a score: the verdicts live in the grader's process, in
    ``resources["raydata_grader"]["verdicts"]`` (:class:`TrackedExecute` puts them there).
    """

    def _add_score(self, cell, resources) -> None:
        gid = cell.metadata["nbgrader"]["grade_id"]
        grade = self.gradebook.find_grade(gid, self.notebook_id, self.assignment_id, self.student_id)
        verdict = resources.get("raydata_grader", {}).get("verdicts", {}).get(gid)
        points = float(cell.metadata["nbgrader"].get("points", 0) or 0)
        earned = verdict is not None and verdict.passed and not verdict.cell_raised
        grade.auto_score = points if earned else 0.0
        grade.needs_manual_grade = grade.manual_score is not None
        self.gradebook.db.commit()


def _is_note(output) -> bool:
    return (output.get("output_type") == "stream" and output.get("name") == "stdout"
            and str(output.get("text", "")).startswith(tuple(NOTE_PREFIXES.values()))
            and len(output.get("text", "")) <= 1000)


def _verdict_outputs(outputs: list) -> set[int]:
    """Indices of the outputs the grader appended after the cell ran: a trailing
    :data:`HIDDEN_PASSED` line, a trailing note, or both. Only the last ones can be the
    grader's: whatever the student's code printed, even the same words, came before them.
    """
    n = len(outputs)
    is_passed = [o.get("output_type") == "stream" and o.get("text") == HIDDEN_PASSED for o in outputs]
    if n and is_passed[-1]:
        return {n - 1}
    if n and _is_note(outputs[-1]):
        return {n - 2, n - 1} if n >= 2 and is_passed[-2] else {n - 1}
    return set()


def _passed_outputs(outputs: list) -> list:
    """The grader's :data:`HIDDEN_PASSED` line and the note right after it, if there is one
    (:func:`_verdict_outputs`); nothing when the cell ends without that line."""
    verdict = [outputs[i] for i in sorted(_verdict_outputs(outputs))]
    return verdict if verdict and verdict[0].get("text") == HIDDEN_PASSED else []


class HideHiddenTests(ClearHiddenTests):
    """Feedback preprocessor: no hidden-test code or printed output in feedback, only the verdict.

    nbgrader's ``ClearHiddenTests`` removes each hidden-test block from the cell's source; a
    placeholder line says where it was. Of the cell's outputs, only the judge's verdict
    stays: an error cut to its one-line message (the oracle's words for the student), or
    :data:`HIDDEN_PASSED`. A malformed block (a ``BEGIN HIDDEN TESTS`` a student typed into
    a cell, unclosed or nested) hides everything from its first line on, instead of failing
    the feedback.

    Examples:
        >>> cell = nbformat.v4.new_code_cell(
        ...     "# part A\\n### BEGIN HIDDEN TESTS\\n# judged by the grader\\n### END HIDDEN TESTS",
        ...     metadata={"nbgrader": {"grade": True, "grade_id": "a_hidden", "points": 1}},
        ...     outputs=[nbformat.v4.new_output("stream", name="stdout", text="plan"),
        ...              nbformat.v4.new_output("error", ename="AssertionError", evalue="On a big dataset, ...",
        ...                                     traceback=["----> 3 check(f)"])])
        >>> cell = HideHiddenTests().preprocess_cell(cell, {}, 0)[0]
        >>> "judged by" in cell.source, [o["output_type"] for o in cell.outputs]
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
        kept = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"][-1:]
        for output in kept:
            output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        if not kept:
            kept = _passed_outputs(cell.get("outputs", []))
        cell.outputs = kept
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

