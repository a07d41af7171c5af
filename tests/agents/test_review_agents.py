"""Review fixes for the node agents: a 1 ms floor on the sampling interval, a node-wide ``nic``
that never switches to Ethernet when an InfiniBand read fails, NVML per-field errors, and a
monitor that forgets nodes which left.

Fake probes and clocks throughout, so every number is exact and checkable by hand.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from deepshare.agents import AgentConfig, ClusterState, LinkRate, LinkReading, NodeReport, NvmlProbe, ProbeSample, Sampler
from deepshare.agents.config import MIN_INTERVAL_S
from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.links import nic_source, with_node_links
from deepshare.agents.probes.base import Probe, ProbeError
from deepshare.agents.report import LinkStat, ProbeStatus
from deepshare.agents.sampler import ReportSchedule
from test_agents_probes import FakeGpu, FakeNvml, run_cli  # this folder is on sys.path under pytest

GB = 1e9


# -- 6: the shortest sampling interval -----------------------------------------------------
def test_config_refuses_an_interval_below_1_ms_instead_of_overflowing() -> None:
    assert MIN_INTERVAL_S == 0.001
    for interval in (5e-324, 1e-9, 0.000999):
        with pytest.raises(ValueError, match=r"^interval_s must be at least 0\.001 s and finite, got"):
            AgentConfig(interval_s=interval)
    with pytest.raises(ValueError, match=r"^report_interval_s must be finite, got inf"):
        AgentConfig(report_interval_s=math.inf)
    fastest = AgentConfig(interval_s=0.001)  # 2 s reports: every 2,000th sample
    assert (fastest.report_period, fastest.stale_after) == (2.0, 6.0)
    for interval, report in ((5e-324, 2.0), (0.001, math.inf)):
        with pytest.raises(ValueError, match=r"must be finite and at least interval_s .*, itself at least 0\.001 s"):
            ReportSchedule(interval, report)
    assert ReportSchedule(0.001, 0.002).period_s == 0.002


@pytest.mark.parametrize(
    "argv, flag, bound",
    [
        (("start", "--address", "127.0.0.1:1", "--interval", "5e-324"), "--interval", "3600"),
        (("start", "--address", "127.0.0.1:1", "--interval", "0.0009"), "--interval", "3600"),
        (("start", "--address", "127.0.0.1:1", "--report-interval", "1e-4"), "--report-interval", "86400"),
        (("start", "--address", "127.0.0.1:1", "--stale-after", "5e-324"), "--stale-after", "86400"),
        (("probe", "--window", "1e-300"), "--window", "3600"),
    ],
)
def test_cli_refuses_durations_below_1_ms_naming_the_flag_and_range(argv, flag, bound, capsys) -> None:
    rc, out, _ = run_cli(*argv)
    err = capsys.readouterr().err
    assert rc == 2 and out == "" and "Traceback" not in err
    assert f"error: argument {flag}: expected seconds in [0.001, {bound}], got '{argv[-1]}'\n" in err


def test_cli_accepts_the_1_ms_floor() -> None:
    import argparse

    from deepshare.cli.agents import register

    parser = argparse.ArgumentParser(prog="deepshare")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["agents", "start", "--interval", "0.001", "--report-interval", "0.001", "--stale-after", "0.002"])
    assert (args.interval, args.report_interval, args.stale_after) == (0.001, 0.001, 0.002)
    assert parser.parse_args(["agents", "probe", "--window", "0.001"]).window == 0.001


# -- 7: the node-wide nic ------------------------------------------------------------------
class CounterProbe(Probe):
    """One counter link growing by ``step`` bytes per sample; its clock is the sample number.
    Reads listed in ``fail_at`` raise; links listed in ``gone`` per sample are left out."""

    def __init__(self, name: str, links: tuple[str, ...], step: float, fail_at=(), gone=None) -> None:
        super().__init__()
        self.name, self.links, self.step = name, links, step
        self.fail_at, self.gone = set(fail_at), gone or {}
        self.t = 0

    def _read(self) -> ProbeSample:
        self.t += 1
        if self.t in self.fail_at:
            raise ProbeError("cannot read counters: EIO")
        value = self.t * self.step
        return ProbeSample(float(self.t), {
            link: LinkReading(value, value / 2, capacity_bytes_per_s=100 * GB)
            for link in self.links if link not in self.gone.get(self.t, ())
        })


def nic_by_step(sampler: Sampler, steps: int) -> list[tuple[float, float] | None]:
    """(rx bytes/s, rx bytes total) of ``nic`` at each step, ``None`` where it is left out."""
    out = []
    for _ in range(steps):
        nic = sampler.step().link("nic")
        out.append(None if nic is None else (nic.rx_bytes_per_s, nic.rx_bytes_total))
    return out


def test_nic_is_left_out_not_switched_to_ethernet_when_infiniband_misses_a_sample() -> None:
    """The reviewer's case: the IB read fails at sample 5. ``nic`` used to read the Ethernet
    port there (its counter fell 30e9 -> 4e6 -> 5e6 -> 40e9); now it is absent for sample 5
    and 6 (no previous IB reading to difference against) and its total never falls."""
    ib = CounterProbe("infiniband", ("ib/mlx5_0/1",), 10 * GB, fail_at={5})
    eth = CounterProbe("ethernet", ("eth/eth0",), 1e6)
    sampler = Sampler("n0", [ib, eth], wall=lambda: 0.0)
    assert nic_by_step(sampler, 8) == [
        None,  # counters need two samples
        (10 * GB, 10 * GB), (10 * GB, 20 * GB), (10 * GB, 30 * GB),
        None, None,  # the failed sample, then the first one after it
        (10 * GB, 40 * GB), (10 * GB, 50 * GB),  # 4 to 5 and 5 to 6 were never measured
    ]
    last = sampler.buffer[-1]
    assert last.link("eth/eth0").rx_bytes_total == 7e6  # the Ethernet port is still reported on its own
    assert last.link("nic").utilization == 0.1  # 10 GB/s over the port's 100 GB/s


def test_nic_stays_out_while_infiniband_fails_even_from_the_first_sample() -> None:
    ib = CounterProbe("infiniband", ("ib/mlx5_0/1",), 10 * GB, fail_at={1, 2, 3})
    eth = CounterProbe("ethernet", ("eth/eth0",), 1e6)
    sampler = Sampler("n0", [ib, eth], wall=lambda: 0.0)
    assert nic_by_step(sampler, 6) == [None, None, None, None, (10 * GB, 10 * GB), (10 * GB, 20 * GB)]
    load = {s.link: s.utilization for s in sampler.step().links}
    assert load["nic"] == 0.1 and load["eth/eth0"] == 1e6 / (100 * GB)


def test_nic_is_the_ethernet_ports_when_no_infiniband_probe_is_available() -> None:
    eth = CounterProbe("ethernet", ("eth/eth0", "eth/eth1"), 1e6)
    assert nic_by_step(Sampler("n0", [eth], wall=lambda: 0.0), 3) == [None, (2e6, 2e6), (2e6, 4e6)]
    unavailable_ib = CounterProbe("infiniband", ("ib/mlx5_0/1",), 10 * GB)
    unavailable_ib._unavailable("no InfiniBand devices")
    eth = CounterProbe("ethernet", ("eth/eth0",), 1e6)
    assert nic_by_step(Sampler("n0", [unavailable_ib, eth], wall=lambda: 0.0), 3) == [None, (1e6, 1e6), (1e6, 2e6)]
    assert nic_source(["nvml", "ethernet", "infiniband"]) == ("infiniband", "ib/")
    assert nic_source(["ethernet"]) == ("ethernet", "eth/") and nic_source(["simulated"]) is None


def test_nic_total_never_falls_when_a_port_drops_out() -> None:
    """eth1 is missing from sample 4 on (an interface that went away): ``nic`` is left out of
    sample 4, whose sum would lack eth1, then sums eth0 alone; its total keeps eth1's bytes."""
    eth = CounterProbe("ethernet", ("eth/eth0", "eth/eth1"), 1000.0, gone={4: ("eth/eth1",), 5: ("eth/eth1",)})
    sampler = Sampler("n0", [eth], wall=lambda: 0.0)
    assert nic_by_step(sampler, 5) == [None, (2000.0, 2000.0), (2000.0, 4000.0), None, (1000.0, 6000.0)]
    # tx total: eth0's 4 intervals x 500 (sample 4's counted, though nic was left out) + eth1's 2 x 500
    assert sampler.buffer[-1].link("nic").tx_bytes_total == 4 * 500 + 2 * 500


