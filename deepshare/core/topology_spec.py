"""The pydantic schema of a cluster spec YAML (see :mod:`deepshare.core.topology` for the format).

Kept out of :mod:`deepshare.core.topology` so that simulating on a preset or a uniform cluster
never imports pydantic (about a tenth of a second of ``deepshare simulate``'s start-up): a
user's YAML is validated here, with errors that name the field. The defaults are the plain ones
of :mod:`deepshare.core.topology_plain`, which builds presets without this module.
``deepshare.core.topology`` re-exports these names (imported on first use).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from deepshare.core.bounds import MAX_LINK_GBPS, MIN_LINK_GBPS, link_gbps_ok
from deepshare.core.names import CONTROL_RANGES, NO_CONTROL_CHARACTERS_OR_EMPTY, name_identity
from deepshare.core.topology_plain import (
    CLUSTER_DEFAULTS, MAX_GPUS_PER_NODE, MAX_NODES, MAX_PCIE_SWITCHES, NODE_GROUP_DEFAULTS, NODE_TYPE_DEFAULTS,
    TESTBED_HARDWARE, pcie_switches_problem,
)


DomainName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=rf"^[^/{CONTROL_RANGES}]+$")]
"""A level's or a domain's name: 1-256 characters, no ``/`` (paths are joined with it), no control characters."""
Text = Annotated[str, StringConstraints(max_length=256, pattern=NO_CONTROL_CHARACTERS_OR_EMPTY)]
"""A name or label without control characters (:mod:`deepshare.core.names`), at most 256
characters: a cluster's, a node type's, a GPU model, a rack, a node name prefix (they reach
outputs, logs and placement requests; a 100,000-character prefix made each of a group's nodes a
name that long, gigabytes for a 100 KB spec)."""


def _none_or_link(value: float) -> float:
    if not link_gbps_ok(value, none_ok=True):
        raise ValueError(f"expected 0 or at least {MIN_LINK_GBPS:g} Gbit/s, got {value:g}")
    return value


LinkGbps = Annotated[float, Field(ge=MIN_LINK_GBPS, le=MAX_LINK_GBPS)]
"""A link's bandwidth, Gbit/s (:data:`~deepshare.core.bounds.MIN_LINK_GBPS` to
:data:`~deepshare.core.bounds.MAX_LINK_GBPS`)."""
OptionalLinkGbps = Annotated[float, Field(ge=0, le=MAX_LINK_GBPS), AfterValidator(_none_or_link)]
"""A link's bandwidth, or 0 where 0 means something (no NVLink, a non-blocking uplink, one fat pipe)."""


class NodeTypeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # strict: YAML's yes/on/true are not the number 1

    gpus: int = Field(gt=0, le=MAX_GPUS_PER_NODE, description="GPUs per node")
    gpu_model: Text = NODE_TYPE_DEFAULTS["gpu_model"]
    fabric: Literal["pcie", "nvlink"] = NODE_TYPE_DEFAULTS["fabric"]
    pcie_switches: int = Field(default=NODE_TYPE_DEFAULTS["pcie_switches"], gt=0, le=MAX_PCIE_SWITCHES)
    intra_node_gbps: LinkGbps = NODE_TYPE_DEFAULTS["intra_node_gbps"]
    nvlink_gbps: OptionalLinkGbps = NODE_TYPE_DEFAULTS["nvlink_gbps"]
    nic_gbps: LinkGbps = NODE_TYPE_DEFAULTS["nic_gbps"]

    @model_validator(mode="after")
    def _switches_have_gpus(self) -> "NodeTypeSpec":
        problem = pcie_switches_problem(self.gpus, self.pcie_switches)
        if problem:
            raise ValueError(problem)
        return self


class NodeGroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # strict: YAML's yes/on/true are not the number 1

    type: Text
    count: int = Field(default=NODE_GROUP_DEFAULTS["count"], gt=0, le=MAX_NODES)
    rack: Text = NODE_GROUP_DEFAULTS["rack"]
    prefix: Text = NODE_GROUP_DEFAULTS["prefix"]
    domains: Optional[dict[str, DomainName]] = Field(
        default=None, description="the group's domain at each of the spec's levels, by level name")
    names: Optional[list[DomainName]] = Field(
        default=None, min_length=1, max_length=MAX_NODES,
        description="the group's nodes' exact names, in order (instead of prefix + a counter; count defaults to their number)")

    @model_validator(mode="after")
    def _names_fit(self) -> "NodeGroupSpec":
        if ";" in self.prefix:
            raise ValueError(f"prefix: no ';' in node names (it separates the nodes of a job's placement in "
                             f"--jobs-csv), got {self.prefix!r}")
        if self.names is None:
            return self
        for j, name in enumerate(self.names):
            if ";" in name:
                raise ValueError(f"names[{j}]: no ';' in node names (it separates the nodes of a job's placement in "
                                 f"--jobs-csv), got {name!r}")
        if "prefix" in self.model_fields_set:
            raise ValueError("names: give prefix or names, not both (names are the nodes' exact names)")
        if "count" not in self.model_fields_set:
            self.count = len(self.names)
        elif self.count != len(self.names):
            raise ValueError(f"names: expected count ({self.count}) names, got {len(self.names)}")
        return self


