"""What an agent sends the monitor: one :class:`NodeReport` per sample (plain, picklable)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from deepshare.core.errors import one_line


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


MAX_NAME_CHARS = 253
"""Longest node, node id, link, probe or gauge name a report may carry (a DNS name's limit)."""
MAX_REASON_CHARS = 1024
"""Longest probe reason (an exception's first line, :func:`probe_reason`)."""
MAX_LINKS_PER_REPORT = 1024
"""Most links one report may list: a node has a few NICs, PCIe switches and NVLink groups; the
view turns every link of every fresh node into the scheduler's ``link_load`` at each poll."""
MAX_GPUS_PER_NODE = 1024
"""GPU indices a report may use are 0 to ``MAX_GPUS_PER_NODE - 1`` (NVML numbers a node's GPUs
from 0; the largest machines have tens)."""
MAX_GPUS_PER_REPORT = MAX_GPUS_PER_NODE
MAX_INT = 2**63
"""Integers in a report (``seq``, ``pid``, GPU indices, link counts, and any number sent as an
int) must have an absolute value below this: a Python int of any size passed the type check, and
one of 400 digits made every float conversion (``/metrics``, the status table) raise, one of
5,000 digits every ``str()`` (``agents status --json``), until the node was forgotten."""
MAX_GAUGES_PER_REPORT = 4096
MAX_PROBES_PER_REPORT = 64


def report_problem(report: object) -> str | None:
    """What makes ``report`` unfit for the monitor's view (None: nothing). Whoever can call the
    monitor actor can send one, and every reader of the view (``link_load``, ``agents status``,
    the ``/metrics`` scrape) reads every field of it, so a field of the wrong type broke them all
    until the entry expired, about an hour later. Utilisations and scores may be NaN or out of
    0..1 and rates NaN (readers filter and clip utilisations; a probe's odd reading must not cost
    the node its whole report); everything else must be what the dataclass says."""
    if not isinstance(report, NodeReport):
        return f"expected a NodeReport, got {type(report).__name__}"
    for name in ("node", "node_id"):
        if not is_name(getattr(report, name)):
            return f"{name}: expected a name of 1 to {MAX_NAME_CHARS} printable characters"
    for name in ("seq", "pid"):
        value = getattr(report, name)
        if not (_integer(value) and value >= 0):
            return f"{name}: expected an integer from 0 to 2**63 - 1"
    for name in ("started_at", "sampled_at"):
        if not _finite(getattr(report, name)):
            return f"{name}: expected a finite number of seconds"
    return _links_problem(report.links) or _mapping_problem(report) or _probes_problem(report.probes)


def _links_problem(links: object) -> str | None:
    if not isinstance(links, (tuple, list)) or len(links) > MAX_LINKS_PER_REPORT:
        return f"links: expected a tuple of at most {MAX_LINKS_PER_REPORT} LinkStat"
    for i, stat in enumerate(links):
        if not isinstance(stat, LinkStat) or not is_name(stat.link):
            return f"links.{i}: expected a LinkStat with a link name of 1 to {MAX_NAME_CHARS} printable characters"
        for field_name in ("rx_bytes_per_s", "tx_bytes_per_s", "rx_bytes_total", "tx_bytes_total"):
            if not _real(getattr(stat, field_name)):
                return f"links.{i}.{field_name}: expected a number"
        for field_name in ("utilization", "contention", "capacity_bytes_per_s"):
            value = getattr(stat, field_name)
            if value is not None and not _real(value):
                return f"links.{i}.{field_name}: expected a number or None"
    return None


def _mapping_problem(report: NodeReport) -> str | None:
    gpus, gauges = report.gpus, report.gauges
    if not isinstance(gpus, Mapping) or len(gpus) > MAX_GPUS_PER_REPORT \
            or not all(_integer(k) and 0 <= k < MAX_GPUS_PER_NODE and _real(v) for k, v in gpus.items()):
        return (f"gpus: expected at most {MAX_GPUS_PER_REPORT} GPU indices (0 to {MAX_GPUS_PER_NODE - 1})"
                " mapped to numbers")
    if not isinstance(gauges, Mapping) or len(gauges) > MAX_GAUGES_PER_REPORT \
            or not all(is_name(k) and _real(v) for k, v in gauges.items()):
        return f"gauges: expected at most {MAX_GAUGES_PER_REPORT} printable names mapped to numbers"
    return None


def _probes_problem(probes: object) -> str | None:
    if not isinstance(probes, (tuple, list)) or len(probes) > MAX_PROBES_PER_REPORT:
        return f"probes: expected a tuple of at most {MAX_PROBES_PER_REPORT} ProbeStatus"
    for i, probe in enumerate(probes):
        if not (isinstance(probe, ProbeStatus) and is_name(probe.name) and isinstance(probe.available, bool)
                and _text(probe.reason, MAX_REASON_CHARS) and _integer(probe.links) and probe.links >= 0):
            return (f"probes.{i}: expected a ProbeStatus (a printable name, available true or false, a printable"
                    f" reason of at most {MAX_REASON_CHARS} characters, links >= 0)")
    return None


def probe_reason(text: str) -> str:
    """A reason a report may carry, from any message (an exception's, a probe's): its first line,
    every character that is not printable escaped (:func:`~deepshare.core.errors.one_line`: a lone
    surrogate, a terminal escape), cut to :data:`MAX_REASON_CHARS`. A driver's error with a long
    dump, or a second line, cost the node its whole report (the monitor refuses longer or
    unprintable reasons), not just the probe."""
    lines = str(text).strip().splitlines()
    first = one_line(lines[0].strip()) if lines else ""
    return first if len(first) <= MAX_REASON_CHARS else first[:MAX_REASON_CHARS - 3] + "..."


def is_name(value: object) -> bool:
    """A node, node id, link, probe or gauge name a report may carry: 1 to
    :data:`MAX_NAME_CHARS` printable characters."""
    return _text(value, MAX_NAME_CHARS) and len(value) > 0  # type: ignore[arg-type]


def _text(value: object, longest: int) -> bool:
    """A str of at most ``longest`` characters, every one printable (so no lone UTF-16 surrogate,
    which ``str.isprintable`` counts out): one link or probe name that UTF-8 cannot encode made
    prometheus_client fail the whole ``/metrics`` page, every node's series with it. Hosts,
    interfaces and probes name nothing with a control character, and agents make their reasons
    printable, so only a forged report is refused."""
    return isinstance(value, str) and len(value) <= longest and value.isprintable()


def _integer(value: object) -> bool:
    """An int (not a bool) of absolute value below :data:`MAX_INT`."""
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT < value < MAX_INT


def _real(value: object) -> bool:
    """A float (NaN and infinities included: a probe's reading, which readers filter and clip) or
    an int that :func:`_integer` accepts (so ``float()`` of it is finite), not a bool."""
    if isinstance(value, float):
        return True
    return _integer(value)


def _finite(value: object) -> bool:
    return _real(value) and math.isfinite(value)  # type: ignore[arg-type]
