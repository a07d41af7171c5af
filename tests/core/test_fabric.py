"""The fabric (:mod:`deepshare.core.fabric`) as data: exact, hand-checkable cases of
:func:`build_fabric`, the ``rack`` level of a spec without levels, and spec errors naming the field."""

from __future__ import annotations

import textwrap

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import RACK_LEVEL, Domain, Level, build_fabric
from deepshare.core.topology import parse_topology

LEAF_SPINE = (Level("leaf", oversubscription=2), Level("spine", uplink_gbps=1000))


def test_domains_are_paths_from_the_top_and_repeated_names_differ():
    # four nodes; leaf "l0" exists under both spines: two different leaves
    names = [("l0", "s0"), ("l1", "s0"), ("l0", "s1"), ("l0", "s0")]
    fabric = build_fabric(LEAF_SPINE, names, [100, 200, 300, 400])
    assert [(d.index, d.level, d.path, d.nodes) for d in fabric.domains] == [
        (0, 0, ("s0", "l0"), (0, 3)),
        (1, 1, ("s0",), (0, 1, 3)),
        (2, 0, ("s0", "l1"), (1,)),
        (3, 0, ("s1", "l0"), (2,)),
        (4, 1, ("s1",), (2,)),
    ]
    assert fabric.node_domains == ((0, 1), (2, 1), (3, 4), (0, 1))
    assert fabric.by_level == ((0, 2, 3), (1, 4))
    assert [d.name for d in fabric.domains] == ["s0/l0", "s0", "s0/l1", "s1/l0", "s1"]
    assert fabric.domain_of(2, 0).path == ("s1", "l0") and fabric.domain_of(2, 0) is not fabric.domain_of(0, 0)
    assert fabric.spanned([0, 2, 3], 0) == [0, 3]
    assert fabric.spanned([0, 1, 3], 1) == [1]
    assert fabric.level_index("spine") == 1
    assert fabric.nvlink_level is None


def test_uplinks_oversubscription_is_nic_total_over_r_and_uplink_gbps_is_fixed():
    names = [("l0", "s0"), ("l1", "s0"), ("l0", "s1"), ("l0", "s0")]
    fabric = build_fabric(LEAF_SPINE, names, [100, 200, 300, 400])
    leaves = {d.name: d.uplink_gbps for d in fabric.domains if d.level == 0}
    assert leaves == {"s0/l0": (100 + 400) / 2, "s0/l1": 200 / 2, "s1/l0": 300 / 2}
    assert {d.name: d.uplink_gbps for d in fabric.domains if d.level == 1} == {"s0": 1000.0, "s1": 1000.0}
    # 1:1 is the NICs' total; neither field is a non-blocking uplink (0)
    one = build_fabric((Level("leaf", oversubscription=1), Level("spine")), names, [100, 200, 300, 400])
    assert [d.uplink_gbps for d in one.domains] == [500.0, 0.0, 200.0, 300.0, 0.0]
    assert all(isinstance(d.uplink_gbps, float) for d in one.domains)


def test_nvlink_domain_is_the_lowest_level():
    levels = (Level("nvlink_domain", nvlink=True), Level("leaf", oversubscription=1))
    fabric = build_fabric(levels, [("nvl0", "leaf0"), ("nvl0", "leaf0"), ("nvl1", "leaf0")], [1600, 1600, 1600])
    assert fabric.nvlink_level == 0
    assert [(d.path, d.nodes, d.uplink_gbps) for d in fabric.domains] == [
        (("leaf0", "nvl0"), (0, 1), 0.0), (("leaf0",), (0, 1, 2), 4800.0), (("leaf0", "nvl1"), (2,), 0.0),
    ]


@pytest.mark.parametrize("levels,names,message", [
    ((), [()], "at least one level"),
    ((Level("leaf"), Level("leaf")), [("a", "b")], "levels: each level needs its own name, got ['leaf', 'leaf']"),
    ((Level("leaf"), Level("nvl", nvlink=True)), [("a", "b")], "levels[1] (nvl): only the lowest level can be an NVLink domain"),
    ((Level("leaf"), Level("spine")), [("a", "b"), ("a",)], "node 1: expected a domain at each of the 2 levels (leaf, spine), got 1"),
])
def test_build_fabric_errors(levels, names, message):
    with pytest.raises(DeepShareError) as info:
        build_fabric(levels, names, [1.0] * len(names))
    assert message in str(info.value)


