"""A push-based ``streaming_split`` built on released Ray 2.60.0.

The package, one concept per module: :mod:`.coordinator` (the actor: the epoch barrier and
the consumers' reports), :mod:`.sender` (its senders, which push blocks), :mod:`.control` (its
control thread), :mod:`.liveness` (failures reach every split), :mod:`.state` (what their
threads share, under one lock), :mod:`.ray_internals` (every read of Ray Data's internals),
:mod:`.window` (the control rule: double buffers, the budget in real bytes), :mod:`.flow` (a
split's window and accounting), :mod:`.readahead` and :mod:`.idle` (the executor's
backpressure policy and idle wait), :mod:`.iterator` (the consumer's ``iter_batches``),
:mod:`.inbox` (where deliveries land and how consumption is reported), :mod:`.messages` (the
typed messages between them), :mod:`.errors` and :mod:`.train` (the Ray Train hook,
``PushDataConfig``).

``ds.streaming_split(n, equal=True)`` in Ray 2.60 is *pull*-based: each consumer asks a
``SplitCoordinator`` actor for the next block and receives an ``ObjectRef``
(``ray/data/_internal/iterator/stream_split_iterator.py:351-454``). The consumer's own
pipeline then keeps zero-copy batches in thread-pool queues after it dropped their refs,
so the object store holds blocks that Ray Data's budget cannot see.

:func:`push_split` turns the flow around:

* a :class:`~.coordinator.PushSplitCoordinator` actor runs **one streaming execution per epoch** behind
  a barrier that every split must reach (waiters sleep on a ``threading.Condition``);
* each consumer has a **window**: rows that may wait *ready* beyond the batch its loop works
  on, at least one batch (a double buffer: the next batch is decoded and pushed while the
  loop trains on this one), at most ``prefetch_batches * batch_size``; by default the
  coordinator starts it at one batch and grows it only while the consumer stalls
  (:mod:`.window`). Per split the coordinator keeps ``rows_pushed``, ``rows_consumed`` (rows
  of batches the training loop is done with: it asked for the next one), ``bytes_pushed`` and
  ``bytes_consumed``, and sends one more block while ``window_rows + batch_rows -
  (rows_pushed - rows_consumed) > 0``. A block is never cut, so the rows in flight exceed the
  window by less than one block;
* the budget is kept **in real bytes**: the consumers' windows (and their batches in use) are
  reserved, one task output per operator is kept aside, and the executor's operators get the
  rest, enforced by a backpressure policy on what their blocks really hold (:mod:`.window`,
  :mod:`.readahead`); Ray Data's own limit stays the budget the user set;
* blocks are **pushed by value**: the coordinator calls the actor that hosts the split
  (Ray's generic ``__ray_call__``, ``ray/actor.py:2841``) with the block's ``ObjectRef`` as
  a top-level argument, so Ray resolves it and the host receives the block, local to its
  node, before the training loop touches it;
* the coordinator **keeps each pushed block's ref until the consumer reports it
  released**, so Ray Data's ``BlockRefCounter`` keeps charging it to the budget; the
  consumer releases rows only once every batch that views them has been garbage-collected
  (a zero-copy batch pins its whole block). Rows leave the window when the loop is done
  with their batch, but their block stays charged until it is released;
* pushed-but-unconsumed bytes go to the executor's external-consumer hook
  ``StreamingExecutor.set_external_consumer_bytes``
  (``ray/data/_internal/execution/streaming_executor.py:480-483``);
* deliveries carry per-split sequence numbers and are **reordered on arrival**; duplicates
  and reports that arrive after a split finished (or for an old epoch) are ignored.

Blocks come from the same ``StreamingSplit`` logical operator that
``Dataset.streaming_split`` builds (``ray/data/dataset.py:2761-2771``), so ``equal=True``
gets Ray's own ``OutputSplitter`` equalisation, including the cut of the final blocks
(``ray/data/_internal/execution/operators/output_splitter.py:177-220``): every split
receives the same number of rows.

Where the split is consumed decides how blocks arrive:

* inside a Ray actor (a Ray Train worker, or any actor that accepts concurrent calls),
  blocks are **pushed** into the actor's process;
* in a process that is not an actor (the driver, a task), nothing can call into it, so a
  background thread fetches each delivery from the coordinator. The window, the refs
  held until consumed, the sequencing and the accounting are the same; only the
  transport differs.

.. warning::
    All ``n`` splits must be iterated at the same time: an epoch starts only when every
    split has reached the barrier. An actor that hosts a split must accept concurrent
    calls while its training loop runs (a Ray Train V2 worker does: it runs the loop in a
    thread, ``ray/train/v2/_internal/execution/worker_group/worker.py:139-175``; a plain
    actor needs ``max_concurrency >= 2``).

Examples:
    >>> import raydata_course as rc, ray                                # doctest: +SKIP
    >>> splits = push_split(ray.data.range(1000), 2)                    # doctest: +SKIP
    >>> [sum(len(b["id"]) for b in s.iter_batches(batch_size=100))      # doctest: +SKIP
    ...  for s in splits]  # iterate concurrently in real use
"""

from __future__ import annotations

import uuid
from typing import Optional

from raydata_course.push_split.coordinator import WINDOW_POLICIES, PushSplitCoordinator
from raydata_course.push_split.flow import SplitFlow
from raydata_course.push_split.iterator import CONSUMER_DEATH_TIMEOUT_S, PushSplitIterator
from raydata_course.push_split.messages import PushSplitError

