"""Ray's node list as a :class:`~deepshare.core.topology.Topology` the policies understand.

Only alive nodes with GPUs count. A node's name is its ``deepshare.io/node-name`` label when
set (``--local`` and cluster YAMLs set it), else Ray's node name (its IP), suffixed with the
first 8 hex digits of its node id when names repeat. A node keeps the name it was first given
while it lives (the scheduler's reads pass ``known``: a node that joins under a name already
in use is the one suffixed, and a survivor keeps its suffix when its namesake leaves): a
renamed node read as gone, and its jobs were torn down as "node lost". A restart forgets
``known``: the launcher seeds it again from the runs it re-attaches to
(:meth:`~deepshare.runtime.launcher.RayLauncher.remember`), and a placement journalled under
``<name>-<8 hex>`` also finds that node under ``<name>``. Fabric, NIC speed, rack and GPU model come
from the labels ``deepshare.io/fabric`` (pcie|nvlink), ``deepshare.io/nic-gbps``,
``deepshare.io/nvlink-gbps``, ``deepshare.io/pcie-switches``, ``deepshare.io/rack`` and
``deepshare.io/gpu-model`` when present, else the testbed's defaults (PCIe, 40 Gb/s NIC). A
numeric label outside its domain (not a number, NaN, infinite, a bandwidth outside
:data:`~deepshare.core.bounds.MIN_LINK_GBPS`..:data:`~deepshare.core.bounds.MAX_LINK_GBPS`, a
PCIe switch count outside 1..1024) is logged once and the default is used: one node's bad label
must not make every prediction NaN or fail every tick. Nodes are ordered by name, so indices are
stable while the set of nodes is.

**Fabric levels from node labels** (``deepshare scheduler start --level NAME=LABEL_KEY``, a
:class:`LabelLevels`): each level's domain of a node is the value of that level's label on it
(``topology.kubernetes.io/rack: r7`` puts it in domain ``r7`` of ``leaf``), and the topology
gets those levels (:mod:`deepshare.core.fabric`), so policies can honour a job's
``required_level`` / ``preferred_level`` / ``slice_level``. A GPU node **without** a level's label
is a domain of its own at that level, named ``unlabelled:<node>`` (a name no label value can
take): what can be said of it without the label is only that one node is inside one domain, so a
gang that requires that level can use it alone but never together with another node. Without
levels the fabric is the single ``rack`` level of ``deepshare.io/rack`` (every node in ``rack0``
when unset), as before.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

from deepshare.core.bounds import MAX_LINK_GBPS, MIN_LINK_GBPS, finite_in
from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import RACK_LEVEL, Level
from deepshare.core.topology import TESTBED_NODE_TYPE, Node, Topology
from deepshare.core.topology_plain import MAX_PCIE_SWITCHES
from deepshare.core.types import Placement

log = logging.getLogger(__name__)

LABEL_PREFIX = "deepshare.io/"
NAME_LABEL = LABEL_PREFIX + "node-name"
NODE_ID_LABEL = "ray.io/node-id"
UNLABELLED = "unlabelled:"
"""Prefix of the domain of a node without a level's label (``unlabelled:<node>``): ``:`` is in
no Kubernetes or Ray label value, so it never merges with a labelled domain."""


@dataclass(frozen=True, slots=True)
class LabelLevels:
    """The fabric's levels and the node label naming each one's domain, lowest level first
    (``--level NAME=LABEL_KEY``; see the module doc). Empty: the single ``rack`` level."""

    levels: tuple[Level, ...] = ()
    labels: tuple[str, ...] = ()
    """The label key of each level, same order."""

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.labels):
            raise DeepShareError(f"{len(self.levels)} level(s) but {len(self.labels)} label key(s)")

    def label(self, level: str) -> str | None:
        """The label key of the level called ``level``, or None when there is no such level."""
        for spec, key in zip(self.levels, self.labels):
            if spec.name == level:
                return key
        return None

    @property
    def names(self) -> tuple[str, ...]:
        """The topology's level names, lowest first: the levels', or the single ``rack`` level's."""
        return tuple(spec.name for spec in self.levels) if self.levels else (RACK_LEVEL,)

    def describe(self) -> str:
        """``leaf=topology.kubernetes.io/rack < spine=example.com/spine`` (empty without levels)."""
        return " < ".join(f"{spec.name}={key}" for spec, key in zip(self.levels, self.labels))


NO_LEVELS = LabelLevels()


