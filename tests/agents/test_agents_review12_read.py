"""Fixes from a second read of the twelfth review's agent fixes: an InfiniBand HCA whose ports
never come up, link names two interfaces shared, AgentConfig values Ray refuses, closing the
probes under the agent's lock and a removed HCA's port read as ACTIVE. Plain objects and fakes,
no Ray cluster."""

from __future__ import annotations

import shutil
from dataclasses import fields
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from deepshare.agents.agent import NodeAgent
from deepshare.agents.config import AgentConfig
from deepshare.agents.probes.base import Probe, link_name
from deepshare.agents.probes.ethernet import EthernetProbe
from deepshare.agents.probes.infiniband import InfinibandProbe
from deepshare.agents.sampler import Sampler, measure
from deepshare.agents.samples import ProbeSample
from test_agents_review12 import _eth, _ib_count, _ib_port, _ticks  # this folder is on sys.path under pytest


def _ib_and_eth(tmp_path, state):
    port = _ib_port(tmp_path, "mlx5_0", state=state)
    _eth(tmp_path, 0)
    ib = InfinibandProbe(sys_root=tmp_path / "sys", clock=_ticks())  # 1 s per sample
    eth = EthernetProbe(proc_root=tmp_path / "proc", sys_root=tmp_path / "nosys", fallback_gbps=10, clock=_ticks(),
                        reader=lambda p: p.read_text())
    return port, ib, eth


# -- F1: an InfiniBand HCA whose ports never come up -------------------------------------------
def test_an_infiniband_hca_whose_ports_stay_down_leaves_nic_the_ethernet_ports(tmp_path):
    """The last fix kept every port, up or not, and made ``nic`` the InfiniBand ports from the
    start: a node whose HCA never brought a port up had no ``nic`` for good (Ethernet made it up
    before, which is right when no InfiniBand port is up), and the probe's status said available,
    0 links, no reason."""
    _, ib, eth = _ib_and_eth(tmp_path, "1: DOWN")
    sampler = Sampler("node0", [ib, eth], node_id="ab" * 28)
    sampler.step()
    for n in range(1, 4):
        _eth(tmp_path, n * 10**9)
        report = sampler.step()
        assert report.link("nic").utilization == report.link("eth/eno1").utilization == 0.8
    status = report.probes[0]
    assert status.name == "infiniband" and not status.available
    assert status.reason == "no port ACTIVE yet (ib/mlx5_0/1 1: DOWN)"
    assert [s.reason for s, _ in measure([ib], 0.0, sleep=lambda s: None)] == [status.reason]


def test_nic_switches_to_infiniband_for_good_and_its_byte_total_goes_on(tmp_path):
    """``nic`` is the Ethernet ports until an InfiniBand port reads ACTIVE, then the InfiniBand
    ports, never back; its byte total (a Prometheus counter) neither falls at the switch nor
    counts the Ethernet bytes after it or the port's bytes from before it."""
    port, ib, eth = _ib_and_eth(tmp_path, "2: INIT")
    _ib_count(port, 10**9)  # traffic before the port came up, or before the agent started
    sampler = Sampler("node0", [ib, eth], node_id="ab" * 28)
    sampler.step()
    _eth(tmp_path, 3000)
    assert sampler.step().link("nic").rx_bytes_total == 3000
    (port / "state").write_text("4: ACTIVE\n")
    _eth(tmp_path, 5000)
    report = sampler.step()  # the port's first reading: it has no rate yet, so nic is left out
    assert report.link("nic") is None and report.probes[0].available and report.probes[0].reason == ""
    totals = []
    for words in (10**9 + 250, 10**9 + 500):
        _ib_count(port, words)
        _eth(tmp_path, 10**6)  # Ethernet traffic no longer makes up nic
        nic = sampler.step().link("nic")
        totals.append(nic.rx_bytes_total)
        assert nic.capacity_bytes_per_s == 25e9
    assert totals == [5000 + 1000, 5000 + 2000]  # Ethernet's 5000 bytes, then the port's 4-byte words
    (port / "state").write_text("1: DOWN\n")
    (port / "counters/port_rcv_data").unlink()  # the port fails: nic is left out, not made Ethernet again
    assert sampler.step().link("nic") is None
    _ib_count(port, 10**9 + 750)
    sampler.step()
    _ib_count(port, 10**9 + 1000)
    assert sampler.step().link("nic").rx_bytes_total == 5000 + 3000


# -- F2: two interfaces, one link name ----------------------------------------------------------
def test_two_interface_names_never_share_a_link_name(tmp_path):
    """``lan`` + ESC and ``lan\\x1b`` written out (Linux allows a backslash in a name) were both
    ``eth/lan\\x1b``: one interface's readings overwrote the other's, and ``nic`` lost its bytes."""
    esc, text = "lan\x1b", "lan\\x1b"
    assert link_name("eth", esc) == "eth/lan\\x1b" and link_name("eth", text) == "eth/lan\\\\x1b"
    assert len({link_name("eth", n) for n in (esc, text, "lan\\", "lan\\\\", "a\nb", "a\\nb", "eth0")}) == 7
    (tmp_path / "proc/net").mkdir(parents=True)

    def counters(a: int, b: int) -> None:
        (tmp_path / "proc/net/dev").write_text(f"h\nh\n  {esc}: {a} 0 0 0 0 0 0 0 {a} 0 0 0 0 0 0 0\n"
                                               f"  {text}: {b} 0 0 0 0 0 0 0 {b} 0 0 0 0 0 0 0\n")

    counters(0, 0)
    eth = EthernetProbe(proc_root=tmp_path / "proc", sys_root=tmp_path / "nosys", fallback_gbps=10, clock=_ticks(),
                        reader=lambda p: p.read_text(), include_virtual=True)
    sampler = Sampler("node0", [eth], node_id="ab" * 28)
    sampler.step()
    counters(10**9, 5 * 10**8)
    got = {s.link: s.rx_bytes_per_s for s in sampler.step().links}
    assert got == {"eth/lan\\x1b": 1e9, "eth/lan\\\\x1b": 5e8, "nic": 1.5e9}


