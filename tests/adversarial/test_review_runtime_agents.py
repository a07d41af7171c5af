"""Review of the contention monitor's view of the node agents' reports
(``deepshare.agents.view.ClusterState``, what ``link_load()`` answers the scheduler's loop):
reports that arrive late from an agent process that has since been replaced, and numbers a buggy
probe produces. Plain objects, no Ray."""

from __future__ import annotations

import math

from deepshare.agents.report import LinkStat, NodeReport
from deepshare.agents.view import ClusterState


def _report(pid: int, started_at: float, seq: int, utilization: float) -> NodeReport:
    return NodeReport("node0", "id0", seq, pid, started_at, 0.0, (LinkStat("nic", 0.0, 0.0, utilization, None),))


def test_a_late_report_of_a_replaced_agent_process_does_not_roll_the_view_back():
    """An agent restarted (Ray restarts it: ``max_restarts``) reports with a new ``pid`` and a
    later ``started_at``. A report of the old process still in flight arrives after the new
    one's: it is taken as yet another restart, replaces the fresh numbers with older ones and
    bumps ``restarts``. Only a report of the same or a newer agent process may replace one."""
    state = ClusterState(10.0, clock=lambda: 0.0, wall=lambda: 0.0)
    state.expect("node0", "id0")
    state.update(_report(pid=100, started_at=1000.0, seq=7, utilization=0.9))  # old process
    state.update(_report(pid=200, started_at=2000.0, seq=0, utilization=0.1))  # restarted
    state.update(_report(pid=100, started_at=1000.0, seq=8, utilization=0.9))  # late, from the old one
    assert state.link_load() == {"node0/nic": 0.1}
    assert state.snapshot().node("node0").restarts == 1


def test_link_load_is_within_0_and_1_even_for_a_nan_utilisation():
    """``link_load()`` is documented (and used by ``ClusterView.link_load``) as utilisation
    clipped to 0..1; ``min(max(u, 0.0), 1.0)`` lets NaN through (a rate probe that read NaN:
    ``max(nan, 0.0)`` is ``nan``). A value that is not a number must be left out (or clipped)."""
    state = ClusterState(10.0, clock=lambda: 0.0, wall=lambda: 0.0)
    state.update(_report(pid=1, started_at=1.0, seq=0, utilization=float("nan")))
    for value in state.link_load().values():
        assert math.isfinite(value) and 0.0 <= value <= 1.0, value
