"""The typed messages of the push-based split, and its error.

Every message that crosses a process boundary between the coordinator actor and a consumer
is one of these dataclasses, so both sides name the fields they read:

- a consumer arrives at the epoch barrier with an :class:`Arrival` (its window and, when it
  is an actor, its handle);
- the coordinator sends a :class:`Delivery` per block, one ``"end"`` per split and epoch, or
  one ``"error"``; in the push transport the block itself travels beside it as a top-level
  argument, so that Ray resolves it into the consumer's node before the call runs; in the
  fetch transport the consumer receives :class:`Parcel` objects (the delivery and the
  block's ``ObjectRef``);
- the consumer reports :class:`RowRange` lists: rows its loop is done with (*consumed*), and
  rows no batch views any more (*released*);
- the coordinator keeps one :class:`InflightBlock` per pushed block until it is consumed and
  released.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

__all__ = ["PushSplitError", "Arrival", "Delivery", "Parcel", "RowRange", "InflightBlock", "DeliveryKind"]

#: What a delivery carries: a block, the end of the split's epoch, or an error message.
DeliveryKind = Literal["block", "end", "error"]


class PushSplitError(RuntimeError):
    """An epoch of a push-based split failed: a teardown error, a dead consumer, an
    executor error, or a misuse (a split iterated twice at once)."""


@dataclass(frozen=True)
class Arrival:
    """A split at the epoch barrier.

    Attributes:
        window_rows: the window the consumer asks for, rows ahead of the batch in use:
            ``prefetch_batches * batch_size`` (>= ``batch_rows``).
        batch_rows: the consumer's ``batch_size`` (>= 1): the batch in use, and an adaptive
            window's floor and step.
        host: handle of the actor that hosts the split (blocks are pushed to it), or None
            when the consumer fetches its deliveries (it is not an actor).
    """

    window_rows: int
    batch_rows: int
    host: Any = None


@dataclass(frozen=True)
class Delivery:
    """One message from the coordinator to the consumer of a split, in sequence order.

    Attributes:
        seq: the delivery's number within the split's epoch (0, 1, ...); the consumer
            reorders by it and ignores repeats.
        kind: ``"block"``, ``"end"`` (no more blocks this epoch) or ``"error"``.
        rows: rows of the block this delivery gives the split (after slicing).
        size_bytes: their share of the block's bytes (Ray Data's ``size_bytes``).
        bounds: ``(start, end)`` row offsets when the split gets only a slice of the block
            (Ray's ``OutputSplitter`` cuts the final blocks under ``equal=True``); None for
            the whole block.
        error: why the epoch failed (``kind == "error"`` only).
    """

    seq: int
    kind: DeliveryKind
    rows: int = 0
    size_bytes: int = 0
    bounds: Optional[tuple[int, int]] = None
    error: str = ""


@dataclass(frozen=True)
class Parcel:
    """A delivery as the fetch transport hands it over: the message and the block's ref.

    Attributes:
        delivery: the :class:`Delivery`.
        ref: the block's ``ObjectRef`` (``kind == "block"``), else None.
    """

    delivery: Delivery
    ref: Any = None


@dataclass(frozen=True)
class RowRange:
    """Rows ``[start, end)`` of the block delivered as ``seq`` (offsets within the delivery)."""

    seq: int
    start: int
    end: int


@dataclass
class InflightBlock:
    """A pushed block the coordinator still tracks, until it is consumed and released.

    Holding :attr:`ref` is what keeps the block charged to Ray Data's budget.

    Attributes:
        ref: the block's ``ObjectRef``; None once every row was released.
        rows: rows delivered to the split.
        size_bytes: their bytes.
        consumed_starts: starts of the row ranges reported consumed (a repeat is ignored).
        rows_consumed: rows reported consumed.
        released_starts: starts of the row ranges reported released.
        rows_released: rows reported released.
    """

    ref: Any
    rows: int
    size_bytes: int
    consumed_starts: set[int] = field(default_factory=set)
    rows_consumed: int = 0
    released_starts: set[int] = field(default_factory=set)
    rows_released: int = 0

    @property
    def done(self) -> bool:
        """Every row was consumed and released: nothing about the block is left to track."""
        return self.rows_consumed >= self.rows and self.rows_released >= self.rows
