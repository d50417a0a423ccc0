"""Measure the object store as it really is, and as Ray Data believes it is.

Three probes, each named for what it reports:

- :class:`PlasmaSampler` polls every raylet from a background thread (10 Hz by default) and
  records the **actual** shared-memory bytes in use, the spilled and fallback bytes, and,
  every few samples, a classification of every object in the store:

  - *referenced*: some worker still holds an ``ObjectRef`` (or a task argument) to it;
  - *pinned, unreferenced*: no ``ObjectRef`` anywhere, but the object is still pinned in
    memory. These are blocks kept alive by zero-copy numpy/Arrow/torch views after the
    consumer pipeline dropped their refs: the hidden buffers, counted directly;
  - the rest of ``used`` is freed-but-not-yet-deleted memory (the raylet deletes freed
    objects in batches every ``free_objects_period_milliseconds``, 1000 ms by default).

- :class:`RayDataProbe` is a Ray Data ``ExecutionCallback``. Ray calls it on the executor's
  scheduling thread after every loop step, wherever the executor runs: in the driver for
  ``iter_batches``, and inside the ``SplitCoordinator`` actor for ``streaming_split`` and
  Ray Train, because the dataset's ``DataContext`` (with its callback classes) is copied
  there. It reads the resource manager's global object-store usage and limit, and the
  external-consumer bytes, and ships samples to a :class:`Recorder` actor.

  Why this hook: ``ExecutionCallback`` is the interface Ray Data itself uses for its
  Prometheus resource-allocator callback (``ray/data/_internal/execution/callbacks/``) and
  is registered through a ``DataContext`` field (``custom_execution_callback_classes``), so
  no Ray function is patched and reads happen on the thread that owns the state. The
  alternatives are worse: parsing progress-bar text breaks on wording changes, Prometheus
  gauges lag by 5 s, and monkeypatching ``ResourceManager.__init__`` depends on a private
  constructor. What remains private is the resource manager's attribute name
  (``executor._resource_manager``) and its two getters, read defensively.

- :func:`time_probe_cost_s` measures what one sampler call costs, so the lab can report it.

Sources: ``ray/data/_internal/execution/execution_callback.py`` (interface),
``ray/data/context.py`` (``custom_execution_callback_classes``),
``ray/data/_internal/execution/resource_manager.py`` (``get_global_usage``,
``get_global_limits``, ``get_external_consumer_bytes``), and the raylet's ``GetNodeStats``
RPC (``ray/core/generated/node_manager_pb2``, the data behind ``ray memory``), all in Ray 2.60.0.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
import ray

__all__ = [
    "RECORDER_NAME",
    "RECORDER_NAMESPACE",
    "PlasmaSample",
    "PlasmaSampler",
    "RayDataSample",
    "RayDataProbe",
    "Recorder",
    "start_recorder",
    "time_probe_cost_s",
]

RECORDER_NAME = "raydata_course_lab_recorder"
RECORDER_NAMESPACE = "raydata_course_lab"


# ------------------------------------------------------------------------ actual plasma


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
    """

    t_s: float
    used_bytes: int
    spilled_bytes_total: int
    fallback_bytes: int
    referenced_bytes: int | None = None
    pinned_unreferenced_bytes: int | None = None
    num_pinned_unreferenced: int | None = None
    call_s: float = 0.0