# -- F3: AgentConfig values Ray refuses ---------------------------------------------------------
def test_agent_config_hands_ray_built_in_numbers():
    """numpy numbers passed the checks, then Ray's actor options refused them with a TypeError
    naming no field of ours, at every reconcile."""
    config = AgentConfig(interval_s=np.float32(0.5), report_interval_s=np.int64(2), stale_after_s=np.float64(9),
                         buffer_size=np.int64(10), reconcile_interval_s=np.float32(2), agent_num_cpus=np.int64(1),
                         max_restarts=np.int32(3), stale_retention_s=Fraction(7, 2), metrics_port=np.uint16(9479))
    got = {f.name: getattr(config, f.name) for f in fields(config) if f.name not in ("metrics_host", "metrics_allowed_hosts")}
    assert got == {"interval_s": 0.5, "report_interval_s": 2, "stale_after_s": 9.0, "buffer_size": 10,
                   "reconcile_interval_s": 2.0, "agent_num_cpus": 1, "max_restarts": 3, "stale_retention_s": 3.5,
                   "metrics_port": 9479}
    assert all(type(v) in (int, float) for v in got.values())
    NodeAgent.options(num_cpus=config.agent_num_cpus, max_restarts=config.max_restarts)  # Ray's own type check
    NodeAgent.options(num_cpus=AgentConfig(agent_num_cpus=np.float32(0.5)).agent_num_cpus)


@pytest.mark.parametrize("cpus", [1e-5, 5e-324, np.float64(9.9e-5)])
def test_agent_config_refuses_a_cpu_fraction_ray_cannot_hold(cpus):
    with pytest.raises(ValueError) as raised:
        AgentConfig(agent_num_cpus=cpus)
    assert str(raised.value).startswith("agent_num_cpus must be 0 or at least 0.0001") and "\n" not in str(raised.value)
    assert AgentConfig(agent_num_cpus=1e-4).agent_num_cpus == 1e-4 and AgentConfig().agent_num_cpus == 0


# -- F4: closing the probes under the agent's lock ----------------------------------------------
class _LockCheckingProbe(Probe):
    """Records, when closed, whether the agent's lock (the one ``recent()`` takes) was free."""

    name = "lock-checking"

    def __init__(self) -> None:
        super().__init__()
        self.agent = None
        self.lock_free_at_close: bool | None = None

    def _read(self) -> ProbeSample:
        return ProbeSample(self.clock(), {})

    def close(self) -> None:
        lock = self.agent._lock
        self.lock_free_at_close = lock.acquire(blocking=False)
        if self.lock_free_at_close:
            lock.release()


def test_closing_the_probes_leaves_recent_free(monkeypatch):
    """The sampling thread closed the probes holding the agent's lock: a close() that blocked
    (``nvmlShutdown`` stuck in the driver) hung every later ``recent()`` call with it."""
    import deepshare.agents.agent as agent_module

    monkeypatch.setattr(agent_module.ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "n" * 56))
    probe = _LockCheckingProbe()
    agent_class = agent_module.NodeAgent.__ray_metadata__.modified_class
    agent = agent_class("node0", None, lambda node, spec: [probe], None, 0.001, 10, None)
    probe.agent = agent
    agent._stop.set()
    agent._thread.join(30)
    assert not agent._thread.is_alive() and probe.lock_free_at_close is True
    assert len(agent_class.recent(agent, 1)) == 1


# -- F5: a port whose HCA was removed before it came up ------------------------------------------
def test_a_port_removed_before_it_came_up_is_not_read_as_active(tmp_path):
    """A missing ``state`` file read as ACTIVE even when the whole port directory was gone (the
    HCA removed while its port was down): the probe then sampled the port and failed every
    sample. A port directory without a ``state`` file still reads as ACTIVE."""
    port = _ib_port(tmp_path, "mlx5_0", state="1: DOWN")
    bare = _ib_port(tmp_path, "mlx5_1", state="1: DOWN")
    ib = InfinibandProbe(sys_root=tmp_path / "sys", clock=_ticks())
    sampler = Sampler("node0", [ib], node_id="ab" * 28)
    sampler.step()
    shutil.rmtree(port.parent.parent)
    for _ in range(2):
        status = sampler.step().probes[0]
        assert ib.links == () and status.reason == "no port ACTIVE yet (ib/mlx5_0/1 gone, ib/mlx5_1/1 1: DOWN)"
    (bare / "state").unlink()  # a driver that publishes no state: taken as ACTIVE
    sampler.step()
    assert ib.links == ("ib/mlx5_1/1",) and sampler.step().probes[0].available
