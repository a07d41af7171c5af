"""Cluster shape: nodes, GPUs per node, intra-node fabric, NICs and racks, from a YAML spec.

A spec names node types once and then lists groups of nodes by type and rack::

    name: testbed
    node_types:
      titanxp:
        gpus: 8
        gpu_model: TITAN Xp
        fabric: pcie            # pcie | nvlink
        pcie_switches: 2        # GPUs are split evenly among this many PCIe switches
        intra_node_gbps: 128    # PCIe Gen3 x16 = 16 GB/s = 128 Gb/s per switch uplink
        nvlink_gbps: 0          # per-GPU NVLink bandwidth when fabric is nvlink
        nic_gbps: 40            # one NIC per node
    nodes:
      - {type: titanxp, count: 4, rack: rack0}
    rack_uplink_gbps: 0         # 0 = non-blocking core network

All bandwidths are in Gbit/s. Presets ship in ``deepshare/data/clusters/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepshare.core.errors import DeepShareError
from deepshare.core.yamlspec import parse_yaml_model


class NodeTypeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(gt=0, description="GPUs per node")
    gpu_model: str = "unknown"
    fabric: Literal["pcie", "nvlink"] = "pcie"
    pcie_switches: int = Field(default=1, gt=0)
    intra_node_gbps: float = Field(default=128.0, gt=0)
    nvlink_gbps: float = Field(default=0.0, ge=0)
    nic_gbps: float = Field(default=40.0, gt=0)


class NodeGroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str
    count: int = Field(default=1, gt=0)
    rack: str = "rack0"
    prefix: str = "node"


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "cluster"
    node_types: dict[str, NodeTypeSpec] = Field(min_length=1)
    nodes: list[NodeGroupSpec] = Field(min_length=1)
    rack_uplink_gbps: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _types_exist(self) -> "ClusterSpec":
        for i, group in enumerate(self.nodes):
            if group.type not in self.node_types:
                raise ValueError(
                    f"nodes[{i}].type: unknown node type {group.type!r}; "
                    f"expected one of {sorted(self.node_types)}"
                )
        return self


@dataclass(frozen=True, slots=True)
class Node:
    """One machine. ``index`` is its position in :attr:`Topology.nodes` (placements use it)."""

    index: int
    name: str
    gpus: int
    rack: str
    node_type: str
    gpu_model: str
    fabric: str
    pcie_switches: int
    intra_node_gbps: float
    nvlink_gbps: float
    nic_gbps: float


@dataclass(frozen=True, slots=True)
class Topology:
    name: str
    nodes: tuple[Node, ...]
    rack_uplink_gbps: float = 0.0
    capacity: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """GPUs per node, by node index (derived once from ``nodes``)."""
    total_gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", tuple(n.gpus for n in self.nodes))
        object.__setattr__(self, "total_gpus", sum(self.capacity))

    @property
    def racks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.rack for n in self.nodes))

    def node_index(self, name: str) -> int:
        for node in self.nodes:
            if node.name == name:
                return node.index
        raise DeepShareError(f"unknown node {name!r} in cluster {self.name!r}")

    def describe(self) -> str:
        kinds = sorted({f"{n.gpus} x {n.gpu_model} ({n.fabric}, {n.nic_gbps:g} Gb/s NIC)" for n in self.nodes})
        return f"{self.name}: {len(self.nodes)} nodes, {self.total_gpus} GPUs; " + "; ".join(kinds)

    @staticmethod
    def from_spec(spec: ClusterSpec) -> "Topology":
        nodes: list[Node] = []
        counters: dict[str, int] = {}
        for group in spec.nodes:
            t = spec.node_types[group.type]
            for _ in range(group.count):
                k = counters.get(group.prefix, 0)
                counters[group.prefix] = k + 1
                nodes.append(
                    Node(
                        index=len(nodes),
                        name=f"{group.prefix}{k}",
                        gpus=t.gpus,
                        rack=group.rack,
                        node_type=group.type,
                        gpu_model=t.gpu_model,
                        fabric=t.fabric,
                        pcie_switches=t.pcie_switches,
                        intra_node_gbps=t.intra_node_gbps,
                        nvlink_gbps=t.nvlink_gbps,
                        nic_gbps=t.nic_gbps,
                    )
                )
        return Topology(spec.name, tuple(nodes), spec.rack_uplink_gbps)


TESTBED_NODE_TYPE = NodeTypeSpec(
    gpus=8, gpu_model="TITAN Xp", fabric="pcie", pcie_switches=2, intra_node_gbps=128.0, nic_gbps=40.0
)
"""The original artifact's node: 8 x TITAN Xp on PCIe Gen3 (16 GB/s), 40 Gb/s InfiniBand."""

NODES_PER_RACK = 32


def uniform(nodes: int, gpus_per_node: int, name: str | None = None) -> Topology:
    """A cluster of ``nodes`` testbed-type nodes with ``gpus_per_node`` GPUs, 32 nodes a rack."""
    if nodes <= 0:
        raise DeepShareError(f"--nodes must be a positive integer, got {nodes}")
    if gpus_per_node <= 0:
        raise DeepShareError(f"--gpus-per-node must be a positive integer, got {gpus_per_node}")
    node_type = TESTBED_NODE_TYPE.model_copy(update={"gpus": gpus_per_node})
    groups = []
    for start in range(0, nodes, NODES_PER_RACK):
        groups.append(
            NodeGroupSpec(type="node", count=min(NODES_PER_RACK, nodes - start), rack=f"rack{start // NODES_PER_RACK}")
        )
    spec = ClusterSpec(name=name or f"uniform-{nodes}x{gpus_per_node}", node_types={"node": node_type}, nodes=groups)
    return Topology.from_spec(spec)


def preset_names() -> list[str]:
    folder = resources.files("deepshare.data") / "clusters"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_topology(preset_or_path: str) -> Topology:
    """Load a preset by name (``testbed``, ...) or a cluster spec YAML by path."""
    if preset_or_path in preset_names():
        text = (resources.files("deepshare.data") / "clusters" / f"{preset_or_path}.yaml").read_text()
        return parse_topology(text, source=f"preset {preset_or_path!r}")
    path = Path(preset_or_path)
    if not path.exists():
        raise DeepShareError(
            f"--cluster: {preset_or_path!r} is neither a preset ({', '.join(preset_names())}) nor an existing file"
        )
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DeepShareError(f"{path}: cannot read cluster spec as text ({exc})") from exc
    return parse_topology(text, source=str(path))


def parse_topology(text: str, source: str = "<cluster spec>") -> Topology:
    return Topology.from_spec(parse_yaml_model(text, ClusterSpec, source, "node_types and nodes"))
