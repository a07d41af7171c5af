"""Presets and uniform clusters built without pydantic equal what the pydantic schema builds.

:func:`plain_topology` must return exactly ``Topology.from_spec(ClusterSpec.model_validate(raw))``
(field values and their types: ``repr`` shows 128 vs 128.0) or None, and None whenever pydantic
rejects the mapping, so every error still comes from the schema.
"""

from __future__ import annotations

from importlib import resources

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from deepshare.core.errors import DeepShareError
from deepshare.core.topology import (
    NODE_TYPE_DEFAULTS, NODES_PER_RACK, TESTBED_HARDWARE, Topology, load_topology, parse_topology, plain_topology,
    preset_names, uniform,
)
from deepshare.core.topology_spec import TESTBED_NODE_TYPE, ClusterSpec, NodeGroupSpec, NodeTypeSpec


def schema_topology(raw: object) -> Topology | None:
    try:
        return Topology.from_spec(ClusterSpec.model_validate(raw))
    except ValidationError:
        return None


def test_every_preset_without_levels_takes_the_plain_path_and_equals_the_schema():
    """Presets with fabric levels go through the schema (the plain path knows no levels); the
    others take the plain path and build exactly what the schema builds."""
    plain_ones = 0
    for name in preset_names():
        text = (resources.files("deepshare.data") / "clusters" / f"{name}.yaml").read_text()
        raw = yaml.safe_load(text)
        plain = plain_topology(raw)
        assert (plain is None) == ("levels" in raw), name
        assert repr(plain or parse_topology(text)) == repr(parse_topology(text)) == repr(load_topology(name))
        plain_ones += plain is not None
    assert plain_ones == 4


def test_testbed_node_type_is_the_plain_testbed_hardware():
    assert TESTBED_NODE_TYPE.model_dump() == {**NODE_TYPE_DEFAULTS, **TESTBED_HARDWARE}
    assert TESTBED_NODE_TYPE.model_fields_set == set(TESTBED_HARDWARE)


def old_uniform(nodes: int, gpus: int) -> Topology:
    """``uniform`` as it was built through the schema (one PCIe switch per GPU at most)."""
    node_type = TESTBED_NODE_TYPE.model_copy(update={"gpus": gpus, "pcie_switches": min(gpus, TESTBED_NODE_TYPE.pcie_switches)})
    groups = [NodeGroupSpec(type="node", count=min(NODES_PER_RACK, nodes - s), rack=f"rack{s // NODES_PER_RACK}")
              for s in range(0, nodes, NODES_PER_RACK)]
    return Topology.from_spec(ClusterSpec(name=f"uniform-{nodes}x{gpus}", node_types={"node": node_type}, nodes=groups))


@given(st.integers(1, 200), st.integers(1, 16))
@settings(max_examples=60, deadline=None)
def test_uniform_equals_the_schema_built_cluster(nodes, gpus):
    assert repr(uniform(nodes, gpus)) == repr(old_uniform(nodes, gpus))


def test_spec_models_are_reexported_lazily():
    import deepshare.core.topology as topology

    assert topology.ClusterSpec is ClusterSpec and topology.NodeTypeSpec is NodeTypeSpec
    assert topology.TESTBED_NODE_TYPE is TESTBED_NODE_TYPE


# Values of every kind the YAML loader produces, valid and not, for every field.
odd = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(2**1023, 2**1100), st.floats(allow_nan=True),
    st.sampled_from(["", "4", "pcie", "nvlink", "t", "x", "rack0", "node", "r\n0", "n\x85", "\u202ex"]), st.lists(st.integers(0, 2), max_size=2),
)
hardware = st.fixed_dictionaries(
    {"gpus": st.one_of(st.integers(1, 16), odd)},
    optional={
        "gpu_model": st.one_of(st.just("A100"), odd), "fabric": st.one_of(st.sampled_from(["pcie", "nvlink"]), odd),
        "pcie_switches": st.one_of(st.integers(1, 4), odd), "intra_node_gbps": st.one_of(st.integers(1, 512), st.floats(0.5, 1e4), odd),
        "nvlink_gbps": st.one_of(st.integers(0, 3600), odd), "nic_gbps": st.one_of(st.floats(1, 400), odd), "colour": odd,
    },
)
group = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(["t", "u"]), odd)},
    optional={"count": st.one_of(st.integers(1, 5), odd), "rack": st.one_of(st.just("r1"), odd),
              "prefix": st.one_of(st.just("n-"), odd), "extra": odd},
)
spec = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.just("c"), odd),
        "node_types": st.one_of(st.dictionaries(st.one_of(st.sampled_from(["t", "u"]), st.integers(0, 1)), hardware, max_size=2), odd),
        "nodes": st.one_of(st.lists(group, max_size=3), odd),
        "rack_uplink_gbps": st.one_of(st.integers(0, 800), odd),
        "racks": odd,
    },
)


@given(st.one_of(spec, odd))
@settings(max_examples=800, deadline=None)
def test_plain_path_equals_the_schema_or_defers_to_it(raw):
    plain = plain_topology(raw)
    reference = schema_topology(raw)
    if reference is None:
        assert plain is None  # pydantic rejects it: its errors are the ones the user sees
    elif plain is not None:
        assert repr(plain) == repr(reference)


