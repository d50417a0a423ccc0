"""How many batches the consumer side of ``iter_batches`` holds without Ray Data counting them.

The model is derived from the installed Ray's code, not quoted. :func:`inspect_consumer_pipeline`
reads ``ray/data/_internal/block_batching/iter_batches.py`` and ``.../util.py`` and reports the
design it finds; :func:`hidden_batches` turns that into counts per consumer.

**Ray 2.60.0 (``iter_threaded`` design).** ``BatchIterator._iter_batches`` runs its whole
pipeline in one outer ``iter_threaded`` worker whose output buffer holds 1 item
(``util.py``: a semaphore bounds "queued + in flight" together; there is no input queue).
Formatting and collation run in an inner ``iter_threaded`` with ``N = min(cap, pf)`` workers
and an output buffer of ``N`` (``cap`` = ``DEFAULT_FORMAT_THREADPOOL_NUM_WORKERS``, env
``RAY_DATA_MAX_FORMAT_THREADPOOL_NUM_WORKERS``, default 4). The sliding prefetch window holds
``ObjectRef``\\s, which Ray Data's ``BlockRefCounter`` counts. Batches downstream of
``ray.get`` have dropped their refs but, being zero-copy, still pin their blocks:

==============================  =====================
where a hidden batch waits      batches
==============================  =====================
format/collate pool             N (queued + in flight)
outer output slot               1
the batch the training loop holds 1
**nominal total**               **N + 2**
==============================  =====================

Measured values fall in ``[N + 1, max(N + 2, 2N)]``: the newest block entering the format
stage may still hold its ref (−1), and worker threads or suspended generators may keep their
last item alive until they resume (up to N − 1 more).

**Ray ≤ 2.55 (``make_async_gen`` design), upstream's count.** An outer input queue of
``pf + 1``, 1 in flight, a format input queue of ``2N``, ``N`` in flight and ``N`` in the
output queue: ``pf + 4N + 2`` (release-test PR for the training-ingest regression test).
Upstream leaves out the outer output queue (``buffer_size = max(pf, 1)``) because on a GPU it
holds device tensors; on a CPU consumer it, and the loop's own batch, stay in plasma, so the
model's upper bound adds ``max(pf, 1) + 1``.

**A local shuffle buffer** (``local_shuffle_buffer_size=S`` rows, ``ShufflingBatcher`` in
``ray/data/_internal/batcher.py``) changes where the hidden bytes are. Its blocks arrive by
``ray.get`` and lose their refs, but stay mapped: the buffer keeps the Arrow blocks as they are
(Ray's own comment: "blocks in the builder reside in object store memory"), and a compaction
keeps a tensor column's chunks rather than copying them. The first batch waits for
``1.5 S + B`` rows (``SHUFFLE_BUFFER_COMPACTION_RATIO``); those blocks then make the first
generation, and the builder refills with about ``S + B`` more rows (until the generation is
down to ``0.5 S``, ``SHUFFLE_BUFFER_COMPACTION_THRESHOLD``) before the next compaction
replaces it. The batches it hands on are copies (``take``), so the N + 2 batches downstream
pin nothing. :func:`shuffle_buffer_blocks` counts the most blocks the buffer pins.

Examples:
    >>> m = hidden_batches(4, format_cap=4, design="iter_threaded")
    >>> (m.nominal, m.low, m.high, m.upstream)
    (6, 5, 8, 22)
    >>> hidden_batches(1, format_cap=4, design="iter_threaded").nominal
    3
    >>> shuffle_buffer_blocks(buffer_rows=4 * 222, batch_rows=222)  # 7 in the first generation + 5 refilled
    12
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from dataclasses import dataclass

__all__ = ["PipelineFacts", "BufferModel", "inspect_consumer_pipeline", "hidden_batches", "upstream_hidden_batches",
           "shuffle_buffer_blocks"]


@dataclass(frozen=True)
class PipelineFacts:
    """What the installed Ray's consumer pipeline looks like.

    Attributes:
        ray_version: ``ray.__version__``.
        design: ``"iter_threaded"`` (bounded semaphores, no input queues) or
            ``"make_async_gen"`` (input and output queues per stage).
        format_cap: ``DEFAULT_FORMAT_THREADPOOL_NUM_WORKERS`` as imported (reads the env var).
        outer_output_buffer: items the outer stage may queue or have in flight.
        format_buffer_is_num_workers: True when the format stage's buffer equals its worker count.
    """

    ray_version: str
    design: str
    format_cap: int
    outer_output_buffer: int
    format_buffer_is_num_workers: bool


@dataclass(frozen=True)
class BufferModel:
    """Hidden batches per consumer for one ``prefetch_batches`` setting.

    Attributes:
        prefetch_batches: ``pf``.
        format_workers: ``N = min(format_cap, pf)``.
        design: the pipeline design the counts apply to.
        nominal: the model's count (2.60: ``N + 2``; old design: ``pf + 4N + 2``).
        low: fewest hidden batches the design allows in steady state.
        high: most hidden batches the design allows in steady state.
        upstream: upstream's ``pf + 4N + 2``, for comparison.
    """

    prefetch_batches: int
    format_workers: int
    design: str
    nominal: int
    low: int
    high: int
    upstream: int

    def hidden_bytes(self, batch_bytes: int, consumers: int = 1) -> int:
        """Predicted hidden bytes: ``consumers * nominal * batch_bytes``."""
        return consumers * self.nominal * batch_bytes


def upstream_hidden_batches(prefetch_batches: int, format_cap: int = 4) -> int:
    """Upstream's count for the queue design: ``pf + 4N + 2`` with ``N = min(cap, pf)``."""
    n = min(format_cap, prefetch_batches)
    return prefetch_batches + 4 * n + 2


