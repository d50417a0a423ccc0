"""Byte units, defined once for the whole course (binary: 1 MiB = 1024**2 bytes).

Examples:
    >>> MiB, GiB // MiB
    (1048576, 1024)
    >>> mib(96 * MiB)
    '96 MiB'
"""

__all__ = ["KiB", "MiB", "GiB", "mib"]

KiB = 1024
MiB = 1024**2
GiB = 1024**3


def mib(num_bytes: float, digits: int = 0) -> str:
    """``num_bytes`` written in MiB, e.g. ``'96 MiB'`` (``digits`` decimals)."""
    return f"{num_bytes / MiB:,.{digits}f} MiB"
