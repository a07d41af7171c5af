"""Node agents without Ray: probes on fixture sysfs/procfs trees and a fake pynvml, the rate
arithmetic, contention scores, node-wide links, the sampler, the cluster view, the Prometheus
exporter and the ``agents`` CLI actions that need no cluster.

Clocks are injected, so every rate below is exact: bytes moved / seconds between the samples.
"""

from __future__ import annotations

import argparse
import io
import shutil
import socket
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from deepshare.agents import (
    AgentConfig,
    ClusterState,
    EthernetProbe,
    InfinibandProbe,
    LinkRate,
    LinkReading,
    NodeReport,
    NvmlProbe,
    ProbeError,
    ProbeSample,
    Sampler,
    SimulatedProbe,
    compute_rates,
    contention_score,
    counter_delta,
    gpu_contention,
)
from deepshare.cli.agents import register
from deepshare.agents.scoring import CONTENTION_CAP
from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.links import with_node_links
from deepshare.agents.probes.infiniband import parse_rate_gbps
from deepshare.agents.report import LinkStat, ProbeStatus
from deepshare.core.topology import TESTBED_NODE_TYPE, ClusterSpec, NodeGroupSpec, Topology
from deepshare.core.errors import DeepShareError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
IB = Path("sys/class/infiniband")


