"""A simulator of streaming ingest: a model of what Ray Data does, not Ray.

Pure Python on ``simpy`` (no Ray, numpy or matplotlib), so it runs in the browser
playground (JupyterLite, Pyodide) as well as here. Give it an
:class:`~raydata_course.sim.config.IngestConfig` (operators with task durations and output
block sizes, the object-store budget, pull or push consumers with ``prefetch_batches``, a
step time and delay, the raylet's lazy-free period) and :func:`simulate` returns a
:class:`~raydata_course.sim.timeline.Timeline`: the object store's counted,
pinned-without-ref and freed-not-deleted bytes, Ray Data's believed usage, the budget and the
batches delivered over time. :mod:`raydata_course.sim.svg` draws it without matplotlib.

Examples:
    >>> from raydata_course.sim import IngestConfig, Operator, simulate
    >>> MiB = 1 << 20
    >>> cfg = IngestConfig([Operator("read", 0.05, 4 * MiB), Operator("decode", 0.5, 32 * MiB)],
    ...                    budget_bytes=256 * MiB, prefetch_batches=4, step_s=0.1, delay_s=0.25)
    >>> t = simulate(cfg)
    >>> t.peak_bytes > cfg.budget_bytes, t.batches
    (True, 20)
"""

from raydata_course.sim.config import SPLITS, IngestConfig, Operator
from raydata_course.sim.engine import simulate
from raydata_course.sim.timeline import Timeline

__all__ = ["IngestConfig", "Operator", "SPLITS", "Timeline", "simulate"]
