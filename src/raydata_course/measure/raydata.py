"""What Ray Data believes it uses, read from inside its streaming executor.

:class:`RayDataProbe` is a Ray Data ``ExecutionCallback``. Ray instantiates the class once
per execution (``ray/data/_internal/planner/planner.py``) and calls
:meth:`~RayDataProbe.on_execution_step` on the executor's scheduling thread after every loop
step (``ray/data/_internal/execution/streaming_executor.py``), wherever the executor runs: in
the driver for ``iter_batches`` and ``materialize``, and inside the ``SplitCoordinator`` actor
for ``streaming_split`` and Ray Train, because the dataset's ``DataContext`` (with its
callback classes) is copied there. Each sample holds the resource manager's global
object-store usage estimate, its limit (the budget), the external-consumer bytes and the
operator topology.

Samples stay in the process that took them (:meth:`RayDataProbe.samples`), and when a
:class:`Recorder` actor is running (:func:`start_recorder`) they are also shipped to it, so a
driver can read what an executor in another process believed.

Why this hook: ``ExecutionCallback`` is the interface Ray Data itself uses for its Prometheus
resource-allocator callback (``ray/data/_internal/execution/callbacks/``) and is registered
through a ``DataContext`` field (``custom_execution_callback_classes``), so no Ray function is
patched and reads happen on the thread that owns the state. Parsing progress-bar text breaks
on wording changes, Prometheus gauges lag by 5 s, and patching ``ResourceManager.__init__``
depends on a private constructor. What remains private is the resource manager's attribute
name (``executor._resource_manager``), its getters (``get_global_usage``,
``get_global_limits``, ``get_external_consumer_bytes`` in
``ray/data/_internal/execution/resource_manager.py``) and ``executor._topology``, all read
defensively: a missing attribute records nothing. All as of Ray 2.60.0.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field

__all__ = ["RECORDER_NAME", "RECORDER_NAMESPACE", "RayDataSample", "RayDataProbe", "Recorder", "start_recorder"]

RECORDER_NAME = "raydata_course_recorder"
RECORDER_NAMESPACE = "raydata_course"
#: The most samples a process keeps (about 15 minutes at 50 Hz).
_MAX_LOCAL_SAMPLES = 50_000


@dataclass
class RayDataSample:
    """What one Ray Data executor believed at one moment.

    Attributes:
        t_wall_s: ``time.time()`` when read (the executor may run in another process).
        t_monotonic_s: ``time.monotonic()`` when read, in the executor's process.
        pid: the process that runs the executor (the driver, or the SplitCoordinator actor).
        executor: an id for the execution, unique per process.
        usage_bytes: the resource manager's global object-store usage estimate.
        limit_bytes: the global object-store limit (the budget); -1 when unknown or unlimited
            (a materializing operator's infinite budget).
        external_consumer_bytes: bytes the consumers reported as prefetched.
        operators: the executor's physical operators, upstream first.
        op_bytes: per operator, upstream first, Ray Data's object-store usage for it: its
            outputs still referenced (``estimate_object_store_usage``) plus its running
            tasks' estimated pending outputs (``resource_manager.py:189-200``).
        op_pending_bytes: per operator, upstream first, the part of ``op_bytes`` that is
            its running tasks' estimated pending outputs
            (``OpRuntimeMetrics.obj_store_mem_pending_task_outputs``).
        op_tasks: per operator, upstream first, its running tasks.
        op_generation_s: per operator, upstream first, the seconds its tasks have spent making
            their output blocks since the execution started, as the workers timed each block
            (``OpRuntimeMetrics.block_generation_time``: a sum of wall times, so it includes
            whatever slowed the tasks, the machine's other load included).
        op_rows: per operator, upstream first, the rows of those blocks
            (``OpRuntimeMetrics.rows_task_outputs_generated``).
        op_out_bytes: per operator, upstream first, the bytes of those blocks
            (``OpRuntimeMetrics.bytes_task_outputs_generated``).
        loop_cpu_s: CPU seconds the executor's scheduling thread had used since it started
            (``time.thread_time`` at its latest sampled loop step; the executor is a thread
            of its own, ``StreamingExecutor(threading.Thread)``). A loop that finds nothing
            to do yet does not wait runs again at once (``push_split.idle``), and this is
            where that shows.
    """

    t_wall_s: float
    t_monotonic_s: float
    pid: int
    executor: str
    usage_bytes: int
    limit_bytes: int
    external_consumer_bytes: int
    operators: list[str] = field(default_factory=list)
    op_bytes: list[int] = field(default_factory=list)
    op_pending_bytes: list[int] = field(default_factory=list)
    op_tasks: list[int] = field(default_factory=list)
    op_generation_s: list[float] = field(default_factory=list)
    op_rows: list[int] = field(default_factory=list)
    loop_cpu_s: float = 0.0
    op_out_bytes: list[int] = field(default_factory=list)


try:
    from ray.data._internal.execution.execution_callback import ExecutionCallback as _ExecutionCallback
except ImportError:  # pragma: no cover - the interface exists in Ray 2.60
    _ExecutionCallback = object


def _finite(value) -> int:
    return int(value) if value is not None and value != float("inf") else -1


class RayDataProbe(_ExecutionCallback):
    """Ray Data ``ExecutionCallback`` that samples the executor's budget and usage.

    Register it on the ``DataContext`` *before* the dataset is created (a dataset keeps the
    context it was made with)::

        ctx = ray.data.DataContext.get_current()
        ctx.custom_execution_callback_classes.append(RayDataProbe)

    A sample is taken at most every :attr:`interval_s` seconds; a subclass can change it
    (the lab samples at 10 Hz, like its plasma sampler). Read this process's samples with
    :meth:`samples`; with a :class:`Recorder` running, they also reach it every
    :attr:`flush_s` seconds and when the execution ends.
    """

    #: seconds between samples of one execution.
    interval_s = 0.02
    #: seconds between shipments to the recorder.
    flush_s = 0.5
    _lock = threading.Lock()
    #: this process's samples, per probe class (a subclass keeps its own).
    _local: dict[type, list[RayDataSample]] = {}

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._id = f"{self._pid}-{id(self):x}"
        self._buffer: list[dict] = []
        self._last_sample = 0.0
        self._last_flush = time.monotonic()
        self._recorder = None
        self._no_recorder = False
        self._loop_cpu_s = 0.0

    # ------------------------------------------------------------ this process's samples
    @classmethod
    def reset(cls) -> None:
        """Forget the samples this class has taken in this process."""
        with RayDataProbe._lock:
            RayDataProbe._local[cls] = []

    @classmethod
    def samples(cls) -> list[RayDataSample]:
        """The samples this class took in this process since the last :meth:`reset`, oldest first."""
        with RayDataProbe._lock:
            return list(RayDataProbe._local.get(cls, []))

    @classmethod
    def operators(cls) -> list[str]:
        """The physical operators of the last execution sampled in this process, upstream first."""
        with RayDataProbe._lock:
            return next((list(s.operators) for s in reversed(RayDataProbe._local.get(cls, [])) if s.operators), [])

    # ------------------------------------------------------------ the callback
    def _read(self, executor, now: float) -> RayDataSample | None:
        rm = getattr(executor, "_resource_manager", None)
        if rm is None:
            return None
        usage = rm.get_global_usage().object_store_memory
        limit = rm.get_global_limits().object_store_memory
        external = rm.get_external_consumer_bytes() if hasattr(rm, "get_external_consumer_bytes") else 0
        topology = getattr(executor, "_topology", None) or {}
        op_usages = getattr(rm, "_op_usages", None) or {}
        op_bytes = [_finite(getattr(op_usages.get(op), "object_store_memory", 0) or 0) for op in topology]
        pending = getattr(rm, "_mem_op_internal", None) or {}
        op_pending = [_finite(pending.get(op, 0) or 0) for op in topology]
        op_tasks = [int(getattr(op.metrics, "num_tasks_running", 0) or 0) for op in topology]
        op_generation_s = [float(getattr(op.metrics, "block_generation_time", 0) or 0) for op in topology]
        op_rows = [int(getattr(op.metrics, "rows_task_outputs_generated", 0) or 0) for op in topology]
        op_out_bytes = [_finite(getattr(op.metrics, "bytes_task_outputs_generated", 0) or 0) for op in topology]
        return RayDataSample(time.time(), now, self._pid, self._id, _finite(usage), _finite(limit),
                             int(external), [op.name for op in topology], op_bytes, op_pending, op_tasks,
                             op_generation_s, op_rows, self._loop_cpu_s, op_out_bytes)

    def _flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._buffer:
            return
        buffer, self._buffer = self._buffer, []
        if self._no_recorder:
            return
        import ray

        try:
            if self._recorder is None:
                self._recorder = ray.get_actor(RECORDER_NAME, namespace=RECORDER_NAMESPACE)
            self._recorder.add.remote(buffer)
        except ValueError:  # no recorder: nobody outside this process listens
            self._no_recorder = True

    def before_execution_starts(self, executor) -> None:
        return None

    def on_execution_step(self, executor) -> None:
        now = time.monotonic()
        if now - self._last_sample < self.interval_s:
            return
        self._loop_cpu_s = time.thread_time()  # here only: the last sample runs in shutdown's thread
        self._sample(executor, now)
        if now - self._last_flush >= self.flush_s:
            self._flush()

    def _sample(self, executor, now: float) -> None:
        self._last_sample = now
        sample = self._read(executor, now)
        if sample is not None:
            with RayDataProbe._lock:
                local = RayDataProbe._local.setdefault(type(self), [])
                if len(local) < _MAX_LOCAL_SAMPLES:
                    local.append(sample)
            self._buffer.append(asdict(sample))

    def after_execution_succeeds(self, executor) -> None:
        self._sample(executor, time.monotonic())  # the execution's final counters
        self._flush()

    def after_execution_fails(self, executor, error: Exception) -> None:
        self._flush()


class Recorder:
    """Body of the recorder actor (:func:`start_recorder`): collects
    :class:`RayDataSample` dicts from probes, per-consumer records from training workers and
    the push split's window samples (``PushSplitCoordinator``'s ``window_history`` records),
    in any process."""

    def __init__(self) -> None:
        self._samples: list[dict] = []
        self._consumers: list[dict] = []
        self._windows: list[dict] = []

    def add(self, samples: list[dict]) -> None:
        self._samples.extend(samples)

    def add_consumer(self, record: dict) -> None:
        self._consumers.append(record)

    def add_windows(self, records: list[dict]) -> None:
        self._windows.extend(records)

    def drain_windows(self) -> list[dict]:
        """Return and forget the push split's window samples."""
        out, self._windows = self._windows, []
        return out

    def drain(self) -> tuple[list[dict], list[dict]]:
        """Return and forget (probe samples, consumer records)."""
        out = (self._samples, self._consumers)
        self._samples, self._consumers = [], []
        return out


def start_recorder():
    """Create (or find) the named recorder actor that probes ship their samples to.

    Returns:
        The actor handle; it uses no CPU and ends with the driver.

    Raises:
        RuntimeError: if Ray is not running.
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running: call raydata_course.setup() first.")
    return ray.remote(num_cpus=0)(Recorder).options(
        name=RECORDER_NAME, namespace=RECORDER_NAMESPACE, get_if_exists=True, lifetime=None
    ).remote()
