"""Node-wide links (``nic``, ``pcie``) derived from what the probes measured per port or GPU.

``ClusterView.link_load`` and the link contention model speak of one ``nic`` and one ``pcie``
fabric per node; probes see ports (``ib/mlx5_0/1``, ``eth/eth0``) and GPUs (``gpu3/pcie``). An
aggregate carries the summed traffic of its members over a capacity taken from the node's
topology spec when given (``nic_gbps``; ``intra_node_gbps x pcie_switches``, the capacity the
link model uses), else the sum of the members' capacities (an upper bound for PCIe, whose GPUs
share switch uplinks). ``nic`` is made of the InfiniBand ports when there are any (the data
network), else of the Ethernet ports. A probe that already names ``nic`` or ``pcie`` (the
simulated one) wins over the aggregate.
"""

from __future__ import annotations

import re
from typing import Sequence

from deepshare.agents.samples import LinkRate, utilization
from deepshare.core.topology import Node

NIC = "nic"
PCIE = "pcie"
_GPU_PCIE = re.compile(r"^gpu\d+/pcie\Z")


def _aggregate(name: str, members: Sequence[LinkRate], capacity: float | None) -> LinkRate:
    rx = sum(m.rx_bytes_per_s for m in members)
    tx = sum(m.tx_bytes_per_s for m in members)
    if capacity is None:
        caps = [m.capacity_bytes_per_s for m in members]
        capacity = None if None in caps else float(sum(caps))  # type: ignore[arg-type]
    return LinkRate(name, rx, tx, utilization(rx, tx, capacity), capacity)


def with_node_links(rates: Sequence[LinkRate], node: Node | None = None) -> tuple[LinkRate, ...]:
    """``rates`` plus the ``nic`` and ``pcie`` aggregates (when they have members), by name."""
    names = {r.link for r in rates}
    out = list(rates)
    if NIC not in names:
        ports = [r for r in rates if r.link.startswith("ib/")] or [r for r in rates if r.link.startswith("eth/")]
        if ports:
            out.append(_aggregate(NIC, ports, None if node is None else node.nic_gbps * 1e9 / 8))
    if PCIE not in names:
        gpus = [r for r in rates if _GPU_PCIE.match(r.link)]
        if gpus:
            cap = None if node is None else node.intra_node_gbps * node.pcie_switches * 1e9 / 8
            out.append(_aggregate(PCIE, gpus, cap))
    return tuple(sorted(out, key=lambda r: r.link))
