"""What the object store actually holds, read from every raylet.

This is *actual* plasma memory, not Ray Data's estimate of its own usage. Every reading is
one ``GetNodeStats`` RPC per raylet (``ray/core/generated/node_manager_pb2``, the data behind
``ray memory`` and Ray Data's own spill report), summed over the cluster. It needs the
``grpcio`` package, which ``ray[data,train]`` does not pull in.

- :func:`object_store_stats`: one cluster-wide reading (about a millisecond locally).
- :class:`PlasmaSampler`: readings from a background thread (10 Hz by default) and, every few
  samples, a classification of every object in the store:

  - *referenced*: some worker still holds an ``ObjectRef`` (or a task argument) to it;
  - *pinned, unreferenced*: no ``ObjectRef`` anywhere, but the object is still pinned in
    memory. These are blocks kept alive by zero-copy numpy/Arrow/torch views after the
    consumer pipeline dropped their refs: the hidden buffers, counted directly;
  - the rest of ``used`` is freed-but-not-yet-deleted memory (the raylet deletes freed
    objects in batches every ``free_objects_period_milliseconds``, 1000 ms by default).

- :func:`settle_store`: wait until freed memory has gone, before a baseline.
- :func:`time_probe_cost_s`: what one reading costs, so a report can state it.
"""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
from dataclasses import dataclass

from raydata_course.units import MiB

__all__ = [
    "ObjectStoreStats",
    "object_store_stats",
    "PlasmaSample",
    "PlasmaSampler",
    "machine_busy_cpu_s",
    "settle_store",
    "time_probe_cost_s",
]

#: seconds a raylet has to answer one reading.
_RPC_TIMEOUT_S = 10


@dataclass(frozen=True)
class ObjectStoreStats:
    """A cluster-wide snapshot of the object store, summed over all nodes.

    Attributes:
        used_bytes: bytes held in shared memory now (primary and secondary copies, and freed
            objects the raylet has not deleted yet).
        primary_copy_bytes: bytes of objects whose primary copy is in shared memory.
        fallback_bytes: bytes allocated on disk because shared memory was full.
        spilled_bytes_total: bytes spilled to external storage since the cluster started.
        restored_bytes_total: bytes restored from spill since the cluster started.
        num_local_objects: objects held in shared memory now.
    """

    used_bytes: int
    primary_copy_bytes: int
    fallback_bytes: int
    spilled_bytes_total: int
    restored_bytes_total: int
    num_local_objects: int


def _require_ray():
    import ray

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running in this process: call raydata_course.setup() first.")
    return ray


def _raylet_stubs() -> list:
    """One open gRPC channel and stub per live raylet; close the channels when done."""
    ray = _require_ray()
    try:
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import node_manager_pb2_grpc
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Reading object-store statistics needs grpcio (`pip install grpcio`, or `make setup`)."
        ) from exc
    stubs = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        channel = init_grpc_channel(f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}")
        stubs.append((channel, node_manager_pb2_grpc.NodeManagerServiceStub(channel)))
    return stubs


def _node_stats(stubs, include_memory_info: bool) -> list:
    from ray.core.generated import node_manager_pb2

    request = node_manager_pb2.GetNodeStatsRequest(include_memory_info=include_memory_info)
    return [stub.GetNodeStats(request, timeout=_RPC_TIMEOUT_S) for _, stub in stubs]


def _sum(replies, field: str) -> int:
    return sum(int(getattr(r.store_stats, field)) for r in replies)


def object_store_stats() -> ObjectStoreStats:
    """Ask every raylet for its object-store statistics; return their sum.

    Returns:
        An :class:`ObjectStoreStats`.

    Raises:
        RuntimeError: if Ray is not initialized in this process.
        ImportError: with install advice, if ``grpcio`` is missing.
    """
    stubs = _raylet_stubs()
    try:
        replies = _node_stats(stubs, include_memory_info=False)
    finally:
        for channel, _ in stubs:
            channel.close()
    return ObjectStoreStats(
        used_bytes=_sum(replies, "object_store_bytes_used"),
        primary_copy_bytes=_sum(replies, "object_store_bytes_primary_copy"),
        fallback_bytes=_sum(replies, "object_store_bytes_fallback"),
        spilled_bytes_total=_sum(replies, "spilled_bytes_total"),
        restored_bytes_total=_sum(replies, "restored_bytes_total"),
        num_local_objects=_sum(replies, "num_local_objects"),
    )


