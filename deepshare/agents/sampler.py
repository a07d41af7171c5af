"""One node's sampling step without Ray: read every probe, derive rates, build a report.

:class:`Sampler` is what a :class:`~deepshare.agents.agent.NodeAgent` runs on its timer and
what ``deepshare agents probe`` runs twice over a short window. A probe that is unavailable, or
whose read fails, is reported with its reason and retried next step: a probe can never stop the
sampler. Reports are kept in a bounded buffer (``deque(maxlen=buffer_size)``). The node-wide
``nic`` and ``pcie`` links (:mod:`~deepshare.agents.links`) are left out of a sample in which one
of their members has no rate, and their byte totals only ever grow. A probe that is available but
has nothing to measure yet (:attr:`~deepshare.agents.probes.base.Probe.waiting`: an InfiniBand
HCA with no port ACTIVE) is reported unavailable with that reason, and is no source of ``nic``
until it has.
:class:`ReportSchedule` decides which samples an agent also sends to the monitor.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from typing import Callable, Iterable, Sequence

from deepshare.agents.config import MIN_INTERVAL_S, report_period
from deepshare.agents.scoring import contention_score, gpu_contention
from deepshare.agents.links import NIC, NIC_SOURCES, aggregate_of, nic_source, with_node_links
from deepshare.agents.probes.base import Probe
from deepshare.agents.report import LinkStat, NodeReport, ProbeStatus, probe_reason
from deepshare.agents.samples import LinkRate, ProbeSample
from deepshare.core.topology import Node


class ReportSchedule:
    """Which sampling ticks also report: the first two, then one every report period.

    The first sample is sent at once (the monitor learns the node and its probes), the second
    too (the first with counter rates), then the first tick at or after the previous report plus
    ``report_period(interval_s, report_interval_s)``. ``due`` is a tick's *scheduled* time, so
    jitter in when the thread wakes never stretches the period; the tolerance absorbs the float
    drift of adding ``interval_s`` over and over.
    """

    def __init__(self, interval_s: float, report_interval_s: float) -> None:
        if not math.inf > report_interval_s >= interval_s >= MIN_INTERVAL_S:
            raise ValueError(
                f"report_interval_s ({report_interval_s:g}) must be finite and at least interval_s ({interval_s:g}),"
                f" itself at least {MIN_INTERVAL_S:g} s"
            )
        self.interval_s = interval_s
        self.period_s = report_period(interval_s, report_interval_s)
        self._next: float | None = None  # None: report the next tick
        self._sent = 0
        self._slack = 1e-6 * interval_s

    def due(self, tick: float) -> bool:
        """Whether the sample of the tick scheduled at ``tick`` should be reported."""
        return self._next is None or tick >= self._next - self._slack

    def sent(self, tick: float) -> None:
        """The sample of ``tick`` was handed to Ray (a failed send is retried next tick)."""
        self._sent += 1
        self._next = tick + (self.interval_s if self._sent == 1 else self.period_s)


class Sampler:
    """Samples ``probes`` on demand (:meth:`step`); owns no thread and starts nothing."""

    def __init__(
        self,
        node: str,
        probes: Sequence[Probe],
        node_spec: Node | None = None,
        buffer_size: int = 600,
        node_id: str = "",
        wall: Callable[[], float] = time.time,
    ) -> None:
        if buffer_size <= 0:
            raise ValueError(f"buffer_size must be positive, got {buffer_size}")
        self.node = node
        self.node_id = node_id
        self.probes = list(probes)
        self.node_spec = node_spec
        self.buffer: deque[NodeReport] = deque(maxlen=buffer_size)
        self._wall = wall
        self._prev: dict[int, ProbeSample] = {}  # by position: two probes may share a name
        self._totals: dict[str, tuple[float, float]] = {}  # link -> (rx, tx) bytes since start
        self._nic_source = nic_source(self._measuring())
        self._nic_prefix = None if self._nic_source is None else self._nic_source[1]
        self._nic_offset = (0.0, 0.0)  # carried over when nic changed source (see _update_nic_source)
        self._seq = 0
        self._pid = os.getpid()
        self._started_at = wall()

    def step(self) -> NodeReport:
        """Sample every probe once and return (and buffer) the node's report."""
        sampled_at = self._wall()
        rates: list[LinkRate] = []
        gauges: dict[str, float] = {}
        statuses: list[ProbeStatus] = []
        unrated: set[str] = set()  # links a probe had or has that carry no rate in this sample
        for i, probe in enumerate(self.probes):
            if not probe.available:
                statuses.append(ProbeStatus(probe.name, False, probe_reason(probe.reason)))
                continue
            before = self._prev.get(i)
            try:
                sample = probe.sample()
                found = probe.rates(before, sample)
            except Exception as exc:  # noqa: BLE001 - a probe must never stop the agent
                self._prev.pop(i, None)
                unrated.update(before.links if before is not None else ())
                statuses.append(ProbeStatus(probe.name, False, probe_reason(f"sample failed: {exc}")))
                continue
            self._prev[i] = sample
            if before is not None and sample.timestamp > before.timestamp:
                self._accumulate(found, sample.timestamp - before.timestamp)
            unrated |= _unrated(before, sample, found)
            rates.extend(found)
            gauges.update(sample.gauges)
            statuses.append(_status(probe, len(sample.links)))
        self._update_nic_source()
        totals = self._node_totals()
        node_links = with_node_links(rates, self.node_spec, self._nic_prefix, self._incomplete(unrated))
        links = tuple(
            LinkStat(r.link, r.rx_bytes_per_s, r.tx_bytes_per_s, r.utilization, contention_score(r.utilization),
                     r.capacity_bytes_per_s, *totals.get(r.link, (0.0, 0.0)))
            for r in node_links
        )
        report = NodeReport(
            node=self.node,
            node_id=self.node_id,
            seq=self._seq,
            pid=self._pid,
            started_at=self._started_at,
            sampled_at=sampled_at,
            links=links,
            gpus=gpu_contention({s.link: s.utilization for s in links}),
            gauges=gauges,
            probes=tuple(statuses),
        )
        self._seq += 1
        self.buffer.append(report)
        return report

    def _measuring(self) -> list[str]:
        """The names of the probes available with something to measure (not :attr:`~Probe.waiting`)."""
        return [p.name for p in self.probes if p.available and not p.waiting]

    def _update_nic_source(self) -> None:
        """Make ``nic`` of a source it prefers to its current one (:data:`NIC_SOURCES`) once that
        source has something to measure: the Ethernet ports until an InfiniBand port has read
        ACTIVE, then the InfiniBand ports for good (``nic`` never goes back, so a failed read
        cannot make it the Ethernet ports for a sample). An HCA whose ports never came up left
        the node without ``nic`` for good. The ``nic`` byte totals (Prometheus counters) go on
        from where the old members left them: neither falling nor counting the new members'
        bytes from before the switch."""
        if self._nic_source == NIC_SOURCES[0]:
            return
        source = nic_source(self._measuring())
        if source is None or source == self._nic_source:
            return
        if self._nic_source is not None and NIC_SOURCES.index(source) > NIC_SOURCES.index(self._nic_source):
            return
        old_rx, old_tx = self._members_total(self._nic_prefix)
        new_rx, new_tx = self._members_total(source[1])
        offset_rx, offset_tx = self._nic_offset
        self._nic_offset = (offset_rx + old_rx - new_rx, offset_tx + old_tx - new_tx)
        self._nic_source, self._nic_prefix = source, source[1]

    def _members_total(self, nic_prefix: str | None) -> tuple[float, float]:
        """The bytes of every link that is a member of ``nic`` under ``nic_prefix``."""
        members = [t for link, t in self._totals.items() if aggregate_of(link, nic_prefix) == NIC]
        return sum(t[0] for t in members), sum(t[1] for t in members)

    def _accumulate(self, rates: Sequence[LinkRate], seconds: float) -> None:
        """Add ``rate x seconds`` per link: exactly the counter delta for counter links, the
        device-measured rate held over the interval for rate links (NVML's PCIe throughput)."""
        for r in rates:
            rx, tx = self._totals.get(r.link, (0.0, 0.0))
            self._totals[r.link] = (rx + r.rx_bytes_per_s * seconds, tx + r.tx_bytes_per_s * seconds)

    def _incomplete(self, unrated: Iterable[str]) -> set[str]:
        """The node-wide links to leave out of this sample: those with a member in ``unrated``
        (a sum without it would understate the load), and ``nic`` when no InfiniBand or Ethernet
        probe has anything to measure (no ports make it up; a probe that names ``nic`` itself
        still counts)."""
        out = {agg for agg in (aggregate_of(link, self._nic_prefix) for link in unrated) if agg is not None}
        if self._nic_prefix is None:
            out.add(NIC)
        return out

    def _node_totals(self) -> dict[str, tuple[float, float]]:
        """Bytes per link since the start, plus per node-wide link (``nic``, ``pcie``) the sum over
        every member that ever carried traffic, not only this sample's: a member missing from one
        sample must not make the total fall, which Prometheus would read as a counter reset.
        ``nic``'s starts from what its earlier source had carried (:meth:`_update_nic_source`)."""
        sums: dict[str, tuple[float, float]] = {NIC: self._nic_offset} if self._nic_offset != (0.0, 0.0) else {}
        for link, (rx, tx) in self._totals.items():
            agg = aggregate_of(link, self._nic_prefix)
            if agg is not None:
                sum_rx, sum_tx = sums.get(agg, (0.0, 0.0))
                sums[agg] = (sum_rx + rx, sum_tx + tx)
        return {**sums, **self._totals}  # a probe that names ``nic`` or ``pcie`` itself wins

    def close(self) -> None:
        for probe in self.probes:
            probe.close()


