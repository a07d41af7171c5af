"""Shared fabrics of the topology tests: the tiny Clos, 2 spines x 2 leaves x 2 NVLink domains x 2
nodes of 4 GPUs (16 nodes, 64 GPUs; leaves of 16 GPUs 2:1 oversubscribed, NVLink domains of 8),
and two leaves of two TITAN Xp nodes whose uplinks carry half a NIC (the uplink contention tests)."""

from __future__ import annotations

from deepshare.core.topology import parse_topology

TINY_CLOS_SPEC = """
name: tiny-clos
node_types:
  g: {gpus: 4, fabric: nvlink, nvlink_gbps: 7200, nic_gbps: 400}
levels:
  - {name: nvlink, nvlink: true}
  - {name: leaf, oversubscription: 2}
  - {name: spine}
nodes:
""" + "".join(
    f"  - {{type: g, count: 2, prefix: s{s}l{l}n{n}-, domains: {{nvlink: n{n}, leaf: l{l}, spine: s{s}}}}}\n"
    for s in range(2) for l in range(2) for n in range(2))
TINY_CLOS = parse_topology(TINY_CLOS_SPEC)


def two_leaves_spec(node_type: str, leaf: str = "{name: leaf}", name: str = "two-leaves-of-two") -> str:
    """A cluster spec of two leaves (nodes 0, 1 | 2, 3) of two nodes of one type under one spine:
    ``node_type`` is the type's YAML mapping, ``leaf`` the leaf level's."""
    return f"""
name: {name}
node_types:
  t: {node_type}
levels:
  - {leaf}
  - {{name: spine}}
nodes:
  - {{type: t, count: 2, prefix: a, domains: {{leaf: l0, spine: s0}}}}
  - {{type: t, count: 2, prefix: b, domains: {{leaf: l1, spine: s0}}}}
"""


TWO_LEAVES_SPEC = two_leaves_spec(
    "{gpus: 2, gpu_model: TITAN Xp, fabric: pcie, pcie_switches: 2, intra_node_gbps: 128, nic_gbps: 40}",
    "{name: leaf, uplink_gbps: 20}", "two-leaves")
"""Two leaves of two 2-GPU nodes (a0, a1 | b0, b1), each leaf's uplink 20 Gbit/s: half a NIC."""
TWO_LEAVES = parse_topology(TWO_LEAVES_SPEC)


def two_leaves_of_two(gpus: int, name: str = "two-leaves-of-two"):
    """Two leaves (nodes 0, 1 | 2, 3) of two nodes of ``gpus`` GPUs under one spine."""
    return parse_topology(two_leaves_spec(f"{{gpus: {gpus}, nic_gbps: 400}}", name=name))
