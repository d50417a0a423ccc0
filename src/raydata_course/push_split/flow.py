"""The flow state of one split in one epoch: its window, and what it has consumed and released.

The coordinator keeps one :class:`SplitFlow` per split and epoch, and changes it only under
its lock. The rules it encodes:

- **the window** counts rows *ahead of* the batch in use: the coordinator may push another
  block while :meth:`SplitFlow.rows_to_send` is positive, that is while ``window_rows +
  batch_rows - (rows_pushed - rows_consumed) > 0``, so a window of one batch is a double
  buffer (one batch in use, one ready). A block is never cut, so the rows in flight exceed
  the window by less than one block;
- **consumed** rows (the training loop asked for the batch after theirs) open the window;
- **released** rows (no batch views them any more) let the coordinator drop the block's ref
  once all its rows are released, so Ray Data's ``BlockRefCounter`` stops charging it.

Examples:
    >>> flow = SplitFlow(window_rows=50, batch_rows=50)
    >>> seq = flow.push("ref-0", rows=60, size_bytes=600)
    >>> flow.rows_to_send(), flow.ready_rows(), flow.short()
    (40, 10, True)
    >>> flow.apply([RowRange(seq, 0, 60)], released=False), flow.rows_to_send()
    (0, 100)
    >>> flow.apply([RowRange(seq, 0, 60)], released=False)  # a repeat is ignored
    1
    >>> flow.inflight[seq].ref, flow.apply([RowRange(seq, 0, 60)], released=True), seq in flow.inflight
    ('ref-0', 0, False)
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from raydata_course.push_split.messages import InflightBlock, RowRange

__all__ = ["SplitFlow", "STALL_WINDOW_STEPS"]

#: how many of a consumer's last reports (about one per step) its stall fraction covers.
STALL_WINDOW_STEPS = 8


@dataclass
class SplitFlow:
    """Flow state of one split in one epoch (recreated every epoch).

    Attributes:
        window_rows: rows the consumer may hold ready beyond the batch in use (at most
            ``prefetch_batches * batch_size``; the adaptive controller moves it).
        batch_rows: the consumer's batch size: the batch in use, and the window's floor and
            step under an adaptive window (:mod:`~raydata_course.push_split.window`).
        host: actor handle of the process hosting the split, or None (fetch transport).
        rows_pushed / rows_consumed: rows sent to / reported consumed by the consumer.
        bytes_pushed / bytes_consumed: the same in bytes (Ray Data's ``size_bytes``).
        blocks_pushed: blocks sent.
        next_seq: sequence number of the next delivery.
        finished: the consumer stopped (exhausted, ``break`` or error); later reports are
            ignored.
        ended: the split's ``"end"`` delivery was sent.
        inflight: ``seq -> InflightBlock`` for pushed blocks not yet wholly consumed and
            released.
        outbox: parcels waiting for a fetch (fetch transport only).
        max_inflight_rows: largest ``rows_pushed - rows_consumed`` seen.
        max_block_rows: largest block pushed, in rows.
        ignored_reports: reports dropped (unknown block, repeat, or after ``finished``).
        blocks_released: blocks whose ref was dropped because every row was released.
        steps: steps (batches) the consumer reported done.
        recent_steps: ``(steps, waited_s, cycle_s)`` of its last reports (the stall signal,
            :meth:`stall_fraction`).
        waited_s: seconds the consumer reported waiting for data, in all.
        max_window_rows: the largest window this epoch (:meth:`set_window_rows`).
    """

    window_rows: int
    batch_rows: int = 1
    host: Any = None
    rows_pushed: int = 0
    rows_consumed: int = 0
    bytes_pushed: int = 0
    bytes_consumed: int = 0
    blocks_pushed: int = 0
    next_seq: int = 0
    finished: bool = False
    ended: bool = False
    inflight: dict[int, InflightBlock] = field(default_factory=dict)
    outbox: collections.deque = field(default_factory=collections.deque)
    max_inflight_rows: int = 0
    max_block_rows: int = 0
    ignored_reports: int = 0
    blocks_released: int = 0
    steps: int = 0
    recent_steps: collections.deque = field(default_factory=lambda: collections.deque(maxlen=STALL_WINDOW_STEPS))
    waited_s: float = 0.0
    max_window_rows: int = 0

    def __post_init__(self) -> None:
        if self.window_rows < 0 or self.batch_rows < 1:
            raise ValueError(f"a split needs window_rows >= 0 and batch_rows >= 1, got {self.window_rows}, "
                             f"{self.batch_rows}.")
        self.max_window_rows = max(self.max_window_rows, self.window_rows)

    def set_window_rows(self, rows: int) -> None:
        """Resize the window (the adaptive controller); rows already in flight stay."""
        self.window_rows = rows
        self.max_window_rows = max(self.max_window_rows, rows)

    def rows_to_send(self) -> int:
        """Credit left: the window plus the batch in use, less what is pushed and not yet
        consumed. The coordinator may send while this is > 0."""
        return self.window_rows + self.batch_rows - (self.rows_pushed - self.rows_consumed)

    def ready_rows(self) -> int:
        """Rows pushed and not yet consumed beyond the batch in use (rows)."""
        return max(0, self.rows_pushed - self.rows_consumed - self.batch_rows)

    def short(self) -> bool:
        """The consumer has no whole batch ready beyond the one in use: the sender waits on
        the executor as a consumer, so the next decode overlaps the current step."""
        return self.ready_rows() < self.batch_rows

    def note_steps(self, steps: int, waited_s: float, cycle_s: float) -> None:
        """A consumer's report: ``steps`` batches done, ``waited_s`` seconds waited for data
        and ``cycle_s`` seconds of step cycles (waits included) since its last report."""
        if steps <= 0 and waited_s <= 0:
            return
        self.steps += max(0, steps)
        self.waited_s += max(0.0, waited_s)
        self.recent_steps.append((max(0, steps), max(0.0, waited_s), max(0.0, cycle_s)))

    def stall_fraction(self) -> float | None:
        """Seconds waited ÷ seconds of step cycles over the last reports (at most
        ``STALL_WINDOW_STEPS`` of them); None before a step with a measured cycle."""
        cycle = sum(c for _, _, c in self.recent_steps)
        if cycle <= 0:
            return None
        return min(1.0, sum(w for _, w, _ in self.recent_steps) / cycle)

    def push(self, ref: Any, rows: int, size_bytes: int) -> int:
        """Account for one more block sent; return its sequence number."""
        seq = self.next_seq
        self.next_seq += 1
        self.inflight[seq] = InflightBlock(ref, rows, size_bytes)
        self.rows_pushed += rows
        self.bytes_pushed += size_bytes
        self.blocks_pushed += 1
        self.max_inflight_rows = max(self.max_inflight_rows, self.rows_pushed - self.rows_consumed)
        self.max_block_rows = max(self.max_block_rows, rows)
        return seq

    def take_seq(self) -> int:
        """The sequence number for a delivery that carries no block (the end)."""
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def apply(self, ranges: list[RowRange], *, released: bool) -> int:
        """Apply a consumer's report: these rows are consumed (``released=False``) or
        released (``released=True``).

        A range for an unknown block, a range whose start was reported before (a duplicate)
        and an empty-backwards range are ignored. Consumed rows open the window; a block whose
        rows are all released loses its ref; a block consumed and released is forgotten.

        Returns:
            How many ranges were ignored.
        """
        ignored = 0
        for r in ranges:
            block = self.inflight.get(r.seq)
            starts = None if block is None else (block.released_starts if released else block.consumed_starts)
            if block is None or r.start in starts or r.end < r.start:
                ignored += 1
                continue
            starts.add(r.start)
            if released:
                block.rows_released += r.end - r.start
                if block.rows_released >= block.rows and block.ref is not None:
                    block.ref = None  # every view is gone: Ray Data uncharges the block
                    self.blocks_released += 1
            else:
                before = block.rows_consumed
                block.rows_consumed = before + (r.end - r.start)
                self.rows_consumed += r.end - r.start
                after = min(block.rows_consumed, block.rows)
                if block.rows:
                    self.bytes_consumed += block.size_bytes * after // block.rows - block.size_bytes * before // block.rows
            if block.done:
                del self.inflight[r.seq]
        self.ignored_reports += ignored
        return ignored

    def held_bytes(self) -> int:
        """Bytes of pushed blocks whose ref is still held (charged to Ray Data's budget)."""
        return sum(block.size_bytes for block in self.inflight.values() if block.ref is not None)

    def bytes_per_row(self) -> float | None:
        """Mean bytes per row of the blocks pushed so far; None before the first."""
        return self.bytes_pushed / self.rows_pushed if self.rows_pushed else None

    def unconsumed_bytes(self) -> int:
        """Bytes pushed and not yet consumed (0 once the consumer finished)."""
        return 0 if self.finished else self.bytes_pushed - self.bytes_consumed

    def snapshot(self) -> dict:
        """The flow's counters, for ``debug_state``."""
        return {
            "window_rows": self.window_rows, "max_window_rows": self.max_window_rows, "steps": self.steps,
            "waited_s": round(self.waited_s, 3),
            "batch_rows": self.batch_rows, "rows_pushed": self.rows_pushed,
            "rows_consumed": self.rows_consumed, "bytes_pushed": self.bytes_pushed,
            "bytes_consumed": self.bytes_consumed, "blocks_pushed": self.blocks_pushed,
            "unconsumed_blocks": len(self.inflight), "blocks_released": self.blocks_released,
            "held_blocks": sum(1 for block in self.inflight.values() if block.ref is not None),
            "finished": self.finished, "ended": self.ended,
            "max_inflight_rows": self.max_inflight_rows, "max_block_rows": self.max_block_rows,
            "ignored_reports": self.ignored_reports, "transport": "push" if self.host is not None else "fetch",
        }