def test_node_links_take_the_nic_prefix_and_leave_out_aggregates_as_told() -> None:
    rates = [LinkRate("eth/eth0", 10.0, 10.0, 0.1, 100.0), LinkRate("gpu0/pcie", 20.0, 40.0, 0.1, 400.0)]
    assert [r.link for r in with_node_links(rates)] == ["eth/eth0", "gpu0/pcie", "nic", "pcie"]  # one snapshot's guess
    assert [r.link for r in with_node_links(rates, nic_prefix="ib/")] == ["eth/eth0", "gpu0/pcie", "pcie"]
    assert [r.link for r in with_node_links(rates, nic_prefix="eth/", leave_out={"pcie"})] == ["eth/eth0", "gpu0/pcie", "nic"]
    named = with_node_links([LinkRate("nic", 1.0, 1.0, 0.5, 2.0)], leave_out={"nic"})
    assert named == (LinkRate("nic", 1.0, 1.0, 0.5, 2.0),)  # a probe's own nic is not an aggregate


# -- 8: NVML per-field errors --------------------------------------------------------------
class FieldErrors(FakeNvml):
    """FakeNvml where the fields in ``failing`` ((GPU index, field id) pairs) carry a per-field
    error and the value 0, while the call itself succeeds."""

    failing: set[tuple[int, int]] = set()

    def nvmlDeviceGetFieldValues(self, gpu, fields):
        out = super().nvmlDeviceGetFieldValues(gpu, fields)
        index = self.gpus.index(gpu)
        ids = [f[0] if isinstance(f, tuple) else f for f in fields]
        error = SimpleNamespace(nvmlReturn=999, valueType=3, value=SimpleNamespace(ullVal=0))  # NVML_ERROR_UNKNOWN
        return [error if (index, fid) in self.failing else v for fid, v in zip(ids, out)]


