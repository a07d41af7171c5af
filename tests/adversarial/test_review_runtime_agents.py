"""Review of the contention monitor's view of the node agents' reports
(``deepshare.agents.view.ClusterState``, what ``link_load()`` answers the scheduler's loop):
reports that arrive late from an agent process that has since been replaced, and numbers a buggy
probe produces, and reports that are not well-formed at all. Plain objects, no Ray."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace

import pytest
from prometheus_client import generate_latest

from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.report import LinkStat, NodeReport, ProbeStatus, report_problem
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


GOOD = NodeReport("n1", "id1", 1, 1, 1.0, 1.0, links=(LinkStat("nic", 1.0, 1.0, 0.5, 1.0),), gpus={0: 0.2},
                  gauges={"gpu0/util": 0.3}, probes=(ProbeStatus("nvml", True),))


@pytest.mark.parametrize("bad, problem", [
    (replace(GOOD, node=None), "node: expected a name"),
    (replace(GOOD, node=7), "node: expected a name"),
    (replace(GOOD, node=""), "node: expected a name"),
    (replace(GOOD, node_id=["x"]), "node_id: expected a name"),
    (replace(GOOD, seq=True), "seq: expected an integer"),
    (replace(GOOD, seq=2**64), "seq: expected an integer"),
    (replace(GOOD, pid=-1), "pid: expected an integer"),
    (replace(GOOD, sampled_at="now"), "sampled_at: expected a finite number"),
    (replace(GOOD, started_at=math.nan), "started_at: expected a finite number"),
    (replace(GOOD, links=None), "links: expected a tuple"),
    (replace(GOOD, links=({"link": "nic"},)), "links.0: expected a LinkStat"),
    (replace(GOOD, links=(LinkStat("nic", 1.0, 1.0, "0.5", None),)), "links.0.utilization: expected a number or None"),
    (replace(GOOD, links=(LinkStat("nic", "1", 1.0, 0.5, None),)), "links.0.rx_bytes_per_s: expected a number"),
    (replace(GOOD, links=tuple(LinkStat(f"l{i}", 1.0, 1.0, 0.5, None) for i in range(1025))), "at most 1024 LinkStat"),
    (replace(GOOD, gpus={0: "high"}), "gpus: expected"),
    (replace(GOOD, gpus={"0": 0.1}), "gpus: expected"),
    (replace(GOOD, gpus={0: object()}), "gpus: expected"),
    (replace(GOOD, gauges={"gpu0/util": "x"}), "gauges: expected"),
    (replace(GOOD, gauges=[1, 2]), "gauges: expected"),
    (replace(GOOD, probes=("x",)), "probes.0: expected a ProbeStatus"),
    (replace(GOOD, probes=(ProbeStatus("nvml", "yes"),)), "probes.0: expected a ProbeStatus"),
    ("not a report", "expected a NodeReport, got str"),
])
def test_a_malformed_report_is_dropped_and_every_reader_still_works(bad, problem, caplog):
    """Anyone who can call the monitor can send a report, and every reader (``link_load`` for the
    scheduler, ``agents status``, ``--json``, the ``/metrics`` scrape) reads every field: a
    ``None`` node name made the snapshot's sort raise, for every reader, for about an hour."""
    assert report_problem(bad) is not None and problem in report_problem(bad)
    state = ClusterState(10.0, clock=lambda: 0.0, wall=lambda: 1.0)
    assert state.update(GOOD)
    with caplog.at_level(logging.WARNING, logger="deepshare.agents.view"):
        assert not state.update(bad)
    assert problem in caplog.text and state.rejected == 1
    assert state.link_load() == {"n1/nic": 0.5}
    snapshot = state.snapshot()
    assert [n.node for n in snapshot.nodes] == ["n1"] and snapshot.node("n1").report is GOOD
    json.dumps(snapshot.to_dict())
    assert "n1" in generate_latest(MetricsExporter(state.snapshot).registry).decode()


def test_odd_readings_of_a_probe_do_not_cost_the_node_its_report():
    """NaN or out-of-range utilisations and NaN rates are a probe's reading, not a forged report:
    the report is taken and the readers filter and clip (see the test above on NaN)."""
    odd = replace(GOOD, links=(LinkStat("nic", math.nan, math.inf, 1.5, math.nan, None, math.nan, 0),))
    assert report_problem(odd) is None
    state = ClusterState(10.0, clock=lambda: 0.0, wall=lambda: 1.0)
    assert state.update(odd) and state.link_load() == {"n1/nic": 1.0}


def test_a_name_taken_by_a_new_ray_node_does_not_serve_the_old_nodes_numbers():
    """A raylet restarted on the same machine gets the same name (``node_names`` by address): the
    departed node's hour-old report must not come back as the new node's fresh numbers."""
    now = [0.0]
    state = ClusterState(5.0, clock=lambda: now[0], wall=lambda: 1000.0)
    state.expect("gpu-host-1", "old")
    assert state.update(NodeReport("gpu-host-1", "old", 1, 111, 1000.0, 1000.0, links=(LinkStat("nic", 1.0, 1.0, 0.97, 10.0),)))
    now[0] = 1800.0
    assert state.link_load() == {}  # stale
    state.expect("gpu-host-1", "new")
    assert state.link_load() == {}
    node = state.snapshot().node("gpu-host-1")
    assert node.report is None and node.node_id == "new" and node.reports == 0 and not node.stale


def test_the_scheduler_says_when_it_decides_without_link_load(monkeypatch, caplog):
    """A monitor that fails to answer (a raising ``link_load``) made the scheduler decide blind to
    contention without a word; it now logs it, and asks again after ``retry_s``."""
    import ray

    from deepshare.runtime.service import LinkLoad

    class Failing:
        class link_load:  # noqa: N801 - the shape of an actor method
            @staticmethod
            def remote():
                return "ref"

    def failing_get(*args, **kwargs):
        raise TypeError("'<' not supported between instances of 'NoneType' and 'str'")

    monkeypatch.setattr(ray, "get", failing_get)
    load = LinkLoad(retry_s=30.0)
    load.handle, load.checked = Failing(), 0.0
    with caplog.at_level(logging.WARNING, logger="deepshare.runtime.service"):
        assert load() == {}
    assert load.handle is None
    assert "the contention monitor did not answer (TypeError: '<' not supported" in caplog.text
    assert "asking again in 30 s" in caplog.text


def test_a_raylet_restarted_on_its_host_keeps_the_hosts_name():
    """``ray.nodes()`` lists the dead raylet beside its successor: only alive nodes share a
    hostname, so the new one is ``gpu-a``, not ``gpu-a-<id>`` (its link load keys would change)."""
    from deepshare.agents.monitor import node_name

    dead = {"NodeID": "aa" * 14, "NodeManagerHostname": "gpu-a", "Alive": False}
    new = {"NodeID": "bb" * 14, "NodeManagerHostname": "gpu-a", "Alive": True}
    twin = {"NodeID": "cc" * 14, "NodeManagerHostname": "gpu-a", "Alive": True}
    assert node_name(new, [dead, new], {}) == "gpu-a"
    assert node_name(new, [dead, new, twin], {}) == "gpu-a-bbbbbbbb"  # two alive on one host: told apart
