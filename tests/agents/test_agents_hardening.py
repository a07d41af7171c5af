"""Fixes from a review of the node agents (reviewer scripts r1..r9): hostile report values,
sequence numbers, node names, nodes forgotten while alive, NVML per-GPU errors and legacy 32-bit
InfiniBand counters. Plain objects and fakes, no Ray cluster."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from prometheus_client import generate_latest

from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.report import LinkStat, NodeReport, ProbeStatus, report_problem
from deepshare.agents.view import ClusterState

GOOD = NodeReport("n1", "id1", 1, 1, 1.0, 1.0, links=(LinkStat("nic", 1.0, 1.0, 0.5, 1.0),), gpus={0: 0.2},
                  gauges={"gpu0/util": 0.3}, probes=(ProbeStatus("nvml", True),))


# -- B1: integers of any size -------------------------------------------------------------------
@pytest.mark.parametrize("bad, problem", [
    (replace(GOOD, gpus={10**5000: 1.0}), "gpus: expected"),
    (replace(GOOD, gpus={1024: 1.0}), "gpus: expected"),
    (replace(GOOD, gpus={-1: 1.0}), "gpus: expected"),
    (replace(GOOD, gpus={0: 10**400}), "gpus: expected"),
    (replace(GOOD, gauges={"gpu0/util": 2**63}), "gauges: expected"),
    (replace(GOOD, links=(LinkStat("nic", 1.0, 1.0, 0.5, 1.0, None, 10**400, 0.0),)), "links.0.rx_bytes_total"),
    (replace(GOOD, links=(LinkStat("nic", 1.0, 1.0, 10**400, 1.0),)), "links.0.utilization"),
    (replace(GOOD, links=(LinkStat("nic", -(10**400), 1.0, 0.5, 1.0),)), "links.0.rx_bytes_per_s"),
    (replace(GOOD, probes=(ProbeStatus("nvml", True, "", 10**400),)), "probes.0"),
])
def test_an_integer_too_large_for_a_float_or_a_string_is_refused(bad, problem):
    """A Python int of any size passed as a number: the report was taken, and then ``to_dict``
    (``agents status --json``), the status table and the ``/metrics`` scrape (HTTP 500) raised for
    up to an hour. Every reader must still work after such a report is offered."""
    assert report_problem(bad) is not None and problem in report_problem(bad)
    state = ClusterState(10.0, clock=lambda: 0.0, wall=lambda: 1.0)
    state.expect("n1", "id1")
    assert not state.update(bad)
    snapshot = state.snapshot()
    json.dumps(snapshot.to_dict())
    generate_latest(MetricsExporter(state.snapshot).registry)


def test_integers_that_fit_are_still_numbers():
    ok = replace(GOOD, gpus={0: 1, 1023: 0.5}, gauges={"g": 2**63 - 1},
                 links=(LinkStat("nic", 1, 2, 0, 1, 10, 2**62, 0),))
    assert report_problem(ok) is None
    state = ClusterState(10.0, clock=lambda: 0.0, wall=lambda: 1.0)
    assert state.update(ok)
    json.dumps(state.snapshot().to_dict())
    assert 'node="n1"' in generate_latest(MetricsExporter(state.snapshot).registry).decode()