def test_nvml_field_error_leaves_the_link_out_and_the_next_good_sample_starts_afresh() -> None:
    """The reviewer's case: ~1 TB moved through NVLink since boot, then 1000 KiB/s. A failed
    field at t=3 used to read as 0 (a reset) and t=4 as 1 TB in one second."""
    gpu = FakeGpu(nvlink_links=2, nvlink_kib=(10**9, 10**9))
    nvml = FieldErrors([gpu])
    now = [0.0]
    sampler = Sampler("n0", [NvmlProbe(nvml=nvml, clock=lambda: now[0])], wall=lambda: 0.0)
    seen = []
    for k in range(6):
        now[0] = float(k)
        gpu.nvlink_kib = (10**9 + 1000 * k, 10**9 + 500 * k)
        nvml.failing = {(0, 138)} if k == 3 else set()  # NVLINK_THROUGHPUT_DATA_TX only
        report = sampler.step()
        assert report.probes[0].available  # the call itself succeeded
        link = report.link("gpu0/nvlink")
        seen.append(None if link is None else (link.tx_bytes_per_s, link.rx_bytes_per_s, link.tx_bytes_total))
    assert seen == [None, (1_024_000.0, 512_000.0, 1_024_000.0), (1_024_000.0, 512_000.0, 2_048_000.0),
                    None, None, (1_024_000.0, 512_000.0, 3_072_000.0)]
    assert sampler.buffer[-1].link("gpu0/nvlink").utilization == 1_024_000 / (2 * 25_000e6)


def test_nvml_pcie_counter_error_drops_that_gpu_and_the_node_pcie_for_the_sample() -> None:
    gpus = [FakeGpu(pcie_bytes=(0, 0)), FakeGpu(pcie_bytes=(0, 0))]
    nvml = FieldErrors(gpus)
    now = [0.0]
    probe = NvmlProbe(nvml=nvml, pcie_gbps=8.0, clock=lambda: now[0])  # 1 GB/s per GPU
    sampler = Sampler("n0", [probe], wall=lambda: 0.0)
    seen = []
    for k in range(5):
        now[0] = float(k)
        for gpu in gpus:
            gpu.pcie_bytes = (100 * k, 300 * k)  # (tx, rx) cumulative bytes
        nvml.failing = {(1, 198)} if k == 2 else set()  # GPU 1's PCIE_COUNT_RX_BYTES
        links = {s.link: s for s in sampler.step().links}
        seen.append((sorted(links), links["pcie"].rx_bytes_total if "pcie" in links else None))
    both = ["gpu0/pcie", "gpu1/pcie", "pcie"]
    # GPU 1 is out at t=2 and has no previous reading at t=3: the node's pcie is out for both;
    # its rx total is GPU 0's 4 x 300 bytes plus GPU 1's 2 x 300 (t=0..1 and t=3..4)
    assert seen == [([], None), (both, 600.0), (["gpu0/pcie"], None), (["gpu0/pcie"], None), (both, 1800.0)]


