"""The agents' settings, one typed dataclass shared by the API, the monitor and the CLI."""

from __future__ import annotations

from dataclasses import dataclass

MONITOR_NAME = "deepshare-contention-monitor"
NAMESPACE = "deepshare"
AGENT_PREFIX = "deepshare-agent"


@dataclass(frozen=True, slots=True)
class AgentConfig:
    interval_s: float = 1.0
    """Seconds between two samples of every agent (each sample is also one report)."""
    stale_after_s: float | None = None
    """A node is stale after this long without a report; default max(5 s, 3 intervals)."""
    buffer_size: int = 600
    """Reports each agent keeps in memory (10 minutes at 1 Hz)."""
    reconcile_interval_s: float = 5.0
    """How often the monitor looks for nodes without an agent (0: only when asked)."""
    agent_num_cpus: float = 0.0
    """CPUs each agent reserves: 0, so an agent fits on a node whose CPUs jobs took."""
    max_restarts: int = -1
    """Agent restarts after a crash (-1: always)."""

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {self.interval_s}")
        if self.stale_after_s is not None and not self.stale_after_s > self.interval_s:
            raise ValueError(f"stale_after_s ({self.stale_after_s}) must exceed interval_s ({self.interval_s})")
        if self.buffer_size <= 0:
            raise ValueError(f"buffer_size must be positive, got {self.buffer_size}")
        if self.reconcile_interval_s < 0:
            raise ValueError(f"reconcile_interval_s must be >= 0, got {self.reconcile_interval_s}")
        if self.agent_num_cpus < 0:
            raise ValueError(f"agent_num_cpus must be >= 0, got {self.agent_num_cpus}")

    @property
    def stale_after(self) -> float:
        return self.stale_after_s if self.stale_after_s is not None else max(5.0, 3 * self.interval_s)
