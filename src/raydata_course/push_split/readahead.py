"""A read-ahead cap for the push split's executor: an operator keeps at most about what its
downstream operator is working on, so the cheap operators at the head of a plan cannot fill
the executor's limit before the expensive one has outputs.

Ray Data's allocator (``ReservationOpResourceAllocator``, ``resource_manager.py:650-1126``)
reserves each eligible operator an equal share of half the limit and splits the rest, the
shared pool, among them; an operator whose usage goes past its reservation draws on the pool
(``update_budgets``, ``:984-1126``). At the start of an epoch the read has outputs before the
decode has any, so the read can take the pool and leave the decode, the operator the
consumers wait for, little room for its tasks (``make lab`` prints Ray Data's believed usage
per operator at its peak). Ray Data's own ``DownstreamCapacityBackpressurePolicy``
(``downstream_capacity_backpressure_policy.py``) bounds an operator's outputs by its
downstream's in-flight inputs only once the operator has used more than half of its budget
(``RAY_DATA_DOWNSTREAM_CAPACITY_OBJECT_STORE_BUDGET_UTIL_THRESHOLD``, 0.5), which a head
operator with the pool to itself need not reach.

:class:`ReadAheadPolicy` is a Ray Data ``BackpressurePolicy`` (``backpressure_policy.py``,
an internal interface; installed with the public ``DataContext.set_config`` under
``"backpressure_policies.enabled"``, ``backpressure_policy/__init__.py:17-34``). While an
operator's downstream operators (the eligible ones, looking through ineligible ones such as a
limit, ``ResourceManager.get_downstream_eligible_ops``, ``resource_manager.py:458-472``) have
tasks running, the operator may hold

    ``cap = max(AHEAD_RATIO × their in-flight inputs, AHEAD_BLOCKS × its average output block)``

bytes of outputs (Ray Data's ``get_mem_op_outputs(op, include_ineligible_downstream=True)``,
which counts every block it produced that is still referenced: queued downstream, and also
held as inputs by the downstream's running tasks; the in-flight inputs are those tasks'
input blocks, ``obj_store_mem_pending_task_inputs``). At the cap it takes no new input, and
its running tasks' outputs are read only up to the cap (``max_task_output_bytes_to_read``: a
read task that yields several blocks then waits in its generator instead of filling the
store). When the downstream has no task running the operator is not capped, so a downstream
that needs several blocks to start a task (a ``map_batches`` whose batch spans blocks) always
gets them. The last eligible operator is not capped either: the split's windows and the
executor's limit bound it. The cap is in blocks, so it is only as fine as the blocks: a read
whose blocks are four batches holds at least two such blocks.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["ReadAheadPolicy", "install_read_ahead_cap", "AHEAD_BLOCKS", "AHEAD_RATIO"]

#: an operator may keep this many of its average output blocks ahead of its downstream ...
AHEAD_BLOCKS = 2
#: ... or this many times its downstream's running tasks' input bytes, when that is more.
AHEAD_RATIO = 2.0

try:  # Ray Data's internal interface; without it the cap is not installed
    from ray.data._internal.execution.backpressure_policy import BackpressurePolicy as _Base
except ImportError:  # pragma: no cover - a Ray without backpressure policies
    _Base = object


def read_ahead_cap_bytes(in_flight_input_bytes: float, average_block_bytes: Optional[float]) -> Optional[float]:
    """The most output bytes an operator may hold: ``max(AHEAD_RATIO × in_flight_input_bytes,
    AHEAD_BLOCKS × average_block_bytes)``; None (no cap) while its downstream has no input in
    flight or before it has an average block.

    Examples:
        >>> read_ahead_cap_bytes(7, 7), read_ahead_cap_bytes(21, 7)
        (14.0, 42.0)
        >>> read_ahead_cap_bytes(0, 7) is None, read_ahead_cap_bytes(5, None) is None
        (True, True)
    """
    if not average_block_bytes or not in_flight_input_bytes:
        return None
    return max(AHEAD_RATIO * in_flight_input_bytes, AHEAD_BLOCKS * average_block_bytes)


class ReadAheadPolicy(_Base):
    """Ray Data backpressure policy: an operator whose outputs reach what its busy downstream
    needs (:func:`read_ahead_cap_bytes`) takes no new input and reads no more task output
    (see the module docstring; Ray Data's liveness guard may still release an idle pipeline,
    ``streaming_executor_state.py:126-238``). A failure to read Ray Data's estimates never stops the
    pipeline: the operator is then not capped."""

    @property
    def name(self) -> str:
        return "ReadAheadCap"

    def _cap_and_outputs(self, op) -> Optional[tuple[float, float]]:
        rm = self._resource_manager
        downstream = list(rm.get_downstream_eligible_ops(op))
        if not downstream:
            return None
        in_flight = sum(d.metrics.obj_store_mem_pending_task_inputs or 0 for d in downstream)
        cap = read_ahead_cap_bytes(in_flight, op.metrics.average_bytes_per_output)
        if cap is None:
            return None
        return cap, rm.get_mem_op_outputs(op, include_ineligible_downstream=True)

    def can_add_input(self, op) -> bool:
        try:
            found = self._cap_and_outputs(op)
        except Exception:  # noqa: BLE001 - an estimate Ray Data lacks: not capped
            return True
        return found is None or found[1] < found[0]

    def max_task_output_bytes_to_read(self, op) -> Optional[int]:
        try:
            found = self._cap_and_outputs(op)
        except Exception:  # noqa: BLE001
            return None
        return None if found is None else int(max(found[0] - found[1], 0))


def install_read_ahead_cap(ctx) -> bool:
    """Add :class:`ReadAheadPolicy` to the backpressure policies of ``ctx`` (a ``DataContext``
    the caller owns; executors built from it use the policy). Returns False, changing nothing,
    when this Ray has no backpressure-policy interface."""
    if _Base is object:
        return False
    from ray.data._internal.execution.backpressure_policy import (
        ENABLED_BACKPRESSURE_POLICIES,
        ENABLED_BACKPRESSURE_POLICIES_CONFIG_KEY,
    )

    policies = list(ctx.get_config(ENABLED_BACKPRESSURE_POLICIES_CONFIG_KEY, ENABLED_BACKPRESSURE_POLICIES))
    if ReadAheadPolicy not in policies:
        ctx.set_config(ENABLED_BACKPRESSURE_POLICIES_CONFIG_KEY, [*policies, ReadAheadPolicy])
    return True
