"""What the monitor's report validation refuses, and what the agent makes of a probe's message.

A name or reason the monitor takes is read by every scrape and every ``agents status``: one that
UTF-8 cannot encode (a lone surrogate) failed the whole ``/metrics`` page, and one longer than
:data:`~deepshare.agents.report.MAX_REASON_CHARS` cost the node its whole report.
"""

from __future__ import annotations

import urllib.request

import pytest

from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.probes.base import Probe, ProbeError
from deepshare.agents.probes.simulated import SimulatedProbe
from deepshare.agents.report import MAX_REASON_CHARS, LinkStat, NodeReport, ProbeStatus, probe_reason, report_problem
from deepshare.agents.sampler import Sampler, measure
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


class _Failing(Probe):
    name = "flaky"

    def __init__(self, message: str) -> None:
        super().__init__()
        self._message = message

    def _read(self):
        raise ProbeError(self._message)


# explicit ids: an id holding the lone surrogate cannot cross pytest-xdist's UTF-8 channel
@pytest.mark.parametrize("message", ["read failed: " + "x" * 1100, "first line\n" + "y" * 5000, "lone \ud800 \x1b[2J"],
                         ids=["long", "multi-line", "surrogate-and-escape"])
def test_a_failing_probe_with_a_long_or_odd_message_costs_only_that_probe(message):
    sampler = Sampler("node0", [SimulatedProbe([{"nic": 0.5}]), _Failing(message)], node_id="id0")
    state = ClusterState(5.0)
    for _ in range(2):
        report = sampler.step()
        assert report_problem(report) is None and state.update(report)
    reason = report.probes[1].reason
    assert reason.startswith("sample failed: ") and len(reason) <= MAX_REASON_CHARS and "\n" not in reason
    assert state.link_load() == {"node0/nic": 0.5}
    (status, _), = [r for r in measure([_Failing(message)], 0.0, sleep=lambda s: None)]
    assert status.reason == reason


def test_probe_reason_keeps_the_first_line_and_cuts_to_the_limit():
    assert probe_reason("no device\nTraceback ...") == "no device"
    assert probe_reason("") == ""
    cut = probe_reason("z" * 5000)
    assert len(cut) == MAX_REASON_CHARS and cut.endswith("...")
    assert probe_reason("a \ud800 b") == "a \\ud800 b"


def test_an_unavailable_probe_with_a_long_reason_costs_only_that_probe():
    from deepshare.agents.probes.base import UnavailableProbe

    sampler = Sampler("node0", [SimulatedProbe([{"nic": 0.5}]), UnavailableProbe("nvml", "no driver: " + "z" * 3000)], node_id="id0")
    report = sampler.step()
    assert report_problem(report) is None and report.probes[1].reason.startswith("no driver: ")


def test_the_log_line_of_a_dropped_report_escapes_the_senders_node_name(caplog):
    """A lone surrogate in the name would make the line unwritable as UTF-8 (lost by a file
    handler, and fatal to pytest-xdist's report channel); an escape would drive a terminal."""
    state = ClusterState(5.0)
    with caplog.at_level("WARNING", logger="deepshare.agents.view"):
        assert not state.update(NodeReport("node\ud800\x1b[2J", "id1", 0, 2, 1.0, 1.0))
    [line] = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    line.encode("utf-8")
    assert "node\\ud800\\x1b[2J" in line