def settle_store(*, empty_bytes: int = 4 * MiB, timeout_s: float = 6.0, quiet_s: float | None = 1.1,
                 poll_s: float = 0.2) -> int:
    """Wait for freed memory to leave the object store; return the bytes it then holds.

    The raylet deletes freed objects in batches (every ``free_objects_period_milliseconds``),
    so right after other work the store still holds memory that is about to go. This collects
    Python garbage (dropping forgotten ObjectRefs), then polls until the store holds at most
    ``empty_bytes``, or (with ``quiet_s``) has not shrunk for ``quiet_s`` seconds, or
    ``timeout_s`` has passed.

    Args:
        empty_bytes: a store holding no more than this counts as settled at once.
        timeout_s: give up after this many seconds and return the lowest reading.
        quiet_s: settled when the reading has not dropped for this long (keep it above the
            raylet's free period); None waits for ``empty_bytes`` or the timeout only.
        poll_s: seconds between readings.

    Returns:
        The lowest ``used_bytes`` seen, cluster-wide.

    Raises:
        RuntimeError: if Ray is not initialized.
    """
    gc.collect()
    start = time.monotonic()
    lowest = object_store_stats().used_bytes
    lowest_since = start
    while lowest > empty_bytes and time.monotonic() - start < timeout_s:
        time.sleep(poll_s)
        current = object_store_stats().used_bytes
        now = time.monotonic()
        if current < lowest:
            lowest, lowest_since = current, now
        elif quiet_s is not None and now - lowest_since >= quiet_s:
            break
    return lowest


@dataclass
class PlasmaSample:
    """One cluster-wide object-store reading.

    Attributes:
        t_s: seconds since the sampler started (``time.monotonic`` based).
        used_bytes: shared-memory bytes in use, summed over nodes.
        spilled_bytes_total: bytes spilled since the cluster started.
        fallback_bytes: bytes allocated on disk because shared memory was full.
        referenced_bytes: bytes of objects some worker still references; None when this
            sample did not classify objects.
        pinned_unreferenced_bytes: bytes of objects pinned in memory with no reference
            anywhere (zero-copy views keep them alive); None when not classified.
        num_pinned_unreferenced: how many such objects.
        call_s: how long this sample's RPCs took, in seconds.
        cpu_busy_s: CPU seconds this machine's cores had spent busy (not idle nor waiting on
            I/O) since boot, summed over cores, from ``/proc/stat`` (:func:`machine_busy_cpu_s`);
            None where it cannot be read (not Linux).
    """

    t_s: float
    used_bytes: int
    spilled_bytes_total: int
    fallback_bytes: int
    referenced_bytes: int | None = None
    pinned_unreferenced_bytes: int | None = None
    num_pinned_unreferenced: int | None = None
    call_s: float = 0.0
    cpu_busy_s: float | None = None


def machine_busy_cpu_s(stat_path: str = "/proc/stat") -> float | None:
    """CPU seconds the machine's cores have been busy since boot, summed over cores: the
    ``cpu`` line of ``/proc/stat`` less its idle and iowait ticks, over ``SC_CLK_TCK`` (Linux,
    ``man 5 proc``). None where the file cannot be read.

    Examples:
        >>> busy = machine_busy_cpu_s()
        >>> busy is None or busy > 0
        True
    """
    try:
        with open(stat_path) as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:]]
        busy = sum(ticks[:8]) - ticks[3] - ticks[4]  # user..steal, less idle and iowait
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _classify(replies, min_object_bytes: int) -> tuple[int, int, int]:
    """Split objects into referenced and pinned-only, from GetNodeStats memory info."""
    referenced: dict[bytes, int] = {}
    pinned: dict[bytes, int] = {}
    for reply in replies:
        for worker in reply.core_workers_stats:
            for ref in worker.object_refs:
                size = int(ref.object_size)
                if size < min_object_bytes:
                    continue
                if ref.local_ref_count > 0 or ref.submitted_task_ref_count > 0 or len(ref.contained_in_owned) > 0:
                    referenced[ref.object_id] = size
                elif ref.pinned_in_memory:
                    pinned[ref.object_id] = size
    pinned_only = {oid: size for oid, size in pinned.items() if oid not in referenced}
    return sum(referenced.values()), sum(pinned_only.values()), len(pinned_only)


