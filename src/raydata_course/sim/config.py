"""What the simulator is told: the pipeline's operators and the consumers' side.

Every quantity carries its unit in its name: bytes (``*_bytes``), seconds (``*_s``), blocks
and batches as counts. One block is one batch, as in the lab (files of one batch each, then
``map_batches`` with the same batch size), so a batch pins exactly one block.

Examples:
    >>> cfg = IngestConfig(operators=[Operator("decode", task_s=0.5, output_bytes=32 << 20)],
    ...                    budget_bytes=256 << 20, prefetch_batches=4, step_s=0.1, delay_s=0.25)
    >>> cfg.block_bytes, cfg.format_workers, cfg.total_batches
    (33554432, 4, 20)
    >>> IngestConfig(operators=[], budget_bytes=1)
    Traceback (most recent call last):
    ...
    ValueError: operators must name at least one operator, got [].
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Operator", "IngestConfig", "SPLITS"]

#: how the consumers are fed: Ray's pull-based ``streaming_split`` / ``iter_batches``, or the
#: course's push-based split.
SPLITS = ("pull", "push")


@dataclass(frozen=True)
class Operator:
    """One operator of the streaming executor: each task turns one input block into one output block.

    Attributes:
        name: shown in tables.
        task_s: CPU seconds one task needs when it has a core to itself.
        output_bytes: bytes of the block each task writes to the object store.
    """

    name: str
    task_s: float
    output_bytes: int

    def __post_init__(self) -> None:
        if not self.task_s >= 0:
            raise ValueError(f"Operator {self.name!r}: task_s must be >= 0 seconds, got {self.task_s!r}.")
        if self.output_bytes < 0:
            raise ValueError(f"Operator {self.name!r}: output_bytes must be >= 0, got {self.output_bytes!r}.")


@dataclass(frozen=True)
class IngestConfig:
    """One simulated ingest run: a source, operators, the budget and the consumers.

    Attributes:
        operators: the operators, upstream first; the last one's blocks are the batches.
        budget_bytes: Ray Data's object-store budget (``resource_limits.object_store_memory``).
        split: ``"pull"`` (``iter_batches`` / ``streaming_split``) or ``"push"`` (the push split).
        consumers: number of consuming iterators (training workers), each fed its own blocks.
        batches_per_consumer: batches each consumer trains on.
        prefetch_batches: ``prefetch_batches`` of ``iter_batches`` / ``iter_torch_batches``;
            under push, the most batches a window may hold ready (its ceiling; the floor is
            one batch, :mod:`raydata_course.push_split.window`).
        format_cap: the cap on format workers (Ray 2.60: 4); pull uses ``N = min(cap, pf)``.
        format_s: seconds a format worker spends on one batch (collation; zero-copy).
        step_s: seconds of one training step (the loop's own work), on cores of its own.
        step_on_cores: the step is CPU work on the machine's ``cores``, shared with Ray Data's
            running tasks (``step_s * step_width`` CPU seconds on up to ``step_width`` cores);
            False: a wait that takes no core.
        step_width: cores the step's work can use at once (PyTorch's threads).
        overhead_cpu_s: CPU seconds the machine spends per batch beside the operators' tasks
            and the steps (Ray's own processes, the split's coordinator, the measurement), run
            on the shared ``cores`` as the consumer takes each batch; 0: none.
        delay_s: extra seconds per step; > 0 makes a slow consumer.
        task_slots: logical CPUs free for Ray Data tasks (one task takes one).
        cores: physical cores that running tasks share (processor sharing); ``None``: as many
            as ``task_slots``, so every task runs at full speed.
        free_period_s: the raylet's lazy free (``free_objects_period_milliseconds / 1000``):
            freed objects leave the store at the raylet's next free; 0 deletes at once.
        free_phase_s: seconds after the epoch's start at which the raylet's first free runs
            (then one every ``free_period_s``), in ``[0, free_period_s)``; 0: the free timer
            starts with the epoch. The raylet's timer runs from the raylet's own start, so a real
            epoch meets it at an unknown phase; :mod:`raydata_course.lab.model_check` runs a
            spread of phases.
        startup_s: seconds before the executor launches its first task (execution start-up).
        window_counted: whether Ray Data charges the pull consumer's prefetch window (refs
            alive) to the budget. True is Ray 2.60 as the lab measures it, in the driver and
            under Ray Train (the counted bytes at the peak stay near the budget); False is a
            what-if where those refs escape the budget and the executor runs ahead by them.
        sample_period_s: spacing of the timeline's evenly spaced samples, in seconds.
        control_interval_s: push: seconds between the window controller's ticks (the
            coordinator's ``control_interval_s``).
        send_s: push: seconds from a sender taking a block to its arrival in the consumer's
            process (measured by the lab as the push round trip).
        steer_on_store: push: charge the bytes freed but not yet deleted, read from the store
            every ``store_sample_period_s``, to the executor's share (``push_split``'s
            ``steer_on_store``; the lab sets it).
        store_sample_period_s: push: seconds between the controller's store readings.
        read_ahead_cap: push: the executor runs the read-ahead policy (``push_split``'s
            ``read_ahead_cap``), with the share guard.
    """

    operators: list[Operator]
    budget_bytes: int
    split: str = "pull"
    consumers: int = 1
    batches_per_consumer: int = 20
    prefetch_batches: int = 4
    format_cap: int = 4
    format_s: float = 0.0
    step_s: float = 0.0
    step_on_cores: bool = False
    step_width: float = 1.0
    overhead_cpu_s: float = 0.0
    delay_s: float = 0.0
    task_slots: int = 4
    cores: float | None = None
    free_period_s: float = 1.0
    free_phase_s: float = 0.0
    startup_s: float = 0.0
    window_counted: bool = True
    sample_period_s: float = 0.1
    control_interval_s: float = 0.1
    send_s: float = 0.0
    steer_on_store: bool = False
    store_sample_period_s: float = 0.5
    read_ahead_cap: bool = True
    notes: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.operators:
            raise ValueError(f"operators must name at least one operator, got {list(self.operators)!r}.")
        if self.split not in SPLITS:
            raise ValueError(f"split must be 'pull' or 'push', got {self.split!r}.")
        for name in ("consumers", "batches_per_consumer", "task_slots", "format_cap"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}.")
        if self.prefetch_batches < 0:
            raise ValueError(f"prefetch_batches must be >= 0, got {self.prefetch_batches!r}.")
        if self.budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {self.budget_bytes!r}.")
        for name in ("format_s", "step_s", "delay_s", "free_period_s", "free_phase_s", "startup_s", "send_s",
                     "overhead_cpu_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)!r}.")
        if self.free_phase_s and not self.free_phase_s < self.free_period_s:
            raise ValueError(f"free_phase_s must be below free_period_s ({self.free_period_s!r} s), "
                             f"got {self.free_phase_s!r}.")
        if self.cores is not None and not self.cores > 0:
            raise ValueError(f"cores must be positive (or None), got {self.cores!r}.")
        for name in ("sample_period_s", "control_interval_s", "store_sample_period_s", "step_width"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive seconds, got {getattr(self, name)!r}.")

    @property
    def block_bytes(self) -> int:
        """Bytes of one batch: the last operator's output block."""
        return self.operators[-1].output_bytes

    @property
    def format_workers(self) -> int:
        """``N = min(format_cap, prefetch_batches)``: the pull consumer's format workers."""
        return min(self.format_cap, self.prefetch_batches)

    @property
    def total_batches(self) -> int:
        """Batches all consumers train on together."""
        return self.consumers * self.batches_per_consumer

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> IngestConfig:
        """The configuration whose ``dataclasses.asdict`` is ``values`` (operators as dicts),
        as the playground reads it from ``validation.json``.

        Raises:
            ValueError: an unknown field (named), or a value the constructor refuses.
        """
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown IngestConfig fields {sorted(unknown)}.")
        ops = [op if isinstance(op, Operator) else Operator(**op) for op in values.get("operators", [])]
        return cls(**{**values, "operators": ops})

    def with_(self, **changes: Any) -> IngestConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