# -- helpers -------------------------------------------------------------------------------
class Clock:
    """A clock that returns the given times in order (the probes read it once per sample)."""

    def __init__(self, *times: float) -> None:
        self._times = list(times)

    def __call__(self) -> float:
        return self._times.pop(0)


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A writable copy of the fixture /proc + /sys tree."""
    shutil.copytree(FIXTURES, tmp_path / "root")
    return tmp_path / "root"


def write(root: Path, rel: str | Path, text: object) -> None:
    (root / rel).write_text(f"{text}\n")


def net_dev(**ifaces: tuple[int, int]) -> str:
    head = ("Inter-|   Receive                                                |  Transmit\n"
            " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n")
    rows = [f"{name:>6}: {rx} 0 0 0 0 0 0 0 {tx} 0 0 0 0 0 0 0" for name, (rx, tx) in ifaces.items()]
    return head + "\n".join(rows) + "\n"


def rates_by_link(rates: tuple[LinkRate, ...]) -> dict[str, LinkRate]:
    return {r.link: r for r in rates}


# -- the arithmetic ------------------------------------------------------------------------
def test_counter_delta_wraps_32_bit_and_treats_64_bit_decrease_as_reset() -> None:
    assert counter_delta(100, 350, 32) == 250
    assert counter_delta(2**32 - 100, 50, 32) == 150
    assert counter_delta(2**40, 7, 64) == 7


def test_compute_rates_counters_rates_and_missing_previous() -> None:
    prev = ProbeSample(1.0, {"a": LinkReading(100, 1000, unit_bytes=4, capacity_bytes_per_s=2000.0)})
    cur = ProbeSample(
        3.0,
        {
            "a": LinkReading(300, 1400, unit_bytes=4, capacity_bytes_per_s=2000.0),
            "b": LinkReading(5, 6),  # new counter: no rate yet
            "c": LinkReading(10.0, 30.0, "rate", capacity_bytes_per_s=60.0),
        },
    )
    got = rates_by_link(compute_rates(prev, cur))
    assert set(got) == {"a", "c"}
    assert (got["a"].rx_bytes_per_s, got["a"].tx_bytes_per_s) == (400.0, 800.0)
    assert got["a"].utilization == 0.4
    assert (got["c"].rx_bytes_per_s, got["c"].tx_bytes_per_s, got["c"].utilization) == (10.0, 30.0, 0.5)
    assert [r.link for r in compute_rates(None, cur)] == ["c"]
    assert [r.link for r in compute_rates(cur, cur)] == ["c"]  # no time passed: counters unknown


# -- Ethernet ------------------------------------------------------------------------------
def test_ethernet_exact_rates_speed_and_interface_selection(tree: Path) -> None:
    probe = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys", clock=Clock(10.0, 12.0))
    assert probe.available and probe.interfaces == ("eth0", "eth1")  # no lo, no virtual docker0
    first = probe.sample()
    write(tree, "proc/net/dev", net_dev(lo=(9, 9), eth0=(1_000_000 + 2_500_000, 2_000_000 + 500_000),
                                        eth1=(500_000 + 1000, 500_000), docker0=(7, 7)))
    got = rates_by_link(probe.rates(first, probe.sample()))
    assert set(got) == {"eth/eth0", "eth/eth1"}
    eth0 = got["eth/eth0"]
    assert (eth0.rx_bytes_per_s, eth0.tx_bytes_per_s) == (1_250_000.0, 250_000.0)
    assert eth0.capacity_bytes_per_s == 1.25e9  # 10000 Mb/s
    assert eth0.utilization == 1_250_000 / 1.25e9
    assert got["eth/eth1"].rx_bytes_per_s == 500.0 and got["eth/eth1"].utilization is None  # speed -1
    probe.close()  # /proc/net/dev stays open between samples; after close it is opened again
    probe.clock = Clock(13.0)
    assert probe.sample().links["eth/eth0"].rx == 3_500_000
    probe.close()


def test_ethernet_options_loopback_virtual_named_and_capacity(tree: Path) -> None:
    root = dict(proc_root=tree / "proc", sys_root=tree / "sys")
    assert EthernetProbe(**root, include_loopback=True).interfaces == ("eth0", "eth1", "lo")
    assert EthernetProbe(**root, include_virtual=True).interfaces == ("docker0", "eth0", "eth1")
    named = EthernetProbe(**root, interfaces=("eth1",), fallback_gbps=8.0)
    assert named.sample().links["eth/eth1"].capacity_bytes_per_s == 1e9
    given = EthernetProbe(**root, capacity_gbps={"eth0": 100.0})
    assert given.sample().links["eth/eth0"].capacity_bytes_per_s == 12.5e9
    missing = EthernetProbe(**root, interfaces=("ib9",))
    assert not missing.available and "ib9" in missing.reason


def test_ethernet_32_bit_counters_wrap(tree: Path) -> None:
    write(tree, "proc/net/dev", net_dev(eth0=(2**32 - 1000, 10)))
    probe = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys", interfaces=("eth0",), counter_bits=32,
                          clock=Clock(0.0, 0.5))
    first = probe.sample()
    write(tree, "proc/net/dev", net_dev(eth0=(1000, 10)))
    (rate,) = probe.rates(first, probe.sample())
    assert rate.rx_bytes_per_s == 4000.0 and rate.tx_bytes_per_s == 0.0


def test_ethernet_unavailable_and_failing_reads(tree: Path, tmp_path: Path) -> None:
    none = EthernetProbe(proc_root=tmp_path / "nowhere", sys_root=tree / "sys")
    assert not none.available and "nowhere" in none.reason
    with pytest.raises(ProbeError, match="unavailable"):
        none.sample()

    def denied(path: Path) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    locked = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys", reader=denied)
    assert not locked.available and "Permission denied" in locked.reason

    write(tree, "proc/net/dev", "Inter-|\n face |\n  eth0: 12 x\n")
    assert "eth0" in EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys").reason

    write(tree, "proc/net/dev", net_dev(lo=(1, 1)))
    only_lo = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys")
    assert not only_lo.available and "besides lo" in only_lo.reason


def test_ethernet_interface_that_disappears_is_dropped(tree: Path) -> None:
    probe = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys", clock=Clock(0.0, 1.0))
    first = probe.sample()
    write(tree, "proc/net/dev", net_dev(eth0=(1_000_100, 2_000_000)))
    got = probe.rates(first, probe.sample())
    assert [r.link for r in got] == ["eth/eth0"] and got[0].rx_bytes_per_s == 100.0


# -- InfiniBand ----------------------------------------------------------------------------
def test_parse_rate() -> None:
    assert parse_rate_gbps("40 Gb/sec (4X QDR)\n") == 40.0
    assert parse_rate_gbps("12.5 Gb/sec (1X FDR10)") == 12.5
    assert parse_rate_gbps("unknown") is None


def test_infiniband_exact_rates_widths_and_capacities(tree: Path) -> None:
    probe = InfinibandProbe(sys_root=tree / "sys", clock=Clock(100.0, 104.0))
    assert probe.available, probe.reason
    assert probe.links == ("ib/mlx4_0/1", "ib/mlx4_1/1", "ib/mlx5_0/1")  # mlx4_0 port 2 is DOWN
    first = probe.sample()
    port = IB / "mlx5_0/ports/1/counters"
    write(tree, port / "port_xmit_data", 1000 + 1_000_000)
    write(tree, port / "port_rcv_data", 2000 + 250_000)
    write(tree, IB / "mlx4_0/ports/1/counters/port_xmit_data", 704)  # 32-bit: wrapped past 2**32
    write(tree, IB / "mlx4_0/ports/1/counters/port_rcv_data", 100 + 400)
    ext = IB / "mlx4_1/ports/1/counters_ext"
    write(tree, ext / "port_xmit_data_64", 5_000_000_000 + 10)
    write(tree, ext / "port_rcv_data_64", 6_000_000_000 + 20)
    got = rates_by_link(probe.rates(first, probe.sample()))

    edr = got["ib/mlx5_0/1"]  # 4-byte words over 4 s
    assert (edr.tx_bytes_per_s, edr.rx_bytes_per_s) == (1_000_000.0, 250_000.0)
    assert edr.capacity_bytes_per_s == 100e9 / 8 and edr.utilization == 1_000_000 / (100e9 / 8)
    qdr = got["ib/mlx4_0/1"]
    assert qdr.tx_bytes_per_s == (704 + 2**32 - 4294967000) * 4 / 4 and qdr.rx_bytes_per_s == 400.0
    assert qdr.capacity_bytes_per_s == 5e9
    fdr = got["ib/mlx4_1/1"]  # counters_ext preferred over the saturated legacy files
    assert (fdr.tx_bytes_per_s, fdr.rx_bytes_per_s) == (10.0, 20.0)
    assert fdr.capacity_bytes_per_s == 7e9


def test_infiniband_width_detection(tree: Path) -> None:
    samples = InfinibandProbe(sys_root=tree / "sys").sample().links
    assert samples["ib/mlx5_0/1"].bits == 64 and samples["ib/mlx5_0/1"].unit_bytes == 4
    assert samples["ib/mlx4_0/1"].bits == 32
    assert samples["ib/mlx4_1/1"].bits == 64
    write(tree, IB / "mlx4_0/ports/1/counters/port_rcv_data", 2**33)  # too big for 32 bits
    assert InfinibandProbe(sys_root=tree / "sys").sample().links["ib/mlx4_0/1"].bits == 64


def test_infiniband_unavailable_reasons(tree: Path, tmp_path: Path) -> None:
    absent = InfinibandProbe(sys_root=tmp_path)
    assert not absent.available and "does not exist" in absent.reason

    def denied(path: Path) -> str:
        if any(part.startswith("counters") for part in path.parts):
            raise PermissionError(13, "Permission denied", str(path))
        return path.read_text()

    locked = InfinibandProbe(sys_root=tree / "sys", reader=denied)
    assert not locked.available and "Permission denied" in locked.reason

    (tmp_path / "empty/class/infiniband").mkdir(parents=True)
    assert "no port under" in InfinibandProbe(sys_root=tmp_path / "empty").reason

    shutil.rmtree(tree / IB / "mlx5_0/ports/1/counters")
    partial = InfinibandProbe(sys_root=tree / "sys")
    assert partial.available and "ib/mlx5_0/1" not in partial.links  # the others still work


def test_infiniband_read_failure_mid_run_raises_probe_error_only_when_every_port_fails(tree: Path) -> None:
    probe = InfinibandProbe(sys_root=tree / "sys")
    (tree / IB / "mlx4_0/ports/1/counters/port_xmit_data").unlink()
    assert set(probe.sample().links) == {"ib/mlx4_1/1", "ib/mlx5_0/1"}  # the others are still read
    shutil.rmtree(tree / IB)
    with pytest.raises(ProbeError, match="ib/mlx4_0/1"):
        probe.sample()


# -- NVML ----------------------------------------------------------------------------------
class FakeNVMLError(Exception):
    MESSAGES = {3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found"}

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self.MESSAGES.get(self.value, f"NVML error {self.value}")


class FakeGpu:
    def __init__(self, pcie_kbs=(0, 0), pcie_bytes=None, nvlink_links=0, nvlink_kib=(0, 0), gen=4, width=16,
                 util=0, nvlink_mbps=25_000):
        self.pcie_kbs = pcie_kbs  # (tx, rx) KB/s from nvmlDeviceGetPcieThroughput
        self.pcie_bytes = pcie_bytes  # (tx, rx) cumulative, or None: fields unsupported
        self.nvlink_links = nvlink_links
        self.nvlink_kib = nvlink_kib  # (tx, rx) cumulative KiB
        self.gen, self.width, self.util, self.nvlink_mbps = gen, width, util, nvlink_mbps


class FakeNvml:
    """The slice of pynvml the probe uses, with its constants' real values."""

    NVMLError = FakeNVMLError
    NVML_SUCCESS = 0
    NVML_FEATURE_ENABLED = 1
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON = 90
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:
        return gpu.pcie_kbs[counter]

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:
        if link >= 12:
            raise FakeNVMLError(3)
        return int(link < gpu.nvlink_links)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        return gpu.gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: FakeGpu) -> int:
        return gpu.width

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=gpu.util, memory=0)

    def nvmlDeviceGetFieldValues(self, gpu: FakeGpu, fields: list) -> list[SimpleNamespace]:
        out = []
        for f in fields:
            fid, scope = f if isinstance(f, tuple) else (f, 0)
            value, ok = 0, True
            if fid in (138, 139):
                ok = gpu.nvlink_links > 0 and scope == 0xFFFFFFFF
                value = gpu.nvlink_kib[fid - 138]
            elif fid in (197, 198):
                ok = gpu.pcie_bytes is not None
                value = gpu.pcie_bytes[fid - 197] if ok else 0
            elif fid == 90:
                value = gpu.nvlink_mbps
            out.append(SimpleNamespace(nvmlReturn=0 if ok else 3, valueType=3, value=SimpleNamespace(ullVal=value)))
        return out


