"""Fixes from the twelfth review of the node agents (reviewer scripts r1..r9): a restarted
monitor and its agents' names, InfiniBand ports that come up late or go away, stopping an agent
while a probe blocks, reconciling after shutdown, unprintable interface names, 32-bit Ethernet
counters, the exporter's name filter and AgentConfig's unchecked fields. Plain objects and
fakes, no Ray cluster."""

from __future__ import annotations

import math
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from deepshare.agents.config import AgentConfig
from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.probes.base import Probe, link_name
from deepshare.agents.probes.ethernet import EthernetProbe
from deepshare.agents.probes.infiniband import InfinibandProbe
from deepshare.agents.report import LinkStat, NodeReport, report_problem
from deepshare.agents.sampler import Sampler
from deepshare.agents.samples import ProbeSample
from deepshare.agents.view import ClusterState
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


# -- 2 and 3: InfiniBand ports that come up late or go away ------------------------------------
def _ib_port(root: Path, device: str, state: str = "4: ACTIVE") -> Path:
    """A port of ``device`` under ``root``'s sysfs: 64-bit counters at 0, an HDR rate (25 GB/s)."""
    port = root / "sys/class/infiniband" / device / "ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text(f"{state}\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (port / "counters/unicast_xmit_packets").write_text("0\n")
    _ib_count(port, 0)
    return port


def _ib_count(port: Path, words: int) -> None:
    for name in ("port_xmit_data", "port_rcv_data"):
        (port / "counters" / name).write_text(f"{words}\n")


def _eth(root: Path, byte_count: int) -> None:
    (root / "proc/net").mkdir(parents=True, exist_ok=True)
    (root / "proc/net/dev").write_text(f"h\nh\n  eno1: {byte_count} 0 0 0 0 0 0 0 {byte_count} 0 0 0 0 0 0 0\n")


def _ticks():
    return iter(range(1000)).__next__


def test_an_infiniband_port_that_comes_up_after_start_is_sampled_and_makes_the_nic(tmp_path):
    """The subnet manager brings ports up seconds after boot, when the agents already run: a port
    that was INIT at start was never sampled, the probe was unavailable for good and ``nic`` was
    the Ethernet (management) ports, 20 GB/s of InfiniBand traffic read as 8e-06. Until the port
    is up ``nic`` is the Ethernet ports (see test_agents_review12_read.py), then InfiniBand."""
    port = _ib_port(tmp_path, "mlx5_0", state="2: INIT")
    _eth(tmp_path, 0)
    ib = InfinibandProbe(sys_root=tmp_path / "sys", clock=_ticks())  # 1 s per sample
    eth = EthernetProbe(proc_root=tmp_path / "proc", sys_root=tmp_path / "nosys", fallback_gbps=1, clock=_ticks(),
                        reader=lambda p: p.read_text())
    assert ib.available and ib.links == ()
    sampler = Sampler("node0", [ib, eth], node_id="ab" * 28)
    sampler.step()
    _eth(tmp_path, 1000)
    assert {s.link for s in sampler.step().links} == {"eth/eno1", "nic"}  # no IB port up: nic is the Ethernet ports
    (port / "state").write_text("4: ACTIVE\n")
    sampler.step()
    _ib_count(port, 5 * 10**9)  # 20 GB in 4-byte words
    links = {s.link: s.utilization for s in sampler.step().links}
    assert links["ib/mlx5_0/1"] == pytest.approx(20e9 / 25e9) and links["nic"] == links["ib/mlx5_0/1"]


def test_an_infiniband_port_still_down_adds_no_capacity_to_the_nic(tmp_path):
    up, down = _ib_port(tmp_path, "mlx5_0"), _ib_port(tmp_path, "mlx5_1", state="1: DOWN")
    ib = InfinibandProbe(sys_root=tmp_path / "sys", clock=_ticks())
    assert ib.links == ("ib/mlx5_0/1",)
    sampler = Sampler("node0", [ib], node_id="ab" * 28)
    sampler.step()
    _ib_count(up, 10**9)
    _ib_count(down, 10**9)  # a down port's counters are not read: no traffic, no capacity
    links = {s.link: s for s in sampler.step().links}
    assert set(links) == {"ib/mlx5_0/1", "nic"} and links["nic"].capacity_bytes_per_s == 25e9


def test_an_infiniband_port_that_goes_away_costs_the_nic_one_sample_not_every_one(tmp_path):
    """One HCA hot-removed (or renamed after a driver reset) made every later InfiniBand sample
    fail: the other ports lost their rates and the node's ``nic`` was left out of every report."""
    kept, gone = _ib_port(tmp_path, "mlx5_0"), _ib_port(tmp_path, "mlx5_1")
    sampler = Sampler("node0", [InfinibandProbe(sys_root=tmp_path / "sys", clock=_ticks())], node_id="ab" * 28)
    sampler.step()
    shutil.rmtree(gone.parent.parent)
    words = 0
    got = []
    for _ in range(3):
        words += 10**9
        _ib_count(kept, words)
        report = sampler.step()
        got.append((sorted(s.link for s in report.links), report.probes[0].available))
    assert got == [
        (["ib/mlx5_0/1"], True),  # the vanished port has no rate: no partial nic in this sample
        (["ib/mlx5_0/1", "nic"], True),
        (["ib/mlx5_0/1", "nic"], True),
    ]
    assert {s.link: s.utilization for s in report.links}["nic"] == pytest.approx(4e9 / 25e9)


