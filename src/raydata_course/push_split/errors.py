"""The push split's errors in one line: what a failed epoch tells every consumer."""

from __future__ import annotations

import re

from raydata_course._util import cause_chain

__all__ = ["error_summary"]


def error_summary(exc: BaseException, max_chars: int = 600) -> str:
    """The execution's error in one line, with its root cause: a failed UDF reaches the
    coordinator as ``RayTaskError(UserCodeException)`` with a generic message, and the
    student's own exception (``ValueError: bad block``) is at the end of its cause chain.

    Examples:
        >>> try:
        ...     try:
        ...         raise ValueError("bad block 150")
        ...     except ValueError as inner:
        ...         raise RuntimeError("UDF failed to process a data block.") from inner
        ... except RuntimeError as outer:
        ...     print(error_summary(outer))
        RuntimeError: UDF failed to process a data block. (caused by ValueError: bad block 150)
    """
    def one_line(e: BaseException) -> str:
        text = " ".join(str(e).split())
        return f"{type(e).__name__}: {text}" if text else type(e).__name__

    chain = cause_chain(exc)
    root = one_line(chain[-1]) if chain[-1] is not exc else None
    # A remote error carries the task's traceback as text, root cause first: its first
    # "SomeError: message" line that is not Ray's own wrapper is the user's exception.
    for e in chain:
        text = _ANSI.sub("", getattr(e, "traceback_str", None) or str(e))
        for line in text.splitlines():
            m = _ERROR_LINE.match(line)
            if m and not m.group(1).endswith(("UserCodeException", "RayTaskError")):
                root = f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"
                break
        else:
            continue
        break
    first = _ANSI.sub("", str(exc)).strip().splitlines()[0] if str(exc).strip() else ""
    said = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if root:
        said += f" (caused by {root})"
    return said[:max_chars]


_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): (.+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
