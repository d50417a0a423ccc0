"""The simulator's output: the object store over time, and the batches delivered.

Object-store bytes are split as the lab splits its measurements:

- **counted**: blocks some ``ObjectRef`` still holds (operator queues, the consumer's prefetch
  window, blocks the push split has sent and not yet had released); Ray Data's
  ``BlockRefCounter`` charges them to the budget;
- **pinned without a ref** (hidden): blocks whose refs the pull consumer dropped while
  zero-copy batches still view them (format workers, the outer output slot, the training
  loop's batch);
- **freed, not deleted**: blocks nothing holds, waiting for the raylet's next lazy free.

**Believed** is Ray Data's own usage figure: counted bytes plus the outputs its running tasks
are expected to write. All bytes; times in seconds from the start of the epoch.

Examples:
    >>> t = Timeline(budget_bytes=100, block_bytes=10, consumers=1)
    >>> t.record(0.0, counted_bytes=0, hidden_bytes=0, freed_bytes=0, believed_bytes=0, delivered_batches=0)
    >>> t.record(1.0, counted_bytes=90, hidden_bytes=30, freed_bytes=10, believed_bytes=95, delivered_batches=2)
    >>> t.peak_bytes, t.peak_breakdown()["hidden_bytes"], t.believed_peak_bytes
    (130, 30, 95)
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

__all__ = ["Timeline", "stall_fraction", "consumption_batches_per_s"]


@dataclass
class Timeline:
    """One simulated run, one sample per change of state (times in s, sizes in bytes).

    Attributes:
        budget_bytes: Ray Data's budget, as configured.
        block_bytes: bytes of one batch's block.
        consumers: consuming iterators.
        t_s: sample times.
        counted_bytes / hidden_bytes / freed_bytes: the store's three parts at each sample.
        believed_bytes: Ray Data's usage figure at each sample.
        delivered_batches: batches the training loops had taken, in total, at each sample.
        batch_done_s: per consumer, when each of its training steps ended.
        batch_wait_s: per consumer, how long it waited for each batch (from asking to getting it).
        windows_t_s / windows_batches: push: each controller tick's time and every split's
            window (batches ready ahead of the one in use).
        warnings: push: what the push split's controller warned of (the budget cannot hold
            the windows asked for, or not even their floor).
        consumer_start_s: when the consumers started iterating (0: with the epoch).
        events: counters of what happened (``tasks``, ``over_budget_launches``, ...).
    """

    budget_bytes: int
    block_bytes: int
    consumers: int
    t_s: list[float] = field(default_factory=list)
    counted_bytes: list[int] = field(default_factory=list)
    hidden_bytes: list[int] = field(default_factory=list)
    freed_bytes: list[int] = field(default_factory=list)
    believed_bytes: list[int] = field(default_factory=list)
    delivered_batches: list[int] = field(default_factory=list)
    batch_done_s: list[list[float]] = field(default_factory=list)
    batch_wait_s: list[list[float]] = field(default_factory=list)
    windows_t_s: list[float] = field(default_factory=list)
    windows_batches: list[list[int]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    consumer_start_s: float = 0.0
    events: dict[str, int] = field(default_factory=dict)

    def record(self, t_s: float, *, counted_bytes: int, hidden_bytes: int, freed_bytes: int, believed_bytes: int,
               delivered_batches: int) -> None:
        """Add a sample; a sample at the same time as the last one replaces it."""
        row = (counted_bytes, hidden_bytes, freed_bytes, believed_bytes, delivered_batches)
        if self.t_s and abs(self.t_s[-1] - t_s) < 1e-12:
            for series, value in zip(self._series(), row):
                series[-1] = value
            return
        self.t_s.append(t_s)
        for series, value in zip(self._series(), row):
            series.append(value)

    def _series(self):
        return (self.counted_bytes, self.hidden_bytes, self.freed_bytes, self.believed_bytes, self.delivered_batches)

    @property
    def used_bytes(self) -> list[int]:
        """The store's total at each sample: counted + hidden + freed-not-deleted."""
        return [c + h + f for c, h, f in zip(self.counted_bytes, self.hidden_bytes, self.freed_bytes)]

    @property
    def peak_bytes(self) -> int:
        """The highest object-store usage."""
        return max(self.used_bytes, default=0)

    @property
    def believed_peak_bytes(self) -> int:
        """The highest usage Ray Data believed."""
        return max(self.believed_bytes, default=0)

    @property
    def hidden_peak_bytes(self) -> int:
        """The most bytes pinned without a ref at once."""
        return max(self.hidden_bytes, default=0)

    def peak_breakdown(self) -> dict[str, float]:
        """The sample with the most bytes used, split three ways (``t_s`` and bytes)."""
        used = self.used_bytes
        if not used:
            return {"t_s": 0.0, "counted_bytes": 0, "hidden_bytes": 0, "freed_bytes": 0}
        i = max(range(len(used)), key=used.__getitem__)
        return {"t_s": self.t_s[i], "counted_bytes": self.counted_bytes[i], "hidden_bytes": self.hidden_bytes[i],
                "freed_bytes": self.freed_bytes[i]}

    @property
    def consume_s(self) -> float:
        """From the consumers' start to the last training step's end (the lab's ``consume_s``)."""
        ends = [times[-1] for times in self.batch_done_s if times]
        return max(ends) - self.consumer_start_s if ends else 0.0

    @property
    def batches(self) -> int:
        """Batches the training loops finished."""
        return sum(len(times) for times in self.batch_done_s)

    @property
    def batches_per_s(self) -> float:
        """All batches over :attr:`consume_s` (the lab's ``batches_per_s``)."""
        return self.batches / self.consume_s if self.consume_s else 0.0

    @property
    def midrun_batches_per_s(self) -> float:
        """Per consumer, batches 25 %-90 % of its epoch over the time they took, summed
        (the lab's ``midrun_batches_per_s``)."""
        total = 0.0
        for times in self.batch_done_s:
            lo, hi = int(0.25 * len(times)), int(0.90 * len(times)) - 1
            if hi > lo and times[hi] > times[lo]:
                total += (hi - lo) / (times[hi] - times[lo])
        return total

    def consumer_records(self) -> list[dict]:
        """Each consumer's waits and step ends in the lab's record shape (``t_start_wall_s``,
        ``wait_s``, ``batch_t_s``), for :func:`stall_fraction` and :func:`consumption_batches_per_s`."""
        return [{"t_start_wall_s": self.consumer_start_s, "wait_s": list(waits),
                 "batch_t_s": [t - self.consumer_start_s for t in done]}
                for waits, done in zip(self.batch_wait_s, self.batch_done_s)]

    @property
    def stall_fraction(self) -> float | None:
        """The job-level stall fraction D (:func:`stall_fraction`)."""
        return stall_fraction(self.consumer_records())

    @property
    def consumption_batches_per_s(self) -> float | None:
        """Batches per second after each consumer's first batch, summed (:func:`consumption_batches_per_s`)."""
        return consumption_batches_per_s(self.consumer_records())

    @property
    def first_batch_s(self) -> float:
        """Seconds until the last consumer got its first batch."""
        return max((w[0] for w in self.batch_wait_s if w), default=0.0)

    @property
    def wait_s_median(self) -> float | None:
        """The median wait per batch after each consumer's first (seconds), as the lab reports it."""
        waits = [w for ws in self.batch_wait_s for w in ws[1:]]
        return statistics.median(waits) if waits else None

    def sampled(self, period_s: float) -> dict[str, list]:
        """The timeline read every ``period_s`` seconds (the last sample at or before each
        time), as the lab's 10 Hz sampler would see it: ``{"t_s", "counted_bytes", ...}``."""
        if not period_s > 0:
            raise ValueError(f"period_s must be positive, got {period_s!r}.")
        out: dict[str, list] = {"t_s": [], "counted_bytes": [], "hidden_bytes": [], "freed_bytes": [],
                                "believed_bytes": [], "delivered_batches": []}
        if not self.t_s:
            return out
        i, t, end = 0, 0.0, self.t_s[-1]
        while t <= end + 1e-9:
            while i + 1 < len(self.t_s) and self.t_s[i + 1] <= t + 1e-12:
                i += 1
            out["t_s"].append(round(t, 6))
            for name, series in zip(("counted_bytes", "hidden_bytes", "freed_bytes", "believed_bytes",
                                     "delivered_batches"), self._series()):
                out[name].append(series[i])
            t += period_s
        return out