def test_nvml_exact_rates_capacities_and_gauges() -> None:
    nvlinked = FakeGpu(pcie_kbs=(1000, 2000), nvlink_links=4, nvlink_kib=(1000, 500), util=87)
    countered = FakeGpu(pcie_bytes=(10_000, 0), gen=3, util=5)
    nvml = FakeNvml([nvlinked, countered])
    probe = NvmlProbe(nvml=nvml, clock=Clock(5.0, 7.0))
    assert probe.available and probe.gpus == 2
    first = probe.sample()
    nvlinked.pcie_kbs, nvlinked.nvlink_kib = (3000, 4000), (1000 + 2000, 500 + 100)
    countered.pcie_bytes = (10_000 + 4_000_000_000, 1_000_000)
    cur = probe.sample()
    got = rates_by_link(probe.rates(first, cur))
    assert set(got) == {"gpu0/pcie", "gpu0/nvlink", "gpu1/pcie"}  # GPU 1 has no NVLink

    pcie0 = got["gpu0/pcie"]  # device-measured KB/s, read as KiB/s
    assert (pcie0.tx_bytes_per_s, pcie0.rx_bytes_per_s) == (3000 * 1024, 4000 * 1024)
    assert pcie0.capacity_bytes_per_s == pytest.approx(16e9 * 16 * 128 / 130 / 8, rel=1e-12)  # Gen4 x16
    nv0 = got["gpu0/nvlink"]  # cumulative KiB over 2 s
    assert (nv0.tx_bytes_per_s, nv0.rx_bytes_per_s) == (1000 * 1024, 50 * 1024)
    assert nv0.capacity_bytes_per_s == 4 * 25_000e6 and nv0.utilization == 1000 * 1024 / 100e9
    pcie1 = got["gpu1/pcie"]  # cumulative byte counters
    assert (pcie1.tx_bytes_per_s, pcie1.rx_bytes_per_s) == (2e9, 500_000.0)
    assert pcie1.capacity_bytes_per_s == pytest.approx(8e9 * 16 * 128 / 130 / 8, rel=1e-12)  # Gen3 x16
    assert cur.gauges == {"gpu0/util": 0.87, "gpu1/util": 0.05}
    probe.close()
    probe.close()
    assert nvml.shutdowns == 1


