"""Small edges: a probe named twice in one report, ``_cause`` of an exception without a message,
``NodeAgent.recent(0)``."""

from __future__ import annotations

import threading
from collections import deque

import pytest
from prometheus_client import generate_latest

from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.probes.simulated import SimulatedProbe
from deepshare.agents.report import NodeReport, ProbeStatus
from deepshare.agents.sampler import Sampler
from deepshare.agents.view import ClusterState
from deepshare.cli.agents import _cause


def test_a_probe_listed_twice_is_kept_once_the_first_time():
    state = ClusterState(5.0)
    report = NodeReport("n", "i", 0, 1, 1.0, 1.0, probes=(ProbeStatus("nvml", False, "first"), ProbeStatus("nvml", True)))
    assert state.update(report)
    assert state.snapshot().node("n").report.probes == (ProbeStatus("nvml", False, "first"),)


def test_two_probes_of_one_class_export_one_series():
    sampler = Sampler("n", [SimulatedProbe([{"nic": 0.5}]), SimulatedProbe([{"pcie": 0.2}])], node_id="i")
    state = ClusterState(5.0)
    assert state.update(sampler.step())
    page = generate_latest(MetricsExporter(state.snapshot).registry).decode()
    assert [line for line in page.splitlines() if line.startswith("deepshare_probe_available")] == [
        'deepshare_probe_available{node="n",probe="simulated"} 1.0']


@pytest.mark.parametrize("exc, said", [(TimeoutError(), "TimeoutError"), (RuntimeError("  \n "), "RuntimeError"),
                                       (RuntimeError("Traceback\n  boom\nValueError: bad"), "ValueError: bad")])
def test_cause_is_the_last_line_or_the_type_name(exc, said):
    assert _cause(exc) == said


def test_recent_of_zero_or_fewer_is_no_sample():
    pytest.importorskip("ray")
    from deepshare.agents.agent import NodeAgent

    cls = NodeAgent.__ray_metadata__.modified_class
    agent = cls.__new__(cls)
    agent._lock = threading.Lock()
    agent._sampler = type("S", (), {"buffer": deque(range(5), maxlen=600)})()
    assert cls.recent(agent, 0) == [] and cls.recent(agent, -2) == []
    assert cls.recent(agent, 2) == [3, 4] and cls.recent(agent) == [4] and cls.recent(agent, 9) == [0, 1, 2, 3, 4]