class PlasmaSampler:
    """Poll every raylet's object-store statistics from a background thread.

    Use as a context manager around the workload, or :meth:`start` and :meth:`stop`; read
    :attr:`samples` afterwards.

    Args:
        interval_s: seconds between samples; 0.1 gives 10 Hz.
        classify_every: classify objects (a heavier RPC, 5-100 ms) every this many samples;
            0 never classifies.
        min_object_bytes: ignore objects smaller than this when classifying (task metadata,
            small results), in bytes.

    The background thread skips a reading whose RPC fails and counts it in
    ``failed_readings``, so a busy raylet leaves a gap in the timeline, not an end.

    Raises:
        RuntimeError: if Ray is not initialized.
    """

    def __init__(self, interval_s: float = 0.1, classify_every: int = 3, min_object_bytes: int = 1 << 20):
        self.interval_s = interval_s
        self.classify_every = classify_every
        self.min_object_bytes = min_object_bytes
        self.samples: list[PlasmaSample] = []
        self.failed_readings = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stubs = _raylet_stubs()
        self._t0 = time.monotonic()

    def sample(self, classify: bool = False) -> PlasmaSample:
        """Take one reading now (also usable without the thread)."""
        start = time.perf_counter()
        replies = _node_stats(self._stubs, include_memory_info=classify)
        sample = PlasmaSample(time.monotonic() - self._t0, _sum(replies, "object_store_bytes_used"),
                              _sum(replies, "spilled_bytes_total"), _sum(replies, "object_store_bytes_fallback"))
        if classify:
            sample.referenced_bytes, sample.pinned_unreferenced_bytes, sample.num_pinned_unreferenced = _classify(
                replies, self.min_object_bytes
            )
        sample.call_s = time.perf_counter() - start
        sample.cpu_busy_s = machine_busy_cpu_s()
        return sample

    def _run(self) -> None:
        i = 0
        next_t = time.monotonic()
        while not self._stop.is_set():
            classify = self.classify_every > 0 and i % self.classify_every == 0
            try:
                self.samples.append(self.sample(classify))
            except Exception:  # noqa: BLE001 - a busy or vanishing raylet: skip this reading
                # On a loaded machine a raylet that is spilling can miss one call's 10 s
                # deadline; stopping here would silently cut the timeline short.
                if self._stop.is_set():
                    break
                self.failed_readings += 1
            i += 1
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def start(self) -> PlasmaSampler:
        """Start the background thread; the clock restarts at 0."""
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="plasma-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[PlasmaSample]:
        """Stop the thread, close the channels, and return the samples."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for channel, _ in self._stubs:
            channel.close()
        return self.samples

    def __enter__(self) -> PlasmaSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def t0_monotonic(self) -> float:
        """The ``time.monotonic()`` value that ``t_s == 0`` corresponds to."""
        return self._t0


def time_probe_cost_s(sampler: PlasmaSampler, repeats: int = 20) -> dict[str, float]:
    """Median seconds per plain and per classifying sample, measured now."""
    plain = [sampler.sample(False).call_s for _ in range(repeats)]
    classify = [sampler.sample(True).call_s for _ in range(max(3, repeats // 4))]
    return {"plain_call_s": statistics.median(plain), "classify_call_s": statistics.median(classify)}
