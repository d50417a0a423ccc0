"""Small helpers shared inside the package (not public API)."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


@contextlib.contextmanager
def temporary_env(values: dict[str, str | None]) -> Iterator[None]:
    """Set (or, for None, unset) environment variables inside a ``with`` block, then restore.

    Examples:
        >>> with temporary_env({"RDC_DEMO": "1"}):
        ...     os.environ["RDC_DEMO"]
        '1'
        >>> "RDC_DEMO" in os.environ
        False
    """
    saved = {k: os.environ.get(k) for k in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