__all__ = [
    "push_split",
    "PushSplitIterator",
    "PushSplitCoordinator",
    "PushSplitError",
    "SplitFlow",
    "DEFAULT_LIVENESS_INTERVAL_S",
    "DEFAULT_CONTROL_INTERVAL_S",
    "CONSUMER_DEATH_TIMEOUT_S",
    "WINDOW_POLICIES",
]

#: seconds between the coordinator's liveness checks of the actors hosting splits.
DEFAULT_LIVENESS_INTERVAL_S = 1.0
#: seconds between the adaptive window controller's ticks.
DEFAULT_CONTROL_INTERVAL_S = 0.1


def push_split(ds, n: int, *, equal: bool = True, locality_hints: Optional[list] = None,
               liveness_interval_s: float = DEFAULT_LIVENESS_INTERVAL_S, window: str = "adaptive",
               steer_on_store: bool = False, read_ahead_cap: bool = True,
               idle_wait: bool = True, control_interval_s: float = DEFAULT_CONTROL_INTERVAL_S) -> list[PushSplitIterator]:
    """Split ``ds`` into ``n`` push-fed iterators, a drop-in for ``ds.streaming_split(n, equal=...)``.

    Args:
        ds: a ``ray.data.Dataset``.
        n: number of splits, at least 1.
        equal: every split gets the same number of rows (the remainder is dropped), as in
            ``streaming_split``.
        locality_hints: node ids, one per split, passed to Ray's ``OutputSplitter``.
        liveness_interval_s: seconds between the coordinator's liveness checks; a consumer
            that dies makes the others fail within a few intervals (well under
            ``CONSUMER_DEATH_TIMEOUT_S``).
        window: ``"adaptive"`` (default): each window starts at one batch ahead (a double
            buffer), grows while its consumer stalls and the budget has room, and the executor
            gets the budget's rest in real bytes
            (:class:`~raydata_course.push_split.window.WindowController`), never above
            ``prefetch_batches * batch_size`` rows ahead; ``"fixed"``: every window is
            ``prefetch_batches * batch_size`` rows ahead, and the executor runs under Ray
            Data's own budgeting.
        steer_on_store: (adaptive) charge how far the object store's measured usage went over
            the budget to the executor's share: it sees the bytes the raylet freed but has not
            deleted yet, which Ray Data's accounting never does.
        read_ahead_cap: (adaptive) add :class:`~raydata_course.push_split.readahead.ReadAheadPolicy`
            to the executor's backpressure policies: while an operator's downstream has tasks
            running, the operator holds at most about twice their inputs, or two of its blocks,
            and the executor's operators keep to their share of the budget in real bytes.
        idle_wait: add :class:`~raydata_course.push_split.idle.IdleWait` to the executor's
            execution callbacks: a scheduling loop that can do nothing until a consumer frees
            bytes waits for the coordinator's news instead of spinning (off: Ray Data's own
            loop, with a :class:`~raydata_course.push_split.idle.LoopMeter` that measures what
            the spin costs; both report in ``debug_state()["idle"]``).
        control_interval_s: (adaptive) seconds between the window controller's ticks.

    Returns:
        ``n`` :class:`PushSplitIterator`; split ``i`` is ``result[i]``.

    Raises:
        ValueError: ``n < 1``, ``locality_hints`` of the wrong length, an unknown
            ``window``, or an interval not above 0.
    """
    import ray.data
    from ray.data._internal.logical.interfaces import LogicalPlan
    from ray.data._internal.logical.operators import StreamingSplit
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}.")
    if locality_hints is not None and len(locality_hints) != n:
        raise ValueError(f"locality_hints must name one node per split ({n}), got {len(locality_hints)}.")
    if window not in WINDOW_POLICIES:
        raise ValueError(f"window must be one of {WINDOW_POLICIES}, got {window!r}.")
    if not control_interval_s > 0:
        raise ValueError(f"control_interval_s must be above 0 seconds, got {control_interval_s!r}.")
    if liveness_interval_s <= 0 or liveness_interval_s * 4 > CONSUMER_DEATH_TIMEOUT_S:
        raise ValueError(f"liveness_interval_s must be in (0, {CONSUMER_DEATH_TIMEOUT_S / 4}], "
                         f"got {liveness_interval_s}.")
    # The same split plan as Dataset.streaming_split (ray/data/dataset.py:2761-2771).
    op = StreamingSplit(num_splits=n, equal=equal, input_dependencies=[ds._logical_plan.dag],
                        locality_hints=locality_hints)
    split_ds = ray.data.Dataset._from_parent(ds, LogicalPlan(op, ds.context))
    split_ds._set_uuid(ds._uuid)
    key = uuid.uuid4().hex
    # Like SplitCoordinator (stream_split_iterator.py:44-49): no CPU, on this node, and
    # enough threads for n barrier waiters, n fetches, the reports and the snapshots.
    actor_cls = ray.remote(num_cpus=0)(PushSplitCoordinator)
    coord = actor_cls.options(
        max_concurrency=2 * n + 8,
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False),
    ).remote(split_ds, n, key, liveness_interval_s, window, steer_on_store, control_interval_s=control_interval_s,
             read_ahead_cap=read_ahead_cap, idle_wait=idle_wait)
    return [PushSplitIterator(coord, i, n, key) for i in range(n)]
