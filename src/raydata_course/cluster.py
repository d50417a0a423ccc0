"""Start and stop the course's embedded Ray cluster, and find its processes.

Every notebook, the lab and the grader start Ray through :func:`setup`, so the course has
one place that decides how big the local cluster is (:mod:`raydata_course.sizing`, whose
names are re-exported here), where Ray keeps its files, whether Ray Data draws progress
bars, and which Ray version is acceptable.

Examples:
    >>> mentions_folder("raylet --temp-dir=/tmp/rdc-t12/session_1", "/tmp/rdc-t12")
    True
"""

from __future__ import annotations

import logging
import os
import random
import re
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from raydata_course._util import drop_known_noise
from raydata_course.layout import HEADLESS_ENV, TEMP_ROOT_ENV
from raydata_course.sizing import (
    RAY_VERSION,
    ClusterSize,
    ClusterTooSmallError,
    RayVersionError,
    check_ray_version,
    default_cluster_size,
)
from raydata_course.units import MiB

__all__ = [
    "RAY_VERSION",
    "ClusterSize",
    "ClusterTooSmallError",
    "CourseSession",
    "RayVersionError",
    "check_ray_version",
    "default_cluster_size",
    "default_temp_root",
    "is_interactive",
    "mentions_folder",
    "ray_processes",
    "setup",
    "shutdown",
    "restart",
]

logger = logging.getLogger(__name__)

FOOTER_ACTORS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"

# Ray puts unix sockets under its session folder; Linux limits a socket path to 107 bytes,
# and Ray appends about 70 characters to the temp root.
_MAX_TEMP_ROOT_CHARS = 36


def default_temp_root() -> str:
    """Return the folder under which Ray writes session files, logs and sockets.

    It is ``$RAYDATA_COURSE_TMPDIR`` when set, else ``/tmp/rdc-<uid>``: private to this
    user, so other Ray users on a shared machine are not disturbed, and short, because Ray
    puts unix sockets below it.
    """
    root = os.environ.get(TEMP_ROOT_ENV)
    if root:
        return root
    base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
    return os.path.join(base, f"rdc-{os.getuid()}")


def is_interactive() -> bool:
    """Tell whether a person is watching: True in a Jupyter or terminal session.

    False when ``RAYDATA_COURSE_HEADLESS=1`` (set by ``make course``, the tests and the
    grader) or when ``CI`` is set, and False for a script whose stdout is not a terminal.
    """
    if os.environ.get(HEADLESS_ENV, "") not in ("", "0") or os.environ.get("CI"):
        return False
    if "ipykernel" in sys.modules:
        return True
    return sys.stdout is not None and sys.stdout.isatty()


@dataclass
class CourseSession:
    """What :func:`setup` started or connected to.

    Use it as a context manager to shut Ray down at the end of a block.

    Attributes:
        address: the GCS address of the cluster.
        num_cpus: CPUs the cluster offers (the whole cluster when connected to one).
        object_store_memory_bytes: object-store capacity of the cluster, in bytes.
        connected_to_existing: True when ``RAY_ADDRESS`` pointed at a running cluster.
        temp_root: the folder holding Ray's session files; None when connected.
        ray_version: ``ray.__version__``.
        package_version: this package's ``__version__``.
        seed: the seed given to Python's and NumPy's generators.
    """

    address: str
    num_cpus: int
    object_store_memory_bytes: int
    connected_to_existing: bool
    temp_root: str | None
    ray_version: str
    package_version: str
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)

    def __enter__(self) -> CourseSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        shutdown()

    def __str__(self) -> str:
        where = f"connected to {self.address}" if self.connected_to_existing else "local"
        return (
            f"raydata_course {self.package_version} | Ray {self.ray_version} | {where} | "
            f"{self.num_cpus} CPUs | object store "
            f"{self.object_store_memory_bytes / MiB:.0f} MiB"
        )


