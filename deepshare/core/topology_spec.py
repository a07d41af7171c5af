"""The pydantic schema of a cluster spec YAML (see :mod:`deepshare.core.topology` for the format).

Kept out of :mod:`deepshare.core.topology` so that simulating on a preset or a uniform cluster
never imports pydantic (about a tenth of a second of ``deepshare simulate``'s start-up): a
user's YAML is validated here, with errors that name the field. The defaults are the plain ones
of :mod:`deepshare.core.topology_plain`, which builds presets without this module.
``deepshare.core.topology`` re-exports these names (imported on first use).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepshare.core.topology_plain import (
    CLUSTER_DEFAULTS, MAX_GPUS_PER_NODE, MAX_NODES, MAX_PCIE_SWITCHES, NODE_GROUP_DEFAULTS, NODE_TYPE_DEFAULTS,
    TESTBED_HARDWARE,
)


class NodeTypeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(gt=0, le=MAX_GPUS_PER_NODE, description="GPUs per node")
    gpu_model: str = NODE_TYPE_DEFAULTS["gpu_model"]
    fabric: Literal["pcie", "nvlink"] = NODE_TYPE_DEFAULTS["fabric"]
    pcie_switches: int = Field(default=NODE_TYPE_DEFAULTS["pcie_switches"], gt=0, le=MAX_PCIE_SWITCHES)
    intra_node_gbps: float = Field(default=NODE_TYPE_DEFAULTS["intra_node_gbps"], gt=0)
    nvlink_gbps: float = Field(default=NODE_TYPE_DEFAULTS["nvlink_gbps"], ge=0)
    nic_gbps: float = Field(default=NODE_TYPE_DEFAULTS["nic_gbps"], gt=0)


class NodeGroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str
    count: int = Field(default=NODE_GROUP_DEFAULTS["count"], gt=0, le=MAX_NODES)
    rack: str = NODE_GROUP_DEFAULTS["rack"]
    prefix: str = NODE_GROUP_DEFAULTS["prefix"]


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = CLUSTER_DEFAULTS["name"]
    node_types: dict[str, NodeTypeSpec] = Field(min_length=1)
    nodes: list[NodeGroupSpec] = Field(min_length=1)
    rack_uplink_gbps: float = Field(default=CLUSTER_DEFAULTS["rack_uplink_gbps"], ge=0)

    @model_validator(mode="after")
    def _types_exist(self) -> "ClusterSpec":
        for i, group in enumerate(self.nodes):
            if group.type not in self.node_types:
                raise ValueError(
                    f"nodes[{i}].type: unknown node type {group.type!r}; "
                    f"expected one of {sorted(self.node_types)}"
                )
        total = sum(group.count for group in self.nodes)
        if total > MAX_NODES:
            raise ValueError(f"nodes: {total} nodes in all; expected at most {MAX_NODES}")
        return self


TESTBED_NODE_TYPE = NodeTypeSpec(**TESTBED_HARDWARE)
"""The original artifact's node: 8 x TITAN Xp on PCIe Gen3 (16 GB/s), 40 Gb/s InfiniBand."""