def test_nvml_capacity_parameters_override_detection() -> None:
    probe = NvmlProbe(nvml=FakeNvml([FakeGpu(nvlink_links=2)]), pcie_gbps=64.0, nvlink_gbps=800.0)
    links = probe.sample().links
    assert links["gpu0/pcie"].capacity_bytes_per_s == 8e9 and links["gpu0/nvlink"].capacity_bytes_per_s == 100e9


@pytest.mark.parametrize(
    ("nvml", "reason"),
    [
        (FakeNvml([], init_error=12), "NVML cannot start: NVML Shared Library Not Found"),
        (FakeNvml([], init_error=9), "Driver Not Loaded"),
        (FakeNvml([]), "NVML sees no GPU"),
    ],
)
def test_nvml_unavailable_with_reason(nvml: FakeNvml, reason: str) -> None:
    probe = NvmlProbe(nvml=nvml)
    assert not probe.available and reason in probe.reason
    with pytest.raises(ProbeError):
        probe.sample()


def test_nvml_error_during_sampling_is_a_probe_error() -> None:
    nvml = FakeNvml([FakeGpu()])
    probe = NvmlProbe(nvml=nvml)

    def lost(*_: object) -> int:
        raise FakeNVMLError(15)

    nvml.nvmlDeviceGetPcieThroughput = lost  # type: ignore[method-assign]
    with pytest.raises(ProbeError, match="NVML read failed"):
        probe.sample()


# -- simulated -----------------------------------------------------------------------------
def test_simulated_probe_replays_filters_and_calls_back() -> None:
    snaps = [{"node0/nic": 0.25, "node0/gpu3/nvlink": 0.5, "node1/nic": 1.0}, {"node0/nic": 0.75}]
    probe = SimulatedProbe(snaps, node="node0", capacity_bytes_per_s=1000.0)
    seen = [rates_by_link(probe.rates(None, probe.sample())) for _ in range(3)]
    assert {k: r.utilization for k, r in seen[0].items()} == {"gpu3/nvlink": 0.5, "nic": 0.25}
    assert seen[0]["nic"].rx_bytes_per_s == 250.0
    assert {k: r.utilization for k, r in seen[1].items()} == {"nic": 0.75}
    assert seen[2]["nic"].utilization == 0.25  # loops
    once = SimulatedProbe(snaps[:1], loop=False)
    once.sample()
    with pytest.raises(ProbeError):
        once.sample()
    loads = iter([{"pcie": 0.5}])
    assert SimulatedProbe(source=lambda: next(loads)).sample().links["pcie"].rx == 0.5e9
    with pytest.raises(ValueError):
        SimulatedProbe()


# -- contention, node-wide links -----------------------------------------------------------
def test_contention_score() -> None:
    assert contention_score(0.0) == 0.0
    assert contention_score(0.5) == 1.0
    assert contention_score(0.75) == 3.0
    assert contention_score(0.99) == CONTENTION_CAP and contention_score(1.7) == CONTENTION_CAP
    assert contention_score(-0.2) == 0.0
    assert contention_score(None) is None


def test_gpu_contention_takes_the_worst_link_it_depends_on() -> None:
    util = {"nic": 0.5, "pcie": 0.2, "gpu0/pcie": 0.75, "gpu0/nvlink": 0.0, "gpu1/nvlink": None, "eth/eth0": 0.99}
    assert gpu_contention(util) == {0: 3.0, 1: 1.0}
    assert gpu_contention({"nic": 0.5}) == {}