def _first_and_end_s(c: dict) -> tuple[float, float]:
    """When consumer ``c`` got its first batch and finished its last step (seconds, the record's clock)."""
    return c["t_start_wall_s"] + c["wait_s"][0], c["t_start_wall_s"] + c["batch_t_s"][-1]


def stall_fraction(consumers: list[dict]) -> float | None:
    """The job-level stall fraction ``D``: over the steps after every rank's first batch, the
    sum of the longest wait for a batch across ranks (steps aligned by index: a data-parallel
    step waits for its slowest rank), over the wall time from the last rank's first batch to
    the last rank's last step. The wait for the first batch is the execution's start, the same
    for every split design, and is reported apart. None without two steps.

    Args:
        consumers: per rank, ``t_start_wall_s`` (seconds), ``wait_s`` (the wait for each batch,
            seconds) and ``batch_t_s`` (each step's end, seconds after ``t_start_wall_s``): the
            lab's consumer record, or :meth:`Timeline.consumer_records`.

    Examples:
        >>> a = {"t_start_wall_s": 0.0, "wait_s": [1.0, 0.0, 0.5, 0.0], "batch_t_s": [2.0, 3.0, 4.5, 5.5]}
        >>> b = {"t_start_wall_s": 0.0, "wait_s": [1.5, 0.2, 0.0, 0.0], "batch_t_s": [2.5, 3.7, 4.7, 5.7]}
        >>> round(stall_fraction([a, b]), 3)  # (0.2 + 0.5 + 0.0) over 5.7 - 1.5 s
        0.167
    """
    ranks = [c for c in consumers if len(c.get("wait_s", [])) >= 2 and len(c.get("batch_t_s", [])) >= 2]
    if not ranks:
        return None
    steps = min(len(c["wait_s"]) for c in ranks)
    waited = sum(max(c["wait_s"][k] for c in ranks) for k in range(1, steps))
    first = max(_first_and_end_s(c)[0] for c in ranks)
    end = max(_first_and_end_s(c)[1] for c in ranks)
    return waited / (end - first) if end > first else None


def consumption_batches_per_s(consumers: list[dict]) -> float | None:
    """The rate at which the consumers took batches after each one's first batch: per consumer,
    its batches after the first over the time from that first batch to its last step, summed
    over consumers (batches per second). None without two steps.

    Examples:
        >>> consumption_batches_per_s([{"t_start_wall_s": 0.0, "wait_s": [1.0, 0, 0], "batch_t_s": [2.0, 3.0, 4.0]}])
        0.6666666666666666
    """
    rates = []
    for c in consumers:
        if len(c.get("wait_s", [])) >= 2 and len(c.get("batch_t_s", [])) >= 2:
            first, end = _first_and_end_s(c)
            if end > first:
                rates.append((len(c["batch_t_s"]) - 1) / (end - first))
    return sum(rates) if rates else None
