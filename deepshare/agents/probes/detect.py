"""Build every local probe, each detecting for itself whether it can run on this machine."""

from __future__ import annotations

from deepshare.agents.probes.base import Probe
from deepshare.agents.probes.ethernet import EthernetProbe
from deepshare.agents.probes.infiniband import InfinibandProbe
from deepshare.agents.probes.nvml import NvmlProbe
from deepshare.core.topology import Node


def local_probes(node: Node | None = None, proc_root: str = "/proc", sys_root: str = "/sys") -> list[Probe]:
    """NVML, InfiniBand and Ethernet probes, in that order; unavailable ones say why.

    ``node`` (this machine's entry in a topology spec) supplies fallback capacities when the
    hardware does not report its speed: ``nic_gbps`` for NICs, ``nvlink_gbps`` for NVLink.
    """
    nic = node.nic_gbps if node is not None else None
    nvlink = node.nvlink_gbps if node is not None and node.nvlink_gbps > 0 else None
    return [
        NvmlProbe(nvlink_gbps=nvlink),
        InfinibandProbe(sys_root=sys_root, fallback_gbps=nic),
        EthernetProbe(proc_root=proc_root, sys_root=sys_root, fallback_gbps=nic),
    ]


def default_probes(node_name: str, node: Node | None = None) -> list[Probe]:
    """The probe factory agents use unless told otherwise (``node_name`` is unused)."""
    return local_probes(node)
