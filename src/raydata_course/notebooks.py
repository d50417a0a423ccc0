"""The course's one notebook executor (nbclient), and clean committed notebooks.

``make course``, the tests and the student self-check all run notebooks through
:func:`execute_notebook`. (The grader's autograde runs them through nbgrader's own
``Execute`` preprocessor, which wraps the same nbclient.)

Examples:
    >>> import nbformat
    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    >>> nb.cells[0].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"})]
    >>> [len(c.outputs) for c in strip_outputs(nb).cells]
    [0]
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from raydata_course._util import temporary_env
from raydata_course.layout import HEADLESS_ENV, IOPUB_TIMEOUT_S, KERNEL_NAME

__all__ = ["CellError", "NotebookRun", "execute_notebook", "cell_errors", "strip_outputs", "is_stripped"]


@dataclass(frozen=True)
class CellError:
    """The first error a cell raised.

    Attributes:
        index: the cell's position in the notebook (0-based).
        ename: the exception's class name.
        evalue: its message, cut at 400 characters.
    """

    index: int
    ename: str
    evalue: str


def cell_errors(notebook) -> list[CellError]:
    """The first error output of every code cell of an executed notebook, in cell order."""
    found = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found.append(CellError(index, output.get("ename", ""), str(output.get("evalue", ""))[:400]))
                break
    return found


@dataclass
class NotebookRun:
    """The outcome of one headless execution.

    Attributes:
        path: the notebook that was run.
        status: ``"ok"``, ``"error"`` (a cell raised, or the kernel died) or ``"timeout"``
            (a cell ran too long). With ``allow_errors``, cells that raise leave it ``"ok"``.
        seconds: wall time of the execution, kernel start included, in seconds.
        error: the failing cell's error name and value, or None.
        output_path: where the executed notebook was written, or None.
        notebook: the executed notebook, with its outputs.
        kernel_died: the kernel died (``os._exit``, a crash) before the end.
    """

    path: Path
    status: str
    seconds: float
    error: str | None = None
    output_path: Path | None = None
    notebook: object = None
    kernel_died: bool = False

    @property
    def last_executed(self) -> int:
        """Index of the last code cell that ran (-1 when none did)."""
        cells = self.notebook.cells if self.notebook is not None else []
        return max((i for i, c in enumerate(cells) if c.get("cell_type") == "code"
                    and c.get("execution_count") is not None), default=-1)


def execute_notebook(
    path: str | os.PathLike,
    output_path: str | os.PathLike | None = None,
    *,
    cell_timeout_s: int = 600,
    kernel_name: str = KERNEL_NAME,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str | None] | None = None,
    allow_errors: bool = False,
) -> NotebookRun:
    """Run a notebook top to bottom in a fresh kernel; stop at the first error.

    A cell tagged ``raises-exception`` may raise; any other error ends the run, and so does a
    cell that runs past ``cell_timeout_s`` (status ``"timeout"``). With ``allow_errors`` every
    cell runs, as in grading: a cell that raises or runs too long (it is interrupted) leaves
    its error in ``run.notebook``, which :func:`cell_errors` lists. ``RAYDATA_COURSE_HEADLESS=1``
    is set for the kernel, so Ray Data draws no progress bars.

    Args:
        path: the notebook to run.
        output_path: where to write the executed notebook (with outputs); not written if None.
        cell_timeout_s: per-cell limit in seconds.
        kernel_name: the Jupyter kernel to start, regardless of the notebook's metadata.
        cwd: working folder of the kernel; default the notebook's folder.
        env: environment changes for the kernel (a value of None unsets the variable),
            e.g. ``{"RAY_ADDRESS": None}`` to make the notebook start its own cluster.
        allow_errors: run every cell even when some raise.

    Returns:
        A :class:`NotebookRun`.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No notebook at {path}.")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=cell_timeout_s,
        iopub_timeout=IOPUB_TIMEOUT_S,
        kernel_name=kernel_name,
        allow_errors=allow_errors,
        interrupt_on_timeout=allow_errors,
        resources={"metadata": {"path": str(cwd or path.parent)}},
    )
    start = time.perf_counter()
    status, error, died = "ok", None, False
    with temporary_env({HEADLESS_ENV: "1", **(env or {})}):
        try:
            client.execute()
        except CellTimeoutError as exc:
            status, error = "timeout", str(exc).strip().splitlines()[-1][:500]
        except (CellExecutionError, DeadKernelError) as exc:
            lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
            status, error = "error", (lines[-1] if lines else type(exc).__name__)[:500]
            died = isinstance(exc, DeadKernelError)
    seconds = time.perf_counter() - start
    written = None
    if output_path is not None:
        written = Path(output_path)
        written.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, written)
    return NotebookRun(path, status, seconds, error, written, nb, died)


def strip_outputs(notebook):
    """Return a copy with outputs and execution counts removed, all metadata kept.

    Uses ``nbstripout``'s own ``strip_output`` with its default key list, which leaves the
    ``nbgrader`` cell metadata and ``tags`` alone.
    """
    from nbstripout import strip_output

    return strip_output(copy.deepcopy(notebook), keep_output=False, keep_count=False, keep_id=True)


def is_stripped(notebook) -> bool:
    """True when no cell has outputs or an execution count."""
    return all(
        not c.get("outputs") and c.get("execution_count") is None
        for c in notebook.cells
        if c.cell_type == "code"
    )
