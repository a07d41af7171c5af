"""Probes: plain classes that read link counters (no Ray). See :mod:`.base` for the contract."""

from deepshare.agents.probes.base import Probe, ProbeError
from deepshare.agents.probes.detect import default_probes, local_probes
from deepshare.agents.probes.ethernet import EthernetProbe
from deepshare.agents.probes.infiniband import InfinibandProbe
from deepshare.agents.probes.nvml import NvmlProbe
from deepshare.agents.probes.simulated import ReplayProbes, SimulatedProbe

__all__ = [
    "EthernetProbe",
    "InfinibandProbe",
    "NvmlProbe",
    "Probe",
    "ProbeError",
    "ReplayProbes",
    "SimulatedProbe",
    "default_probes",
    "local_probes",
]
