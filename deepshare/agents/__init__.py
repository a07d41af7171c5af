"""Node agents: measure link contention on a live cluster and feed ``ClusterView.link_load``.

Layers inside the package (Ray only in the last row; importing this package imports no Ray):

- probes (``probes/``): plain classes reading NVML, InfiniBand sysfs, ``/proc/net/dev`` or a
  simulated replay -> :class:`ProbeSample`; :func:`compute_rates` -> :class:`LinkRate`.
- :mod:`.scoring` (the contention score), :mod:`.links` (node-wide ``nic``/``pcie``), :class:`Sampler`
  (one node's step -> :class:`NodeReport`), :class:`ClusterState` (the cluster-wide view).
- :mod:`.agent` (``NodeAgent``), :mod:`.monitor` (``ContentionMonitor``), :mod:`.exporter`
  (Prometheus) and :mod:`.deploy`; the ``deepshare agents`` commands are :mod:`deepshare.cli.agents`.

See ``docs/agents.md``.
"""

_EXPORTS = {
    "AgentConfig": "config", "contention_score": "scoring", "gpu_contention": "scoring",
    "EthernetProbe": "probes", "InfinibandProbe": "probes", "NvmlProbe": "probes", "Probe": "probes",
    "ProbeError": "probes", "ReplayProbes": "probes", "SimulatedProbe": "probes", "local_probes": "probes",
    "LinkStat": "report", "NodeReport": "report", "ProbeStatus": "report",
    "LinkRate": "samples", "LinkReading": "samples", "ProbeSample": "samples", "compute_rates": "samples",
    "counter_delta": "samples", "Sampler": "sampler", "measure": "sampler",
    "ClusterSnapshot": "view", "ClusterState": "view", "NodeState": "view",
}
"""Name -> submodule. Imported on first use (PEP 562), so ``deepshare`` commands that only
register the agents' subcommands do not load every probe."""

__all__ = [
    "AgentConfig", "ClusterSnapshot", "ClusterState", "EthernetProbe", "InfinibandProbe", "LinkRate",
    "LinkReading", "LinkStat", "NodeReport", "NodeState", "NvmlProbe", "Probe", "ProbeError",
    "ProbeSample", "ProbeStatus", "ReplayProbes", "Sampler", "SimulatedProbe", "compute_rates", "contention_score",
    "counter_delta", "gpu_contention", "local_probes", "measure",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'deepshare.agents' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"deepshare.agents.{module}"), name)
    globals()[name] = value
    return value