def test_node_links_aggregate_ports_and_gpus() -> None:
    rates = [
        LinkRate("eth/eth0", 10.0, 10.0, 0.1, 100.0),
        LinkRate("ib/mlx5_0/1", 30.0, 10.0, 0.3, 100.0),
        LinkRate("ib/mlx5_1/1", 50.0, 0.0, 0.5, 100.0),
        LinkRate("gpu0/pcie", 20.0, 40.0, 0.1, 400.0),
        LinkRate("gpu1/pcie", 20.0, 0.0, None, None),
    ]
    got = rates_by_link(with_node_links(rates))
    assert got["nic"] == LinkRate("nic", 80.0, 10.0, 0.4, 200.0)  # the IB ports, not Ethernet
    assert got["pcie"] == LinkRate("pcie", 40.0, 40.0, None, None)  # one capacity unknown
    node = Topology.from_spec(ClusterSpec(node_types={"t": TESTBED_NODE_TYPE}, nodes=[NodeGroupSpec(type="t")])).nodes[0]
    spec = rates_by_link(with_node_links(rates, node))
    assert spec["nic"].capacity_bytes_per_s == 40e9 / 8 and spec["nic"].utilization == 80.0 / 5e9
    assert spec["pcie"].capacity_bytes_per_s == 2 * 128e9 / 8
    given = rates_by_link(with_node_links([LinkRate("nic", 1.0, 1.0, 0.5, 2.0), *rates]))
    assert given["nic"].utilization == 0.5


# -- the sampler ---------------------------------------------------------------------------
def test_sampler_survives_failing_probes_and_buffers(tree: Path) -> None:
    eth = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys", clock=Clock(0.0, 1.0, 2.0))
    sim = SimulatedProbe([{"gpu0/nvlink": 0.5}], capacity_bytes_per_s=100.0)
    broken = InfinibandProbe(sys_root=tree / "sys")
    gone = NvmlProbe(nvml=FakeNvml([], init_error=12))
    sampler = Sampler("n0", [gone, broken, eth, sim], buffer_size=2, node_id="abc", wall=Clock(49.0, 50.0, 51.0, 52.0))  # started_at, then 3 steps
    first = sampler.step()
    assert [s.link for s in first.links] == ["gpu0/nvlink"]  # counters need a second sample
    shutil.rmtree(tree / IB)  # every port fails
    write(tree, "proc/net/dev", net_dev(eth0=(1_000_000 + 125_000, 2_000_000), eth1=(500_000, 500_000)))
    second = sampler.step()
    status = {p.name: p for p in second.probes}
    assert not status["nvml"].available and "Shared Library" in status["nvml"].reason
    assert not status["infiniband"].available and status["infiniband"].reason.startswith("sample failed")
    assert status["ethernet"] == ProbeStatus("ethernet", True, "", 2)
    links = {s.link: s for s in second.links}
    assert links["eth/eth0"].rx_bytes_per_s == 125_000.0 and links["eth/eth0"].contention == pytest.approx(1e-4 / (1 - 1e-4))
    assert "nic" not in links  # IB is configured but missed this sample: no nic, never the Ethernet ports
    assert second.gpus == {0: 1.0} and (second.node, second.node_id, second.seq, second.sampled_at) == ("n0", "abc", 1, 51.0)
    sampler.step()
    assert [r.seq for r in sampler.buffer] == [1, 2]


def test_measure_reports_each_probe_and_never_raises(tree: Path) -> None:
    from deepshare.agents import measure
    from deepshare.agents.probes.base import UnavailableProbe

    eth = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys", clock=Clock(0.0, 0.5))
    ib = InfinibandProbe(sys_root=tree / "sys")
    shutil.rmtree(tree / IB)  # every port fails from the first sample

    def wait(seconds: float) -> None:
        assert seconds == 0.5
        write(tree, "proc/net/dev", net_dev(eth0=(1_000_000, 2_000_000 + 50), eth1=(500_000, 500_000)))

    got = {status.name: (status, rates) for status, rates in measure([eth, ib, UnavailableProbe("x", "why")], 0.5, wait)}
    assert got["ethernet"][0].available and rates_by_link(got["ethernet"][1])["eth/eth0"].tx_bytes_per_s == 100.0
    assert not got["infiniband"][0].available and "ib/mlx4_0/1" in got["infiniband"][0].reason
    assert got["x"] == (ProbeStatus("x", False, "why"), ())


# -- report interval -----------------------------------------------------------------------
def test_agent_config_report_interval_defaults_and_validation() -> None:
    from deepshare.agents.config import report_period

    one_hz = AgentConfig()
    assert (one_hz.report_interval, one_hz.report_period, one_hz.stale_after) == (2.0, 2.0, 6.0)
    assert AgentConfig(interval_s=0.1).report_period == 2.0 and AgentConfig(interval_s=0.1).stale_after == 6.0
    slow = AgentConfig(interval_s=5.0)  # never reports faster than it samples
    assert (slow.report_period, slow.stale_after) == (5.0, 15.0)
    assert AgentConfig(interval_s=0.1, report_interval_s=0.3).report_period == pytest.approx(0.3)
    assert report_period(1.0, 2.5) == 3.0 and report_period(0.1, 0.3) == pytest.approx(0.3)  # whole samples
    assert AgentConfig(interval_s=1.0, report_interval_s=2.5, stale_after_s=3.5).stale_after == 3.5
    with pytest.raises(ValueError, match=r"report_interval_s \(0.5\) must be at least interval_s \(1\)"):
        AgentConfig(report_interval_s=0.5)
    with pytest.raises(ValueError, match=r"stale_after_s \(3\) must exceed the report period \(3 s"):
        AgentConfig(interval_s=1.0, report_interval_s=2.5, stale_after_s=3.0)
    with pytest.raises(ValueError, match=r"stale_after_s \(1.5\) must exceed the report period \(2 s"):
        AgentConfig(stale_after_s=1.5)  # the default 2 s report interval counts too


