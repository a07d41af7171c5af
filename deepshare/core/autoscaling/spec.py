"""The autoscaling cluster model: node types with prices and limits, from YAML or a Ray cluster YAML.

An autoscaling spec extends the cluster spec's node types (``deepshare/core/topology.py``) with
what an autoscaler needs::

    name: aws-mixed
    idle_timeout_s: 300          # an up node idle this long is removed (above min_nodes)
    max_slowdown: 1.25           # contention-aware autoscaler: the co-location threshold
    node_types:
      a10g:
        gpus: 4
        gpu_model: A10G
        fabric: pcie
        nic_gbps: 40
        price_usd_per_hour: 5.672
        min_nodes: 0
        max_nodes: 8
        provisioning_s: 300      # from the request until the node can take jobs
        rack: rack0

The simulator's topology holds ``max_nodes`` slots of every type (names ``<type>-<k>``), in
the order the types are listed; which of them exist at any time is the autoscaler's business.
``max_workers`` (optional) caps the nodes up or starting at once over every type, as a Ray
cluster YAML's top-level ``max_workers`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepshare.core.topology import ClusterSpec, NodeGroupSpec, NodeTypeSpec, Topology
from deepshare.core.topology_spec import OptionalLinkGbps
from deepshare.core.yamlspec import parse_yaml_model, read_config_text


MAX_AUTOSCALE_SLOTS = 10_000
"""Most nodes an autoscaling spec may allow in all (the sum of its types' ``max_nodes``): the
simulator holds a slot for every node that may exist, and its cost grows with them (99,998 slots
made a 150-job run take 150 s against 1 s)."""
MAX_PRICE_USD_PER_HOUR = 1e6
MAX_SECONDS = 365 * 86400.0


class NodePoolSpec(NodeTypeSpec):
    """A node type the autoscaler may add: hardware (as in a cluster spec) plus price and limits."""

    price_usd_per_hour: float = Field(ge=0, le=MAX_PRICE_USD_PER_HOUR, allow_inf_nan=False,
                                      description="on-demand price of one node")
    min_nodes: int = Field(default=0, ge=0, le=MAX_AUTOSCALE_SLOTS, description="nodes always up (from t = 0)")
    max_nodes: int = Field(gt=0, le=MAX_AUTOSCALE_SLOTS, description="most nodes of this type at once")
    provisioning_s: float = Field(default=300.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False, description="request to ready")
    rack: str = "rack0"

    @model_validator(mode="after")
    def _limits(self) -> "NodePoolSpec":
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} exceeds max_nodes {self.max_nodes}")
        return self

    def hardware(self) -> NodeTypeSpec:
        """The cluster-spec node type (without price and limits)."""
        return NodeTypeSpec(**self.model_dump(include=set(NodeTypeSpec.model_fields)))


class AutoscaleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = "autoscaling"
    node_types: dict[str, NodePoolSpec] = Field(min_length=1)
    idle_timeout_s: float = Field(default=300.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False,
                                  description="idle time before a node is removed")
    max_slowdown: float = Field(default=1.25, ge=1.0, le=1000.0, allow_inf_nan=False,
                                description="contention-aware co-location threshold")
    rack_uplink_gbps: OptionalLinkGbps = 0.0
    max_workers: Optional[int] = Field(default=None, gt=0, le=MAX_AUTOSCALE_SLOTS, strict=True, description=(
        "most nodes up or starting at once over every type (a Ray cluster YAML's top-level max_workers); "
        "null: each type's max_nodes only"))

    @model_validator(mode="after")
    def _totals(self) -> "AutoscaleSpec":
        slots = sum(t.max_nodes for t in self.node_types.values())
        if slots > MAX_AUTOSCALE_SLOTS:
            raise ValueError(f"node_types: max_nodes add up to {slots:,}; the autoscaling simulator allows at most "
                             f"{MAX_AUTOSCALE_SLOTS:,} nodes in all")
        floor = sum(t.min_nodes for t in self.node_types.values())
        if self.max_workers is not None and floor > self.max_workers:
            raise ValueError(f"max_workers: {self.max_workers} is below the types' min_nodes, which add up to {floor}")
        return self


@dataclass(frozen=True)
class Slots:
    """The simulator topology of a spec and which node indices belong to which type."""

    topology: Topology
    by_type: dict[str, tuple[int, ...]]
    type_of: tuple[str, ...]


def most_gpus(spec: AutoscaleSpec, rack: str | None = None) -> int:
    """The most GPUs ``spec``'s nodes can hold up at once: every type's ``min_nodes``, then the
    types with the most GPUs per node first, as far as ``max_nodes`` and ``max_workers`` allow (a
    job asking more can never run). With ``rack``: inside that rack alone (the other racks'
    ``min_nodes`` still take their share of ``max_workers``), what a job that requires one rack
    can have there."""
    every = list(spec.node_types.values())
    types = [t for t in every if rack is None or t.rack == rack]
    total = sum(t.min_nodes * t.gpus for t in types)
    left = None if spec.max_workers is None else spec.max_workers - sum(t.min_nodes for t in every)
    for t in sorted(types, key=lambda t: -t.gpus):
        more = t.max_nodes - t.min_nodes if left is None else min(t.max_nodes - t.min_nodes, left)
        total += more * t.gpus
        if left is not None:
            left -= more
    return total


def build_slots(spec: AutoscaleSpec) -> Slots:
    """A topology with ``max_nodes`` nodes of every type, in the spec's type order."""
    cluster = ClusterSpec(
        name=spec.name,
        node_types={name: t.hardware() for name, t in spec.node_types.items()},
        nodes=[NodeGroupSpec(type=name, count=t.max_nodes, rack=t.rack, prefix=f"{name}-") for name, t in spec.node_types.items()],
        rack_uplink_gbps=spec.rack_uplink_gbps,
    )
    topology = Topology.from_spec(cluster)
    type_of = tuple(n.node_type for n in topology.nodes)
    by_type = {name: tuple(n.index for n in topology.nodes if n.node_type == name) for name in spec.node_types}
    return Slots(topology, by_type, type_of)


def parse_autoscale_spec(text: str, source: str = "<autoscale spec>") -> AutoscaleSpec:
    return parse_yaml_model(text, AutoscaleSpec, source, "node_types")


def load_autoscale_spec(path: str | Path) -> AutoscaleSpec:
    return parse_autoscale_spec(read_config_text(path, "autoscaling config"), str(path))
