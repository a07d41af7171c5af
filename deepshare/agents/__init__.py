"""Node agents: measure link contention on a live cluster and feed ``ClusterView.link_load``.

Layers inside the package (Ray only in the last row; importing this package imports no Ray):

- probes (``probes/``): plain classes reading NVML, InfiniBand sysfs, ``/proc/net/dev`` or a
  simulated replay -> :class:`ProbeSample`; :func:`compute_rates` -> :class:`LinkRate`.
- :mod:`.contention` (the score), :mod:`.links` (node-wide ``nic``/``pcie``), :class:`Sampler`
  (one node's step -> :class:`NodeReport`), :class:`ClusterState` (the cluster-wide view).
- :mod:`.agent` (``NodeAgent``), :mod:`.monitor` (``ContentionMonitor``), :mod:`.exporter`
  (Prometheus), :mod:`.deploy` and :mod:`.cli`.

See ``deepshare/agents/README.md``.
"""

from deepshare.agents.config import AgentConfig
from deepshare.agents.contention import contention_score, gpu_contention
from deepshare.agents.probes import (
    EthernetProbe,
    InfinibandProbe,
    NvmlProbe,
    Probe,
    ProbeError,
    ReplayProbes,
    SimulatedProbe,
    local_probes,
)
from deepshare.agents.report import LinkStat, NodeReport, ProbeStatus
from deepshare.agents.samples import LinkRate, LinkReading, ProbeSample, compute_rates, counter_delta
from deepshare.agents.sampler import Sampler, measure
from deepshare.agents.view import ClusterSnapshot, ClusterState, NodeState

__all__ = [
    "AgentConfig", "ClusterSnapshot", "ClusterState", "EthernetProbe", "InfinibandProbe", "LinkRate",
    "LinkReading", "LinkStat", "NodeReport", "NodeState", "NvmlProbe", "Probe", "ProbeError",
    "ProbeSample", "ProbeStatus", "ReplayProbes", "Sampler", "SimulatedProbe", "compute_rates", "contention_score",
    "counter_delta", "gpu_contention", "local_probes", "measure",
]