def test_report_schedule_first_two_samples_then_every_period() -> None:
    from deepshare.agents.sampler import ReportSchedule

    def reported(schedule: ReportSchedule, ticks: list[float]) -> list[float]:
        out = []
        for tick in ticks:
            if schedule.due(tick):
                schedule.sent(tick)
                out.append(tick)
        return out

    t = 0.0  # accumulate the float error the agent's loop has
    ticks = []
    for _ in range(20):
        ticks.append(t)
        t += 0.1
    assert [round(x, 6) for x in reported(ReportSchedule(0.1, 0.3), ticks)] == [0.0, 0.1, 0.4, 0.7, 1.0, 1.3, 1.6, 1.9]
    assert reported(ReportSchedule(1.0, 2.5), [float(i) for i in range(12)]) == [0.0, 1.0, 4.0, 7.0, 10.0]
    assert reported(ReportSchedule(1.0, 1.0), [0.0, 1.0, 2.0]) == [0.0, 1.0, 2.0]
    late = ReportSchedule(1.0, 2.0)
    assert reported(late, [0.0, 1.0, 2.0, 3.5, 4.5]) == [0.0, 1.0, 3.5]  # a late tick reports once due
    unsent = ReportSchedule(1.0, 2.0)
    assert unsent.due(0.0) and unsent.due(1.0)  # nothing sent yet (the send failed): still due
    with pytest.raises(ValueError, match="at least interval_s"):
        ReportSchedule(1.0, 0.5)


# -- the cluster view ----------------------------------------------------------------------
def report(node: str, seq: int, pid: int = 1, u: float | None = 0.5, sampled_at: float = 0.0) -> NodeReport:
    links = (LinkStat("nic", 1.0, 2.0, u, contention_score(u), None, 3e12, 4.5),
             LinkStat("eth/eth0", 1.0, 2.0, None, None, None, 1000.0, 2000.0))
    return NodeReport(node, f"id-{node}", seq, pid, 100.0 + pid, sampled_at, links, {0: 1.0}, {"gpu0/util": 0.5},
                      (ProbeStatus("simulated", True),))


def test_cluster_state_staleness_restarts_and_link_load() -> None:
    now = [0.0]
    state = ClusterState(stale_after_s=2.0, clock=lambda: now[0], wall=lambda: 10.25)
    state.expect("a", "id-a")
    state.update(report("b", 0, sampled_at=10.0))
    now[0] = 1.0
    state.update(report("b", 3, u=1.5))
    state.update(report("b", 2))  # late: ignored
    snap = state.snapshot()
    assert [(n.node, n.stale, n.report is None) for n in snap.nodes] == [("a", False, True), ("b", False, False)]
    assert snap.node("b").report.seq == 3 and snap.node("b").reports == 2
    assert state.link_load() == {"b/nic": 1.0}  # clipped; unknown utilisation left out
    now[0] = 2.5
    assert [n.stale for n in state.snapshot().nodes] == [True, False]  # a never reported
    state.update(report("b", 0, pid=2))  # a restarted agent starts again at seq 0
    assert state.link_load() == {"b/nic": 0.5}
    now[0] = 4.0
    snap = state.snapshot()
    assert snap.node("b").restarts == 1 and not snap.node("b").stale
    now[0] = 5.0
    assert state.snapshot().node("b").stale and state.link_load() == {}
    assert state.latencies()[0] == 0.25
    doc = state.snapshot().to_dict()
    assert doc["nodes"][1]["links"][0] == {"link": "nic", "rx_bytes_per_s": 1.0, "tx_bytes_per_s": 2.0,
                                           "utilization": 0.5, "contention": 1.0}


def test_exporter_serves_counters_and_gauges_on_loopback() -> None:
    state = ClusterState(stale_after_s=5.0)
    state.update(report("node0", 0, u=0.25))
    exporter = MetricsExporter(state.snapshot)
    _, port = exporter.start(0)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        exporter.stop()
    assert "# TYPE deepshare_link_receive_bytes_total counter" in text
    assert "# TYPE deepshare_link_transmit_bytes_total counter" in text
    assert 'deepshare_link_receive_bytes_total{link="eth/eth0",node="node0"} 1000.0' in text
    assert 'deepshare_link_transmit_bytes_total{link="eth/eth0",node="node0"} 2000.0' in text
    assert 'deepshare_link_receive_bytes_total{link="nic",node="node0"} 3e+12' in text
    assert "# TYPE deepshare_link_utilization_ratio gauge" in text
    assert 'deepshare_link_utilization_ratio{link="nic",node="node0"} 0.25' in text
    assert 'deepshare_link_utilization_ratio{link="eth/eth0"' not in text  # capacity unknown
    assert "bytes_per_second" not in text  # rates are rate() over the counters now
    assert 'deepshare_link_contention{link="nic",node="node0"} 0.333' in text
    assert 'deepshare_gpu_contention{gpu="0",node="node0"} 1.0' in text
    assert 'deepshare_gpu_utilization_ratio{gpu="0",node="node0"} 0.5' in text
    assert 'deepshare_probe_available{node="node0",probe="simulated"} 1.0' in text
    assert 'deepshare_node_stale{node="node0"} 0.0' in text
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1)