# -- 4: stopping an agent while a probe blocks --------------------------------------------------
class _BlockingProbe(Probe):
    """Its second read blocks until ``release`` is set (an NVML call stuck in the driver); records
    every read and the close, in order."""

    name = "blocking"

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def _read(self) -> ProbeSample:
        self.events.append("read")
        if self.events.count("read") == 2:
            self.entered.set()
            self.release.wait(30)
        self.events.append("read done")
        return ProbeSample(self.clock(), {})

    def close(self) -> None:
        self.events.append("close")


def test_stop_never_closes_a_probe_the_sampling_thread_is_still_reading(monkeypatch):
    """``stop()`` waited 5 intervals + 1 s for the thread, then closed the probes while a blocked
    sample was still running: the Ethernet probe reopened ``/proc/net/dev`` after its close and
    leaked the descriptor, and NVML could be shut down in the middle of a call."""
    import deepshare.agents.agent as agent_module

    monkeypatch.setattr(agent_module.ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "n" * 56))
    probe = _BlockingProbe()
    agent_class = agent_module.NodeAgent.__ray_metadata__.modified_class
    agent = agent_class("node0", None, lambda node, spec: [probe], None, 0.001, 10, None)
    try:
        assert probe.entered.wait(30)
        agent_class.stop(agent)  # its wait for the blocked thread runs out
        assert "close" not in probe.events
    finally:
        probe.release.set()
    agent._thread.join(30)
    assert not agent._thread.is_alive()
    assert probe.events[-3:] == ["read", "read done", "close"] and probe.events.count("close") == 1


# -- 5: a reconcile after shutdown ----------------------------------------------------------------
def test_a_reconcile_after_shutdown_starts_no_agent(monkeypatch):
    """A concurrent ``agents start`` (its ``start_monitor`` reconciles) or the reconcile loop
    racing ``shutdown()`` started an agent on every node again; ``agents stop`` got a count back,
    killed only the monitor, and the new detached agents ran on with nobody to report to."""
    cls, mon = _monitor(monkeypatch, [_node("aa" * 28, "h1"), _node("bb" * 28, "h2")])
    assert cls.reconcile(mon) == ["h1", "h2"]
    assert cls.shutdown(mon) == 2
    assert cls.reconcile(mon) == [] and cls.agents(mon) == {}


# -- 6: an interface or device name that is not printable ---------------------------------------
def test_an_unprintable_interface_name_is_escaped_and_the_node_s_report_is_taken(tmp_path):
    """Linux lets an interface's name hold control characters: ``eth/lan\\x1b`` made the monitor
    refuse the node's whole report, every time, so the node stayed stale for good."""
    (tmp_path / "proc/net").mkdir(parents=True)

    def traffic(byte_count: int) -> None:
        rows = "".join(f"{name}: {byte_count} 0 0 0 0 0 0 0 {byte_count} 0 0 0 0 0 0 0\n" for name in ("eth0", "lan\x1b"))
        (tmp_path / "proc/net/dev").write_text("h\nh\n" + rows)

    traffic(0)
    probe = EthernetProbe(proc_root=tmp_path / "proc", sys_root=tmp_path / "nosys", fallback_gbps=10,
                          clock=_ticks(), reader=lambda p: p.read_text())
    sampler = Sampler("node0", [probe], node_id="ab" * 28)
    sampler.step()
    traffic(10**9)
    report = sampler.step()
    assert [s.link for s in report.links] == ["eth/eth0", "eth/lan\\x1b", "nic"]
    state = ClusterState(5.0, clock=lambda: 0.0, wall=lambda: 1.0)
    assert report_problem(report) is None and state.update(report)
    assert state.link_load()["node0/nic"] == pytest.approx(2e9 / 2.5e9)


def test_an_unprintable_infiniband_device_name_is_escaped(tmp_path):
    port = _ib_port(tmp_path, "mlx5\x1b0")
    sampler = Sampler("node0", [InfinibandProbe(sys_root=tmp_path / "sys", clock=_ticks())], node_id="ab" * 28)
    sampler.step()
    _ib_count(port, 10**9)
    report = sampler.step()
    assert [s.link for s in report.links] == ["ib/mlx5\\x1b0/1", "nic"] and report_problem(report) is None


