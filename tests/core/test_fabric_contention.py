"""The link model on multi-level fabrics (issue 36): hand-checked works on tiny fabrics.

Two NVLink domains of 16 four-GPU nodes under one leaf. A 32-GPU job (2 GPUs on each of 16
nodes) split 15:1 or 8:8 across the domains: inside a domain its inter-node traffic rides
NVLink; across them each domain's share of the cross-domain ring goes through the NICs of the
job's nodes there, so the lone node of a 15:1 split carries 8 times what each node of an 8:8
split does, and a neighbour on that node slows the 15:1 job more.
"""

from __future__ import annotations

import pytest

from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.link.model import LinkContention, ring_factor
from deepshare.core.contention.link.params import REF_NIC_GBPS, default_link_catalog, shape_factor
from deepshare.core.topology import parse_topology
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog

SPEC = """
name: two-nvl
node_types:
  g: {{gpus: 4, fabric: nvlink, nvlink_gbps: 14400, nic_gbps: 400, intra_node_gbps: 512, pcie_switches: 4}}
levels:
  - {{name: nvlink_domain, nvlink: true}}
  - {{name: leaf, {leaf}}}
  - {{name: spine}}
nodes:
  - {{type: g, count: 16, prefix: a, domains: {{nvlink_domain: nvl0, leaf: leaf0, spine: s0}}}}
  - {{type: g, count: 16, prefix: b, domains: {{nvlink_domain: nvl1, leaf: {second_leaf}, spine: s0}}}}
"""
CATALOG = default_catalog()
MODEL = "FSDP"


def topology(leaf: str = "uplink_gbps: 0", second_leaf: str = "leaf0"):
    return parse_topology(SPEC.format(leaf=leaf, second_leaf=second_leaf))


def split(left: int, right: int) -> Placement:
    return Placement.of({**{i: 2 for i in range(left)}, **{16 + i: 2 for i in range(right)}})


def works(topo, placement: Placement) -> dict[str, float]:
    state = LinkContention().new_state(topo, CATALOG)
    state.add(RunningJob("A", MODEL, placement.total_gpus, placement))
    names = state.link_names()
    record = state._jobs["A"]
    return {names[link]: work for link, work in zip(record.links, record.works)}


def test_inside_one_nvlink_domain_no_nic_carries_anything():
    placed = works(topology(), Placement.of({i: 2 for i in range(16)}))
    assert not [name for name in placed if name.endswith("/nic") or name.endswith("/uplink")]


def test_the_lone_node_of_a_15_1_split_carries_its_domains_whole_share():
    p = default_link_catalog().params[default_link_catalog().resolve(MODEL, CATALOG)]
    cross = p.nic_s * ring_factor(2) * shape_factor(p, 2, 2) * REF_NIC_GBPS / 400  # one domain's share, by hand
    lopsided, even = works(topology(), split(15, 1)), works(topology(), split(8, 8))
    assert lopsided["b0/nic"] == pytest.approx(cross)
    assert lopsided["a0/nic"] == pytest.approx(cross / 15)
    assert even["b0/nic"] == pytest.approx(cross / 8) == pytest.approx(even["a0/nic"])
    assert lopsided["b0/nic"] / even["b0/nic"] == pytest.approx(8)


def test_a_neighbour_on_the_lone_node_slows_the_15_1_split_more():
    topo = topology()
    slowed = {}
    for name, placement in (("15:1", split(15, 1)), ("8:8", split(8, 8))):
        state = LinkContention().new_state(topo, CATALOG)
        state.add(RunningJob("A", MODEL, 32, placement))
        assert state.ratio("A") == 1.0  # alone
        state.add(RunningJob("B", MODEL, 4, Placement.of({15: 2, 16: 2})))  # across the domains, on node b0
        slowed[name] = state.ratio("A")
    assert slowed["15:1"] < slowed["8:8"] < 1.0


def test_oversubscribed_leaf_uplinks_carry_the_cross_leaf_ring():
    """Two leaves of 16 x 400 Gb/s NICs at 2:1: each uplink is 3,200 Gb/s and a job spanning both
    puts the two-domain ring's volume on each (the spine, one domain, has no uplink to cross)."""
    topo = topology(leaf="oversubscription: 2", second_leaf="leaf1")
    assert [d.uplink_gbps for d in topo.fabric.domains if d.level == 1] == [3200.0, 3200.0]
    p = default_link_catalog().params[default_link_catalog().resolve(MODEL, CATALOG)]
    placed = works(topo, split(8, 8))
    expected = p.nic_s * ring_factor(2) * shape_factor(p, 16, 2) * REF_NIC_GBPS / 3200
    assert placed["s0/leaf0/uplink"] == pytest.approx(expected) == pytest.approx(placed["s0/leaf1/uplink"])
    assert "s0/uplink" not in placed
