"""The hidden-test loader: what a hidden test cell calls, in the kernel being graded.

A hidden test block in ``solutions/`` holds one call::

    import importlib, raydata_grader.hidden  # reloaded: the real check, whatever ran before
    importlib.reload(raydata_grader.hidden).hidden_check("data01", "check_make_blocks", make_blocks)

The check itself lives in ``autograder/oracles/<assignment>.py``, which only the grader has
(the grader names the folder in ``$RAYDATA_COURSE_ORACLES`` for the kernels it starts), so
the notebook, and the feedback rendered from it, holds nothing but the call.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

__all__ = ["HiddenOraclesUnavailable", "hidden_check"]


def _fresh_layout():
    """A fresh copy of :mod:`raydata_course.layout`, run from its file now.

    The hidden cell reloads this module so that it runs the real check whatever an answer
    cell did before; the course's facts it reads must be as fresh. An answer cell that rebinds
    ``raydata_course.layout.ORACLES_ENV`` changes the imported module, not this copy (and
    ``sys.modules`` keeps the module the rest of the kernel uses).
    """
    spec = importlib.util.find_spec("raydata_course.layout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class HiddenOraclesUnavailable(RuntimeError):
    """A hidden test ran outside the grader, where the oracle modules are not available."""


def hidden_check(assignment: str, check: str, *args: Any, **kwargs: Any) -> None:
    """Run hidden test ``check`` of ``assignment`` on the student's objects.

    The oracle is ``<$RAYDATA_COURSE_ORACLES>/<assignment>.py``; ``check`` names one of its
    functions, called as ``check(*args, **kwargs)``.

    Args:
        assignment: assignment id, e.g. ``"data01"``.
        check: name of the oracle function.
        *args: passed through, usually the student's functions.
        **kwargs: passed through.

    Raises:
        AssertionError: the check failed. The message is the oracle's student-facing
            explanation; the traceback stops here, so no oracle source reaches feedback.
        HiddenOraclesUnavailable: ``RAYDATA_COURSE_ORACLES`` is unset or lacks the module.
    """
    oracles_env = _fresh_layout().ORACLES_ENV
    folder = os.environ.get(oracles_env)
    path = Path(folder, f"{assignment}.py") if folder else None
    if path is None or not path.is_file():
        raise HiddenOraclesUnavailable(
            f"Hidden tests for {assignment} run only in the course's grader "
            f"({oracles_env} is {'unset' if not folder else repr(folder)}). "
            "Students: use the visible tests and `Validate` instead."
        )
    spec = importlib.util.spec_from_file_location(f"_raydata_course_oracle_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    try:
        getattr(module, check)(*args, **kwargs)
    except AssertionError as exc:
        message = str(exc) or f"hidden test {check!r} failed"
    except HiddenOraclesUnavailable:
        raise
    except Exception as exc:  # the student's code raised inside the oracle
        message = (
            f"hidden test {check!r}: your code raised {type(exc).__name__}: {exc}. "
            "Run your function on a few datasets of different shapes to reproduce it."
        )
    else:
        return
    raise AssertionError(message) from None
