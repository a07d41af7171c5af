"""A multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``) for trying the
multi-node path locally: a head with no CPUs, like the cluster YAMLs' heads, and GPU-less
worker nodes that carry the fabric resource and labels of a cluster YAML's worker type.

``deepshare cluster fake --workers 2`` starts one, prints its address and waits; run
``deepshare train CONFIG --address ADDRESS --num-env-runners 2`` against it from another shell
(the same command as on a cloud cluster after ``ray up``). Only the processes it started are
stopped on exit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FakeNode:
    cpus: int = 1
    fabric: str = "pcie"
    """Carried as the ``deepshare_fabric_<fabric>`` resource (no GPUs are faked)."""


def start_fake_cluster(workers: list[FakeNode], head_cpus: int = 0) -> Any:
    """Start a head and ``workers`` worker nodes; returns the running ``Cluster``."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "include_dashboard": False})
    for node in workers:
        cluster.add_node(num_cpus=node.cpus, resources={f"deepshare_fabric_{node.fabric}": 1})
    cluster.wait_for_nodes()
    return cluster


def describe(cluster: Any) -> str:
    return json.dumps({"address": cluster.address, "nodes": len(cluster.list_all_nodes())})
