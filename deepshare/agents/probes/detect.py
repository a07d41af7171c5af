"""Build every local probe, each detecting for itself whether it can run on this machine."""

from __future__ import annotations

from typing import Callable

from deepshare.agents.probes.base import Probe, UnavailableProbe
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
        built("nvml", lambda: NvmlProbe(nvlink_gbps=nvlink)),
        built("infiniband", lambda: InfinibandProbe(sys_root=sys_root, fallback_gbps=nic)),
        built("ethernet", lambda: EthernetProbe(proc_root=proc_root, sys_root=sys_root, fallback_gbps=nic)),
    ]


def built(name: str, make: Callable[[], Probe]) -> Probe:
    """``make()``, or an :class:`UnavailableProbe` saying why it raised.

    Probes report their own missing sources, but a source that fails in a way nobody foresaw
    (an odd permission, a driver bug) must cost only that probe, never the others."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - any failure of one probe is reported, not raised
        return UnavailableProbe(name, f"cannot start: {exc.__class__.__name__}: {exc}")


def default_probes(node_name: str, node: Node | None = None) -> list[Probe]:
    """The probe factory agents use unless told otherwise (``node_name`` is unused)."""
    return local_probes(node)