def _seed(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return
    np.random.seed(seed)
    if "torch" in sys.modules:  # seed torch only if the notebook already uses it
        sys.modules["torch"].manual_seed(seed)


def _check_temp_root(root: str) -> None:
    if len(root) > _MAX_TEMP_ROOT_CHARS:
        raise ValueError(
            f"Ray's temp folder {root!r} is {len(root)} characters long; Ray puts unix "
            f"sockets below it and Linux limits their paths to 107 bytes. Choose a folder of "
            f"at most {_MAX_TEMP_ROOT_CHARS} characters with {TEMP_ROOT_ENV}=/tmp/<short>."
        )


#: tries to start a local cluster when Ray's node start-up times out on a busy machine.
_START_ATTEMPTS = 3
#: The arguments of the last :func:`setup` that started a local cluster in this process (for :func:`restart`).
_LAST_LOCAL_START: dict[str, Any] | None = None
#: the address of the local cluster :func:`setup` started in this process, if it did
_STARTED_HERE_ADDRESS: str | None = None


def setup(
    *,
    num_cpus: int | None = None,
    object_store_memory_bytes: int | None = None,
    seed: int = 0,
    temp_root: str | None = None,
    progress_bars: bool | None = None,
    require_num_cpus: int = 1,
    require_object_store_bytes: int = 0,
    system_config: dict[str, Any] | None = None,
) -> CourseSession:
    """Start the course's embedded local Ray cluster, or connect to the one in ``RAY_ADDRESS``.

    It checks the Ray version, seeds Python's and NumPy's generators, starts Ray without the
    dashboard in a private temp folder, sizes the Parquet reader's footer-reading actor pool
    for the local cluster (``RAY_DATA_PARQUET_FOOTER_NUM_ACTORS``, unless already set), and
    turns Ray Data's progress bars off unless a person is watching (see :func:`is_interactive`). Calling it again while Ray is running
    reuses the running cluster.

    Args:
        num_cpus: logical CPUs for a local cluster; default from :func:`default_cluster_size`.
        object_store_memory_bytes: object-store size for a local cluster, in bytes; default
            from :func:`default_cluster_size`.
        seed: seed for ``random`` and ``numpy.random`` (and torch, if already imported).
        temp_root: folder for Ray's session files; default :func:`default_temp_root`.
        progress_bars: force Ray Data's progress bars on or off; default: on when interactive.
        require_num_cpus: fail unless the cluster offers at least this many CPUs.
        require_object_store_bytes: fail unless the object store holds at least this many bytes.
        system_config: Ray system settings for a local cluster (``ray.init(_system_config=...)``),
            e.g. ``{"free_objects_period_milliseconds": 0}``; ignored when connecting.

    Returns:
        A :class:`CourseSession` describing the cluster.

    Raises:
        RayVersionError: if the installed Ray is not ``RAY_VERSION``.
        ClusterTooSmallError: if the cluster is smaller than the ``require_*`` arguments.
        ValueError: if a size is not positive or the temp folder path is too long.
    """
    from raydata_course import __version__

    ray_version = check_ray_version()
    import ray
    import ray.data

    for name, value in (("num_cpus", num_cpus), ("object_store_memory_bytes", object_store_memory_bytes)):
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}.")

    if temp_root is not None:
        _check_temp_root(temp_root)
    address_env = os.environ.get("RAY_ADDRESS", "")
    connected = False
    started_here = False
    root: str | None = None
    if ray.is_initialized():
        connected = bool(address_env)
        logger.info("Ray is already running in this process; reusing it as it is.")
    elif address_env:
        if num_cpus is not None or object_store_memory_bytes is not None:
            logger.warning(
                "RAY_ADDRESS=%s is set, so setup() connects to that cluster and ignores "
                "num_cpus/object_store_memory_bytes (a running cluster cannot be resized).",
                address_env,
            )
        ray.init(address=address_env, log_to_driver=True)
        connected = True
    else:
        size = default_cluster_size()
        root = temp_root or default_temp_root()
        _check_temp_root(root)
        os.makedirs(root, exist_ok=True)
        # Ray 2.60's Parquet reader lists files in a task that starts an actor pool to read
        # footers, 32 actors by default (RAY_DATA_PARQUET_FOOTER_NUM_ACTORS, read when
        # read_parquet is called, in ray/data/_internal/datasource_v2/formats/parquet/
        # footer_file_indexer.py). Starting 32 Python processes costs 4-6 s per read on two
        # cores; a laptop-sized cluster needs one per four CPUs. A value the user set wins.
        os.environ.setdefault(FOOTER_ACTORS_ENV, str(max(1, (num_cpus or size.num_cpus) // 4)))
        # Ray's processes inherit this, which lets ray_processes() find them even after
        # they rename themselves (ray::DashboardAgent, ...).
        os.environ[TEMP_ROOT_ENV] = root
        for attempt in range(_START_ATTEMPTS):
            try:
                ray.init(
                    num_cpus=num_cpus or size.num_cpus,
                    object_store_memory=object_store_memory_bytes or size.object_store_memory_bytes,
                    include_dashboard=False,
                    _temp_dir=root,
                    _system_config=system_config or None,
                )
                break
            except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception on a slow start
                # On a busy machine the local node can miss Ray's fixed start-up wait
                # ("The current node timed out during startup"); a second start usually works.
                if "timed out during startup" not in str(exc) or attempt + 1 == _START_ATTEMPTS:
                    raise
                ray.shutdown()
        started_here = True
        global _LAST_LOCAL_START, _STARTED_HERE_ADDRESS
        _STARTED_HERE_ADDRESS = ray.get_runtime_context().gcs_address
        _LAST_LOCAL_START = {"num_cpus": num_cpus, "object_store_memory_bytes": object_store_memory_bytes, "seed": seed,
                             "temp_root": temp_root, "progress_bars": progress_bars, "system_config": system_config,
                             "require_num_cpus": require_num_cpus,
                             "require_object_store_bytes": require_object_store_bytes}

    drop_known_noise()  # workers' known-harmless repeated warnings (see _util.KNOWN_NOISE)
    resources = ray.cluster_resources()
    session = CourseSession(
        address=ray.get_runtime_context().gcs_address,
        num_cpus=int(resources.get("CPU", 0)),
        object_store_memory_bytes=int(resources.get("object_store_memory", 0)),
        connected_to_existing=connected,
        temp_root=root,
        ray_version=ray_version,
        package_version=__version__,
        seed=seed,
    )
    if session.num_cpus < require_num_cpus or session.object_store_memory_bytes < require_object_store_bytes:
        message = (
            f"This cluster offers {session.num_cpus} CPUs and a "
            f"{session.object_store_memory_bytes / MiB:.0f} MiB object store, but this notebook "
            f"needs at least {require_num_cpus} CPUs and "
            f"{require_object_store_bytes / MiB:.0f} MiB."
        )
        if started_here:
            shutdown()
        if not connected:
            message += " Pass larger num_cpus/object_store_memory_bytes to setup()."
        else:
            message += " Connect to a larger cluster, or unset RAY_ADDRESS to run locally."
        raise ClusterTooSmallError(message)

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = is_interactive() if progress_bars is None else progress_bars
    _seed(seed)
    return session


def shutdown(wait_s: float = 20.0) -> None:
    """Disconnect from Ray, and stop the local cluster if :func:`setup` started one.

    First it stops Ray Data's executions still running in this process and waits up to
    ``wait_s`` seconds for threads that may be in a Ray call, such as a ``streaming_split``
    reader a time limit gave up on (:func:`raydata_course.ray_threads.settle`): Ray ends the
    process when a thread calls it after ``ray.shutdown()``. If one is still running then and
    this process reached a running cluster (``RAY_ADDRESS``), it stays connected until the
    process exits and says so; a local cluster this process started is always stopped.

    Safe to call when Ray is not running.

    Args:
        wait_s: the longest wait for those threads, in seconds (>= 0).

    Raises:
        ValueError: if ``wait_s`` is negative.
    """
    import ray

    from raydata_course.ray_threads import settle

    if wait_s < 0:
        raise ValueError(f"wait_s must be >= 0, got {wait_s!r}.")
    if not ray.is_initialized():
        return
    left = settle(wait_s)
    address = _current_address()
    if left and _STARTED_HERE_ADDRESS != address:
        print(f"raydata_course.shutdown: {len(left)} thread(s) still in Ray calls "
              f"({', '.join(sorted({t.name for t in left}))}); this process stays connected to "
              f"{address} until it exits (disconnecting now would end it).", file=sys.stderr)
        return
    ray.shutdown()


def _current_address() -> str | None:
    """The GCS address this process is connected to, or None."""
    import ray

    try:
        return ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 - not connected
        return None


def restart() -> CourseSession:
    """Stop the local cluster :func:`setup` started in this process and start it again, fresh,
    with the same arguments: an empty object store, new workers (everything the old cluster
    held is gone, so datasets and object refs made before cannot be used after).

    Returns:
        The new :class:`CourseSession`.

    Raises:
        RuntimeError: if :func:`setup` has not started a local cluster in this process (a
            cluster reached through ``RAY_ADDRESS`` is not this process's to restart).
    """
    if _LAST_LOCAL_START is None:
        raise RuntimeError("setup() has not started a local Ray cluster in this process: nothing to restart.")
    shutdown()
    return setup(**_LAST_LOCAL_START)


def mentions_folder(cmdline: str, folder: str) -> bool:
    """True when ``cmdline`` names ``folder`` or a path inside it.

    A plain substring test is not enough: ``/tmp/rdc-t12`` is a prefix of ``/tmp/rdc-t1234``,
    another test session's folder.

    Examples:
        >>> mentions_folder("raylet --temp-dir=/tmp/rdc-t12/session_1", "/tmp/rdc-t12")
        True
        >>> mentions_folder("raylet --temp-dir=/tmp/rdc-t1234/session_1", "/tmp/rdc-t12")
        False
    """
    folder = folder.rstrip("/")
    return re.search(re.escape(folder) + r"(?=/|\s|$)", cmdline) is not None


def ray_processes(temp_root: str | None = None) -> list[dict[str, Any]]:
    """List this user's live processes that belong to Ray clusters under ``temp_root``.

    A process belongs when its command line mentions ``temp_root`` or its environment holds
    ``RAYDATA_COURSE_TMPDIR=<temp_root>`` (set by :func:`setup` before Ray starts, and
    inherited by every Ray process, including agents that rename themselves).

    Args:
        temp_root: the folder given to Ray; default :func:`default_temp_root`.

    Returns:
        One dict per process with ``pid`` and ``cmdline`` (a string), sorted by pid.
    """
    import psutil

    root = temp_root or default_temp_root()
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "cmdline", "uids"]):
        try:
            if proc.info["pid"] == me or proc.info["uids"] is None:
                continue
            if proc.info["uids"].real != os.getuid():
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            if mentions_folder(cmdline, root) or proc.environ().get(TEMP_ROOT_ENV) == root:
                found.append({"pid": proc.info["pid"], "cmdline": cmdline[:200]})
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return sorted(found, key=lambda p: p["pid"])
