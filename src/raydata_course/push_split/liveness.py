"""The coordinator's liveness: a consumer that dies fails the epoch for the others instead of
hanging them, and an execution error reaches every split.

The watchdog thread runs for the coordinator's lifetime: every ``liveness_interval_s`` it
collects the outcome of the pushes made so far (a push to a dead actor fails with
``RayActorError``) and pings the actors hosting unfinished splits and those waiting at the
barrier (Ray's generic ``__ray_call__``, ``ray/actor.py:2841``).
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

import ray

from raydata_course.push_split.inbox import deliver
from raydata_course.push_split.messages import Delivery, PushSplitError

__all__ = ["Liveness"]

logger = logging.getLogger(__name__)


def _ping(_host_self) -> bool:
    return True


class Liveness:
    """The coordinator's failure handling (a mixin of
    :class:`~raydata_course.push_split.coordinator.PushSplitCoordinator`; state in
    ``self._state``)."""

    def _fail_epoch(self, epoch: int, error: PushSplitError, dead_split: Optional[int] = None) -> None:
        """Fail ``epoch`` with ``error``: every live consumer gets an ``"error"`` delivery, the
        refs are dropped and the executor is shut down in the background."""
        st = self._state
        with st.cond:
            if not st.healthy(epoch):
                return
            st.error = error
            hosts = []
            for i, flow in st.flows.items():
                flow.inflight.clear()
                if flow.host is not None and i != dead_split and not flow.finished:
                    hosts.append((i, flow.host))
            executor = st.executor
            st.account_locked()
            st.cond.notify_all()
        logger.warning("push split: %s", error)
        for i, host in hosts:
            host.__ray_call__.remote(deliver, self._key, epoch, i, Delivery(-1, "error", error=str(error)), None)
        if executor is not None:
            threading.Thread(target=self._shutdown_quietly, args=(executor,), daemon=True).start()

    def _watch(self) -> None:
        """Liveness: surface failed deliveries and ping the hosts of unfinished splits, so
        a consumer that dies makes the epoch fail (and the others with it) within a few
        intervals. Runs for the coordinator's lifetime."""
        from ray.exceptions import RayActorError

        st = self._state
        while not self._stop.wait(self._liveness_interval_s):
            with st.cond:
                epoch = st.epoch
                calls = dict(st.delivery_calls)
                hosts = {i: f.host for i, f in st.flows.items() if f.host is not None and not f.finished}
                healthy = st.error is None
                barrier_hosts = {i: a.host for i, a in st.arrivals.items() if a.host is not None}
                waiting = set(barrier_hosts)
            if not healthy and not waiting:
                continue
            if calls:
                done, _ = ray.wait(list(calls), num_returns=len(calls), timeout=0)
                with st.cond:
                    for ref in done:
                        st.delivery_calls.pop(ref, None)
                for ref in done:
                    try:
                        ray.get(ref)
                    except RayActorError:
                        self._fail_epoch(epoch, PushSplitError(
                            f"the consumer of split {calls[ref]} died during epoch {epoch}."), dead_split=calls[ref])
                    except Exception as exc:  # noqa: BLE001
                        self._fail_epoch(epoch, PushSplitError(f"delivering to split {calls[ref]} failed: {exc!r}"))
            targets = {**(hosts if healthy else {}), **barrier_hosts}
            if not targets:
                continue
            pings = {i: h.__ray_call__.remote(_ping) for i, h in targets.items()}
            ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=self._liveness_interval_s)
            for i, ref in pings.items():
                if ref not in ready:
                    continue  # busy, not dead
                try:
                    ray.get(ref)
                except RayActorError:
                    if i in waiting:
                        self._fail_barrier(i)
                    else:
                        self._fail_epoch(epoch, PushSplitError(
                            f"the consumer of split {i} died during epoch {epoch}."), dead_split=i)

    def _fail_barrier(self, dead_split: int) -> None:
        """A split that waits at the barrier died: fail the waiters instead of hanging."""
        st = self._state
        with st.cond:
            if dead_split not in st.arrivals:
                return
            starting = st.epoch
            st.arrivals = {}
            for flow in st.flows.values():
                flow.inflight.clear()
            st.epoch = starting + 1
            st.error = PushSplitError(f"the consumer of split {dead_split} died at the barrier of epoch {starting + 1}.")
            st.flows = {}
            st.cond.notify_all()

    def _shutdown_quietly(self, executor) -> None:
        try:
            executor.shutdown(force=True)  # streaming_executor.py:310
        except Exception as exc:  # noqa: BLE001 - surfaced at the next barrier
            self._state.teardown_error = exc
