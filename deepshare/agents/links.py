"""Node-wide links (``nic``, ``pcie``) derived from what the probes measured per port or GPU.

``ClusterView.link_load`` and the link contention model speak of one ``nic`` and one ``pcie``
fabric per node; probes see ports (``ib/mlx5_0/1``, ``eth/eth0``) and GPUs (``gpu3/pcie``). An
aggregate carries the summed traffic of its members over a capacity taken from the node's
topology spec when given (``nic_gbps``; ``intra_node_gbps x pcie_switches``, the capacity the
link model uses), else the sum of the members' capacities (an upper bound for PCIe, whose GPUs
share switch uplinks). ``nic`` is made of the InfiniBand ports once the node's InfiniBand probe
has a port that read ACTIVE (the data network), else of the Ethernet ports: the
:class:`~deepshare.agents.sampler.Sampler` decides that from its probes (:func:`nic_source`),
never from which rates one sample happens to hold, and switches to InfiniBand once, for good, so
an InfiniBand read that fails cannot turn ``nic`` into the Ethernet ports for a sample. A probe that already names ``nic`` or ``pcie`` (the simulated one) wins over
the aggregate.
"""

from __future__ import annotations

import re
from typing import Collection, Iterable, Sequence

from deepshare.agents.samples import LinkRate, utilization
from deepshare.core.topology import Node

NIC = "nic"
PCIE = "pcie"
_GPU_PCIE = re.compile(r"^gpu\d+/pcie\Z")
NIC_SOURCES = (("infiniband", "ib/"), ("ethernet", "eth/"))
"""Probe name and the prefix of its port links, in the order ``nic`` prefers them."""


def nic_source(probe_names: Iterable[str]) -> tuple[str, str] | None:
    """The probe (name, link prefix) whose ports make up ``nic``, given the names of a node's
    probes that are available with something to measure (an InfiniBand probe once a port is
    ACTIVE): InfiniBand when there is such a probe, else Ethernet, else ``None``."""
    names = set(probe_names)
    return next((source for source in NIC_SOURCES if source[0] in names), None)


def aggregate_of(link: str, nic_prefix: str | None) -> str | None:
    """The node-wide link (``nic``, ``pcie``) that ``link`` is a member of, if any."""
    if nic_prefix is not None and link.startswith(nic_prefix):
        return NIC
    return PCIE if _GPU_PCIE.match(link) else None


def _aggregate(name: str, members: Sequence[LinkRate], capacity: float | None) -> LinkRate:
    rx = sum(m.rx_bytes_per_s for m in members)
    tx = sum(m.tx_bytes_per_s for m in members)
    if capacity is None:
        caps = [m.capacity_bytes_per_s for m in members]
        capacity = None if None in caps else float(sum(caps))  # type: ignore[arg-type]
    return LinkRate(name, rx, tx, utilization(rx, tx, capacity), capacity)


def with_node_links(
    rates: Sequence[LinkRate],
    node: Node | None = None,
    nic_prefix: str | None = None,
    leave_out: Collection[str] = (),
) -> tuple[LinkRate, ...]:
    """``rates`` plus the ``nic`` and ``pcie`` aggregates (when they have members), by name.

    ``nic_prefix`` names the ports ``nic`` sums (``"ib/"``, ``"eth/"``; see :func:`nic_source`);
    without it, the InfiniBand ports in ``rates`` if any, else the Ethernet ones (one snapshot's
    guess: across samples, pass the prefix). Aggregates named in ``leave_out`` are not built (a
    member has no rate in this sample, and a partial sum would understate the load).
    """
    names = {r.link for r in rates}
    out = list(rates)
    if NIC not in names and NIC not in leave_out:
        if nic_prefix is not None:
            ports = [r for r in rates if r.link.startswith(nic_prefix)]
        else:
            ports = [r for r in rates if r.link.startswith("ib/")] or [r for r in rates if r.link.startswith("eth/")]
        if ports:
            out.append(_aggregate(NIC, ports, None if node is None else node.nic_gbps * 1e9 / 8))
    if PCIE not in names and PCIE not in leave_out:
        gpus = [r for r in rates if _GPU_PCIE.match(r.link)]
        if gpus:
            cap = None if node is None else node.intra_node_gbps * node.pcie_switches * 1e9 / 8
            out.append(_aggregate(PCIE, gpus, cap))
    return tuple(sorted(out, key=lambda r: r.link))