def inspect_consumer_pipeline() -> PipelineFacts:
    """Read the installed Ray's consumer pipeline and report its structure.

    Raises:
        RuntimeError: if the code matches neither known design (a newer Ray: re-derive the model).
    """
    import ray

    iter_batches = importlib.import_module("ray.data._internal.block_batching.iter_batches")
    util = importlib.import_module("ray.data._internal.block_batching.util")
    source = inspect.getsource(iter_batches)
    cap = int(getattr(iter_batches, "DEFAULT_FORMAT_THREADPOOL_NUM_WORKERS", 4))
    batch_iterator = inspect.getsource(iter_batches.BatchIterator)

    if hasattr(util, "iter_threaded") and "iter_threaded(" in batch_iterator:
        params = inspect.signature(util.iter_threaded).parameters
        outer_call = re.search(r"iter_threaded\(\s*self\._ref_bundles\s*,\s*fn=self\._pipeline\s*\)", batch_iterator)
        if outer_call is None:
            raise RuntimeError("BatchIterator calls iter_threaded with explicit sizes; re-derive the buffer model.")
        outer_buffer = int(params["output_buffer_size"].default)
        format_is_n = bool(re.search(r"num_workers=num_threadpool_workers,\s*output_buffer_size=num_threadpool_workers", source))
        return PipelineFacts(ray.__version__, "iter_threaded", cap, outer_buffer, format_is_n)
    if "make_async_gen(" in source:
        return PipelineFacts(ray.__version__, "make_async_gen", cap, 1, False)
    raise RuntimeError(f"Unknown consumer pipeline in Ray {ray.__version__}: neither iter_threaded nor make_async_gen.")


def hidden_batches(prefetch_batches: int, format_cap: int | None = None, design: str | None = None) -> BufferModel:
    """Hidden batches per consumer for the installed (or given) pipeline design.

    Args:
        prefetch_batches: ``prefetch_batches`` passed to ``iter_batches``/``iter_torch_batches``.
        format_cap: the format-thread cap; default: read from the installed Ray.
        design: ``"iter_threaded"`` or ``"make_async_gen"``; default: the installed Ray's.

    Returns:
        A :class:`BufferModel`.

    Raises:
        ValueError: if ``prefetch_batches`` is negative or ``design`` is unknown.
    """
    if prefetch_batches < 0:
        raise ValueError(f"prefetch_batches must be >= 0, got {prefetch_batches}.")
    if format_cap is None or design is None:
        facts = inspect_consumer_pipeline()
        format_cap = facts.format_cap if format_cap is None else format_cap
        design = facts.design if design is None else design
    n = min(format_cap, prefetch_batches)
    upstream = upstream_hidden_batches(prefetch_batches, format_cap)
    if design == "iter_threaded":
        return BufferModel(prefetch_batches, n, design, n + 2, n + 1, max(n + 2, 2 * n), upstream)
    if design == "make_async_gen":
        # Upstream's count; on a CPU consumer the outer output queue (max(pf, 1) batches,
        # excluded upstream because it holds GPU tensors) and the loop's batch stay in plasma.
        return BufferModel(prefetch_batches, n, design, upstream, upstream,
                           upstream + max(prefetch_batches, 1) + 1, upstream)
    raise ValueError(f"design must be 'iter_threaded' or 'make_async_gen', got {design!r}.")


def shuffle_buffer_blocks(buffer_rows: int, batch_rows: int, block_rows: int | None = None) -> int:
    """Most object-store blocks a consumer's local shuffle buffer pins at once, by the installed code.

    Just before a compaction the buffer holds the previous generation's blocks (the first
    generation is the largest: ``1.5 S + B`` rows) and the builder's refill (about ``S + B``
    rows, added while the generation drains to ``0.5 S``), each rounded up to whole blocks.
    The ratios are read from the installed ``ray/data/_internal/batcher.py``. With a buffer,
    these blocks take the place of :func:`hidden_batches`' N + 2 (the buffer's batches are
    copies); without one (``buffer_rows=0``) the buffer pins nothing.

    Args:
        buffer_rows: ``local_shuffle_buffer_size``, in rows (0 or None: no buffer).
        batch_rows: ``batch_size``, in rows.
        block_rows: rows per block; default ``batch_rows`` (the lab's one batch per block).

    Returns:
        Blocks pinned at the peak (multiply by the block's bytes for bytes).

    Raises:
        ValueError: if ``batch_rows`` or ``block_rows`` is not positive, or ``buffer_rows`` is negative.
    """
    batcher = importlib.import_module("ray.data._internal.batcher")
    ratio = float(batcher.SHUFFLE_BUFFER_COMPACTION_RATIO)
    threshold = float(batcher.SHUFFLE_BUFFER_COMPACTION_THRESHOLD)
    block_rows = batch_rows if block_rows is None else block_rows
    if batch_rows < 1 or block_rows < 1:
        raise ValueError(f"batch_rows and block_rows must be positive, got {batch_rows} and {block_rows}.")
    if not buffer_rows:
        return 0
    if buffer_rows < 0:
        raise ValueError(f"buffer_rows must be >= 0, got {buffer_rows}.")
    buffer_rows = max(buffer_rows, batch_rows)  # ShufflingBatcher rounds a smaller buffer up to a batch
    first_generation = math.ceil((ratio * buffer_rows + batch_rows) / block_rows)
    refill = math.ceil(((ratio - threshold) * buffer_rows + batch_rows) / block_rows)
    return first_generation + refill
