"""The agents' settings, one typed dataclass shared by the API, the monitor and the CLI."""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import MISSING, dataclass, fields
from typing import Any

from deepshare.core.hosts import is_host_name

MONITOR_NAME = "deepshare-contention-monitor"
NAMESPACE = "deepshare"
AGENT_PREFIX = "deepshare-agent"

MIN_INTERVAL_S = 0.001
"""Shortest sampling period (1 ms), and so the shortest report period and stale timeout.

Reading every probe takes tens to hundreds of microseconds, so a shorter period only keeps
the agent busy; and report periods are a count of samples, which overflows an integer once
the interval is small enough (5e-324 s sampling with 2 s reports is 4e323 samples).
"""

MIN_NUM_CPUS = 0.0001
"""The least fraction of a CPU Ray takes as a resource quantity (its precision): a smaller
``agent_num_cpus`` other than 0 is refused by Ray when it starts each agent."""

DEFAULT_STALE_RETENTION_S = 3600.0
"""Default seconds a stale node stays in the monitor's view and ``/metrics`` before it is
forgotten: long enough to see which node went quiet and why, short enough that a cluster whose
nodes come and go (autoscaling, spot instances) does not grow the view, or every scrape, without
bound."""

DEFAULT_REPORT_INTERVAL_S = 2.0
"""Default seconds between two reports (when sampling is not slower than that).

Each report is one Ray actor call, about 1.3 ms of the agent's CPU, while sampling the local
probes costs 0.05-0.2 ms: reporting every second sample at 1 Hz halves the calls (the bench:
0.1-0.15% of a core over an idle Ray worker instead of ~0.2%) and keeps data at the monitor at
most ~2 s old (1 s on average),
which is fresher than a 5 s Prometheus scrape and than the job-placement decisions that read
``link_load``. The default stale timeout (3 report periods, at least 5 s) stays close to the
5 s it was with one report per sample. Longer intervals save little more CPU per agent but do
cut the monitor's load on large clusters (one call per node per report): raise it there.
"""


def default_report_interval(interval_s: float) -> float:
    """``max(interval_s, DEFAULT_REPORT_INTERVAL_S)``: never report faster than sampling."""
    return max(interval_s, DEFAULT_REPORT_INTERVAL_S)


def report_period(interval_s: float, report_interval_s: float) -> float:
    """Seconds between two reports: ``report_interval_s`` rounded up to whole samples.

    Reports are sent right after a sample, so an agent sampling every 1 s with a 2.5 s report
    interval reports every 3 s (1e-9 tolerance for float noise: 0.1 x 3 is 0.3). Callers keep
    ``interval_s`` at least :data:`MIN_INTERVAL_S` and ``report_interval_s`` finite, so the count
    of samples stays a reasonable integer.
    """
    return interval_s * max(1, math.ceil(report_interval_s / interval_s - 1e-9))