def _raylet_stubs() -> list:
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import node_manager_pb2_grpc

    stubs = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        channel = init_grpc_channel(f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}")
        stubs.append((channel, node_manager_pb2_grpc.NodeManagerServiceStub(channel)))
    return stubs


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

    Use as a context manager around the workload; read :attr:`samples` afterwards.

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
        if not ray.is_initialized():
            raise RuntimeError("PlasmaSampler needs a running Ray: call raydata_course.setup() first.")
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
        from ray.core.generated import node_manager_pb2

        start = time.perf_counter()
        request = node_manager_pb2.GetNodeStatsRequest(include_memory_info=classify)
        replies = [stub.GetNodeStats(request, timeout=10) for _, stub in self._stubs]
        used = sum(int(r.store_stats.object_store_bytes_used) for r in replies)
        spilled = sum(int(r.store_stats.spilled_bytes_total) for r in replies)
        fallback = sum(int(r.store_stats.object_store_bytes_fallback) for r in replies)
        sample = PlasmaSample(time.monotonic() - self._t0, used, spilled, fallback)
        if classify:
            sample.referenced_bytes, sample.pinned_unreferenced_bytes, sample.num_pinned_unreferenced = _classify(
                replies, self.min_object_bytes
            )
        sample.call_s = time.perf_counter() - start
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
    import statistics

    plain = [sampler.sample(False).call_s for _ in range(repeats)]
    classify = [sampler.sample(True).call_s for _ in range(max(3, repeats // 4))]
    return {"plain_call_s": statistics.median(plain), "classify_call_s": statistics.median(classify)}


# ------------------------------------------------------------------- Ray Data's own view


@dataclass
class RayDataSample:
    """What one Ray Data executor believed at one moment.

    Attributes:
        t_wall_s: ``time.time()`` when read (the executor may run in another process).
        pid: process that runs the executor (the driver, or the SplitCoordinator actor).
        executor: an id for the execution, unique per process.
        usage_bytes: the resource manager's global object-store usage estimate.
        limit_bytes: the global object-store limit (the budget); 0 until first computed.
        external_consumer_bytes: bytes the consumers reported as prefetched.
    """

    t_wall_s: float
    pid: int
    executor: str
    usage_bytes: int
    limit_bytes: int
    external_consumer_bytes: int


@ray.remote(num_cpus=0)
class Recorder:
    """Collects :class:`RayDataSample` dicts from probes, and per-consumer throughput
    records from Train workers, in any process."""

    def __init__(self) -> None:
        self._samples: list[dict] = []
        self._consumers: list[dict] = []

    def add(self, samples: list[dict]) -> None:
        self._samples.extend(samples)

    def add_consumer(self, record: dict) -> None:
        self._consumers.append(record)

    def drain(self) -> tuple[list[dict], list[dict]]:
        """Return and forget (probe samples, consumer records)."""
        out = (self._samples, self._consumers)
        self._samples, self._consumers = [], []
        return out


def start_recorder():
    """Create (or find) the named :class:`Recorder` actor that probes send to."""
    return Recorder.options(
        name=RECORDER_NAME, namespace=RECORDER_NAMESPACE, get_if_exists=True, lifetime=None
    ).remote()


try:
    from ray.data._internal.execution.execution_callback import ExecutionCallback as _ExecutionCallback
except ImportError:  # pragma: no cover - interface missing in some Ray versions
    _ExecutionCallback = object


class RayDataProbe(_ExecutionCallback):
    """Ray Data ``ExecutionCallback`` that samples the resource manager (see module docs).

    Register it before the dataset is created::

        ctx = ray.data.DataContext.get_current()
        ctx.custom_execution_callback_classes.append(RayDataProbe)

    Samples are taken at most every ``interval_s`` (0.1 s) and sent to the recorder every
    ``flush_s`` (0.5 s) and when execution ends.
    """

    interval_s = 0.1
    flush_s = 0.5

    def __init__(self) -> None:
        import os

        self._pid = os.getpid()
        self._id = f"{self._pid}-{id(self):x}"
        self._buffer: list[dict] = []
        self._last_sample = 0.0
        self._last_flush = time.monotonic()
        self._recorder = None

    def _read(self, executor) -> RayDataSample | None:
        rm = getattr(executor, "_resource_manager", None)
        if rm is None:
            return None
        usage = rm.get_global_usage().object_store_memory
        limit = rm.get_global_limits().object_store_memory
        external = rm.get_external_consumer_bytes() if hasattr(rm, "get_external_consumer_bytes") else 0
        finite = lambda x: int(x) if x is not None and x != float("inf") else -1  # noqa: E731
        return RayDataSample(time.time(), self._pid, self._id, finite(usage), finite(limit), int(external))

    def _flush(self) -> None:
        if not self._buffer:
            return
        try:
            if self._recorder is None:
                self._recorder = ray.get_actor(RECORDER_NAME, namespace=RECORDER_NAMESPACE)
            self._recorder.add.remote(self._buffer)
        except ValueError:  # no recorder: the probe is registered but nobody listens
            pass
        self._buffer = []
        self._last_flush = time.monotonic()

    def on_execution_step(self, executor) -> None:
        now = time.monotonic()
        if now - self._last_sample < self.interval_s:
            return
        self._last_sample = now
        sample = self._read(executor)
        if sample is not None:
            self._buffer.append(asdict(sample))
        if now - self._last_flush >= self.flush_s:
            self._flush()

    def after_execution_succeeds(self, executor) -> None:
        self._flush()

    def after_execution_fails(self, executor, error: Exception) -> None:
        self._flush()
