"""Reading Ray Data's own stats text: per operator, per blocked stage, and the UDF heap.

Chapter 07 diagnoses a pipeline from what Ray 2.60 prints: ``ds.stats()`` (one block of lines
per operator, written by ``DatasetStatsSummary.to_string`` in ``ray/data/_internal/stats.py``)
and an iterator's ``stats()`` (its blocked-time breakdown, ``IterStatsSummary.to_string``).
These functions turn that text into numbers.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from raydata_course.units import MiB

__all__ = ["operator_table", "blocked_breakdown", "max_uss_bytes"]

_OPERATOR_LINE = r"^(?:Sub)?[Oo]perator \d+ (?P<name>.+?): (?P<tasks>\d+) tasks executed, (?P<blocks>\d+) blocks produced"
_TOTAL = r"(?P<total>[\d.]+)(?P<unit>us|ms|s)? total"
_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0}


def operator_table(stats_text: str) -> list[dict[str, Any]]:
    """The per-operator figures of a ``Dataset.stats()`` text, as rows.

    Reads the lines Ray 2.60 writes for each executed operator, and for each suboperator of
    an all-to-all operator such as ``RandomShuffle`` (its map and reduce stages), in
    ``ray/data/_internal/stats.py`` (``DatasetStatsSummary.to_string``)::

        Operator 3 MapBatches(decode): 1 tasks executed, 2 blocks produced in 0.82s
        * Remote wall time: 101.35ms min, 703.05ms max, 402.2ms mean, 804.39ms total
        * Remote cpu time: 101.94ms min, 703.28ms max, 402.61ms mean, 805.23ms total
        * Output size bytes per block: 19269632 min, ..., 154157056 total

    Args:
        stats_text: what ``ds.stats()`` returned after the dataset executed.

    Returns:
        One dict per executed operator, upstream first: ``operator``, ``tasks``, ``blocks``,
        ``wall_s`` and ``cpu_s`` (summed over its tasks, seconds), ``output_rows``, ``output_MiB``. An operator
        without a figure has None there. Operators that executed no task are left out.

    Examples:
        >>> text = ("Operator 1 ReadX: 2 tasks executed, 4 blocks produced in 1s\\n"
        ...         "* Remote wall time: 1ms min, 2s max, 1s mean, 2.5s total\\n"
        ...         "* Remote cpu time: 1ms min, 20ms max, 10ms mean, 40ms total\\n"
        ...         "* Output num rows per block: 1 min, 9 max, 5 mean, 20 total\\n"
        ...         "* Output size bytes per block: 1 min, 2 max, 1 mean, 2097152 total\\n")
        >>> operator_table(text)  # doctest: +NORMALIZE_WHITESPACE
        [{'operator': 'ReadX', 'tasks': 2, 'blocks': 4, 'wall_s': 2.5, 'cpu_s': 0.04, 'output_rows': 20,
          'output_MiB': 2.0}]
    """
    rows: list[dict[str, Any]] = []
    for line in stats_text.splitlines():
        stripped = line.strip()
        head = re.match(_OPERATOR_LINE, stripped)
        if head:
            rows.append({"operator": head["name"], "tasks": int(head["tasks"]), "blocks": int(head["blocks"]),
                         "wall_s": None, "cpu_s": None, "output_rows": None, "output_MiB": None})
            continue
        if not rows:
            continue
        total = re.search(_TOTAL, stripped)
        if total is None:
            continue
        if stripped.startswith("* Remote wall time:"):
            rows[-1]["wall_s"] = round(float(total["total"]) * _SECONDS[total["unit"]], 3)
        elif stripped.startswith("* Remote cpu time:"):
            rows[-1]["cpu_s"] = round(float(total["total"]) * _SECONDS[total["unit"]], 3)
        elif stripped.startswith("* Output num rows per block:"):
            rows[-1]["output_rows"] = int(float(total["total"]))
        elif stripped.startswith("* Output size bytes per block:"):
            rows[-1]["output_MiB"] = round(float(total["total"]) / MiB, 1)
    return rows


_BLOCKED_HEADER = "Per-stage training-thread blocked time breakdown:"
_BLOCKED_LINE = re.compile(r"^\s*\* (?P<stage>.+?): (?P<value>[\d.]+)(?P<unit>us|ms|s)$")


def blocked_breakdown(stats_text: str) -> dict[str, float]:
    """Where an iterator's training thread was blocked, per stage, from its ``stats()`` text.

    Reads the section Ray 2.60 writes after the iterator's time breakdown
    (``ray/data/_internal/stats.py``, ``IterStatsSummary.to_string``)::

        Per-stage training-thread blocked time breakdown:
            * production wait: 8.46s
            * data transfer (ray.get): 667.16us

    Stages with no blocked time are left out by Ray.

    Args:
        stats_text: what a ``streaming_split`` iterator's (or a Train shard's) ``stats()`` returned.

    Returns:
        ``{stage: seconds}`` in Ray's order; empty when the text has no such section.

    Examples:
        >>> blocked_breakdown(_BLOCKED_HEADER + "\\n    * production wait: 2.5s\\n    * collate: 1.54ms\\n")
        {'production wait': 2.5, 'collate': 0.00154}
    """
    if _BLOCKED_HEADER not in stats_text:
        return {}
    found: dict[str, float] = {}
    for line in stats_text.split(_BLOCKED_HEADER, 1)[1].splitlines()[1:]:
        match = _BLOCKED_LINE.match(line)
        if match is None:
            break
        found[match["stage"]] = round(float(match["value"]) * _SECONDS[match["unit"]], 6)
    return found


_EXTRA_MAX_USS = re.compile(r"'max_uss_bytes': (?P<dist>\{[^{}]*\})")


def max_uss_bytes(stats_text: str) -> int | None:
    """The largest heap (USS) any map task of the dataset reached, in bytes, from ``ds.stats()``.

    Ray Data samples each map task's unique set size every
    ``DataContext.memory_usage_poll_interval_s`` seconds (``map_operator.py``) and keeps the
    distribution in the operator's extra metrics, which ``ds.stats()`` prints only when
    ``DataContext.verbose_stats_logs`` is True (``* Extra metrics: {..., 'max_uss_bytes':
    {'num_samples': 2, 'mean': ..., 'min': ..., 'max': ...}, ...}``).

    Args:
        stats_text: ``ds.stats()`` of an executed dataset, printed with ``verbose_stats_logs`` on.

    Returns:
        The largest ``max`` over the operators, in bytes; None when no operator recorded one
        (verbose stats off, or tasks shorter than one sample).

    Examples:
        >>> max_uss_bytes("* Extra metrics: {'a': 1, 'max_uss_bytes': {'num_samples': 2, 'max': 383098880}}")
        383098880
        >>> max_uss_bytes("Operator 1 Read: 1 tasks executed") is None
        True
    """
    found = [ast.literal_eval(m["dist"]).get("max") for m in _EXTRA_MAX_USS.finditer(stats_text)]
    found = [int(v) for v in found if v is not None]
    return max(found) if found else None
