"""Shared fabric of the topology tests: 2 spines x 2 leaves x 2 NVLink domains x 2 nodes of 4
GPUs (16 nodes, 64 GPUs; leaves of 16 GPUs 2:1 oversubscribed, NVLink domains of 8)."""

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
