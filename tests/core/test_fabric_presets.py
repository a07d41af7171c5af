"""The multi-level fabric presets load with the levels, domains and uplinks their headers document."""

from __future__ import annotations

from importlib import resources

import pytest

from deepshare.core.topology import load_topology, preset_names

FABRIC_PRESETS = ("gb200-nvl72-4", "h100-leafspine-1to1", "h100-leafspine-2to1", "clos3-256")


def _levels(name: str) -> list[tuple[str, bool, int, set[float]]]:
    """(level, nvlink, domains, the domains' uplinks) per level, lowest first."""
    fabric = load_topology(name).fabric
    return [(level.name, level.nvlink, len(fabric.by_level[i]), {fabric.domains[d].uplink_gbps for d in fabric.by_level[i]})
            for i, level in enumerate(fabric.levels)]


def test_the_fabric_presets_are_shipped():
    assert set(FABRIC_PRESETS) <= set(preset_names())


@pytest.mark.parametrize("name", FABRIC_PRESETS)
def test_each_preset_names_its_sources_and_assumptions(name):
    text = (resources.files("deepshare.data") / "clusters" / f"{name}.yaml").read_text()
    header = text.split("\nname:", 1)[0]
    assert "Sources" in header and "Assumptions" in header
    assert load_topology(name).name == name


def test_gb200_nvl72_4():
    topo = load_topology("gb200-nvl72-4")
    assert (len(topo.nodes), topo.total_gpus) == (72, 288)
    node = topo.nodes[0]
    assert (node.gpus, node.fabric, node.nvlink_gbps, node.nic_gbps) == (4, "nvlink", 7200.0, 1600.0)
    assert _levels("gb200-nvl72-4") == [
        ("nvlink_domain", True, 4, {0.0}),
        ("leaf", False, 2, {36 * 1600.0}),  # two racks of 18 nodes per leaf, 1:1
        ("spine", False, 1, {0.0}),
    ]
    fabric = topo.fabric
    assert fabric.nvlink_level == 0
    racks = [fabric.domains[d] for d in fabric.by_level[0]]
    assert [(d.name, len(d.nodes)) for d in racks] == [
        ("spine/leaf0/nvl0", 18), ("spine/leaf0/nvl1", 18), ("spine/leaf1/nvl2", 18), ("spine/leaf1/nvl3", 18)]
    assert (topo.nodes[0].name, topo.nodes[18].name, topo.nodes[71].name) == ("nvl0-0", "nvl1-0", "nvl3-17")
    assert topo.racks == ("spine/leaf0", "spine/leaf1")


@pytest.mark.parametrize("name,ratio", [("h100-leafspine-1to1", 1), ("h100-leafspine-2to1", 2)])
def test_h100_leaf_spine(name, ratio):
    topo = load_topology(name)
    assert (len(topo.nodes), topo.total_gpus) == (64, 512)
    node = topo.nodes[0]
    assert (node.gpus, node.gpu_model, node.nvlink_gbps, node.nic_gbps) == (8, "H100-SXM5-80GB", 3600.0, 3200.0)
    assert _levels(name) == [("leaf", False, 4, {16 * 3200.0 / ratio}), ("spine", False, 1, {0.0})]
    assert [len(topo.fabric.domains[d].nodes) for d in topo.fabric.by_level[0]] == [16] * 4
    assert {51200.0: 1, 25600.0: 2}[topo.fabric.domains[0].uplink_gbps] == ratio


def test_clos3_256():
    topo = load_topology("clos3-256")
    assert (len(topo.nodes), topo.total_gpus) == (256, 2048)
    assert _levels("clos3-256") == [
        ("leaf", False, 16, {16 * 3200.0}),             # 16 hosts per leaf, 1:1
        ("aggregation", False, 4, {64 * 3200.0 / 4}),   # 4 leaves (64 hosts) per aggregation domain, 4:1
        ("core", False, 1, {0.0}),
    ]
    fabric = topo.fabric
    assert [len(fabric.domains[d].nodes) for d in fabric.by_level[1]] == [64] * 4
    assert fabric.domain_of(255, 0).name == "dsw0/psw3/asw15"
    assert len({n.name for n in topo.nodes}) == 256


@pytest.mark.parametrize("name", ["testbed", "a100-16", "mixed-32", "h100-64"])
def test_the_earlier_presets_keep_one_rack_level(name):
    topo = load_topology(name)
    assert topo.levels == ()
    assert [level.name for level in topo.fabric.levels] == ["rack"]
    assert len(topo.fabric.by_level[0]) == len(topo.racks)
    assert {d.uplink_gbps for d in topo.fabric.domains} == {topo.rack_uplink_gbps}