def _status(probe: Probe, links: int) -> ProbeStatus:
    """The status of a probe that produced a sample: unavailable, with the reason, while it has
    nothing to measure yet (:attr:`~Probe.waiting`)."""
    waiting = probe.waiting
    return ProbeStatus(probe.name, False, probe_reason(waiting), links) if waiting else ProbeStatus(probe.name, True, "", links)


def _unrated(before: ProbeSample | None, sample: ProbeSample, found: Sequence[LinkRate]) -> set[str]:
    """Links of a probe's previous or current sample without a rate now: a port or GPU dropped
    from this sample (a failed NVML field, an interface that went away), or one with no earlier
    reading to take a counter's difference from (the first sample, or the first after a failure)."""
    links = set(sample.links) if before is None else set(sample.links) | set(before.links)
    return links - {r.link for r in found}


def measure(
    probes: Sequence[Probe], window_s: float, sleep: Callable[[float], None] = time.sleep
) -> list[tuple[ProbeStatus, tuple[LinkRate, ...]]]:
    """Sample every probe, wait ``window_s``, sample again: each probe's status and rates.

    What ``deepshare agents probe`` prints; a probe that fails is reported, never raised.
    """
    first: list[ProbeSample | Exception | None] = []
    for probe in probes:
        try:
            first.append(probe.sample() if probe.available else None)
        except Exception as exc:  # noqa: BLE001 - reported below
            first.append(exc)
    sleep(window_s)
    out: list[tuple[ProbeStatus, tuple[LinkRate, ...]]] = []
    for probe, before in zip(probes, first):
        if not probe.available:
            out.append((ProbeStatus(probe.name, False, probe_reason(probe.reason)), ()))
            continue
        try:
            if isinstance(before, Exception):
                raise before
            second = probe.sample()
            rates = probe.rates(before, second)
        except Exception as exc:  # noqa: BLE001
            out.append((ProbeStatus(probe.name, False, probe_reason(f"sample failed: {exc}")), ()))
            continue
        out.append((_status(probe, len(second.links)), rates))
    return out