def test_a_link_name_longer_than_a_report_allows_is_left_out():
    assert link_name("eth", "e" * 249) == "eth/" + "e" * 249
    assert link_name("eth", "e" * 250) is None


# -- 7: 32-bit Ethernet counters -------------------------------------------------------------------
def test_a_32_bit_ethernet_counter_above_4_gib_is_read_as_64_bit(tmp_path):
    """``/proc/net/dev`` prints 64-bit stats on every kernel since 2.6.36: on a 32-bit userland a
    value at or above 2**32 was taken as a saturated 32-bit counter, and the interface never had
    a rate again (nor the node a ``nic``)."""
    (tmp_path / "proc/net").mkdir(parents=True)

    def traffic(byte_count: int) -> None:
        (tmp_path / "proc/net/dev").write_text(f"h\nh\n  eth0: {byte_count} 0 0 0 0 0 0 0 {byte_count} 0 0 0 0 0 0 0\n")

    traffic(5 * 2**32)
    probe = EthernetProbe(proc_root=tmp_path / "proc", sys_root=tmp_path / "nosys", fallback_gbps=100, counter_bits=32,
                          clock=_ticks(), reader=lambda p: p.read_text())
    sampler = Sampler("node0", [probe], node_id="ab" * 28)
    sampler.step()
    traffic(5 * 2**32 + 10**9)
    links = {s.link: s for s in sampler.step().links}
    assert links["eth/eth0"].rx_bytes_per_s == 1e9 and links["nic"].utilization == pytest.approx(0.08)


# -- 8: the exporter's name filter ----------------------------------------------------------------
@pytest.mark.parametrize("name, series", [
    ("deepshare_link_utilization_ratio", 'deepshare_link_utilization_ratio{link="nic",node="node0"} 0.5'),
    ("deepshare_link_receive_bytes_total", 'deepshare_link_receive_bytes_total{link="nic",node="node0"} 5.0'),
    ("deepshare_node_stale", 'deepshare_node_stale{node="node0"} 0.0'),
])
def test_a_scrape_filtered_by_name_returns_that_series(name, series):
    """``/metrics?name[]=X`` maps names to collectors through ``describe()``; the collector had
    none, so every filtered page was empty."""
    state = ClusterState(5.0, clock=lambda: 0.0, wall=lambda: 1.0)
    state.update(NodeReport("node0", "id0", 0, 1, 1.0, 1.0, links=(LinkStat("nic", 1.0, 2.0, 0.5, 1.0, 10.0, 5, 6),)))
    page = generate_latest(MetricsExporter(state.snapshot).registry.restricted_registry([name])).decode()
    assert series in page.splitlines()
    assert [line for line in page.splitlines() if not line.startswith("#") and not line.startswith(name)] == []


# -- 9: AgentConfig fields that failed later, inside the actors -----------------------------------
@pytest.mark.parametrize("field, value, said", [
    ("max_restarts", -2, "max_restarts must be -1 (always), 0 or a positive integer, got -2"),
    ("max_restarts", 1.5, "max_restarts must be -1 (always), 0 or a positive integer, got 1.5"),
    ("max_restarts", True, "max_restarts must be -1 (always), 0 or a positive integer, got True"),
    ("agent_num_cpus", math.nan, "agent_num_cpus must be a finite number >= 0, got nan"),
    ("agent_num_cpus", math.inf, "agent_num_cpus must be a finite number >= 0, got inf"),
    ("agent_num_cpus", "1", "agent_num_cpus must be a finite number >= 0, got '1'"),
    ("reconcile_interval_s", math.inf, "reconcile_interval_s must be a number of seconds from 0 to"),
    ("reconcile_interval_s", math.nan, "reconcile_interval_s must be a number of seconds from 0 to"),
    ("reconcile_interval_s", threading.TIMEOUT_MAX * 2, "reconcile_interval_s must be a number of seconds from 0 to"),
    ("buffer_size", 2.5, "buffer_size must be a positive integer, got 2.5"),
    ("buffer_size", 0, "buffer_size must be a positive integer, got 0"),
])
def test_agent_config_refuses_in_one_line_naming_the_field(field, value, said):
    """Each was accepted, then failed inside the monitor or every agent (at every reconcile, as an
    error that did not name the field), left agents pending for ever, ended the reconcile thread
    or quietly turned reconciling off."""
    with pytest.raises(ValueError) as raised:
        AgentConfig(**{field: value})
    message = str(raised.value)
    assert message.startswith(said) and "\n" not in message


def test_agent_config_takes_the_edges_of_each_range():
    config = AgentConfig(max_restarts=0, agent_num_cpus=0.5, reconcile_interval_s=threading.TIMEOUT_MAX, buffer_size=1)
    assert (config.max_restarts, config.agent_num_cpus, config.buffer_size) == (0, 0.5, 1)
    assert AgentConfig(max_restarts=-1, agent_num_cpus=2, reconcile_interval_s=0).reconcile_interval_s == 0