@dataclass(frozen=True, slots=True)
class AgentConfig:
    # New fields go at the end, with defaults: _setstate (below) reads an older pickle by position.
    interval_s: float = 1.0
    """Seconds between two samples of every agent (each sample goes to the agent's buffer); at
    least :data:`MIN_INTERVAL_S`."""
    report_interval_s: float | None = None
    """Seconds between two reports to the monitor (each carries the latest sample, rounded up to
    whole samples); default ``max(interval_s, 2 s)`` (see :data:`DEFAULT_REPORT_INTERVAL_S`)."""
    stale_after_s: float | None = None
    """A node is stale after this long without a report; default max(5 s, 3 report periods).
    Must exceed the report period, or healthy nodes would flap stale between reports."""
    buffer_size: int = 600
    """Samples each agent keeps in memory (10 minutes at 1 Hz)."""
    reconcile_interval_s: float = 5.0
    """How often the monitor looks for nodes without an agent (0: only when asked)."""
    agent_num_cpus: float = 0.0
    """CPUs each agent reserves: 0, so an agent fits on a node whose CPUs jobs took."""
    max_restarts: int = -1
    """Agent restarts after a crash (-1: always)."""
    stale_retention_s: float = DEFAULT_STALE_RETENTION_S
    """Seconds a node stays in the monitor's view and ``/metrics`` once stale; then the monitor
    forgets it (0: as soon as it turns stale). See :data:`DEFAULT_STALE_RETENTION_S`."""
    metrics_port: int | None = None
    """Port of the monitor's Prometheus endpoint (0: any free port; None: none). Part of the
    config so a monitor Ray restarts (``max_restarts=-1``) serves it again."""
    metrics_host: str = "127.0.0.1"
    """Address the metrics endpoint binds (``0.0.0.0``: every interface, which exposes it)."""
    metrics_allowed_hosts: tuple[str, ...] = ()
    """Names besides the bound address, localhost, loopback IPs (and, bound elsewhere, any IP
    literal and the node's host names) that a request's ``Host`` may give the metrics endpoint:
    the name Prometheus scrapes it by. Any other ``Host`` gets a 403 (DNS rebinding)."""

    def __post_init__(self) -> None:
        self._normalise()
        if not MIN_INTERVAL_S <= self.interval_s < math.inf:
            raise ValueError(f"interval_s must be at least {MIN_INTERVAL_S:g} s and finite, got {self.interval_s}")
        if self.report_interval_s is not None and math.isinf(self.report_interval_s):
            raise ValueError(f"report_interval_s must be finite, got {self.report_interval_s}")
        if self.report_interval_s is not None and not self.report_interval_s >= self.interval_s:
            raise ValueError(
                f"report_interval_s ({self.report_interval_s:g}) must be at least interval_s ({self.interval_s:g}):"
                " an agent reports at most once per sample"
            )
        if self.stale_after_s is not None and not self.stale_after_s > self.report_period:
            raise ValueError(
                f"stale_after_s ({self.stale_after_s:g}) must exceed the report period ({self.report_period:g} s:"
                f" report_interval_s {self.report_interval:g} rounded up to whole samples of interval_s"
                f" {self.interval_s:g}), or nodes turn stale between two reports"
            )
        self._check_agent_fields()
        if not 0 <= self.stale_retention_s < math.inf:
            raise ValueError(f"stale_retention_s must be >= 0 and finite, got {self.stale_retention_s}")
        port = self.metrics_port
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535):
            raise ValueError(f"metrics_port must be None or an integer from 0 to 65535, got {port!r}")
        if not isinstance(self.metrics_host, str) or not self.metrics_host.strip():
            raise ValueError(f"metrics_host must be an address to bind (an empty one binds every interface),"
                             f" got {self.metrics_host!r}")
        allowed = self.metrics_allowed_hosts
        if not isinstance(allowed, tuple) or not all(is_host_name(name) for name in allowed):
            raise ValueError("metrics_allowed_hosts must be a tuple of host names (no spaces, slashes or control"
                             f" characters), got {allowed!r}")

    def _normalise(self) -> None:
        """Turn the numbers of other types (numpy's, ``Fraction``) into built-in ``int`` and
        ``float``: the monitor hands ``agent_num_cpus`` and ``max_restarts`` to Ray's actor
        options, which refuse a numpy number with a ``TypeError`` naming no field of ours, at
        every reconcile. Anything else is left for the checks to refuse (``buffer_size=2.5``)."""
        for name in _FLOAT_FIELDS + _INT_FIELDS:
            value = getattr(self, name)
            if type(value) in (int, float) or not _real(value):
                continue
            if _integer(value):
                object.__setattr__(self, name, int(value))
            elif name in _FLOAT_FIELDS:
                object.__setattr__(self, name, float(value))

    def _check_agent_fields(self) -> None:
        """Check the fields the monitor hands Ray and its threads as they are: a bad one passed
        here, then failed inside the monitor, at every reconcile, as an error that did not name
        it (``max_restarts=-2``, ``agent_num_cpus=nan``), left every agent pending for ever
        (``agent_num_cpus=inf``), ended the reconcile thread (``reconcile_interval_s=inf``),
        quietly turned reconciling off (``nan``), or failed every agent's constructor
        (``buffer_size=2.5``)."""
        if not _integer(self.buffer_size) or self.buffer_size <= 0:
            raise ValueError(f"buffer_size must be a positive integer, got {self.buffer_size!r}")
        if not _integer(self.max_restarts) or self.max_restarts < -1:
            raise ValueError(f"max_restarts must be -1 (always), 0 or a positive integer, got {self.max_restarts!r}")
        if not (_real(self.agent_num_cpus) and 0 <= self.agent_num_cpus < math.inf):
            raise ValueError(f"agent_num_cpus must be a finite number >= 0, got {self.agent_num_cpus!r}")
        if 0 < self.agent_num_cpus < MIN_NUM_CPUS:
            raise ValueError(f"agent_num_cpus must be 0 or at least {MIN_NUM_CPUS:g} (Ray's precision for a"
                             f" resource), got {self.agent_num_cpus!r}")
        wait_max = threading.TIMEOUT_MAX
        if not (_real(self.reconcile_interval_s) and 0 <= self.reconcile_interval_s <= wait_max):
            raise ValueError(f"reconcile_interval_s must be a number of seconds from 0 to {wait_max:g},"
                             f" got {self.reconcile_interval_s!r}")

    @property
    def report_interval(self) -> float:
        """The report interval asked for (the default filled in)."""
        return self.report_interval_s if self.report_interval_s is not None else default_report_interval(self.interval_s)

    @property
    def report_period(self) -> float:
        """Seconds between two reports of a punctual agent (the interval rounded up to samples)."""
        return report_period(self.interval_s, self.report_interval)

    @property
    def stale_after(self) -> float:
        return self.stale_after_s if self.stale_after_s is not None else max(5.0, 3 * self.report_period)


def _setstate(self: AgentConfig, state: Any) -> None:
    """Unpickle, an older deepshare's config too: fields it did not have take their defaults (Ray
    restarts a detached monitor from the arguments it was first created with, pickled by the
    deepshare of that day; a missing slot made every read of the new field fail). Assigned after
    the class: Python 3.10's dataclass(slots=True, frozen=True) replaces one defined in it."""
    known = dict(zip((f.name for f in fields(self)), state))
    for f in fields(self):
        default = f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
        object.__setattr__(self, f.name, known.get(f.name, default))


AgentConfig.__setstate__ = _setstate  # type: ignore[method-assign]


_FLOAT_FIELDS = ("interval_s", "report_interval_s", "stale_after_s", "reconcile_interval_s", "agent_num_cpus",
                 "stale_retention_s")
_INT_FIELDS = ("buffer_size", "max_restarts", "metrics_port")


def _integer(value: object) -> bool:
    """An integer (a numpy one too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value: object) -> bool:
    """A real number, not a bool (NaN included: callers compare it, which NaN fails)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
