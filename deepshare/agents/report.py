"""What an agent sends the monitor: one :class:`NodeReport` per sample (plain, picklable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True, slots=True)
class LinkStat:
    """One link's rates, utilisation (``None``: capacity unknown) and contention score, plus the
    bytes it carried since the agent started (what Prometheus counters export: users take
    ``rate()`` over them, so no traffic between two reports is lost)."""

    link: str
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    utilization: float | None
    contention: float | None
    capacity_bytes_per_s: float | None = None
    rx_bytes_total: float = 0.0
    tx_bytes_total: float = 0.0


@dataclass(frozen=True, slots=True)
class ProbeStatus:
    """Whether a probe produced this sample, and why not when it did not."""

    name: str
    available: bool
    reason: str = ""
    links: int = 0


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One sample of one node. ``sampled_at`` is wall-clock time (for report latency only)."""

    node: str
    node_id: str
    seq: int
    pid: int
    started_at: float
    """Wall-clock start of the agent process: a new value means the agent restarted."""
    sampled_at: float
    links: tuple[LinkStat, ...] = ()
    gpus: Mapping[int, float] = field(default_factory=dict)
    """GPU index -> contention score (see :func:`deepshare.agents.scoring.gpu_contention`)."""
    gauges: Mapping[str, float] = field(default_factory=dict)
    probes: tuple[ProbeStatus, ...] = ()

    def link(self, name: str) -> LinkStat | None:
        return next((s for s in self.links if s.link == name), None)
