"""Ray's node list as a :class:`~deepshare.core.topology.Topology` the policies understand.

Only alive nodes with GPUs count. A node's name is its ``deepshare.io/node-name`` label when
set (``--local`` and cluster YAMLs set it), else Ray's node name (its IP), suffixed with the
first 8 hex digits of its node id when names repeat. Fabric, NIC speed, rack and GPU model come
from the labels ``deepshare.io/fabric`` (pcie|nvlink), ``deepshare.io/nic-gbps``,
``deepshare.io/nvlink-gbps``, ``deepshare.io/pcie-switches``, ``deepshare.io/rack`` and
``deepshare.io/gpu-model`` when present, else the testbed's defaults (PCIe, 40 Gb/s NIC). Nodes
are ordered by name, so indices are stable while the set of nodes is.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from deepshare.core.topology import TESTBED_NODE_TYPE, Node, Topology
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Placement

LABEL_PREFIX = "deepshare.io/"
NAME_LABEL = LABEL_PREFIX + "node-name"
NODE_ID_LABEL = "ray.io/node-id"


@dataclass(frozen=True, slots=True)
class RayNode:
    node_id: str
    name: str
    ip: str
    gpus: int


@dataclass(frozen=True, slots=True)
class ClusterState:
    """The GPU nodes now alive and the topology built from them (same order)."""

    topology: Topology
    nodes: tuple[RayNode, ...]

    def index(self, name: str) -> int | None:
        for i, node in enumerate(self.nodes):
            if node.name == name:
                return i
        return None

    def node(self, name: str) -> RayNode:
        i = self.index(name)
        if i is None:
            raise DeepShareError(f"node {name!r} is not in the cluster")
        return self.nodes[i]

    def to_placement(self, alloc: Sequence[tuple[str, int]]) -> Placement | None:
        """A by-name allocation as a by-index placement, or ``None`` if one of its nodes is gone."""
        counts: dict[int, int] = {}
        for name, gpus in alloc:
            i = self.index(name)
            if i is None:
                return None
            counts[i] = counts.get(i, 0) + gpus
        return Placement.of(counts)

    def to_alloc(self, placement: Placement) -> tuple[tuple[str, int], ...]:
        return tuple((self.nodes[i].name, g) for i, g in placement.alloc)


def _label_float(labels: Mapping[str, str], key: str, default: float) -> float:
    try:
        return float(labels[LABEL_PREFIX + key])
    except (KeyError, ValueError):
        return default


def read_cluster(ray_nodes: Sequence[Mapping[str, Any]], name: str = "ray") -> ClusterState:
    """Build the state from ``ray.nodes()`` entries (a pure function: tests feed it dicts)."""
    alive = [n for n in ray_nodes if n.get("Alive") and int(n.get("Resources", {}).get("GPU", 0)) > 0]
    base = [str(n.get("Labels", {}).get(NAME_LABEL) or n.get("NodeName") or n.get("NodeManagerAddress") or "node")
            for n in alive]
    repeats = Counter(base)
    found: list[tuple[str, Mapping[str, Any]]] = []
    for b, n in zip(base, alive):
        found.append((b if repeats[b] == 1 else f"{b}-{str(n['NodeID'])[:8]}", n))
    found.sort(key=lambda item: item[0])
    t = TESTBED_NODE_TYPE
    nodes, ray_list = [], []
    for i, (node_name, n) in enumerate(found):
        labels = n.get("Labels", {}) or {}
        gpus = int(n["Resources"]["GPU"])
        fabric = labels.get(LABEL_PREFIX + "fabric", t.fabric)
        nodes.append(Node(
            index=i, name=node_name, gpus=gpus, rack=labels.get(LABEL_PREFIX + "rack", "rack0"), node_type="ray",
            gpu_model=labels.get(LABEL_PREFIX + "gpu-model", "unknown"),
            fabric=fabric if fabric in ("pcie", "nvlink") else t.fabric,
            pcie_switches=max(1, int(_label_float(labels, "pcie-switches", 1))),
            intra_node_gbps=_label_float(labels, "intra-node-gbps", t.intra_node_gbps),
            nvlink_gbps=_label_float(labels, "nvlink-gbps", t.nvlink_gbps),
            nic_gbps=_label_float(labels, "nic-gbps", t.nic_gbps),
        ))
        ray_list.append(RayNode(node_id=str(n["NodeID"]), name=node_name, ip=str(n.get("NodeManagerAddress", "")),
                                gpus=gpus))
    return ClusterState(Topology(name, tuple(nodes)), tuple(ray_list))


def current_cluster() -> ClusterState:
    import ray

    return read_cluster(ray.nodes())
