"""The cluster-wide view a monitor keeps: the latest report per node, ages, staleness.

:class:`ClusterState` is plain and thread-safe (a lock): the monitor actor feeds it reports and
reads snapshots from its own threads. Ages use the *monitor's* monotonic clock at receipt, so
nodes' clocks never need to agree; a node is stale when nothing arrived for ``stale_after_s``
(an agent that was started but never reported counts from its start). A node that stayed stale
for longer than ``stale_retention_s`` (a node that left the cluster; the monitor names the nodes
still alive, :meth:`ClusterState.keep`, which are never forgotten) is forgotten, by the next
snapshot or :meth:`ClusterState.forget_expired`, so a cluster whose nodes come and go keeps a
bounded view and ``/metrics`` page. Report latency (receipt
minus the agent's wall-clock sample time) is kept for the benchmark; it assumes synchronised
wall clocks, which holds on one machine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from deepshare.agents.config import DEFAULT_STALE_RETENTION_S, MIN_INTERVAL_S
from deepshare.agents.report import LinkStat, NodeReport, ProbeStatus, report_problem
from deepshare.core.errors import one_line

log = logging.getLogger(__name__)
LOG_EVERY_REJECTED = 1000


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as the monitor sees it now."""

    node: str
    node_id: str
    age_s: float
    """Seconds since the last report (or since the agent was started, before its first one)."""
    stale: bool
    restarts: int
    reports: int
    report: NodeReport | None


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Every known node, by name, at one instant."""

    nodes: tuple[NodeState, ...]
    stale_after_s: float

    def link_load(self) -> dict[str, float]:
        """``ClusterView.link_load``: ``{"NODE/LINK": utilisation clipped to 0..1}``.

        Only fresh nodes count (a stale node's last numbers may be arbitrarily old) and only
        links with a known utilisation.
        """
        out: dict[str, float] = {}
        for state in self.nodes:
            if state.stale or state.report is None:
                continue
            for stat in state.report.links:
                if stat.utilization is not None and stat.utilization == stat.utilization:  # NaN passes min/max
                    out[f"{state.node}/{stat.link}"] = min(max(stat.utilization, 0.0), 1.0)
        return out

    def node(self, name: str) -> NodeState | None:
        return next((n for n in self.nodes if n.node == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``deepshare agents status --json`` prints."""
        nodes = []
        for n in self.nodes:
            r = n.report
            nodes.append({
                "node": n.node, "node_id": n.node_id, "age_s": round(n.age_s, 3), "stale": n.stale,
                "restarts": n.restarts, "reports": n.reports,
                "probes": [] if r is None else [
                    {"name": p.name, "available": p.available, "reason": p.reason} for p in r.probes
                ],
                "gpus": {} if r is None else {str(k): v for k, v in r.gpus.items()},
                "links": [] if r is None else [
                    {"link": s.link, "rx_bytes_per_s": s.rx_bytes_per_s, "tx_bytes_per_s": s.tx_bytes_per_s,
                     "utilization": s.utilization, "contention": s.contention}
                    for s in r.links
                ],
            })
        return {"stale_after_s": self.stale_after_s, "nodes": nodes}


class _Entry:
    __slots__ = ("node_id", "seen", "report", "restarts", "reports")

    def __init__(self, node_id: str, seen: float) -> None:
        self.node_id = node_id
        self.seen = seen
        self.report: NodeReport | None = None
        self.restarts = 0
        self.reports = 0


class ClusterState:
    """Latest report per node; thread-safe. A node stale for longer than ``stale_retention_s``
    is dropped (see the module docstring)."""

    def __init__(
        self,
        stale_after_s: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        latency_window: int = 10_000,
        stale_retention_s: float = DEFAULT_STALE_RETENTION_S,
        interval_s: float = MIN_INTERVAL_S,
    ) -> None:
        if not stale_after_s > 0:
            raise ValueError(f"stale_after_s must be positive, got {stale_after_s}")
        if not stale_retention_s >= 0:
            raise ValueError(f"stale_retention_s must be >= 0, got {stale_retention_s}")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.stale_after_s = stale_after_s
        self.stale_retention_s = stale_retention_s
        self.interval_s = interval_s
        """The agents' sampling period: ``seq`` counts samples, so it grows by at most one per
        ``interval_s`` (the default, the shortest period allowed, is the loosest bound)."""
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._nodes: dict[str, _Entry] = {}
        self._kept: frozenset[str] = frozenset()
        self._latencies: deque[float] = deque(maxlen=latency_window)
        self.rejected = 0
        """Reports dropped since start (malformed, a ``seq`` too far ahead, or refused by the
        monitor)."""

    def expect(self, node: str, node_id: str) -> None:
        """An agent was started for ``node``: it turns stale if it never reports."""
        with self._lock:
            entry = self._nodes.get(node)
            if entry is None:
                self._nodes[node] = _Entry(node_id, self._clock())
            elif entry.node_id != node_id:  # the name now belongs to a new Ray node: the old one's
                entry.node_id, entry.seen = node_id, self._clock()  # numbers are not its (nor fresh)
                entry.report, entry.reports = None, 0

    def rename(self, old: str, new: str, node_id: str) -> None:
        """The node ``node_id`` is called ``new`` now: its entry (report, counts, age) moves there,
        replacing any entry ``new`` had (a departed node's, whose numbers are not this node's)."""
        with self._lock:
            entry = self._nodes.get(old)
            if entry is None or entry.node_id != node_id:
                entry = None
            else:
                del self._nodes[old]
            held = self._nodes.get(new)
            if held is not None and held.node_id == node_id and (entry is None or held.seen >= entry.seen):
                return  # a report under the new name came in first: it is the newer
            if entry is None:
                self._nodes[new] = _Entry(node_id, self._clock())
                return
            if entry.report is not None:
                entry.report = replace(entry.report, node=new)
            self._nodes[new] = entry

    def keep(self, names: Iterable[str]) -> None:
        """Never forget these nodes, however long they stay stale: the monitor passes its alive
        nodes' names at each reconcile, so only a node that left expires (one whose agent stopped
        reporting stays in the view, ``agents status`` and ``/metrics`` as stale)."""
        kept = frozenset(names)
        with self._lock:
            self._kept = kept

    def update(self, report: NodeReport) -> bool:
        """Take one agent report; returns whether it was taken. One that is not a well-formed
        report (:func:`~deepshare.agents.report.report_problem`) is dropped with a log line: every
        reader of the view reads every field. While the node is fresh, an older one from the same
        agent process is ignored, and so is a late one from an agent process the node's fresh
        reports come from a newer process than (Ray restarted the agent; the old one's last reports
        were still in flight): it would roll the node's numbers back and count a restart that did
        not happen. A ``seq`` further ahead of the last one taken than the agent can have sampled
        since (:meth:`max_seq_jump`) is dropped too: one report with ``seq = 2**63 - 1`` under a
        node's process made every real report look old, silencing the node until it was forgotten.
        A stale node takes the next report of its process whatever its ``seq``, so a bad report
        that got through costs the node at most the stale timeout. A link or a probe listed twice
        is kept once, the first time (every reader keys them by name; ``/metrics`` exported both,
        and a probe class sampled twice names two statuses alike)."""
        problem = report_problem(report)
        if problem is not None:
            self.reject(report, problem)
            return False
        if len({s.link for s in report.links}) != len(report.links):
            first: dict[str, LinkStat] = {}
            for stat in report.links:
                first.setdefault(stat.link, stat)
            report = replace(report, links=tuple(first.values()))
        if len({p.name for p in report.probes}) != len(report.probes):
            named: dict[str, ProbeStatus] = {}
            for probe in report.probes:
                named.setdefault(probe.name, probe)
            report = replace(report, probes=tuple(named.values()))
        received = self._wall()
        jumped = False
        with self._lock:
            now = self._clock()
            entry = self._nodes.setdefault(report.node, _Entry(report.node_id, now))
            last = entry.report
            fresh = now - entry.seen <= self.stale_after_s
            if last is not None and (last.pid, last.started_at) == (report.pid, report.started_at):
                if fresh and report.seq <= last.seq:
                    return False
                jumped = fresh and report.seq - last.seq > self.max_seq_jump(now - entry.seen)
            elif last is not None:
                if fresh and last.node_id == report.node_id and report.started_at < last.started_at:
                    return False  # (a stale node takes it: a wall clock set back must not silence a node for good)
                entry.restarts += 1
            if not jumped:
                entry.node_id = report.node_id
                entry.report = report
                entry.seen = now
                entry.reports += 1
                self._latencies.append(received - report.sampled_at)
        if jumped:
            self.reject(report, f"seq {report.seq} is further ahead of the last one taken ({last.seq}) than the"
                                f" agent can have sampled since")
            return False
        return True

    def max_seq_jump(self, elapsed_s: float) -> float:
        """How far ``seq`` may move ahead of the last report taken ``elapsed_s`` seconds ago: the
        samples an agent can take in that time at one per :attr:`interval_s`, plus a stale
        timeout's worth for reports delayed and then delivered together. A report that got
        through ahead of its agent by that slack silences it until the node turns stale."""
        return (max(elapsed_s, 0.0) + self.stale_after_s) / self.interval_s + 1

    def reject(self, report: object, problem: str) -> None:
        """Log a dropped report: the first few, then one in :data:`LOG_EVERY_REJECTED` (a sender
        that keeps sending them must not flood the log)."""
        with self._lock:
            self.rejected += 1
            count = self.rejected
        if count <= 10 or count % LOG_EVERY_REJECTED == 0:
            node = getattr(report, "node", None)
            # the name is the sender's own: escaped, as a lone surrogate cannot be written as UTF-8
            # (the log line would be lost) and a terminal escape would reach whoever reads the log
            log.warning("contention report dropped (%d so far) for node %s: %s", count,
                        one_line(node[:64]) if isinstance(node, str) else "?", problem)

    def forget_expired(self) -> list[str]:
        """Drop every node stale for longer than ``stale_retention_s``, except those :meth:`keep`
        names; returns their names."""
        with self._lock:
            return self._forget_expired(self._clock())

    def _forget_expired(self, now: float) -> list[str]:
        """:meth:`forget_expired` with the lock held."""
        limit = self.stale_after_s + self.stale_retention_s
        expired = [name for name, e in self._nodes.items() if now - e.seen > limit and name not in self._kept]
        for name in expired:
            del self._nodes[name]
        return expired

    def snapshot(self) -> ClusterSnapshot:
        """Every node the state still holds (expired ones are forgotten first), by name."""
        now = self._clock()
        with self._lock:
            self._forget_expired(now)
            nodes = tuple(
                NodeState(name, e.node_id, now - e.seen, now - e.seen > self.stale_after_s, e.restarts, e.reports,
                          e.report)
                for name, e in sorted(self._nodes.items())
            )
        return ClusterSnapshot(nodes, self.stale_after_s)

    def link_load(self) -> dict[str, float]:
        return self.snapshot().link_load()

    def latencies(self) -> list[float]:
        """Report latencies in seconds (agent sample to monitor receipt), oldest first."""
        with self._lock:
            return list(self._latencies)
