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

A fabric of several levels (:mod:`deepshare.core.fabric`) names its levels, lowest first, and
each node group's domain at every level::

    levels:
      - {name: nvlink_domain, nvlink: true}      # an NVLink domain spanning nodes (GB200 NVL72)
      - {name: leaf, oversubscription: 2}        # uplink = the leaf's NIC bandwidth / 2
      - {name: spine, uplink_gbps: 51200, port_gbps: 400}   # 128 x 400G ports, flows hashed (ECMP)
    nodes:
      - {type: gb200, count: 18, prefix: r0-, domains: {nvlink_domain: nvl0, leaf: leaf0, spine: spine0}}

Without ``levels`` the fabric has one level, ``rack`` (the groups' racks, ``rack_uplink_gbps``).
All bandwidths are in Gbit/s. Presets ship in ``deepshare/data/clusters/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import RACK_LEVEL, Fabric, Level, build_fabric
from deepshare.core.files import CONFIG_BYTES, read_input_text
from deepshare.core.topology_plain import (  # noqa: F401 - the defaults are re-exported
    CLUSTER_DEFAULTS, MAX_NODES, NODE_GROUP_DEFAULTS, NODE_TYPE_DEFAULTS, NODE_TYPE_FIELDS, TESTBED_HARDWARE, Group,
    plain_groups,
)

if TYPE_CHECKING:
    from deepshare.core.topology_spec import ClusterSpec, NodeGroupSpec, NodeTypeSpec  # noqa: F401

_SPEC_NAMES = ("ClusterSpec", "NodeGroupSpec", "NodeTypeSpec", "TESTBED_NODE_TYPE")
"""The pydantic schema's names, re-exported from :mod:`deepshare.core.topology_spec` on first use."""


def __getattr__(name: str) -> Any:
    """The spec models (and ``TESTBED_NODE_TYPE``) without importing pydantic with this module:
    presets and uniform clusters are built from plain values, only a user's YAML needs them."""
    if name in _SPEC_NAMES:
        from deepshare.core import topology_spec

        return getattr(topology_spec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    domains: tuple[str, ...] = ()
    """Its domain's name at each of the topology's ``levels``, lowest first (empty without levels)."""


@dataclass(frozen=True, slots=True)
class Topology:
    name: str
    nodes: tuple[Node, ...]
    rack_uplink_gbps: float = 0.0
    levels: tuple[Level, ...] = ()
    """The fabric's levels, lowest first; empty: one ``rack`` level (the nodes' racks, ``rack_uplink_gbps``)."""
    capacity: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """GPUs per node, by node index (derived once from ``nodes``)."""
    total_gpus: int = field(init=False, repr=False, compare=False)
    fabric: Fabric = field(init=False, repr=False, compare=False)
    """The levels, domains and uplinks (:mod:`deepshare.core.fabric`), derived from the nodes."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", tuple(n.gpus for n in self.nodes))
        object.__setattr__(self, "total_gpus", sum(self.capacity))
        if self.levels:
            levels, names = self.levels, [n.domains for n in self.nodes]
        else:
            levels, names = (Level(RACK_LEVEL, uplink_gbps=self.rack_uplink_gbps),), [(n.rack,) for n in self.nodes]
        object.__setattr__(self, "fabric", build_fabric(levels, names, [n.nic_gbps for n in self.nodes]))

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
        levels = tuple(Level(lv.name, lv.nvlink, lv.uplink_gbps, lv.oversubscription, lv.port_gbps)
                       for lv in spec.levels or ())
        groups = []
        for g in spec.nodes:
            domains = tuple(g.domains[lv.name] for lv in levels) if levels and g.domains else ()
            rack = g.rack
            if levels and "rack" not in g.model_fields_set:  # the switch a node hangs off names its rack
                first = 1 if levels[0].nvlink and len(levels) > 1 else 0
                rack = "/".join(reversed(domains[first:]))
            groups.append((g.type, {f: getattr(spec.node_types[g.type], f) for f in NODE_TYPE_FIELDS}, g.count, rack,
                           g.prefix, domains, g.names))
        return topology_from_groups(spec.name, groups, spec.rack_uplink_gbps, levels)


def topology_from_groups(name: str, groups: Iterable[Group], rack_uplink_gbps: float,
                         levels: tuple[Level, ...] = ()) -> Topology:
    """The topology of node groups ``(type name, hardware fields, count, rack, name prefix[,
    domains[, names]])``: nodes numbered in group order, named ``prefix`` + a counter per prefix,
    or ``names`` (the nodes' exact names, ``count`` of them) when a group gives them."""
    nodes: list[Node] = []
    counters: dict[str, int] = {}
    for type_name, hardware, count, rack, prefix, *rest in groups:
        domains = tuple(rest[0]) if rest else ()
        names = rest[1] if len(rest) > 1 else None
        for i in range(count):
            if names is not None:
                node_name = names[i]
            else:
                k = counters.get(prefix, 0)
                counters[prefix] = k + 1
                node_name = f"{prefix}{k}"
            nodes.append(Node(index=len(nodes), name=node_name, rack=rack, node_type=type_name, **hardware,
                              domains=domains))
    topology = Topology(name, tuple(nodes), rack_uplink_gbps, levels)
    problem = nvlink_domain_problem(topology)
    if problem is not None:
        raise DeepShareError(problem)
    return topology


def nvlink_domain_problem(topology: Topology) -> str | None:
    """Why ``topology`` cannot be simulated, when a node without NVLink (``fabric`` not
    ``nvlink``, or ``nvlink_gbps`` 0) shares a domain of its NVLink level with other nodes: the
    link model carries traffic between the nodes of such a domain over NVLink only, so that
    node's inter-node traffic would cost nothing. None when there is no such node (a node alone
    in its NVLink domain may lack NVLink: its traffic leaves over its NICs).

    :class:`ClusterSpec` refuses such a spec with the group's field; this covers topologies built
    from node groups in code (:func:`topology_from_groups`)."""
    fabric = topology.fabric
    level = fabric.nvlink_level
    if level is None:
        return None
    for d in fabric.by_level[level]:
        domain = fabric.domains[d]
        if len(domain.nodes) < 2:
            continue
        for i in domain.nodes:
            node = topology.nodes[i]
            if node.fabric != "nvlink" or node.nvlink_gbps <= 0:
                why = "fabric: pcie" if node.fabric != "nvlink" else "nvlink_gbps: 0"
                return (f"node {node.name!r} (type {node.node_type!r}) has no NVLink ({why}) but is in NVLink domain "
                        f"{domain.name!r} (level {fabric.levels[level].name!r}) with {len(domain.nodes) - 1} other "
                        "node(s); give its type fabric: nvlink and nvlink_gbps > 0, or it an NVLink domain of its own")
    return None


NODES_PER_RACK = 32


def uniform(nodes: int, gpus_per_node: int, name: str | None = None) -> Topology:
    """A cluster of ``nodes`` testbed-type nodes with ``gpus_per_node`` GPUs, 32 nodes a rack
    (a one-GPU node has one PCIe switch, not the testbed's two)."""
    if nodes <= 0:
        raise DeepShareError(f"--nodes must be a positive integer, got {nodes}")
    if gpus_per_node <= 0:
        raise DeepShareError(f"--gpus-per-node must be a positive integer, got {gpus_per_node}")
    hardware = {**NODE_TYPE_DEFAULTS, **TESTBED_HARDWARE, "gpus": gpus_per_node}
    hardware["pcie_switches"] = min(hardware["pcie_switches"], gpus_per_node)  # each switch serves a GPU
    groups = [("node", hardware, min(NODES_PER_RACK, nodes - start), f"rack{start // NODES_PER_RACK}", "node")
              for start in range(0, nodes, NODES_PER_RACK)]
    return topology_from_groups(name or f"uniform-{nodes}x{gpus_per_node}", groups, CLUSTER_DEFAULTS["rack_uplink_gbps"])


def preset_names() -> list[str]:
    folder = resources.files("deepshare.data") / "clusters"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


SPEC_VALUES = 22 * MAX_NODES
"""Values a cluster spec may hold (a YAML document's: every scalar, list and mapping, keys not
counted): a node group costs 5 values, one per level's domain (at most 16) and one per name, so
an imported cluster of :data:`MAX_NODES` hosts, each in a group of its own (hosts listed across
racks), fits (the documents' general 100,000 refused 40,000 hosts four to a switch)."""


def load_topology(preset_or_path: str, field: str = "--cluster") -> Topology:
    """Load a preset by name (``testbed``, ...) or a cluster spec YAML by path; a missing or
    unreadable file's error names ``field`` (the flag or config key it came from)."""
    if preset_or_path in preset_names():
        text = (resources.files("deepshare.data") / "clusters" / f"{preset_or_path}.yaml").read_text()
        return _preset_topology(text, source=f"preset {preset_or_path!r}")
    path = Path(preset_or_path)
    missing = f"is neither a preset ({', '.join(preset_names())}) nor an existing file"
    text = read_input_text(path, "cluster spec", CONFIG_BYTES, label=f"{field} {preset_or_path!r}", not_found=missing)
    return parse_topology(text, source=str(path))


def parse_topology(text: str, source: str = "<cluster spec>") -> Topology:
    """A cluster spec YAML, validated by :class:`ClusterSpec` (errors name the source and field)."""
    from deepshare.core.topology_spec import ClusterSpec
    from deepshare.core.yamlspec import parse_yaml_model

    spec = parse_yaml_model(text, ClusterSpec, source, "node_types and nodes", SPEC_VALUES)
    try:
        return Topology.from_spec(spec)
    except DeepShareError as exc:  # what the schema cannot see alone (the fabric's ports): named as its fields are
        raise DeepShareError(f"{source}: {exc}") from None


def _preset_topology(text: str, source: str) -> Topology:
    """A shipped preset, built from plain values when :func:`plain_topology` accepts it (every shipped one), else through :func:`parse_topology` (same result, or its errors)."""
    from deepshare.core.documents import load_yaml

    try:
        raw = load_yaml(text, source, max_values=SPEC_VALUES)
    except DeepShareError:
        raw = None  # parse_topology names the error
    topology = plain_topology(raw)
    return topology if topology is not None else parse_topology(text, source)


def plain_topology(raw: Any) -> Topology | None:
    """The topology of a parsed spec mapping built without pydantic, or None when only the schema
    can decide (see :mod:`deepshare.core.topology_plain`); when not None it equals
    ``Topology.from_spec(ClusterSpec.model_validate(raw))``."""
    groups = plain_groups(raw)
    return None if groups is None else topology_from_groups(*groups)

