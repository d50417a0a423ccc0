"""Keep a tuning step only when the numbers say so: repeated epochs, their median and spread.

Chapter 07 tunes a pipeline one change at a time. One epoch per configuration is not enough
to decide: the same configuration varies from run to run (other processes, the raylet's lazy
frees, the order in which tasks finish). :func:`measure_repeats` runs a configuration several
times; :func:`decide` keeps a candidate only if its median epoch time beats the kept
configuration's median by more than the larger of the two spreads (max − min of each).

Examples:
    >>> import numpy as np
    >>> from raydata_course.chapters.ch07_ingest_tuning import EpochResult
    >>> def runs(name, *seconds):
    ...     return StepTimes(name, [EpochResult(name, 10, s, 10 / s, 0, 0, 0.5, 0.1, np.arange(10))
    ...                             for s in seconds])
    >>> kept, candidate = runs("kept", 3.0, 3.2, 3.4), runs("candidate", 2.0, 2.1, 2.5)
    >>> (kept.median_s, round(kept.spread_s, 2))
    (3.2, 0.4)
    >>> decide(candidate, kept).keep
    True
    >>> decide(runs("noisy", 2.0, 2.1, 3.6), kept).keep  # 1.1 s faster, but its spread is 1.6 s
    False
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from raydata_course.chapters.ch07_ingest_tuning import EpochResult, measure_epoch
from raydata_course.units import MiB

__all__ = ["StepTimes", "measure_repeats", "Decision", "decide"]


@dataclass
class StepTimes:
    """Repeated epochs of one configuration.

    Attributes:
        name: the step's name.
        epochs: one :class:`EpochResult` per repeat, in the order run.
    """

    name: str
    epochs: list[EpochResult] = field(default_factory=list)

    @property
    def seconds(self) -> list[float]:
        """Each repeat's epoch time, in seconds."""
        return [e.seconds for e in self.epochs]

    @property
    def median_s(self) -> float:
        """Median epoch time, in seconds."""
        return float(statistics.median(self.seconds))

    @property
    def spread_s(self) -> float:
        """Slowest minus fastest repeat, in seconds."""
        return max(self.seconds) - min(self.seconds)

    @property
    def median_epoch(self) -> EpochResult:
        """The repeat whose time is the median (the lower middle one for an even count)."""
        ranked = sorted(self.epochs, key=lambda e: e.seconds)
        return ranked[(len(ranked) - 1) // 2]

    def row(self) -> dict[str, Any]:
        """The figures as a table row: median and spread in seconds, each repeat's seconds, and
        the median repeat's waiting share and object-store peak (MiB)."""
        mid = self.median_epoch
        return {"name": self.name, "median_s": round(self.median_s, 2), "spread_s": round(self.spread_s, 2),
                "repeats_s": [round(s, 2) for s in self.seconds],
                "waiting_fraction": round(mid.waiting_fraction, 2),
                "peak_store_MiB": round(mid.peak_store_bytes / MiB)}


def measure_repeats(name: str, build: Callable[[], Any], *, repeats: int = 3,
                    already: Sequence[EpochResult] = (), **epoch_kwargs: Any) -> StepTimes:
    """Run :func:`~raydata_course.chapters.ch07_ingest_tuning.measure_epoch` until ``repeats``
    epochs of one configuration are measured.

    Args:
        name: the step's name.
        build: returns the dataset; called once per repeat (each repeat is a fresh execution).
        repeats: epochs to measure in all, at least 1.
        already: epochs of the same configuration measured before; they count as repeats.
        **epoch_kwargs: passed to ``measure_epoch`` (``step_s``, ``prefetch_batches``, ...).

    Returns:
        A :class:`StepTimes` with ``max(repeats, len(already))`` epochs.

    Raises:
        ValueError: if ``repeats`` is below 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}.")
    epochs = list(already)
    while len(epochs) < repeats:
        epochs.append(measure_epoch(name, build, **epoch_kwargs))
    return StepTimes(name, epochs)


@dataclass(frozen=True)
class Decision:
    """Whether a candidate configuration replaces the kept one.

    Attributes:
        candidate: the candidate step's name.
        kept: the kept step's name.
        keep: True when the candidate is kept.
        gain_s: kept median minus candidate median, in seconds (negative: the candidate is slower).
        margin_s: the larger of the two spreads, in seconds: the gain must exceed it.
    """

    candidate: str
    kept: str
    keep: bool
    gain_s: float
    margin_s: float

    def __str__(self) -> str:
        head = f"{'keep' if self.keep else 'reject'} {self.candidate!r}: its median epoch is {abs(self.gain_s):.2f} s"
        if self.gain_s <= 0:
            return f"{head} {'slower than' if self.gain_s < 0 else 'the same as'} {self.kept!r}'s"
        rule = "more than" if self.keep else "within"
        return f"{head} faster than {self.kept!r}'s, {rule} the larger spread ({self.margin_s:.2f} s)"


def decide(candidate: StepTimes, kept: StepTimes) -> Decision:
    """Keep ``candidate`` only if its median epoch time beats ``kept``'s by more than the larger
    of their spreads (max − min of each one's repeats).

    Args:
        candidate: the repeats of the changed configuration.
        kept: the repeats of the configuration kept so far.

    Returns:
        A :class:`Decision`.

    Raises:
        ValueError: if either has no epochs.
    """
    if not candidate.epochs or not kept.epochs:
        raise ValueError("decide needs at least one epoch of each configuration.")
    gain_s = kept.median_s - candidate.median_s
    margin_s = max(kept.spread_s, candidate.spread_s)
    return Decision(candidate.name, kept.name, gain_s > margin_s, gain_s, margin_s)
