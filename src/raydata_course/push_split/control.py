"""The coordinator's control thread: observe, tick the window controller, apply.

Under ``window="adaptive"`` (the default), one thread per epoch calls
:meth:`~raydata_course.push_split.window.WindowController.tick` about every
``control_interval_s`` seconds with what the coordinator sees: the budget the user set and
Ray Data's believed usage (:func:`~raydata_course.push_split.ray_internals.budget_and_usage`),
one task output per operator
(:func:`~raydata_course.push_split.ray_internals.task_output_bytes`), each split's held bytes,
ready rows, steps and stall fraction, and, with ``steer_on_store``, the object store's measured
usage. It applies the windows and publishes the executor's share in real bytes
(:class:`~raydata_course.push_split.window.ExecutorShare`) to the executor's backpressure policy.
Ray Data's own limit is never changed.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

import ray

from raydata_course.push_split.idle import wake
from raydata_course.push_split.ray_internals import budget_and_usage, publish_share, task_output_bytes
from raydata_course.push_split.state import HISTORY_LIMIT
from raydata_course.push_split.window import ExecutorShare, Observation, SplitRequest, SplitState, WindowController

__all__ = ["Control", "STORE_SAMPLE_INTERVAL_S", "ship_windows"]

#: seconds between the controller's readings of the object store (``steer_on_store``). A
#: reading is a raylet ``GetNodeStats`` call, and the raylet answers it only after asking
#: every worker on its node for its core-worker stats (``NodeManager::HandleGetNodeStats``
#: in ``node_manager.cc``): at every 0.1 s tick that fan-out took CPU from the trainers. The
#: signal it is for, bytes freed but not yet deleted, changes once per raylet free batch
#: (``free_objects_period_milliseconds``, 1000 ms by default), so two readings a second
#: resolve it. Ticks in between see no store reading (``Observation.store_bytes`` is None).
STORE_SAMPLE_INTERVAL_S = 0.5


def ship_windows(records: list[dict]) -> None:
    """Send window samples to the recorder actor (``raydata_course.measure.raydata``) if
    one runs; nothing otherwise."""
    if not records:
        return
    from raydata_course.measure.raydata import RECORDER_NAME, RECORDER_NAMESPACE

    try:
        ray.get_actor(RECORDER_NAME, namespace=RECORDER_NAMESPACE).add_windows.remote(records)
    except ValueError:  # no recorder: nobody outside this process listens
        pass


class Control:
    """The coordinator's control side (a mixin of
    :class:`~raydata_course.push_split.coordinator.PushSplitCoordinator`; state in
    ``self._state``)."""

    def _start_controller_locked(self) -> None:
        """Adaptive windows: every split starts at one batch ahead (a double buffer), and a
        control thread adjusts the windows for this epoch (call under the lock)."""
        st = self._state
        flows = [st.flows[i] for i in range(st.n)]
        if self._window != "adaptive":
            return
        st.controller = WindowController(
            [SplitRequest(batch_rows=f.batch_rows, requested_rows=max(f.window_rows, f.batch_rows)) for f in flows],
            steer_on_store=self._steer_on_store, warned=self._warned)
        for flow, rows in zip(flows, st.controller.windows_rows):
            flow.set_window_rows(rows)
        threading.Thread(target=self._control_loop, args=(st.epoch, st.controller), daemon=True,
                         name=f"push-split-control-{st.epoch}").start()

    def _control_loop(self, epoch: int, controller: WindowController) -> None:
        """One epoch's control thread: observe, tick, apply, until the epoch ends; then the
        epoch's window samples go to the course's recorder actor, when one runs (the lab)."""
        start = len(self._state.window_history)
        try:
            self._control(epoch, controller)
        finally:
            ship_windows(self._window_records(start))

    def _control(self, epoch: int, controller: WindowController) -> None:
        st = self._state
        next_store_s = 0.0  # the store is read at the first tick, then every STORE_SAMPLE_INTERVAL_S
        while not self._stop.wait(self._control_interval_s):
            with st.cond:
                if not st.healthy(epoch) or all(f.finished for f in st.flows.values()):
                    return
                executor = st.executor
                flows = [st.flows[i] for i in range(st.n)]
                states = [SplitState(bytes_per_row=f.bytes_per_row(), held_bytes=f.held_bytes(),
                                     ready_rows=f.ready_rows(), steps=f.steps, stall_fraction=f.stall_fraction())
                          for f in flows]
            limit_bytes, usage_bytes = budget_and_usage(executor)
            if self._budget_bytes is None:  # the budget the user set: Ray Data's limit, never lowered
                self._budget_bytes = limit_bytes
            store_bytes = None
            if self._steer_on_store and time.monotonic() >= next_store_s:
                store_bytes = self._store_used_bytes()
                next_store_s = time.monotonic() + STORE_SAMPLE_INTERVAL_S  # from the reading's end
            windows = controller.tick(Observation(self._budget_bytes, states, task_output_bytes(executor),
                                                  store_bytes))
            with st.cond:
                if st.epoch != epoch:
                    return
                for flow, rows in zip(flows, windows):
                    flow.set_window_rows(rows)
                if self._budget_bytes is not None:
                    if st.share is None:
                        st.share = ExecutorShare(self._budget_bytes)
                        publish_share(executor, st.share)
                    st.share.reserve_bytes = controller.reserve_bytes
                    st.share.task_bytes = controller.task_bytes
                    st.share.lazy_bytes = controller.lazy_charged_bytes
                    st.share.held_bytes = st.held_bytes()
                    wake()  # the share moved: an idle executor looks again now
                if len(st.window_history) < HISTORY_LIMIT:
                    st.window_history.append({
                        "t": time.time(), "epoch": epoch, "windows_rows": windows, "budget_bytes": self._budget_bytes,
                        "usage_bytes": usage_bytes, "held_bytes": sum(s.held_bytes for s in states),
                        "store_bytes": store_bytes, "limit_bytes": limit_bytes,
                        "reserve_bytes": int(controller.reserve_bytes), "task_bytes": int(controller.task_bytes),
                        "lazy_bytes": int(controller.lazy_bytes),
                        "lazy_charged_bytes": int(controller.lazy_charged_bytes),
                        "share_bytes": None if controller.executor_share_bytes is None
                        else int(controller.executor_share_bytes),
                        "stall_fractions": [s.stall_fraction for s in states], "key": self._key})
                st.cond.notify_all()

    def _store_used_bytes(self) -> Optional[int]:
        """The object store's measured usage, summed over nodes (None if a reading fails)."""
        from raydata_course.measure.store import PlasmaSampler

        try:
            if self._store_sampler is None:
                self._store_sampler = PlasmaSampler(classify_every=0)
            return self._store_sampler.sample(False).used_bytes
        except Exception:  # noqa: BLE001 - a busy raylet: no reading this tick
            return None

    def _window_records(self, start: int) -> list[dict]:
        """The window samples from index ``start`` on, as dicts: ``t`` (``time.time()``),
        ``epoch``, ``windows_rows`` (rows ahead of the batch in use), ``budget_bytes``,
        ``usage_bytes`` (Ray Data's belief), ``held_bytes`` (the windows' held refs),
        ``store_bytes`` (measured, or None on a tick that did not read the store, see
        :data:`STORE_SAMPLE_INTERVAL_S`), ``limit_bytes`` (Ray Data's limit, as read),
        ``reserve_bytes`` (``W``), ``task_bytes`` (``R``), ``lazy_bytes`` (``L``),
        ``lazy_charged_bytes`` (the part of ``L`` charged), ``share_bytes`` (``E`` at the tick),
        ``stall_fractions`` (per split) and ``key``."""
        with self._state.cond:
            return self._state.window_history[start:]
