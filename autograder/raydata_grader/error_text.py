"""What a student reads when their code raised while the judge checked a cell (grader only).

A UDF that raises inside Ray Data reaches the judge as a long text: Ray's task lines, colour
codes, process ids, retry advice and the chained exception twice. :func:`ray_error_text` keeps
the error the student's code raised and the Ray task it ran in; :func:`raised_message` says it
in a sentence, with the kind of input it raised on when the check named one.
"""

from __future__ import annotations

import re

from raydata_grader.remote import KernelRaised

__all__ = ["ray_error_text", "raised_message"]


#: Terminal escape sequences (CSI, OSC such as links, and the rest) and other control characters.
_ANSI = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]")
_RAY_TASK_LINE = re.compile(r"^\s*ray::(?P<task>\S+?)\(\)\s*\(pid=\d+, ip=[^)]*\)\s*$")
_FRAME_LINE = re.compile(r'^\s*File "[^"]*", line (\d+), in (\S+)')
_RAY_BOILERPLATE = (
    "The above exception was the direct cause of the following exception:",
    "Failed to apply UDF transform after",
    "To change retry attempts",
    "ray.exceptions.UserCodeException: UDF failed to process a data block.",
)


def ray_error_text(text: str) -> str:
    r"""The part of a Ray error's text that helps a student: the error their code raised, and
    in which Ray task; without colour codes, process ids, Ray's retry advice or the repeated
    chained exception.

    A ``map_batches`` UDF that raises reaches the caller as ``RayTaskError(UserCodeException)``,
    whose text holds the UDF's own error first, then "The above exception was the direct
    cause ...", the task line again and Ray Data's retry advice (Ray 2.60,
    ``ray/data/_internal/execution/util.py`` and ``ray/exceptions.py``).

    Examples:
        >>> task = "\x1b[36mray::ReadRange->MapBatches(bad)()\x1b[39m (pid=7, ip=10.0.0.1)"
        >>> ray_error_text("\n".join([
        ...     task, '  File "<cell>", line 4, in bad', "    raise ValueError(why)", "ValueError: columns differ.", "",
        ...     "The above exception was the direct cause of the following exception:", "", task,
        ...     "ray.exceptions.UserCodeException: UDF failed to process a data block.",
        ...     "Failed to apply UDF transform after 1/1 attempts (total backoff 0.0s)."]))
        'ValueError: columns differ. (in the Ray task ReadRange->MapBatches(bad), line 4 of bad)'
        >>> ray_error_text("plain text, nothing of Ray")
        'plain text, nothing of Ray'
    """
    text = _ANSI.sub("", text)
    first = text.split(_RAY_BOILERPLATE[0], 1)[0]
    task, where, kept = None, None, []
    for line in first.splitlines():
        match = _RAY_TASK_LINE.match(line)
        frame = _FRAME_LINE.match(line)
        if match:
            task = match.group("task")
        elif frame:
            where = where or f"line {frame.group(1)} of {frame.group(2)}"  # the task's own function
        elif line.strip() and not line[:1].isspace() and not line.startswith(_RAY_BOILERPLATE):
            if line.strip() not in kept:  # the error's own lines, once; indented ones are source
                kept.append(line.strip())
    if task is None or not kept:
        return text.strip()
    return f"{' '.join(kept)} (in the Ray task {task}" + (f", {where})" if where else ")")


def raised_message(exc: KernelRaised) -> str:
    """What the student reads when their code raised during a check."""
    text = ray_error_text(exc.message.strip())[:400]
    if exc.is_a("NameError") and "not defined in your notebook" in text:
        return f"{text}: an earlier cell did not run to the end, or the name was changed."
    said = f"your code raised {exc.type_name}" + (f": {text}" if text else "")
    said = said if said.endswith((".", "!", "?", ")")) else said + "."
    described = getattr(exc, "input_description", None)
    if described:
        return said + f" It raised on {described}: build such an input and call your function on it to reproduce it."
    return said + " Call your function on inputs of other sizes and shapes to reproduce it."
