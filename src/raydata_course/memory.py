"""Read the object store's real usage, as the raylets report it.

This is *actual* plasma memory (what the store holds), not Ray Data's estimate of its own
usage. The call is the one Ray Data itself uses for its spill statistics
(``ray/data/dataset.py``, ``_get_memory_info_reply``-based spill report in 2.60.0): a gRPC
request to each raylet for its ``ObjectStoreStats``, summed over the cluster. It needs the
``grpcio`` package, which ``ray[data,train]`` does not pull in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ObjectStoreStats", "object_store_stats"]


@dataclass(frozen=True)
class ObjectStoreStats:
    """A cluster-wide snapshot of the object store, summed over all nodes.

    Attributes:
        used_bytes: bytes held in shared memory now (primary and secondary copies).
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


def object_store_stats() -> ObjectStoreStats:
    """Ask the raylets for their object-store statistics.

    Returns:
        An :class:`ObjectStoreStats`. One call takes about a millisecond on a local cluster.

    Raises:
        RuntimeError: if Ray is not initialized in this process.
        ImportError: with install advice, if ``grpcio`` is missing.
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("Ray is not running in this process: call raydata_course.setup() first.")
    try:
        from ray._private.internal_api import get_memory_info_reply, get_state_from_address
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Reading object-store statistics needs grpcio (`pip install grpcio`, or `make setup`)."
        ) from exc
    reply = get_memory_info_reply(get_state_from_address(ray.get_runtime_context().gcs_address))
    s = reply.store_stats
    return ObjectStoreStats(
        used_bytes=int(s.object_store_bytes_used),
        primary_copy_bytes=int(s.object_store_bytes_primary_copy),
        fallback_bytes=int(s.object_store_bytes_fallback),
        spilled_bytes_total=int(s.spilled_bytes_total),
        restored_bytes_total=int(s.restored_bytes_total),
        num_local_objects=int(s.num_local_objects),
    )
