"""Cluster presets, uniform clusters and YAML spec validation."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from deepshare.core.topology import NODES_PER_RACK, load_topology, parse_topology, preset_names, uniform
from deepshare.core.errors import DeepShareError

GOOD = """\
name: tiny
node_types:
  t:
    gpus: 4
    gpu_model: X
    nic_gbps: 100
nodes:
  - {type: t, count: 2, rack: r0}
  - {type: t, count: 1, rack: r1, prefix: extra-}
"""


def test_preset_names():
    assert preset_names() == ["a100-16", "clos3-256", "gb200-nvl72-4", "h100-64", "h100-leafspine-1to1",
                              "h100-leafspine-2to1", "mixed-32", "testbed"]


def test_testbed_preset():
    topo = load_topology("testbed")
    assert topo.name == "testbed"
    assert len(topo.nodes) == 4
    assert topo.capacity == (8, 8, 8, 8)
    assert topo.total_gpus == 32
    for i, node in enumerate(topo.nodes):
        assert node.index == i
        assert node.name == f"node{i}"
        assert node.gpu_model == "TITAN Xp"
        assert node.fabric == "pcie"
        assert node.pcie_switches == 2
        assert node.intra_node_gbps == 128
        assert node.nic_gbps == 40
        assert node.rack == "rack0"
    assert topo.racks == ("rack0",)
    assert topo.rack_uplink_gbps == 0
    assert "4 nodes, 32 GPUs" in topo.describe()
    assert "TITAN Xp" in topo.describe()
    assert "40 Gb/s NIC" in topo.describe()


@pytest.mark.parametrize(
    "name,nodes,gpus,racks",
    [("a100-16", 16, 128, 2), ("h100-64", 64, 512, 4), ("mixed-32", 32, 16 * 4 + 16 * 8, 2)],
)
def test_other_presets(name, nodes, gpus, racks):
    topo = load_topology(name)
    assert len(topo.nodes) == nodes
    assert topo.total_gpus == gpus
    assert len(topo.racks) == racks
    assert [n.index for n in topo.nodes] == list(range(nodes))
    assert len({n.name for n in topo.nodes}) == nodes


def test_mixed_preset_details():
    topo = load_topology("mixed-32")
    assert topo.nodes[0].name == "a10g-0" and topo.nodes[0].gpus == 4 and topo.nodes[0].fabric == "pcie"
    assert topo.nodes[16].name == "a100-0" and topo.nodes[16].gpus == 8 and topo.nodes[16].fabric == "nvlink"
    assert topo.node_index("a100-3") == 19
    with pytest.raises(DeepShareError):
        topo.node_index("nope")


def test_uniform():
    topo = uniform(3, 5)
    assert topo.name == "uniform-3x5"
    assert topo.capacity == (5, 5, 5)
    assert topo.total_gpus == 15
    assert all(n.gpu_model == "TITAN Xp" and n.nic_gbps == 40 for n in topo.nodes)
    assert uniform(2, 2, name="mine").name == "mine"
    big = uniform(NODES_PER_RACK + 8, 2)
    assert big.racks == ("rack0", "rack1")
    assert sum(n.rack == "rack1" for n in big.nodes) == 8
    assert [n.name for n in big.nodes[:2]] == ["node0", "node1"]
    assert big.nodes[-1].name == f"node{NODES_PER_RACK + 7}"


@pytest.mark.parametrize("nodes,gpus", [(0, 8), (-1, 8), (4, 0), (4, -2)])
def test_uniform_rejects_non_positive(nodes, gpus):
    with pytest.raises(DeepShareError):
        uniform(nodes, gpus)


def test_parse_good_spec_and_load_from_path(tmp_path: Path):
    topo = parse_topology(GOOD)
    assert topo.name == "tiny"
    assert [n.name for n in topo.nodes] == ["node0", "node1", "extra-0"]
    assert topo.racks == ("r0", "r1")
    assert topo.nodes[0].nic_gbps == 100
    assert topo.nodes[0].fabric == "pcie"  # default
    path = tmp_path / "c.yaml"
    path.write_text(GOOD)
    assert load_topology(str(path)) == topo




@pytest.mark.parametrize(
    "text,fragments",
    [
        ("nodes: [\n  {type: t", ["not valid YAML"]),
        ("- a\n- b\n", ["expected a mapping", "list"]),
        ("just a string", ["expected a mapping", "str"]),
        ("", ["expected a mapping", "NoneType"]),
        (GOOD.replace("{type: t, count: 1", "{type: q, count: 1"), ["nodes[1].type", "'q'", "['t']"]),
        (GOOD.replace("gpus: 4", "gpus: -4"), ["node_types.t.gpus"]),
        (GOOD.replace("gpus: 4", "gpus: 0"), ["node_types.t.gpus"]),
        (GOOD.replace("gpus: 4", "gpus: four"), ["node_types.t.gpus"]),
        (GOOD.replace("count: 2", "count: -1"), ["nodes.0.count"]),
        (GOOD.replace("nic_gbps: 100", "nic_gbps: 100\n    nic_speed: 5"), ["node_types.t.nic_speed"]),
        (GOOD.replace("name: tiny", "name: tiny\ncolour: red"), ["colour"]),
        (GOOD.replace("rack: r0}", "rack: r0, zone: z}"), ["nodes.0.zone"]),
        (GOOD.replace("    gpu_model: X\n", "    gpu_model: X\n    fabric: infiniband\n"), ["node_types.t.fabric"]),
        # link bandwidths: 5e-324 (> 0) made the link model's ratios NaN
        (GOOD.replace("nic_gbps: 100", "nic_gbps: 5.0e-324"), ["node_types.t.nic_gbps", "0.001"]),
        (GOOD.replace("nic_gbps: 100", "nic_gbps: 1.0e+12"), ["node_types.t.nic_gbps", "1000000000"]),
        (GOOD.replace("nic_gbps: 100", "nic_gbps: 100\n    nvlink_gbps: 1.0e-9"), ["node_types.t.nvlink_gbps", "0 or at least"]),
        (GOOD.replace("nic_gbps: 100", "nic_gbps: 100\n    intra_node_gbps: 0"), ["node_types.t.intra_node_gbps"]),
        (GOOD + "rack_uplink_gbps: 1.0e-300\n", ["rack_uplink_gbps", "0 or at least"]),
        ("name: x\nnode_types:\n  t: {gpus: 2}\n", ["nodes", "required"]),
        ("name: x\nnodes:\n  - {type: t}\n", ["node_types"]),
        ("name: x\nnode_types: {}\nnodes: []\n", ["node_types", "nodes"]),
    ],
)
def test_bad_specs_name_the_field(text, fragments):
    with pytest.raises(DeepShareError) as info:
        parse_topology(text, source="spec.yaml")
    message = str(info.value)
    assert message.startswith("spec.yaml: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_load_topology_errors(tmp_path: Path):
    with pytest.raises(DeepShareError) as info:
        load_topology(str(tmp_path / "missing.yaml"))
    assert "testbed" in str(info.value)  # lists the presets
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(DeepShareError) as info:
        load_topology(str(binary))
    assert str(binary) in str(info.value)
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(textwrap.dedent(GOOD).replace("gpus: 4", "gpus: -1"))
    with pytest.raises(DeepShareError) as info:
        load_topology(str(bad_file))
    assert str(bad_file) in str(info.value)
    assert "node_types.t.gpus" in str(info.value)


@pytest.mark.parametrize("yaml_text, message", [
    ("node_types: {t: {gpus: 8}}\nnodes: [{type: t, count: 1000000000}]", "nodes.0.count: Input should be less than or equal to 100000"),
    ("node_types: {t: {gpus: 100000}}\nnodes: [{type: t}]", "node_types.t.gpus: Input should be less than or equal to 1024"),
    ("node_types: {t: {gpus: 8}}\nnodes: [{type: t, count: 60000}, {type: t, count: 60000}]", "nodes: 120000 nodes in all; expected at most 100000"),
])
def test_a_cluster_too_large_to_build_is_an_error_not_an_out_of_memory(yaml_text, message):
    """A mistyped count is refused before any node is built (it used to exhaust memory)."""
    with pytest.raises(DeepShareError, match=re.escape(message)):
        parse_topology(yaml_text, "c.yaml")


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_bandwidth_that_is_not_finite_is_named_as_such(value, tmp_path):
    """A NaN or infinite link bandwidth is 'a finite number' expected, not a bound it broke."""
    spec = (Path(__file__).resolve().parents[2] / "deepshare" / "data" / "clusters" / "a100-16.yaml").read_text().replace("nic_gbps: 200", f"nic_gbps: {value}")
    path = tmp_path / "c.yaml"
    path.write_text(spec)
    with pytest.raises(DeepShareError) as info:
        load_topology(str(path))
    assert str(info.value).endswith("c.yaml: node_types.a100.nic_gbps: Input should be a finite number")
