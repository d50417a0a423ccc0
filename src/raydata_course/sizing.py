"""What the course asks of Ray and of the machine: Ray's version, and the local cluster's size.

:mod:`raydata_course.cluster` starts the cluster with these (and re-exports them).

Examples:
    >>> size = ClusterSize(num_cpus=4, object_store_memory_bytes=512 * 1024**2)
    >>> size.object_store_memory_bytes // 1024**2
    512
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from raydata_course.layout import MACHINE_CPUS_ENV, RAY_VERSION_ENV
from raydata_course.units import GiB, MiB

__all__ = ["RAY_VERSION", "ClusterSize", "ClusterTooSmallError", "RayVersionError", "check_ray_version",
           "default_cluster_size"]

#: The Ray release the course is written and tested against.
RAY_VERSION = "2.60.0"



class RayVersionError(RuntimeError):
    """The installed Ray is not the version the course is pinned to."""


class ClusterTooSmallError(RuntimeError):
    """The machine or the connected cluster lacks the CPUs or object-store bytes asked for."""


@dataclass(frozen=True)
class ClusterSize:
    """How big the embedded local cluster is.

    Attributes:
        num_cpus: logical CPUs Ray may schedule on. It may exceed the physical core count:
            Ray Data's read, map and consumer tasks are often I/O bound or sleeping.
        object_store_memory_bytes: size of the shared-memory object store (plasma), in bytes.
    """

    num_cpus: int
    object_store_memory_bytes: int


def check_ray_version(expected: str | None = None) -> str:
    """Check that the importable Ray is the course's pinned version.

    Args:
        expected: the version string that must match ``ray.__version__`` exactly; default
            ``RAY_VERSION``, or ``$RAYDATA_COURSE_RAY_VERSION`` when set (the lab's
            across-versions environment, built by ``make lab RAY=<version>``).

    Returns:
        The installed version string.

    Raises:
        RayVersionError: if Ray cannot be imported or its version differs.
    """
    expected = expected or os.environ.get(RAY_VERSION_ENV) or RAY_VERSION
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - exercised only without Ray
        raise RayVersionError(
            f"Ray is not installed in this Python ({sys.executable}). The course needs "
            f"ray=={expected}: run `make setup` and choose the 'Python (raydata-course)' kernel."
        ) from exc
    if ray.__version__ != expected:
        raise RayVersionError(
            f"This course is pinned to Ray {expected}, but Ray {ray.__version__} is installed "
            f"in {sys.executable}. Ray Data's behaviour changes between releases, so the "
            f"notebooks' explanations and numbers would not hold. Run `make setup` (it builds "
            f".venv with ray=={expected}) and select the 'Python (raydata-course)' kernel."
        )
    return ray.__version__


def default_cluster_size(
    *,
    min_num_cpus: int = 4,
    object_store_fraction: float = 0.25,
    min_object_store_bytes: int = 256 * MiB,
    max_object_store_bytes: int = 2 * GiB,
) -> ClusterSize:
    """Choose a cluster size that fits this machine.

    The CPU count is the machine's logical CPU count, but at least ``min_num_cpus``, so that
    a 2-core laptop can still run an actor pool next to read tasks. Where
    ``RAYDATA_COURSE_MACHINE_CPUS`` is set (the grader sets it in every graded kernel), its
    value counts as the machine's CPUs instead. The object store gets
    ``object_store_fraction`` of the memory that is available now, clamped to
    ``[min_object_store_bytes, max_object_store_bytes]``.

    Args:
        min_num_cpus: lower bound on logical CPUs.
        object_store_fraction: share of currently available RAM for the object store.
        min_object_store_bytes: smallest object store the course works with, in bytes.
        max_object_store_bytes: largest object store the defaults ask for, in bytes.

    Returns:
        A :class:`ClusterSize`.

    Raises:
        ClusterTooSmallError: if less than twice ``min_object_store_bytes`` of RAM is
            available (the object store plus Python workers would not fit).
        ValueError: if ``RAYDATA_COURSE_MACHINE_CPUS`` is set to something other than a
            positive whole number.
    """
    import psutil

    available_bytes = psutil.virtual_memory().available
    if available_bytes < 2 * min_object_store_bytes:
        raise ClusterTooSmallError(
            f"Only {available_bytes / MiB:.0f} MiB of RAM is available, and the course needs "
            f"at least {2 * min_object_store_bytes / MiB:.0f} MiB (an object store of "
            f"{min_object_store_bytes / MiB:.0f} MiB plus worker processes). Close other "
            f"programs, or pass a smaller object_store_memory_bytes to setup()."
        )
    wanted = int(available_bytes * object_store_fraction)
    object_store_bytes = max(min_object_store_bytes, min(max_object_store_bytes, wanted))
    machine_cpus = os.cpu_count() or 1
    if os.environ.get(MACHINE_CPUS_ENV):
        value = os.environ[MACHINE_CPUS_ENV]
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{MACHINE_CPUS_ENV}={value!r}: it must be a whole number of CPUs, at least 1 "
                             f"(or unset, to count this machine's {machine_cpus}).")
        machine_cpus = int(value)
    num_cpus = max(min_num_cpus, machine_cpus)
    return ClusterSize(num_cpus=num_cpus, object_store_memory_bytes=object_store_bytes)