def label_levels(levels: Sequence[str] = (), *, nvlink: str | None = None, uplink_gbps: Sequence[str] = (),
                 oversubscription: Sequence[str] = ()) -> LabelLevels:
    """The levels of ``deepshare scheduler start``'s flags (their ``NAME=VALUE`` strings as given),
    parsed and checked as ``deepshare clusters import`` parses the same flags for Kubernetes nodes
    (:mod:`deepshare.core.fabric_import`): every mistake is one :class:`DeepShareError` line."""
    from deepshare.core.fabric_import import check_level_options, check_unique_levels, level_numbers, level_pairs

    pairs = level_pairs(levels, "--level")
    if not pairs:
        for flag, given in (("--nvlink", nvlink is not None), ("--uplink-gbps", bool(uplink_gbps)),
                            ("--oversubscription", bool(oversubscription))):
            if given:
                raise DeepShareError(f"{flag} needs the levels: --level NAME=LABEL_KEY, lowest first "
                                     "(e.g. --level leaf=topology.kubernetes.io/rack)")
        return NO_LEVELS
    names = [name for name, _ in pairs]
    check_unique_levels(names)
    for name, key in pairs:
        if key == NODE_ID_LABEL:
            raise DeepShareError(f"--level {name}={key}: every node has its own {key}; name a label its domain's "
                                 "nodes share (e.g. topology.kubernetes.io/rack)")
    over = level_numbers(oversubscription, "--oversubscription", names, 1, 1e6,
                         "a ratio from 1 to 1,000,000 (2 means 2:1)")
    uplink = level_numbers(uplink_gbps, "--uplink-gbps", names, 0, 1e9, "Gbit/s from 0 (non-blocking) to 1,000,000,000")
    check_level_options(names, over, uplink, nvlink)
    return LabelLevels(
        tuple(Level(name, nvlink=(i == 0 and nvlink is not None), uplink_gbps=uplink.get(name, 0.0),
                    oversubscription=over.get(name, 0.0)) for i, name in enumerate(names)),
        tuple(key for _, key in pairs))


@dataclass(frozen=True, slots=True)
class RayNode:
    node_id: str
    name: str
    ip: str
    gpus: int
    domain_labels: tuple[str | None, ...] = ()
    """The value of each level's label on it (:class:`LabelLevels` order), None where it has none."""


@dataclass(frozen=True, slots=True)
class ClusterState:
    """The GPU nodes now alive and the topology built from them (same order)."""

    topology: Topology
    nodes: tuple[RayNode, ...]
    levels: LabelLevels = NO_LEVELS
    """The labels the topology's levels were read from (empty: the single ``rack`` level)."""

    def index(self, name: str) -> int | None:
        """The node called ``name``; else, for ``<base>-<8 hex>`` (a name suffixed while another
        node shared ``<base>``), the node called ``<base>`` whose node id begins with those
        digits: the same node, named before its namesake left (a restarted scheduler forgets
        the names it gave)."""
        for i, node in enumerate(self.nodes):
            if node.name == name:
                return i
        base, dash, short = name.rpartition("-")
        if dash and len(short) == 8:
            for i, node in enumerate(self.nodes):
                if node.name == base and node.node_id.startswith(short):
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

    def unlabelled(self) -> list[tuple[str, str, list[str]]]:
        """``(level, label key, names of the GPU nodes without that label)`` for each level some node lacks."""
        missing = []
        for i, (spec, key) in enumerate(zip(self.levels.levels, self.levels.labels)):
            names = [n.name for n in self.nodes if n.domain_labels[i] is None]
            if names:
                missing.append((spec.name, key, names))
        return missing


