"""Fixes from the twelfth review of the node agents (reviewer scripts r1..r9): a restarted
monitor and its agents' names, InfiniBand ports that come up late or go away, stopping an agent
while a probe blocks, reconciling after shutdown, unprintable interface names, 32-bit Ethernet
counters, the exporter's name filter and AgentConfig's unchecked fields. Plain objects and
fakes, no Ray cluster."""

from __future__ import annotations

from deepshare.agents.report import LinkStat, NodeReport
from test_agents_hardening import _monitor, _node  # this folder is on sys.path under pytest


# -- 1: a restarted monitor takes the reports of an agent started under an older name ---------
def test_a_restarted_monitor_files_an_agent_s_older_name_under_the_node_s_name(monkeypatch):
    """Two raylets shared a hostname, so the agent was started as ``host-aaaa1111``; the monitor
    restarted after the other left, named the node ``host``, and found the running agent by its
    actor name (Ray ignores the arguments then): every report of that agent was dropped, and the
    node stayed stale for as long as it lived."""
    a, b = "aaaa1111" * 7, "bbbb2222" * 7
    nodes = [_node(a, "host"), _node(b, "host")]
    cls, first = _monitor(monkeypatch, nodes)
    cls.reconcile(first)
    started_as = first._names[a]
    assert started_as == "host-aaaa1111"
    nodes.pop()
    cls, restarted = _monitor(monkeypatch, nodes)  # Ray restarts the monitor: its state is empty
    assert cls.reconcile(restarted) == ["host"]
    cls.report(restarted, NodeReport(started_as, a, 0, 1, 1.0, 1.0, links=(LinkStat("nic", 0, 0, 0.7, None),)))
    assert restarted._state.rejected == 0
    assert restarted._state.link_load() == {"host/nic": 0.7}
    assert restarted._state.snapshot().node("host").reports == 1


def test_a_report_from_a_node_id_without_an_agent_is_still_dropped(monkeypatch):
    cls, mon = _monitor(monkeypatch, [_node("aa" * 28, "host")])
    cls.reconcile(mon)
    cls.report(mon, NodeReport("host", "cc" * 28, 0, 1, 1.0, 1.0))
    cls.report(mon, NodeReport("host\x1b", "aa" * 28, 0, 1, 1.0, 1.0))  # its node id, an unprintable name
    assert mon._state.rejected == 2 and mon._state.snapshot().node("host").reports == 0
