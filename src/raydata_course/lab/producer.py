"""What the producer and the machine did in an epoch, from the lab's samplers: the decode's
rate over the epoch and after the consumers' first batch, the share of the files read by that
batch and the bytes the plan made per batch (Ray Data's counters, as the probe sampled them),
and the machine's busy CPU beside the consumers' steps after that batch (``/proc/stat``, as the
store sampler read it). :func:`raydata_course.lab.epoch.measure_epoch` records them; the targets and the
playground's simulator read them (:mod:`raydata_course.lab.targets`,
:mod:`raydata_course.lab.model_check`).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["production_batches_per_s", "epoch_production_batches_per_s", "read_done_at", "made_bytes_per_batch",
           "decoded_batches_after",
           "cpu_after_first_batch", "last_first_batch_wall_s"]


def cpu_after_first_batch(samples, consumers: list[dict], t_wall0: float,
                          decoded_batches: Optional[float] = None) -> Optional[dict]:
    """What the machine's cores did from the last consumer's first batch to the last step's end.

    Args:
        samples: the store sampler's readings (``t_s`` seconds since ``t_wall0``, and
            ``cpu_busy_s``, the machine's busy CPU seconds since boot).
        consumers: each consumer's record (``t_start_wall_s``, ``wait_s``, ``batch_t_s``,
            ``step_cpu_s``).
        t_wall0: ``time.time()`` when the run (and the sampler) started.
        decoded_batches: batches the decode made in the window (:func:`decoded_batches_after`).

    Returns:
        ``{"window_s", "machine_cpu_s", "steps_cpu_s", "batches", "decoded_batches"}``: the
        window's seconds, the machine's busy CPU seconds in it (between the samples nearest its
        ends), the CPU seconds the consumers' processes used during the steps that ended in
        it, those steps' count, and ``decoded_batches``; None without two readings of the
        machine's CPU or two steps.

    Examples:
        >>> from types import SimpleNamespace as S
        >>> samples = [S(t_s=t, cpu_busy_s=100 + 1.5 * t) for t in range(10)]
        >>> c = {"t_start_wall_s": 0.0, "wait_s": [2.0, 0, 0], "batch_t_s": [3.0, 5.0, 8.0], "step_cpu_s": [1, 1, 2]}
        >>> cpu_after_first_batch(samples, [c], t_wall0=0.0)
        {'window_s': 6.0, 'machine_cpu_s': 9.0, 'steps_cpu_s': 4.0, 'batches': 3, 'decoded_batches': None}
    """
    timed = [(x.t_s, x.cpu_busy_s) for x in samples if getattr(x, "cpu_busy_s", None) is not None]
    ranks = [c for c in consumers if c.get("wait_s") and len(c.get("batch_t_s", [])) >= 2]
    if len(timed) < 2 or not ranks:
        return None
    first = max(c["t_start_wall_s"] + c["wait_s"][0] for c in ranks) - t_wall0
    end = max(c["t_start_wall_s"] + c["batch_t_s"][-1] for c in ranks) - t_wall0
    if end <= first:
        return None

    def busy_at(t: float) -> float:
        return min(timed, key=lambda x: abs(x[0] - t))[1]

    steps_cpu, batches = 0.0, 0
    for c in ranks:
        cpu = c.get("step_cpu_s") or []
        for k, t in enumerate(c["batch_t_s"]):
            if c["t_start_wall_s"] + t - t_wall0 > first:
                steps_cpu += cpu[k] if k < len(cpu) else 0.0
                batches += 1
    return {"window_s": round(end - first, 3), "machine_cpu_s": round(busy_at(end) - busy_at(first), 3),
            "steps_cpu_s": round(steps_cpu, 3), "batches": batches, "decoded_batches": decoded_batches}


def last_first_batch_wall_s(consumers: list[dict]) -> Optional[float]:
    """When the last consumer got its first batch (``time.time()``); None before any.

    Examples:
        >>> last_first_batch_wall_s([{"t_start_wall_s": 10.0, "wait_s": [2.0], "batch_t_s": [3.0]},
        ...                          {"t_start_wall_s": 10.5, "wait_s": [1.0], "batch_t_s": [2.0]}])
        12.0
    """
    return max((c["t_start_wall_s"] + c["wait_s"][0] for c in consumers if c.get("wait_s") and c.get("batch_t_s")),
               default=None)


def _counted(probe_samples: list[dict], *keys: str) -> tuple[list[dict], Optional[int]]:
    """The probe samples that carry Ray Data's per-operator counters (``op_rows`` and each of
    ``keys``), in time order, of one execution (``executor``; the counters count from an
    execution's start): the one that made the most rows among these samples, the epoch's own,
    should the window also hold the first samples of the next epoch's execution; and the index
    of the plan's last task operator that made rows (the decode); None for the index without
    such samples."""
    samples = sorted((p for p in probe_samples if p.get("op_rows") and all(p.get(k) for k in keys)),
                     key=lambda p: p["t_wall_s"])
    if samples:
        made = {p.get("executor"): sum(p["op_rows"]) for p in samples}  # each execution's last sample
        epoch_executor = max(made, key=made.get)
        samples = [p for p in samples if p.get("executor") == epoch_executor]
    index = max((i for i, rows in enumerate(samples[-1]["op_rows"]) if rows), default=None) if samples else None
    return samples, index


def _decode_rows_after(probe_samples: list[dict], first_wall_s: Optional[float]
                       ) -> Optional[tuple[list[dict], list[int], int]]:
    """The probe samples that carry per-operator rows (in time order), the rows the plan's last
    task operator (the decode) had made at each, and those it had made by ``first_wall_s``;
    None without such counters or without ``first_wall_s``."""
    samples, index = _counted(probe_samples)
    if index is None or first_wall_s is None:
        return None
    rows = [p["op_rows"][index] for p in samples]
    return samples, rows, max((r for p, r in zip(samples, rows) if p["t_wall_s"] <= first_wall_s), default=0)


def decoded_batches_after(probe_samples: list[dict], first_wall_s: Optional[float], batch_rows: int) -> Optional[float]:
    """Batches of ``batch_rows`` the decode made after ``first_wall_s`` (``time.time()``), from
    Ray Data's counters as the probe sampled them; None without them.

    Examples:
        >>> s = lambda t, rows: {"t_wall_s": t, "op_rows": [rows, 0, rows // 2]}
        >>> decoded_batches_after([s(0, 0), s(2, 100), s(4, 300), s(6, 500)], 2.0, 50)
        4.0
    """
    found = _decode_rows_after(probe_samples, first_wall_s)
    if found is None or batch_rows < 1:
        return None
    _, rows, at_first = found
    return (rows[-1] - at_first) / batch_rows


def production_batches_per_s(probe_samples: list[dict], first_wall_s: Optional[float],
                             batch_rows: int) -> Optional[float]:
    """The producer's rate after the consumers' first batch: the rows the plan's last task
    operator (the decode) made from ``first_wall_s`` (``time.time()``, when the last consumer
    got its first batch) until it made its last, in batches of ``batch_rows`` per second, from
    Ray Data's counters as the probe sampled them (``rows_task_outputs_generated``). What a
    split decoded ahead while its consumers waited for their first batch does not count: a
    consumer draining such a stock is fast, not its producer. None without probe counters, or
    when the producer had finished before the first batch.

    Examples:
        >>> s = lambda t, rows: {"t_wall_s": t, "op_rows": [rows, 0, rows // 2]}
        >>> production_batches_per_s([s(0, 0), s(2, 100), s(4, 300), s(6, 500), s(7, 500)], 2.0, 50)
        1.0
    """
    found = _decode_rows_after(probe_samples, first_wall_s)
    if found is None or batch_rows < 1:
        return None
    samples, rows, at_first = found
    done_t = next(p["t_wall_s"] for p, r in zip(samples, rows) if r == rows[-1])
    if rows[-1] <= at_first or done_t <= first_wall_s:
        return None
    return (rows[-1] - at_first) / batch_rows / (done_t - first_wall_s)


def epoch_production_batches_per_s(probe_samples: list[dict], consumers: list[dict], batch_rows: int) -> Optional[float]:
    """The producer's rate over the whole epoch: the rows the plan's last task operator (the
    decode) made, in batches of ``batch_rows``, over the seconds from the epoch's start to
    its last block. The start is the first consumer's start (``t_start_wall_s``): the split
    starts the epoch's execution when its consumers ask for it, so the window holds everything
    the producer did for the epoch: listing the files, reading them and decoding them. From
    Ray Data's counters as the probe sampled them (``rows_task_outputs_generated``,
    ``timeline["op_rows"]``); None without them or a consumer's start, or when the decode had
    already made rows at the first sample (the execution started before the samples did, so
    its start is unknown).

    This is the producer's pace that a producer-bound job sees (seconds per epoch). Its rate
    after the first batch (:func:`production_batches_per_s`) depends on what a split did
    before that batch: a pull split over its budget lists and reads every file first, and
    then only decodes (:func:`read_done_at`).

    Examples:
        >>> s = lambda t, rows: {"t_wall_s": t, "op_rows": [rows, rows // 2]}
        >>> c = [{"t_start_wall_s": 1.0}, {"t_start_wall_s": 1.5}]
        >>> epoch_production_batches_per_s([s(0, 0), s(2, 0), s(4, 200), s(6, 400), s(7, 400)], c, 50)
        0.8
    """
    samples, index = _counted(probe_samples)
    starts = [c["t_start_wall_s"] for c in consumers if c.get("t_start_wall_s") is not None]
    if index is None or batch_rows < 1 or not starts or samples[0]["op_rows"][index]:
        return None
    start = min(starts)
    final = samples[-1]["op_rows"][index]
    done_t = next(p["t_wall_s"] for p in samples if p["op_rows"][index] == final)
    return final / batch_rows / (done_t - start) if done_t > start else None


def read_done_at(probe_samples: list[dict], at_wall_s: Optional[float]) -> Optional[float]:
    """The share of its rows the read (the first operator whose name starts with ``Read``,
    such as ``ReadFilesParquetV2``) had made by ``at_wall_s`` (``time.time()``), from Ray
    Data's counters as the probe sampled them: 1.0 when every file was read by then. None
    without the counters, ``at_wall_s``, or a read that made rows (a read fused into the
    decode is not told apart).

    Examples:
        >>> s = lambda t, read, dec: {"t_wall_s": t, "operators": ["ListFiles", "ReadFiles", "Map"],
        ...                           "op_rows": [0, read, dec]}
        >>> read_done_at([s(0, 0, 0), s(2, 300, 100), s(4, 400, 400)], 2.0)
        0.75
    """
    samples, _ = _counted(probe_samples)
    names = samples[-1].get("operators") or [] if samples else []
    read = next((i for i, name in enumerate(names) if name.startswith("Read")), None)
    if read is None or at_wall_s is None or not samples[-1]["op_rows"][read]:
        return None
    done = max((p["op_rows"][read] for p in samples if p["t_wall_s"] <= at_wall_s), default=0)
    return done / samples[-1]["op_rows"][read]


def made_bytes_per_batch(probe_samples: list[dict], batch_rows: int) -> Optional[int]:
    """The bytes the plan's operators made per batch over the epoch: every operator's output
    blocks (``bytes_task_outputs_generated``, the file listing's, the read's and the decode's)
    over the batches of ``batch_rows`` rows the last one (the decode) made, in bytes. Each of
    those blocks is freed once, so a consumer that takes a batch frees, in steady state, the
    batch and the blocks it was made from (the encoded block the decode read). From the
    probe's last sample that carries the counters; None without them.

    Examples:
        >>> s = {"t_wall_s": 1.0, "op_rows": [0, 10, 400, 400], "op_out_bytes": [0, 100, 4000, 32000]}
        >>> made_bytes_per_batch([s], 100)
        9025
    """
    samples, index = _counted(probe_samples, "op_out_bytes")
    if index is None or batch_rows < 1:
        return None
    last = samples[-1]
    return round(sum(last["op_out_bytes"]) / (last["op_rows"][index] / batch_rows))
