"""A cluster spec's plain schema: its defaults, and a parsed spec's node groups without pydantic.

The defaults are the one copy: :mod:`deepshare.core.topology_spec` (pydantic) uses them too.
:func:`plain_groups` accepts only specs it can vouch for: exactly the keys of the schema in
:mod:`deepshare.core.topology_spec`, values of exactly the expected types (an int for an int, an
int or float for a float, no strings to coerce, no bools) within the schema's bounds. For those
it returns the node groups that ``ClusterSpec.model_validate(raw)`` holds (defaults filled, ints as
floats where the schema says float), which :func:`deepshare.core.topology.plain_topology` turns
into a topology; for anything else it returns None and the caller validates with pydantic, so
every error message still comes from the schema. The shipped presets take this path, which saves
``deepshare simulate`` importing pydantic.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

from deepshare.core.bounds import link_gbps_ok
from deepshare.core.names import has_control_character

NODE_TYPE_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "gpu_model": "unknown", "fabric": "pcie", "pcie_switches": 1,
    "intra_node_gbps": 128.0, "nvlink_gbps": 0.0, "nic_gbps": 40.0,
})
"""A node type's optional fields and their defaults (``gpus`` is required)."""
NODE_GROUP_DEFAULTS: Mapping[str, Any] = MappingProxyType({"count": 1, "rack": "rack0", "prefix": "node"})
CLUSTER_DEFAULTS: Mapping[str, Any] = MappingProxyType({"name": "cluster", "rack_uplink_gbps": 0.0})
NODE_TYPE_FIELDS = ("gpus", *NODE_TYPE_DEFAULTS)
MAX_NODES = 100_000
"""Nodes in one cluster spec at most (a group's ``count`` and all groups together): far above any
real cluster, and a mistyped count gets an error instead of exhausting memory."""
MAX_GPUS_PER_NODE = 1024
MAX_PCIE_SWITCHES = 1024
"""The hardware fields of a node type, which every node of the type copies."""

TESTBED_HARDWARE: Mapping[str, Any] = MappingProxyType({
    "gpus": 8, "gpu_model": "TITAN Xp", "fabric": "pcie", "pcie_switches": 2, "intra_node_gbps": 128.0, "nic_gbps": 40.0,
})
"""The original artifact's node: 8 x TITAN Xp on PCIe Gen3 (16 GB/s), 40 Gb/s InfiniBand
(the fields given; the rest are defaults). ``TESTBED_NODE_TYPE`` is this as a ``NodeTypeSpec``."""

Group = tuple[str, Mapping[str, Any], int, str, str]
"""A node group: (type name, hardware fields, count, rack, name prefix); a spec with fabric
levels goes through pydantic, whose groups also carry the domains."""

_Check = Callable[[Any], bool]


def pcie_switches_problem(gpus: int, pcie_switches: int) -> str | None:
    """Why a node of ``gpus`` GPUs cannot have ``pcie_switches`` PCIe switches, or None: each
    switch serves at least one GPU (the link model sums the switches' bandwidth, so a switch
    without a GPU would add bandwidth no job can use)."""
    if pcie_switches > gpus:
        return f"pcie_switches: at most gpus ({gpus}), as each switch serves one or more of the node's GPUs, got {pcie_switches}"
    return None


def _up_to(high: int) -> _Check:
    return lambda v: 0 < v <= high


def _link_or_none(v: float) -> bool:
    return link_gbps_ok(v, none_ok=True)


def _text(v: str) -> bool:
    return len(v) <= 256 and not has_control_character(v)  # the schema's Text


def _prefix(v: str) -> bool:
    """A node name prefix this module vouches for: ASCII (names compared as written are then
    compared as the schema compares them, by identity) and no ``;`` (which the schema refuses)."""
    return _text(v) and v.isascii() and ";" not in v


def _fabric(v: str) -> bool:
    return v in ("pcie", "nvlink")


# field: (kind, check or None); a field missing from the defaults is required.
_NODE_TYPE: dict[str, tuple[type, _Check | None]] = {
    "gpus": (int, _up_to(MAX_GPUS_PER_NODE)), "gpu_model": (str, _text), "fabric": (str, _fabric),
    "pcie_switches": (int, _up_to(MAX_PCIE_SWITCHES)),
    "intra_node_gbps": (float, link_gbps_ok), "nvlink_gbps": (float, _link_or_none), "nic_gbps": (float, link_gbps_ok),
}
_NODE_GROUP: dict[str, tuple[type, _Check | None]] = {
    "type": (str, _text), "count": (int, _up_to(MAX_NODES)), "rack": (str, _text), "prefix": (str, _prefix),
}
_CLUSTER_SCALARS: dict[str, tuple[type, _Check | None]] = {"name": (str, _text), "rack_uplink_gbps": (float, _link_or_none)}


class _Unsure(Exception):
    """The mapping is not one this module vouches for (pydantic decides)."""


def _value(v: Any, kind: type, check: _Check | None) -> Any:
    if kind is float and type(v) in (int, float):
        try:
            v = float(v)
        except OverflowError:
            raise _Unsure from None
    elif type(v) is not kind:
        raise _Unsure
    if check is not None and not check(v):
        raise _Unsure
    return v


def _record(raw: Any, rules: dict[str, tuple[type, _Check | None]], defaults: Any) -> dict[str, Any]:
    """``raw`` (a dict with no unknown keys) with defaults filled in and each value checked."""
    if type(raw) is not dict or not set(raw) <= set(rules):
        raise _Unsure
    out = {}
    for key, (kind, check) in rules.items():
        if key in raw:
            out[key] = _value(raw[key], kind, check)
        elif key in defaults:
            out[key] = defaults[key]
        else:
            raise _Unsure
    return out


def plain_groups(raw: Any) -> tuple[str, list[Group], float] | None:
    """The spec mapping ``raw`` as (name, node groups, rack uplink), or None when pydantic must validate it."""
    try:
        return _groups(raw)
    except _Unsure:
        return None


def _groups(raw: Any) -> tuple[str, list[Group], float]:
    if type(raw) is not dict or not set(raw) <= {*_CLUSTER_SCALARS, "node_types", "nodes"}:
        raise _Unsure
    scalars = _record({k: v for k, v in raw.items() if k in _CLUSTER_SCALARS}, _CLUSTER_SCALARS, CLUSTER_DEFAULTS)
    node_types, groups = raw.get("node_types"), raw.get("nodes")
    if type(node_types) is not dict or not node_types or type(groups) is not list or not groups:
        raise _Unsure
    hardware = {}
    for name, spec in node_types.items():
        if type(name) is not str or not _text(name):
            raise _Unsure
        hardware[name] = _record(spec, _NODE_TYPE, NODE_TYPE_DEFAULTS)
        if pcie_switches_problem(hardware[name]["gpus"], hardware[name]["pcie_switches"]):
            raise _Unsure
    rows: list[Group] = []
    for raw_group in groups:
        g = _record(raw_group, _NODE_GROUP, NODE_GROUP_DEFAULTS)
        if g["type"] not in hardware:
            raise _Unsure
        rows.append((g["type"], hardware[g["type"]], g["count"], g["rack"], g["prefix"]))
    if sum(row[2] for row in rows) > MAX_NODES:
        raise _Unsure
    prefixes = sorted({row[4] for row in rows})
    if any(b.startswith(a) for a, b in zip(prefixes, prefixes[1:])):  # node1 + counter may be node + counter:
        raise _Unsure  # the schema checks such names one by one (sorted: a prefix of any is one of the next's)
    return scalars["name"], rows, scalars["rack_uplink_gbps"]
