"""The coordinator's senders: one thread per split and epoch takes the split's next block from
the executor and pushes it into the consumer's process while the window has credit.

A sender waits for a block *as a consumer*, inside Ray Data's blocking output call, only when
its consumer has no whole batch ready beyond the one in use
(:meth:`~raydata_course.push_split.flow.SplitFlow.short`): that is when the next batch must be
decoded now to be ready as the current step ends. Ray Data relaxes the terminal operator's
output backpressure while a consumer is blocked in ``get_output_blocking``
(``streaming_executor_state.py:196-211``: with an external consumer it unblocks when
``num_waiting_consumers > 0``, counted at ``:562-566``), so a sender that sat in that call
whenever its window had credit would keep that rule on for a consumer with a batch ready.
Otherwise it polls the split's output queue and takes a block as soon as one is there.
"""

from __future__ import annotations

import collections

from raydata_course.push_split.errors import error_summary
from raydata_course.push_split.idle import wake
from raydata_course.push_split.inbox import deliver
from raydata_course.push_split.messages import Delivery, Parcel, PushSplitError
from raydata_course.push_split.ray_internals import output_ready

__all__ = ["Sender", "OUTPUT_POLL_S"]

#: seconds between a sender's looks at its split's output queue while its consumer has a
#: batch ready (see :meth:`Sender._await_output`).
OUTPUT_POLL_S = 0.01


class Sender:
    """The coordinator's sending side (a mixin of
    :class:`~raydata_course.push_split.coordinator.PushSplitCoordinator`; its state is the
    coordinator's :class:`~raydata_course.push_split.state.EpochState`, ``self._state``)."""

    def _send_loop(self, epoch: int, split_idx: int) -> None:
        """One thread per split and epoch: wait for credit, take the split's next block
        from the executor (``OutputIterator.get_next(split_idx)``,
        ``streaming_executor.py:785-807``) and push it."""
        st = self._state
        pending: collections.deque = collections.deque()
        while True:
            with st.cond:
                flow = st.flows.get(split_idx)
                st.cond.wait_for(lambda: not st.healthy(epoch) or flow.finished or flow.rows_to_send() > 0)
                if not st.healthy(epoch):
                    return
                draining = flow.finished
                output_iterator = st.output_iterator
                executor = st.executor
            if not pending:
                if not draining and not self._await_output(epoch, split_idx, executor):
                    return
                try:
                    bundle = output_iterator.get_next(split_idx)
                except StopIteration:
                    self._end_split(epoch, split_idx)
                    return
                except Exception as exc:  # noqa: BLE001 - the executor failed
                    if draining:  # every consumer may be gone and the executor shut down
                        return
                    self._fail_epoch(epoch, PushSplitError(f"execution of epoch {epoch} failed: {error_summary(exc)}"))
                    return
                pending.extend(zip(bundle.blocks, bundle.slices))
                del bundle
                wake()  # the output queue shrank: the executor may have room again
            if draining:  # the consumer stopped early: keep the splitter flowing, drop blocks
                pending.clear()
                continue
            entry, block_slice = pending.popleft()
            self._push_block(epoch, split_idx, entry, block_slice)
            del entry

    def _await_output(self, epoch: int, split_idx: int, executor) -> bool:
        """Wait until the split's output queue has a block (or the execution ended), or until
        its consumer runs short (see the module docstring); False when the epoch ended or
        failed meanwhile. Without the executor's internals (another Ray release) it returns at
        once and the sender blocks in Ray Data's call."""
        st = self._state
        while True:
            ready = output_ready(executor, split_idx)
            if ready is None or ready:
                return True
            with st.cond:
                if not st.healthy(epoch):
                    return False
                flow = st.flows[split_idx]
                if flow.finished or flow.short():
                    return True
                st.cond.wait(OUTPUT_POLL_S)

    def _push_block(self, epoch: int, split_idx: int, entry, block_slice) -> None:
        meta = entry.metadata
        rows = int(meta.num_rows or 0)
        size = int(meta.size_bytes or 0)
        bounds = None
        if block_slice is not None:
            bounds = (int(block_slice.start_offset), int(block_slice.end_offset))
            full_rows = rows
            rows = bounds[1] - bounds[0]
            size = size * rows // full_rows if full_rows else 0
        st = self._state
        with st.cond:
            flow = st.flows.get(split_idx)
            if not st.healthy(epoch) or flow.finished:
                return
            seq = flow.push(entry.ref, rows, size)
            st.account_locked()
            delivery = Delivery(seq, "block", rows, size, bounds)
            host = flow.host
            if host is None:
                flow.outbox.append(Parcel(delivery, entry.ref))
                st.cond.notify_all()
                return
        # The ref is a top-level argument: Ray resolves it, and the host gets the block
        # itself, already in its node's object store (``__ray_call__``, ``ray/actor.py:2841``).
        call = host.__ray_call__.remote(deliver, self._key, epoch, split_idx, delivery, entry.ref)
        with st.cond:
            if st.epoch == epoch:
                st.delivery_calls[call] = split_idx

    def _end_split(self, epoch: int, split_idx: int) -> None:
        st = self._state
        with st.cond:
            flow = st.flows.get(split_idx)
            if not st.healthy(epoch):
                return
            delivery = Delivery(flow.take_seq(), "end")
            flow.ended = True
            host = flow.host
            if host is None:
                flow.outbox.append(Parcel(delivery))
                st.cond.notify_all()
                return
        host.__ray_call__.remote(deliver, self._key, epoch, split_idx, delivery, None)