# -- CLI actions without a cluster -----------------------------------------------------------
def run_cli(*argv: str) -> tuple[int, str, str]:
    """``deepshare agents ARGV`` as the main CLI runs it: DeepShareError -> one line, exit 2."""
    parser = argparse.ArgumentParser(prog="deepshare")
    register(parser.add_subparsers(dest="command", required=True))
    out_buf, err_buf = io.StringIO(), io.StringIO()
    out, err = Console(file=out_buf, width=140), Console(file=err_buf, width=140)
    try:
        args = parser.parse_args(["agents", *argv])
        rc = args.func(args, out, err)
    except SystemExit as exc:
        rc = exc.code
    except DeepShareError as exc:
        err.print(f"deepshare: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        rc = 2
    return rc, out_buf.getvalue(), err_buf.getvalue()


def test_cli_probe_json_on_this_machine() -> None:
    import json

    rc, out, _ = run_cli("probe", "--json", "-", "--window", "0.2")
    assert rc == 0
    probes = {p["name"]: p for p in json.loads(out)["probes"]}
    assert set(probes) == {"nvml", "infiniband", "ethernet"}
    for p in probes.values():
        assert set(p) == {"name", "available", "reason", "links"}
        assert p["available"] or p["reason"]  # unavailable always says why
    if not Path("/sys/class/infiniband").exists():
        assert not probes["infiniband"]["available"] and "InfiniBand" in probes["infiniband"]["reason"]
    if not probes["nvml"]["available"]:
        assert probes["nvml"]["reason"].startswith(("NVML", "nvidia-ml-py"))
    assert probes["ethernet"]["available"]  # /proc/net/dev exists on any Linux
    for link in probes["ethernet"]["links"]:
        assert set(link) == {"link", "rx_bytes_per_s", "tx_bytes_per_s", "utilization"}
        assert link["link"].startswith("eth/") and link["rx_bytes_per_s"] >= 0


def test_cli_probe_table() -> None:
    rc, out, _ = run_cli("probe", "--window", "0.05")
    assert rc == 0 and "ethernet: available" in out and "infiniband:" in out and "nvml:" in out


def test_cli_errors_are_one_line_without_a_cluster(no_ray) -> None:
    import ray

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, err = run_cli("status", "--address", f"127.0.0.1:{port}")
    assert rc == 2 and err.count("\n") == 1 and f"127.0.0.1:{port}" in err and "no Ray cluster" in err
    rc, _, err = run_cli("stop", "--address", "nonsense")
    assert rc == 2 and "HOST:PORT" in err
    start = ("start", "--address", f"127.0.0.1:{port}")  # flags are checked before connecting
    rc, _, err = run_cli(*start, "--interval", "2", "--stale-after", "1")
    assert rc == 2 and "--stale-after 1 must exceed the report period 2 s (default report interval" in err
    rc, _, err = run_cli(*start, "--stale-after", "1.5")  # 1 Hz reports every 2 s by default
    assert rc == 2 and "--stale-after 1.5 must exceed the report period 2 s" in err
    rc, _, err = run_cli(*start, "--interval", "1", "--report-interval", "2.5", "--stale-after", "3")
    assert rc == 2 and "must exceed the report period 3 s (--report-interval rounded up to whole --interval 1" in err
    rc, _, err = run_cli(*start, "--interval", "1", "--report-interval", "0.5")
    assert rc == 2 and "--report-interval 0.5 must be at least --interval 1" in err and err.count("\n") == 1
    assert run_cli("probe", "--window", "-1")[0] == 2  # argparse
    assert run_cli("start", "--metrics-port", "70000")[0] == 2
    assert not ray.is_initialized()


# -- unreadable sources --------------------------------------------------------------------
@pytest.fixture()
def sysfs_denied(tree: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tree/sys/class`` answers every stat below it with EACCES, as a locked-down host does
    for a non-root agent (tests run as root, where chmod 000 would not stop a read)."""
    locked = tree / "sys" / "class"
    real_stat = Path.stat

    def stat(self: Path, *args, **kwargs):
        if self != locked and locked in self.parents:
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    return tree


def sysfs_denying_reader(tree: Path):
    """A file reader that fails like an unreadable ``tree/sys/class`` and reads the rest."""
    from deepshare.agents.probes.base import read_text

    def read(path: Path) -> str:
        if tree / "sys" / "class" in Path(path).parents:
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    return read


def test_unreadable_sysfs_never_raises_from_a_probe_constructor(sysfs_denied: Path) -> None:
    tree = sysfs_denied
    with pytest.raises(PermissionError):
        (tree / "sys/class/net").is_dir()  # the fault is real: this is what used to escape
    eth = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys", clock=Clock(0.0, 1.0),
                        reader=sysfs_denying_reader(tree))
    assert eth.available, eth.reason  # counters come from /proc; sysfs only filters and sizes
    assert eth.interfaces == ("docker0", "eth0", "eth1")  # cannot tell virtual ones: all kept
    assert eth.sample().links["eth/eth0"].capacity_bytes_per_s is None
    ib = InfinibandProbe(sys_root=tree / "sys")
    assert not ib.available and "Permission denied" in ib.reason and "class/infiniband" in ib.reason


def test_local_probes_report_every_probe_even_when_one_constructor_raises(
    sysfs_denied: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deepshare.agents.probes import detect

    class Exploding:
        def __init__(self, **_: object) -> None:
            raise RuntimeError("driver bug")

    monkeypatch.setattr(detect, "NvmlProbe", Exploding)
    probes = detect.local_probes(proc_root=str(sysfs_denied / "proc"), sys_root=str(sysfs_denied / "sys"))
    state = {p.name: (p.available, p.reason) for p in probes}
    assert list(state) == ["nvml", "infiniband", "ethernet"]
    assert state["nvml"] == (False, "cannot start: RuntimeError: driver bug")
    assert state["infiniband"][0] is False and "Permission denied" in state["infiniband"][1]
    assert state["ethernet"] == (True, "")


# -- flag bounds and runtime failures ------------------------------------------------------
@pytest.mark.parametrize(
    "argv, flag, bound",
    [
        (("probe", "--window", "1e10"), "--window", "3600"),
        (("probe", "--window", "nan"), "--window", "3600"),
        (("start", "--interval", "1e10"), "--interval", "3600"),
        (("start", "--interval", "0"), "--interval", "3600"),
        (("start", "--report-interval", "1e10"), "--report-interval", "86400"),
        (("start", "--stale-after", "inf"), "--stale-after", "86400"),
    ],
)
def test_out_of_range_durations_name_the_flag_and_range(argv, flag, bound, capsys) -> None:
    rc, _, _ = run_cli(*argv)
    err = capsys.readouterr().err
    assert rc == 2 and f"argument {flag}: expected seconds in [0.001, {bound}]" in err and "Traceback" not in err


def test_longest_accepted_durations_pass_the_parser() -> None:
    parser = argparse.ArgumentParser(prog="deepshare")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["agents", "start", "--interval", "3600", "--report-interval", "86400", "--stale-after", "86400"])
    assert (args.interval, args.report_interval, args.stale_after) == (3600.0, 86400.0, 86400.0)


def test_a_monitor_that_never_answers_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.exceptions

    from deepshare.agents import deploy

    def timeout(*_: object, **__: object):
        raise ray.exceptions.GetTimeoutError("Get timed out: some object(s) not ready.")

    monkeypatch.setattr(deploy, "connect", lambda address: None)
    monkeypatch.setattr(deploy, "start_monitor", timeout)
    rc, out, err = run_cli("start")
    assert rc == 1 and out == ""
    assert err == "deepshare: error: the contention monitor did not start (GetTimeoutError: Get timed out: some object(s) not ready.)\n"


# -- cumulative traffic --------------------------------------------------------------------
def test_sampler_accumulates_exact_bytes_per_link_and_node_aggregate(tree: Path) -> None:
    """Totals are the counters' deltas summed from the agent's first sample: exact bytes, the
    node-wide ``nic`` summing its ports the way its rates do."""
    eth = EthernetProbe(proc_root=tree / "proc", sys_root=tree / "sys", clock=Clock(0.0, 1.0, 3.0))
    sampler = Sampler("n0", [eth], wall=lambda: 0.0)
    first = {s.link: s for s in sampler.step().links}
    assert first == {}  # counters need two samples: no rate, nothing carried yet
    write(tree, "proc/net/dev", net_dev(eth0=(1_000_500, 2_000_100), eth1=(500_000, 500_000)))
    second = {s.link: s for s in sampler.step().links}
    assert (second["eth/eth0"].rx_bytes_total, second["eth/eth0"].tx_bytes_total) == (500.0, 100.0)
    assert (second["eth/eth1"].rx_bytes_total, second["eth/eth1"].tx_bytes_total) == (0.0, 0.0)
    write(tree, "proc/net/dev", net_dev(eth0=(1_002_500, 2_000_100), eth1=(500_300, 500_000)))
    third = {s.link: s for s in sampler.step().links}
    assert third["eth/eth0"].rx_bytes_per_s == 1000.0  # 2,000 bytes over 2 s
    assert (third["eth/eth0"].rx_bytes_total, third["eth/eth0"].tx_bytes_total) == (2500.0, 100.0)
    assert (third["eth/eth1"].rx_bytes_total, third["nic"].rx_bytes_total, third["nic"].tx_bytes_total) == (300.0, 2800.0, 100.0)


@pytest.mark.parametrize("action", ["start", "status", "stop"])
def test_a_ray_that_times_out_while_joining_is_one_line_and_exit_1(action, monkeypatch: pytest.MonkeyPatch) -> None:
    from deepshare.agents import deploy

    def times_out(address: str) -> None:
        raise TimeoutError("GCS did not answer within 30 s")

    monkeypatch.setattr(deploy, "connect", times_out)
    rc, out, err = run_cli(action, "--address", "10.0.0.1:6379")
    assert rc == 1 and out == ""
    assert err == "deepshare: error: --address 10.0.0.1:6379: Ray did not answer (TimeoutError: GCS did not answer within 30 s)\n"
