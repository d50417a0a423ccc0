"""Support package for the Streaming Ray Data course.

Importing this package does nothing beyond defining names: it starts no cluster, seeds
nothing, creates no folder and touches no plotting state. Call :func:`setup` for that.

Examples:
    >>> import raydata_course
    >>> raydata_course.RAY_VERSION
    '2.60.0'
"""

__version__ = "0.1.0"

from raydata_course.cluster import (  # noqa: E402
    RAY_VERSION,
    ClusterSize,
    ClusterTooSmallError,
    CourseSession,
    RayVersionError,
    check_ray_version,
    default_cluster_size,
    setup,
    shutdown,
)
from raydata_course.hints import hint  # noqa: E402

__all__ = [
    "__version__",
    "RAY_VERSION",
    "ClusterSize",
    "ClusterTooSmallError",
    "CourseSession",
    "RayVersionError",
    "check_ray_version",
    "default_cluster_size",
    "hint",
    "setup",
    "shutdown",
]