def test_unknown_level_names_the_levels():
    fabric = build_fabric(LEAF_SPINE, [("l0", "s0")], [1])
    with pytest.raises(DeepShareError, match=r"unknown fabric level 'core'; this cluster's levels are leaf, spine"):
        fabric.level_index("core")


def test_a_spec_without_levels_has_one_rack_level():
    topo = parse_topology(textwrap.dedent("""\
        node_types: {t: {gpus: 4, nic_gbps: 100}}
        nodes:
          - {type: t, count: 2, rack: r0}
          - {type: t, count: 1, rack: r1}
        rack_uplink_gbps: 150
        """))
    fabric = topo.fabric
    assert topo.levels == ()
    assert fabric.levels == (Level(RACK_LEVEL, uplink_gbps=150.0),)
    assert fabric.domains == (Domain(0, 0, ("r0",), (0, 1), 150.0), Domain(1, 0, ("r1",), (2,), 150.0))
    assert fabric.node_domains == ((0,), (0,), (1,))
    assert [n.domains for n in topo.nodes] == [(), (), ()]


def test_a_spec_with_levels_builds_the_fabric_and_names_racks_by_switch():
    topo = parse_topology(textwrap.dedent("""\
        node_types: {g: {gpus: 4, fabric: nvlink, nvlink_gbps: 7200, nic_gbps: 1600}}
        levels:
          - {name: nvlink_domain, nvlink: true}
          - {name: leaf, oversubscription: 2}
          - {name: spine, uplink_gbps: 5000}
        nodes:
          - {type: g, count: 2, prefix: a-, domains: {nvlink_domain: nvl0, leaf: leaf0, spine: sp0}}
          - {type: g, count: 1, prefix: b-, domains: {nvlink_domain: nvl0, leaf: leaf0, spine: sp1}}
        """))
    fabric = topo.fabric
    assert [lv.name for lv in fabric.levels] == ["nvlink_domain", "leaf", "spine"]
    assert fabric.nvlink_level == 0
    # nvl0 and leaf0 under sp1 are not those under sp0
    assert [(d.name, d.nodes, d.uplink_gbps) for d in fabric.domains] == [
        ("sp0/leaf0/nvl0", (0, 1), 0.0), ("sp0/leaf0", (0, 1), 1600.0), ("sp0", (0, 1), 5000.0),
        ("sp1/leaf0/nvl0", (2,), 0.0), ("sp1/leaf0", (2,), 800.0), ("sp1", (2,), 5000.0),
    ]
    assert [n.name for n in topo.nodes] == ["a-0", "a-1", "b-0"]
    assert [n.domains for n in topo.nodes] == [("nvl0", "leaf0", "sp0")] * 2 + [("nvl0", "leaf0", "sp1")]
    assert [n.rack for n in topo.nodes] == ["sp0/leaf0", "sp0/leaf0", "sp1/leaf0"]  # the switch above NVLink


SPEC_HEAD = "node_types: {t: {gpus: 4}}\n"


