"""What the monitor's report validation refuses: a name or reason it takes is read by every
scrape and every ``agents status``, and one that UTF-8 cannot encode (a lone surrogate) failed
the whole ``/metrics`` page."""

from __future__ import annotations

import urllib.request

import pytest

from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.report import LinkStat, NodeReport, ProbeStatus, report_problem
from deepshare.agents.view import ClusterState

GOOD = NodeReport("node0", "id0", 0, 1, 1.0, 1.0, links=(LinkStat("nic", 1.0, 1.0, 0.1, 0.1),),
                  probes=(ProbeStatus("simulated", True),))


def _scrape(state: ClusterState) -> str:
    exporter = MetricsExporter(state.snapshot)
    exporter.start(0)
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5).read().decode()
    finally:
        exporter.stop()


@pytest.mark.parametrize("forged", [
    NodeReport("node1", "id1", 0, 2, 1.0, 1.0, links=(LinkStat("eth/\ud800", 1.0, 1.0, 0.1, 0.1),)),
    NodeReport("node1", "id1", 0, 2, 1.0, 1.0, probes=(ProbeStatus("x\udfff", True),)),
    NodeReport("node1", "id1", 0, 2, 1.0, 1.0, probes=(ProbeStatus("p", False, "bad \ud800 reason"),)),
    NodeReport("node\ud800", "id1", 0, 2, 1.0, 1.0),
    NodeReport("node1", "id1", 0, 2, 1.0, 1.0, gauges={"gpu0/util\ud800": 0.5}),
    NodeReport("node1", "id1", 0, 2, 1.0, 1.0, links=(LinkStat("a\nb", 1.0, 1.0, 0.1, 0.1),)),
])
def test_a_name_or_reason_utf8_cannot_encode_or_not_printable_is_refused_and_scrapes_still_work(forged):
    state = ClusterState(5.0)
    assert state.update(GOOD)
    assert report_problem(forged) is not None and not state.update(forged)
    page = _scrape(state)
    assert 'deepshare_link_utilization_ratio{link="nic",node="node0"} 0.1' in page
    assert "node1" not in page


def test_printable_names_and_reasons_beyond_ascii_are_taken():
    report = NodeReport("nœud-ü", "id0", 0, 1, 1.0, 1.0, links=(LinkStat("eth/ümlaut", 1.0, 1.0, 0.1, 0.1),),
                        probes=(ProbeStatus("p", False, "no device (ä \ufffd)"),))
    assert report_problem(report) is None