def _label_float(labels: Mapping[str, str], key: str, default: float, node: str, low: float, high: float,
                 zero: bool = False) -> float:
    """The number in label ``deepshare.io/KEY``, or ``default`` without one; a value that is not a
    finite number in ``low``..``high`` (or 0 where ``zero``) gives ``default`` too, logged once."""
    raw = labels.get(LABEL_PREFIX + key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if finite_in(value, low, high) or (zero and value == 0):
        return value
    _bad_label(node, LABEL_PREFIX + key, str(raw)[:64], f"{'0 or ' if zero else ''}{low:g} to {high:g}", default)
    return default


@lru_cache(maxsize=1024)
def _bad_label(node: str, key: str, raw: str, expected: str, default: float) -> None:
    """Log a node's bad numeric label once (the cluster is read every tick)."""
    log.warning("node %s: label %s=%r is not a number from %s; using %g", node, key, raw, expected, default)


def _domain_label(labels: Mapping[str, Any], key: str) -> str | None:
    value = labels.get(key)
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()


def node_names(bases: Sequence[str], ids: Sequence[str], known: dict[str, str] | None = None) -> list[str]:
    """Each node's name: ``bases[i]``, suffixed ``-<first 8 hex of its id>`` when another node
    has the same base. With ``known`` (node id -> the name it was given before; replaced by this
    call's names), a node keeps its earlier name while that is still its base or its suffixed
    base and no other node took it, so a node that joins under a name in use is the one suffixed
    and none is renamed when a namesake joins or leaves."""
    names: list[str | None] = [None] * len(bases)
    taken: set[str] = set()
    for i, (base, node_id) in enumerate(zip(bases, ids)):
        kept = (known or {}).get(node_id)
        if kept is not None and kept not in taken and kept in (base, f"{base}-{node_id[:8]}"):
            names[i] = kept
            taken.add(kept)
    repeats = Counter(bases)
    for i, (base, node_id) in enumerate(zip(bases, ids)):
        if names[i] is None:
            plain = repeats[base] == 1 and base not in taken
            names[i] = base if plain else f"{base}-{node_id[:8]}"
            taken.add(names[i])  # type: ignore[arg-type]
    out = [n for n in names if n is not None]
    if known is not None:
        known.clear()
        known.update(zip(ids, out))
    return out


def read_cluster(ray_nodes: Sequence[Mapping[str, Any]], name: str = "ray", levels: LabelLevels = NO_LEVELS,
                 known: dict[str, str] | None = None) -> ClusterState:
    """Build the state from ``ray.nodes()`` entries (a pure function of them and ``known``: tests
    feed it dicts), the fabric's levels read from the node labels ``levels`` names (see the
    module doc). ``known``: the names earlier reads gave, by node id (:func:`node_names`)."""
    alive = [n for n in ray_nodes if n.get("Alive") and int(n.get("Resources", {}).get("GPU", 0)) > 0]
    base = [str(n.get("Labels", {}).get(NAME_LABEL) or n.get("NodeName") or n.get("NodeManagerAddress") or "node")
            for n in alive]
    found = list(zip(node_names(base, [str(n["NodeID"]) for n in alive], known), alive))
    found.sort(key=lambda item: item[0])
    t = TESTBED_NODE_TYPE
    # The switch a node hangs off names its rack (as in a cluster spec with levels): its path above
    # the NVLink level.
    first = 1 if levels.levels and levels.levels[0].nvlink and len(levels.levels) > 1 else 0
    nodes, ray_list = [], []
    for i, (node_name, n) in enumerate(found):
        labels = n.get("Labels", {}) or {}
        gpus = int(n["Resources"]["GPU"])
        fabric = labels.get(LABEL_PREFIX + "fabric", t.fabric)
        values = tuple(_domain_label(labels, key) for key in levels.labels)
        domains = tuple(v if v is not None else f"{UNLABELLED}{node_name}" for v in values)
        rack = labels.get(LABEL_PREFIX + "rack") or ("/".join(reversed(domains[first:])) if domains else "rack0")
        nodes.append(Node(
            index=i, name=node_name, gpus=gpus, rack=rack, node_type="ray",
            gpu_model=labels.get(LABEL_PREFIX + "gpu-model", "unknown"),
            fabric=fabric if fabric in ("pcie", "nvlink") else t.fabric,
            # at most one switch per GPU (as a cluster spec must): a label cannot add bandwidth no GPU uses
            pcie_switches=min(gpus, int(_label_float(labels, "pcie-switches", 1, node_name, 1, MAX_PCIE_SWITCHES))),
            intra_node_gbps=_label_float(labels, "intra-node-gbps", t.intra_node_gbps, node_name, MIN_LINK_GBPS,
                                         MAX_LINK_GBPS),
            nvlink_gbps=_label_float(labels, "nvlink-gbps", t.nvlink_gbps, node_name, MIN_LINK_GBPS, MAX_LINK_GBPS,
                                     zero=True),
            nic_gbps=_label_float(labels, "nic-gbps", t.nic_gbps, node_name, MIN_LINK_GBPS, MAX_LINK_GBPS),
            domains=domains,
        ))
        ray_list.append(RayNode(node_id=str(n["NodeID"]), name=node_name, ip=str(n.get("NodeManagerAddress", "")),
                                gpus=gpus, domain_labels=values))
    return ClusterState(Topology(name, tuple(nodes), levels=levels.levels), tuple(ray_list), levels)


def current_cluster(levels: LabelLevels = NO_LEVELS, known: dict[str, str] | None = None) -> ClusterState:
    """The alive GPU nodes now (``known``: see :func:`read_cluster`)."""
    import ray

    return read_cluster(ray.nodes(), levels=levels, known=known)