def test_nvml_field_error_in_a_direct_sample_keeps_the_other_links() -> None:
    gpu = FakeGpu(pcie_bytes=(5, 7), nvlink_links=1, nvlink_kib=(1, 2))
    nvml = FieldErrors([gpu])
    probe = NvmlProbe(nvml=nvml, clock=lambda: 1.0)
    assert set(probe.sample().links) == {"gpu0/pcie", "gpu0/nvlink"}
    nvml.failing = {(0, 139)}  # NVLINK_THROUGHPUT_DATA_RX, after detection
    links = probe.sample().links
    assert set(links) == {"gpu0/pcie"} and (links["gpu0/pcie"].tx, links["gpu0/pcie"].rx) == (5, 7)


# -- 9: forgetting nodes that left ---------------------------------------------------------
def report(node: str, seq: int = 0) -> NodeReport:
    return NodeReport(node, f"id-{node}", seq, 1, 100.0, 0.0, (LinkStat("nic", 1.0, 2.0, 0.5, 1.0, None, 30.0, 40.0),),
                      {}, {}, (ProbeStatus("simulated", True),))


def test_config_stale_retention_defaults_to_an_hour_and_is_checked() -> None:
    assert AgentConfig().stale_retention_s == 3600.0 and AgentConfig(stale_retention_s=0).stale_retention_s == 0
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"^stale_retention_s must be >= 0 and finite, got"):
            AgentConfig(stale_retention_s=bad)
    with pytest.raises(ValueError, match=r"^stale_retention_s must be >= 0, got -1"):
        ClusterState(2.0, stale_retention_s=-1)


def test_cluster_state_forgets_a_node_stale_for_longer_than_the_retention() -> None:
    now = [0.0]
    state = ClusterState(stale_after_s=2.0, clock=lambda: now[0], wall=lambda: 0.0, stale_retention_s=10.0)
    state.update(report("a"))
    state.expect("b", "id-b")  # never reports
    now[0] = 11.0
    state.update(report("c"))
    now[0] = 12.0  # a and b: stale since t=2, for exactly the retention
    assert [(n.node, n.stale) for n in state.snapshot().nodes] == [("a", True), ("b", True), ("c", False)]
    now[0] = 12.5
    assert [n.node for n in state.snapshot().nodes] == ["c"]
    now[0] = 30.0
    assert state.forget_expired() == ["c"] and state.snapshot().nodes == ()
    state.update(report("a", seq=7))  # back after being forgotten: a new entry
    assert [(n.node, n.reports, n.restarts, n.stale) for n in state.snapshot().nodes] == [("a", 1, 0, False)]


def test_node_churn_keeps_the_view_bounded() -> None:
    """One new node a second, each reporting once: only those seen within the stale timeout plus
    the retention (1 + 5 s) remain, n0993..n0999 (age <= 6 s), 7 of 1,000."""
    now = [0.0]
    state = ClusterState(stale_after_s=1.0, clock=lambda: now[0], wall=lambda: 0.0, stale_retention_s=5.0)
    for i in range(1000):
        now[0] = float(i)
        state.update(report(f"n{i:04d}"))
        if i % 100 == 0:
            state.forget_expired()
    assert [n.node for n in state.snapshot().nodes] == [f"n{i:04d}" for i in range(993, 1000)]


def test_metrics_stop_exporting_a_forgotten_node() -> None:
    now = [0.0]
    state = ClusterState(stale_after_s=2.0, clock=lambda: now[0], wall=lambda: 0.0, stale_retention_s=10.0)
    state.update(report("gone"))
    exporter = MetricsExporter(state.snapshot)
    now[0] = 12.0
    page = generate_latest(exporter.registry).decode()
    assert 'deepshare_link_receive_bytes_total{link="nic",node="gone"} 30.0' in page
    assert 'deepshare_node_stale{node="gone"} 1.0' in page
    now[0] = 12.001
    assert 'node="gone"' not in generate_latest(exporter.registry).decode()


def test_monitor_forgets_the_agents_and_names_of_nodes_that_left() -> None:
    pytest.importorskip("ray")
    from deepshare.agents.monitor import forget_departed

    agents = {"id1": "handle1", "id2": "handle2"}
    names = {"id1": "node1", "id2": "node2", "id3": "node3"}  # id3: its agent never started
    assert forget_departed(agents, names, {"id2": {}}) == ["node1", "node3"]
    assert (agents, names) == ({"id2": "handle2"}, {"id2": "node2"})
    assert forget_departed(agents, names, {"id2", "id4"}) == [] and names == {"id2": "node2"}