@pytest.mark.parametrize("body,fragments", [
    ("levels: [{name: leaf}, {name: leaf}]\nnodes: [{type: t, domains: {leaf: a}}]\n",
     ["levels: each level needs its own name, got ['leaf', 'leaf']"]),
    ("levels: [{name: leaf}, {name: nvl, nvlink: true}]\nnodes: [{type: t, domains: {leaf: a, nvl: b}}]\n",
     ["levels[1].nvlink: only the lowest level can be an NVLink domain"]),
    ("levels: [{name: leaf}, {name: spine}]\nnodes: [{type: t, domains: {leaf: a}}]\n",
     ["nodes[0].domains: expected a domain for each level (leaf, spine), got leaf"]),
    ("levels: [{name: leaf}]\nnodes: [{type: t}]\n", ["nodes[0].domains: expected a domain for each level (leaf), got none"]),
    ("nodes: [{type: t, domains: {leaf: a}}]\n", ["nodes[0].domains: the spec has no levels"]),
    ("levels: [{name: leaf, uplink_gbps: 100, oversubscription: 2}]\nnodes: [{type: t, domains: {leaf: a}}]\n",
     ["levels.0", "give uplink_gbps or oversubscription, not both"]),
    ("levels: [{name: leaf, oversubscription: 0.5}]\nnodes: [{type: t, domains: {leaf: a}}]\n",
     ["levels.0", "oversubscription: expected 1 or more"]),
    ("levels: [{name: leaf}]\nrack_uplink_gbps: 10\nnodes: [{type: t, domains: {leaf: a}}]\n",
     ["rack_uplink_gbps: with levels"]),
    ("levels: [{name: leaf}]\nnodes: [{type: t, domains: {leaf: a/b}}]\n", ["nodes.0.domains.leaf", "pattern"]),
    ("levels: [{name: leaf, colour: red}]\nnodes: [{type: t, domains: {leaf: a}}]\n", ["levels.0.colour"]),
])
def test_fabric_spec_errors_name_the_field(body, fragments):
    with pytest.raises(DeepShareError) as info:
        parse_topology(SPEC_HEAD + body, source="f.yaml")
    message = str(info.value)
    assert message.startswith("f.yaml: ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


NVL_SPEC = """\
node_types:
  g: {{gpus: 8, fabric: {fabric}, nvlink_gbps: {nvlink}, nic_gbps: 40}}
  h: {{gpus: 8, fabric: nvlink, nvlink_gbps: 3600, nic_gbps: 40}}
levels: [{{name: nvlink_domain, nvlink: true}}, {{name: leaf}}]
nodes:
  - {{type: h, count: 2, prefix: h, domains: {{nvlink_domain: nvl0, leaf: leaf0}}}}
  - {{type: g, count: {count}, prefix: a, domains: {{nvlink_domain: {domain}, leaf: leaf0}}}}
"""


@pytest.mark.parametrize("fabric,nvlink,count,domain,why,others", [
    ("pcie", 0, 2, "nvl1", "fabric: pcie", 1),     # two PCIe nodes in one NVLink domain
    ("nvlink", 0, 2, "nvl1", "nvlink_gbps: 0", 1),  # NVLink nodes without NVLink bandwidth
    ("pcie", 0, 1, "nvl0", "fabric: pcie", 2),     # one PCIe node among NVLink ones
])
def test_an_nvlink_domain_of_nodes_without_nvlink_is_refused(fabric, nvlink, count, domain, why, others):
    """The link model carries the traffic between the nodes of one NVLink domain over NVLink only;
    a node without NVLink there talked to its domain for free (a job's ratio 1.0 however crowded
    its NICs). The spec is refused in one line naming the group, its type, the domain and the level."""
    with pytest.raises(DeepShareError) as info:
        parse_topology(NVL_SPEC.format(fabric=fabric, nvlink=nvlink, count=count, domain=domain), source="f.yaml")
    message = str(info.value)
    assert message.startswith("f.yaml: ") and "\n" not in message
    assert (f"nodes[1]: node type 'g' has no NVLink ({why}) but is in NVLink domain 'leaf0/{domain}' "
            f"(level 'nvlink_domain') with {others} other node(s)") in message, message


def test_a_node_without_nvlink_alone_in_its_nvlink_domain_is_fine():
    # alone in its domain it has no in-domain peer: its inter-node traffic leaves over its NICs
    topo = parse_topology(NVL_SPEC.format(fabric="pcie", nvlink=0, count=1, domain="nvl1"))
    assert [n.fabric for n in topo.nodes] == ["nvlink", "nvlink", "pcie"]


def test_topologies_built_in_code_are_checked_too():
    from deepshare.core.topology import NODE_TYPE_DEFAULTS, topology_from_groups

    pcie = {**NODE_TYPE_DEFAULTS, "gpus": 4}
    levels = (Level("nvlink_domain", nvlink=True), Level("leaf"))
    with pytest.raises(DeepShareError, match=r"node 'a0' \(type 't'\) has no NVLink \(fabric: pcie\) but is in NVLink "
                                             r"domain 'leaf0/nvl0' \(level 'nvlink_domain'\) with 1 other node"):
        topology_from_groups("x", [("t", pcie, 2, "r", "a", ("nvl0", "leaf0"))], 0.0, levels)
    alone = topology_from_groups("x", [("t", pcie, 1, "r", "a", ("nvl0", "leaf0")),
                                       ("t", pcie, 1, "r", "b", ("nvl1", "leaf0"))], 0.0, levels)
    assert alone.fabric.nvlink_level == 0
