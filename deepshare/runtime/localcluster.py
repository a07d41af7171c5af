"""``--local``: a fake multi-node Ray cluster on this machine (fake GPUs; jobs run on CPU with gloo).

A head node without GPUs and ``nodes`` worker nodes, each declaring ``gpus_per_node`` GPUs and
the label ``deepshare.io/node-name: node<i>``, so the scheduler's topology names them node0...

Every node of it is started with ``node_ip_address=127.0.0.1``: its Ray processes advertise and
listen on loopback only, so the fake cluster (which runs whatever jobs the scheduler launches)
cannot be reached from the network. ``ray.init`` rewrites a loopback address to the machine's
"remotely reachable" IP (where nothing listens then); :func:`deepshare.infra.localray.resolve_loopback_as_self`
turns that off for this driver process only (Ray's own switch for single-machine clusters).
"""

from __future__ import annotations

from typing import Any

from deepshare.core.errors import DeepShareError
from deepshare.infra.localray import resolve_loopback_as_self
from deepshare.runtime.cluster import NAME_LABEL

NODE_MEMORY = 80 * 1024**2
LOOPBACK = "127.0.0.1"


class LocalCluster:
    """Start with :meth:`start`, stop with :meth:`shutdown`; the driver connects in namespace ``deepshare``."""

    def __init__(self, nodes: int, gpus_per_node: int, cpus_per_node: int = 1) -> None:
        if nodes <= 0:
            raise DeepShareError(f"--nodes must be a positive integer, got {nodes}")
        if gpus_per_node <= 0:
            raise DeepShareError(f"--gpus-per-node must be a positive integer, got {gpus_per_node}")
        self.nodes, self.gpus_per_node, self.cpus_per_node = nodes, gpus_per_node, cpus_per_node
        self.cluster: Any = None
        self.handles: list[Any] = []

    def start(self) -> str:
        import logging

        import ray
        from ray.cluster_utils import Cluster

        from deepshare.runtime.launcher import NAMESPACE

        self.cluster = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=1, num_gpus=0, include_dashboard=False, object_store_memory=NODE_MEMORY,
            node_ip_address=LOOPBACK, dashboard_host=LOOPBACK))
        for i in range(self.nodes):
            self.handles.append(self.add_node(f"node{i}"))
        self.cluster.wait_for_nodes()
        resolve_loopback_as_self()
        ray.init(address=self.cluster.address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
        return str(self.cluster.address)

    def add_node(self, name: str) -> Any:
        return self.cluster.add_node(num_cpus=self.cpus_per_node, num_gpus=self.gpus_per_node,
                                     object_store_memory=NODE_MEMORY, labels={NAME_LABEL: name},
                                     node_ip_address=LOOPBACK)

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None