class LevelSpec(BaseModel):
    """One fabric level (:class:`deepshare.core.fabric.Level`)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # strict: YAML's yes/on/true are not the number 1

    name: DomainName
    nvlink: bool = Field(default=False, description="an NVLink domain: nodes inside talk over NVLink (lowest level only)")
    uplink_gbps: OptionalLinkGbps = Field(default=0.0, description="each domain's uplink, Gbit/s (0: non-blocking)")
    oversubscription: float = Field(default=0.0, ge=0, le=1e6,
                                    description="when > 0: uplink = the domain's NIC bandwidth / this (2 = 2:1)")
    port_gbps: OptionalLinkGbps = Field(default=0.0,
                                        description="one uplink switch port, Gbit/s (e.g. 400): the uplink is round(uplink / "
                                         "port_gbps) ports and each crossing flow is hashed onto one (ECMP); "
                                         "0: one fat pipe")

    @model_validator(mode="after")
    def _one_uplink(self) -> "LevelSpec":
        if self.uplink_gbps > 0 and self.oversubscription > 0:
            raise ValueError("give uplink_gbps or oversubscription, not both")
        if 0 < self.oversubscription < 1:
            raise ValueError(f"oversubscription: expected 1 or more (2 means 2:1), got {self.oversubscription:g}")
        return self


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # strict: YAML's yes/on/true are not the number 1

    name: Text = CLUSTER_DEFAULTS["name"]
    node_types: dict[Text, NodeTypeSpec] = Field(min_length=1)
    nodes: list[NodeGroupSpec] = Field(min_length=1)
    rack_uplink_gbps: OptionalLinkGbps = CLUSTER_DEFAULTS["rack_uplink_gbps"]
    levels: Optional[list[LevelSpec]] = Field(
        default=None, min_length=1, max_length=16,
        description="the fabric's levels, lowest first (without: one level, the racks, with rack_uplink_gbps)")

    @model_validator(mode="after")
    def _types_exist(self) -> "ClusterSpec":
        names = [lv.name for lv in self.levels or ()]
        if len(set(names)) != len(names):
            raise ValueError(f"levels: each level needs its own name, got {names}")
        for i, level in enumerate(self.levels or ()):
            if level.nvlink and i:
                raise ValueError(f"levels[{i}].nvlink: only the lowest level can be an NVLink domain")
        if self.levels and self.rack_uplink_gbps:
            raise ValueError("rack_uplink_gbps: with levels, give each level's uplink_gbps or oversubscription instead")
        for i, group in enumerate(self.nodes):
            if group.type not in self.node_types:
                raise ValueError(
                    f"nodes[{i}].type: unknown node type {group.type!r}; "
                    f"expected one of {sorted(self.node_types)}"
                )
            given = sorted(group.domains or ())
            if self.levels and given != sorted(names):
                raise ValueError(f"nodes[{i}].domains: expected a domain for each level ({', '.join(names)}), "
                                 f"got {', '.join(given) or 'none'}")
            if not self.levels and group.domains:
                raise ValueError(f"nodes[{i}].domains: the spec has no levels; add levels (lowest first) or drop domains")
        total = sum(group.count for group in self.nodes)
        if total > MAX_NODES:
            raise ValueError(f"nodes: {total} nodes in all; expected at most {MAX_NODES}")
        _check_unique_names(self.nodes)
        if self.levels and self.levels[0].nvlink:
            _check_nvlink_domains(self.levels, self.nodes, self.node_types)
        return self


def _check_nvlink_domains(levels: list[LevelSpec], groups: list[NodeGroupSpec],
                          node_types: dict[str, NodeTypeSpec]) -> None:
    """Every node that shares a domain of the NVLink level with another node has NVLink
    (``fabric: nvlink`` and ``nvlink_gbps`` > 0): the link model sends traffic between the
    nodes of one such domain over NVLink only, so a node without it would talk to its domain for
    free. A node alone in its NVLink domain may lack NVLink (its traffic leaves over its NICs)."""
    names = [level.name for level in levels]
    held: dict[tuple[str, ...], int] = {}  # a domain's identity is its path: every level's name
    for group in groups:
        key = tuple((group.domains or {})[name] for name in names)
        held[key] = held.get(key, 0) + group.count
    for i, group in enumerate(groups):
        hardware = node_types[group.type]
        if hardware.fabric == "nvlink" and hardware.nvlink_gbps > 0:
            continue
        key = tuple((group.domains or {})[name] for name in names)
        if held[key] > 1:
            why = "fabric: pcie" if hardware.fabric != "nvlink" else "nvlink_gbps: 0"
            raise ValueError(f"nodes[{i}]: node type {group.type!r} has no NVLink ({why}) but is in NVLink domain "
                             f"{'/'.join(reversed(key))!r} (level {names[0]!r}) with {held[key] - 1} other node(s); "
                             "give the type fabric: nvlink and nvlink_gbps > 0, or each such node an NVLink domain "
                             "of its own")


def _check_unique_names(groups: list[NodeGroupSpec]) -> None:
    """Every node's name is unique across the cluster: the ``prefix`` + counter names (a group
    with prefix ``node1`` makes ``node10``, which a group of eleven ``node`` nodes makes too) and
    the exact names of a group's ``names``."""
    owner: dict[str, int] = {}  # by name_identity: names that show alike are one name
    counters: dict[str, int] = {}
    for i, group in enumerate(groups):  # the prefixed names first, as topology_from_groups makes them
        if group.names is None:
            start = counters.get(group.prefix, 0)
            counters[group.prefix] = start + group.count
            prefix = name_identity(group.prefix)
            for k in range(start, start + group.count):
                name = f"{prefix}{k}"
                if owner.setdefault(name, i) != i:
                    raise ValueError(f"nodes[{i}]: prefix {group.prefix!r} names a node {group.prefix + str(k)!r}, "
                                     f"already the name of a node of nodes[{owner[name]}] (or one that shows alike); "
                                     "node names must be unique (choose another prefix)")
    for i, group in enumerate(groups):
        for j, name in enumerate(group.names or ()):
            same = name_identity(name)
            if same in owner:
                raise ValueError(f"nodes[{i}].names[{j}]: {name!r} is already the name of a node of "
                                 f"nodes[{owner[same]}] (or shows as one); node names must be unique")
            owner[same] = i


TESTBED_NODE_TYPE = NodeTypeSpec(**TESTBED_HARDWARE)
"""The original artifact's node: 8 x TITAN Xp on PCIe Gen3 (16 GB/s), 40 Gb/s InfiniBand."""
