"""A cluster spec mapping (parsed YAML) as a :class:`Topology`, without pydantic.

:func:`plain_topology` accepts only specs it can vouch for: exactly the keys of the schema in
:mod:`deepshare.core.topology_spec`, values of exactly the expected types (an int for an int, an
int or float for a float, no strings to coerce, no bools) within the schema's bounds. For those
it returns what ``Topology.from_spec(ClusterSpec.model_validate(raw))`` returns (defaults filled,
ints as floats where the schema says float); for anything else it returns None and the caller
validates with pydantic, so every error message still comes from the schema. The shipped presets
take this path, which saves ``deepshare simulate`` importing pydantic.
"""

from __future__ import annotations

from typing import Any, Callable

from deepshare.core.topology import (
    CLUSTER_DEFAULTS, NODE_GROUP_DEFAULTS, NODE_TYPE_DEFAULTS, Topology, topology_from_groups,
)

_Check = Callable[[Any], bool]


def _positive(v: float) -> bool:
    return v > 0


def _non_negative(v: float) -> bool:
    return v >= 0


def _fabric(v: str) -> bool:
    return v in ("pcie", "nvlink")


# field: (kind, check or None); a field missing from the defaults is required.
_NODE_TYPE: dict[str, tuple[type, _Check | None]] = {
    "gpus": (int, _positive), "gpu_model": (str, None), "fabric": (str, _fabric), "pcie_switches": (int, _positive),
    "intra_node_gbps": (float, _positive), "nvlink_gbps": (float, _non_negative), "nic_gbps": (float, _positive),
}
_NODE_GROUP: dict[str, tuple[type, _Check | None]] = {
    "type": (str, None), "count": (int, _positive), "rack": (str, None), "prefix": (str, None),
}
_CLUSTER_SCALARS: dict[str, tuple[type, _Check | None]] = {"name": (str, None), "rack_uplink_gbps": (float, _non_negative)}


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


def plain_topology(raw: Any) -> Topology | None:
    """The topology of the spec mapping ``raw``, or None when pydantic must validate it."""
    try:
        return _topology(raw)
    except _Unsure:
        return None


def _topology(raw: Any) -> Topology:
    if type(raw) is not dict or not set(raw) <= {*_CLUSTER_SCALARS, "node_types", "nodes"}:
        raise _Unsure
    scalars = _record({k: v for k, v in raw.items() if k in _CLUSTER_SCALARS}, _CLUSTER_SCALARS, CLUSTER_DEFAULTS)
    node_types, groups = raw.get("node_types"), raw.get("nodes")
    if type(node_types) is not dict or not node_types or type(groups) is not list or not groups:
        raise _Unsure
    hardware = {}
    for name, spec in node_types.items():
        if type(name) is not str:
            raise _Unsure
        hardware[name] = _record(spec, _NODE_TYPE, NODE_TYPE_DEFAULTS)
    rows = []
    for raw_group in groups:
        g = _record(raw_group, _NODE_GROUP, NODE_GROUP_DEFAULTS)
        if g["type"] not in hardware:
            raise _Unsure
        rows.append((g["type"], hardware[g["type"]], g["count"], g["rack"], g["prefix"]))
    return topology_from_groups(scalars["name"], rows, scalars["rack_uplink_gbps"])
