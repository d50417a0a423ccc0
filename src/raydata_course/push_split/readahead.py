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
input blocks, ``obj_store_mem_pending_task_inputs``). At the cap it takes no new input.
When the downstream has no task running the operator is not capped, so a downstream
that needs several blocks to start a task (a ``map_batches`` whose batch spans blocks) always
gets them. The last eligible operator is not capped either: the split's windows and the
executor's limit bound it. The cap is in blocks, so it is only as fine as the blocks: a read
whose blocks are four batches holds at least two such blocks.

It caps new inputs only, and reads every running task's outputs: holding a running task's
outputs would hold its task slot. Ray Data counts a task as running, and its CPU as used,
until its generator has been read to the end, and starts no task whose CPU does not fit
what is left (``ReservationOpResourceAllocator.can_submit_new_task``: "CPU/GPU/memory limits
are always enforced", ``resource_manager.py:823-862``). When the policy also capped the
outputs it reads (``max_task_output_bytes_to_read``), the capped file listing and the capped
read each held one of the 3 CPUs the lab's fast variant leaves to Ray Data (4 logical CPUs,
the two trainers hold 1) for most of the epoch, so the decode, the operator the consumers
wait for, ran one task at a time and the consumers waited for it; the pull split, without
this policy, lists and reads the files within the epoch's first seconds.
``benchmarks/read_ahead_outputs.py`` measures both ways in one run; with
``PUSH_SPLIT_READ_AHEAD_CAP_OUTPUTS=1`` in the environment of the process that runs the
executor, the policy caps running tasks' outputs too, as it first did. Without that, a read
task that yields several blocks adds all of them past the cap: one more reason the lab's
files hold one batch each.

With task slots free, the decode can run several tasks at once, and Ray Data admits each
against its own per-operator budget, which may be oversubscribed by design. So the policy also
holds the executor to its *share* of the budget, in real bytes
(:class:`~raydata_course.push_split.window.ExecutorShare`, which the coordinator's controller
publishes: the budget less the consumers' reserve, one task output per operator and the lazily
freed bytes): while an operator has a task running, it may start another only if the
executor's blocks (every operator's referenced outputs, Ray Data's ``BlockRefCounter``, plus
one output per running task; the windows' held blocks taken off) and that task's output fit the
share (:meth:`ReadAheadPolicy._task_fits_budget`). An operator with no task running may always
start one (liveness, as Ray Data's own allocator allows, ``resource_manager.py:823-862``), so
the executor passes its share by at most one task output per operator, which the share keeps
aside. Before the controller's first tick, or without a coordinator (the policy installed by
hand), the guard uses Ray Data's believed usage against the budget the user set instead, with
room for ``TRANSIENT_OUTPUTS`` more task outputs: Ray Data counts every running task's whole
pending output (running tasks × the per-task estimate, ``op_runtime_metrics.py:836-858``) until
the task ends, also once its block counts among the operator's outputs.
"""

from __future__ import annotations

import math
import os
from typing import Optional

from raydata_course.push_split.ray_internals import op_task_bytes, published_share, real_usage_bytes
from raydata_course.push_split.window import (AHEAD_BLOCKS, AHEAD_RATIO, TRANSIENT_OUTPUTS, believed_usage_admits,
                                              read_ahead_cap_bytes)

__all__ = ["ReadAheadPolicy", "install_read_ahead_cap", "AHEAD_BLOCKS", "AHEAD_RATIO", "CAP_OUTPUTS_ENV",
           "TRANSIENT_OUTPUTS", "read_ahead_cap_bytes"]

#: set to ``1`` to cap the reading of running tasks' outputs too (it holds their task slots);
#: the push split's own switch, named like Ray Data's ``RAY_DATA_*`` ones
CAP_OUTPUTS_ENV = "PUSH_SPLIT_READ_AHEAD_CAP_OUTPUTS"

try:  # Ray Data's internal interface; without it the cap is not installed
    from ray.data._internal.execution.backpressure_policy import BackpressurePolicy as _Base
except ImportError:  # pragma: no cover - a Ray without backpressure policies
    _Base = object


class ReadAheadPolicy(_Base):
    """Ray Data backpressure policy: an operator whose outputs reach what its busy downstream
    needs (:func:`read_ahead_cap_bytes`), or whose next task would not fit the executor's share
    of the budget while it has one running, takes no new input; its running
    tasks' outputs are read in full unless ``PUSH_SPLIT_READ_AHEAD_CAP_OUTPUTS=1`` (see the
    module docstring; Ray Data's liveness guard may still release an idle pipeline,
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

    def _task_fits_budget(self, op) -> bool:
        """Whether one more task of ``op`` fits: with a published share, the executor's real
        bytes plus the task's output within the share (:meth:`ExecutorShare.admits`);
        without one, Ray Data's believed usage plus the task's pending output
        (``obj_store_mem_max_pending_output_per_task``), plus ``TRANSIENT_OUTPUTS`` more of
        them, within the budget the user set. An operator with no task running may always
        start one (liveness, as Ray Data's own allocator allows, ``resource_manager.py:823-862``);
        no finite budget, no guard."""
        if op.num_active_tasks() == 0:
            return True
        share = published_share(self._resource_manager)
        if share is not None:
            return share.admits(real_usage_bytes(self._resource_manager), op_task_bytes(op))
        ctx = getattr(self, "_data_context", None)
        budget = getattr(getattr(getattr(ctx, "execution_options", None), "resource_limits", None),
                         "object_store_memory", None)
        if budget is None or not math.isfinite(budget) or budget <= 0:
            return True
        per_task = op.metrics.obj_store_mem_max_pending_output_per_task or 0
        return believed_usage_admits(self._resource_manager.get_global_usage().object_store_memory, per_task, budget)

    def can_add_input(self, op) -> bool:
        try:
            if not self._task_fits_budget(op):
                return False
            found = self._cap_and_outputs(op)
        except Exception:  # noqa: BLE001 - an estimate Ray Data lacks: not capped
            return True
        return found is None or found[1] < found[0]

    def max_task_output_bytes_to_read(self, op) -> Optional[int]:
        if os.environ.get(CAP_OUTPUTS_ENV, "0") != "1":
            return None
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