valid_hardware = st.fixed_dictionaries(
    {"gpus": st.integers(4, 16)},  # pcie_switches up to 4 needs as many GPUs
    optional={
        "gpu_model": st.just("A100"), "fabric": st.sampled_from(["pcie", "nvlink"]), "pcie_switches": st.integers(1, 4),
        "intra_node_gbps": st.one_of(st.integers(1, 512), st.floats(0.5, 1e4)), "nvlink_gbps": st.one_of(st.integers(0, 3600), st.just(0.0)),
        "nic_gbps": st.one_of(st.floats(1, 400), st.integers(1, 400)),
    },
)
valid_group = st.fixed_dictionaries(
    {"type": st.sampled_from(["t", "u"])},
    optional={"count": st.integers(1, 5), "rack": st.sampled_from(["r0", "r1"]), "prefix": st.sampled_from(["n-", "node"])},
)
valid_spec = st.fixed_dictionaries(
    {"node_types": st.fixed_dictionaries({"t": valid_hardware, "u": valid_hardware}), "nodes": st.lists(valid_group, min_size=1, max_size=4)},
    optional={"name": st.just("c"), "rack_uplink_gbps": st.one_of(st.integers(0, 800), st.just(0.0), st.floats(1e-3, 1e4))},
)


SPOILABLE = [None, "name", "node_types", "nodes", "rack_uplink_gbps", "racks", *(f"t.{f}" for f in (*NODE_TYPE_DEFAULTS, "gpus", "colour")),
             *(f"nodes0.{f}" for f in ("type", "count", "rack", "prefix", "extra"))]


def spoilt(raw: dict, field: str, value: object) -> dict:
    """``raw`` with ``field`` (top level, ``t.FIELD`` of node type t, ``nodes0.FIELD``) set to ``value``."""
    if field.startswith("t."):
        return {**raw, "node_types": {**raw["node_types"], "t": {**raw["node_types"]["t"], field[2:]: value}}}
    if field.startswith("nodes0."):
        return {**raw, "nodes": [{**raw["nodes"][0], field[7:]: value}, *raw["nodes"][1:]]}
    return {**raw, field: value}


@given(valid_spec, st.sampled_from(SPOILABLE), odd)
@settings(max_examples=400, deadline=None)
def test_plain_path_on_valid_specs_and_one_bad_field(raw, field, value):
    """A valid spec takes the plain path and equals the schema's; one field spoilt, it defers."""
    if field is None:
        assert plain_topology(raw) is not None
        assert repr(plain_topology(raw)) == repr(schema_topology(raw))
        return
    raw = spoilt(raw, field, value)
    plain, reference = plain_topology(raw), schema_topology(raw)
    assert plain is None or (reference is not None and repr(plain) == repr(reference))
    if reference is None:
        assert plain is None


def test_more_pcie_switches_than_gpus_is_refused_naming_the_field():
    """Each switch serves a GPU: the link model sums the switches' bandwidth, and 8 switches on a
    4-GPU node counted bandwidth no job could use (the plain path defers, the schema refuses)."""
    raw = {"node_types": {"t": {"gpus": 4, "pcie_switches": 8}}, "nodes": [{"type": "t"}]}
    assert plain_topology(raw) is None and schema_topology(raw) is None
    with pytest.raises(DeepShareError, match=r"c.yaml: node_types.t: Value error, pcie_switches: at most gpus \(4\).*got 8"):
        parse_topology(yaml.safe_dump(raw), "c.yaml")
    assert plain_topology({**raw, "node_types": {"t": {"gpus": 4, "pcie_switches": 4}}}) is not None


@pytest.mark.parametrize("where", ["name", "type key", "gpu_model", "rack", "prefix", "group type"])
def test_names_with_control_characters_are_refused_by_both_paths(where):
    """A rack, a prefix, a GPU model, a node type's or the cluster's name reaches outputs, logs
    and the placement service's requests, which refuse control characters."""
    bad = "r\u2028\u202ex"
    raw = {"name": "c", "node_types": {"t": {"gpus": 4, "gpu_model": "A100"}}, "nodes": [{"type": "t", "rack": "r0", "prefix": "n"}]}
    if where == "name":
        raw["name"] = bad
    elif where == "type key":
        raw["node_types"] = {bad: raw["node_types"]["t"]}
        raw["nodes"][0]["type"] = bad
    elif where == "gpu_model":
        raw["node_types"]["t"]["gpu_model"] = bad
    elif where == "group type":
        raw["nodes"][0]["type"] = bad
    else:
        raw["nodes"][0][where] = bad
    assert plain_topology(raw) is None and schema_topology(raw) is None
    with pytest.raises(DeepShareError) as info:
        parse_topology(yaml.safe_dump(raw), "c.yaml")
    assert "String should match pattern" in str(info.value) and "\u2028" not in str(info.value)


def test_plain_path_accepts_a_typical_spec():
    raw = {"name": "c", "node_types": {"t": {"gpus": 4, "nic_gbps": 100}}, "nodes": [{"type": "t", "count": 2}]}
    assert plain_topology(raw) is not None
    assert repr(plain_topology(raw)) == repr(schema_topology(raw))
