"""A multi-node Ray cluster on this one machine, for the grading tests and the scale benchmark.

:func:`local_cluster` starts a head node that grades nothing (no CPUs, like a driver's node)
and ``nodes`` worker nodes with ``ray.cluster_utils.Cluster`` (Ray's own test tool: each node
a raylet and object store of its own), in a private temp folder, and shuts them down on exit.
More nodes can join later (:meth:`LocalCluster.add_node`), and one can die
(:meth:`LocalCluster.kill_node`: its raylet gets SIGKILL, as when a machine is lost).
The node's ``memory`` resource is what a grading task asks for (the per-notebook memory
limit plus the worker's allowance), so ``memory_bytes`` decides how many notebooks a node
takes at once. The head notices a dead node within a few seconds (health checks every
second, three misses).
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from raydata_course.units import MiB


@dataclass
class LocalCluster:
    """A started cluster.

    Attributes:
        address: the GCS address to pass to ``--cluster``.
        node_ids: the worker nodes' Ray node ids, in the order they were added.
        raylet_pids: the worker nodes' raylet pids, in the same order.
        cluster: Ray's ``Cluster`` object.
        node_args: what every worker node is started with.
    """

    address: str
    node_ids: list[str] = field(default_factory=list)
    raylet_pids: list[int] = field(default_factory=list)
    cluster: object = None
    node_args: dict = field(default_factory=dict)
    nodes: list = field(default_factory=list)

    def add_node(self) -> str:
        """Start one more worker node, wait until the head knows it; return its node id."""
        node = self.cluster.add_node(**self.node_args)
        self.cluster.wait_for_nodes()
        self.nodes.append(node)
        self.node_ids.append(node.node_id)
        self.raylet_pids.append(node.all_processes["raylet"][0].process.pid)
        return node.node_id

    def kill_node(self, index: int) -> None:
        """SIGKILL the raylet of worker node ``index``, as when its machine is lost: the workers on it
        die with it. Then its other processes (Ray's agents) are stopped too, and the node is
        forgotten here, so that :meth:`add_node` waits only for live nodes."""
        os.kill(self.raylet_pids[index], signal.SIGKILL)
        self.cluster.remove_node(self.nodes[index], allow_graceful=False)


@contextlib.contextmanager
def local_cluster(temp_dir: str | os.PathLike, nodes: int = 2, cpus_per_node: int = 1,
                  memory_bytes: int = 5 * 1024**3, object_store_bytes: int = 100 * MiB) -> Iterator[LocalCluster]:
    """Start a head (0 CPUs) and ``nodes`` worker nodes; yield a :class:`LocalCluster`; shut it down."""
    from ray.cluster_utils import Cluster

    temp_dir = Path(temp_dir)
    (temp_dir / "ray").mkdir(parents=True, exist_ok=True)  # Ray writes its address file there
    saved = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(temp_dir)
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, connect=False, head_node_args=dict(
            num_cpus=0, object_store_memory=object_store_bytes, include_dashboard=False, temp_dir=str(temp_dir),
            _system_config={"health_check_period_ms": 1000, "health_check_failure_threshold": 3,
                            "health_check_initial_delay_ms": 0}))
        started = LocalCluster(cluster.address, cluster=cluster, node_args=dict(
            num_cpus=cpus_per_node, memory=memory_bytes, object_store_memory=object_store_bytes))
        for _ in range(nodes):
            started.add_node()
        yield started
    finally:
        if cluster is not None:
            cluster.shutdown()
        if saved is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved
