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


# -- B2: a forged seq far ahead ----------------------------------------------------------------
def _real(seq: int, u: float) -> NodeReport:
    return NodeReport("node0", "id0", seq, 4242, 999.0, 1000.0, links=(LinkStat("nic", 0, 0, u, None),))


def test_a_seq_far_ahead_is_dropped_and_cannot_silence_the_real_agent():
    """A report with the node's real name, id, pid and started_at and ``seq = 2**63 - 1`` made every
    later real report look old: the node was silenced (stale) until forgotten an hour later."""
    now = [0.0]
    state = ClusterState(5.0, clock=lambda: now[0], wall=lambda: 1000.0)  # any interval down to 1 ms
    state.expect("node0", "id0")
    assert state.update(_real(0, 0.10))
    assert not state.update(_real(2**63 - 1, 0.0))  # further ahead than even 1 kHz sampling allows
    assert state.rejected == 1
    now[0] = 2.0
    assert state.update(_real(2, 0.95)) and state.link_load() == {"node0/nic": 0.95}


def test_the_seq_jump_allowed_is_the_samples_since_plus_a_stale_timeout():
    now = [0.0]
    state = ClusterState(5.0, clock=lambda: now[0], wall=lambda: 1000.0, interval_s=1.0)
    assert state.update(_real(0, 0.10))
    now[0] = 2.0
    assert state.max_seq_jump(2.0) == (2.0 + 5.0) / 1.0 + 1
    assert not state.update(_real(9, 0.5))
    assert state.update(_real(8, 0.5))


def test_a_forged_seq_that_got_through_costs_at_most_the_stale_timeout():
    """Within the slack a forged seq is taken; the real agent's lower seqs are then dropped while
    the node is fresh, and taken again as soon as it turns stale."""
    now = [0.0]
    state = ClusterState(5.0, clock=lambda: now[0], wall=lambda: 1000.0)
    state.expect("node0", "id0")
    assert state.update(_real(0, 0.10))
    assert state.update(_real(1000, 0.0))  # within 5 s (+1 sample) of 1 kHz sampling
    for t, seq in ((2, 2), (4, 4)):
        now[0] = t
        assert not state.update(_real(seq, 0.95))
    now[0] = 6.0  # stale: the process's next report is taken whatever its seq
    assert state.snapshot().node("node0").stale
    assert state.update(_real(6, 0.95)) and state.link_load() == {"node0/nic": 0.95}
    now[0] = 8.0
    assert state.update(_real(8, 0.9)) and state.link_load() == {"node0/nic": 0.9}
    assert state.snapshot().node("node0").restarts == 0


def test_a_backlog_of_reports_delivered_together_is_taken():
    """Reports of one agent queued behind a busy monitor arrive at once: each is one report
    period ahead of the previous, with no time between them."""
    now = [0.0]
    state = ClusterState(6.0, clock=lambda: now[0], wall=lambda: 1000.0, interval_s=1.0)
    assert state.update(_real(0, 0.1))
    now[0] = 5.0
    for seq in range(2, 12, 2):
        assert state.update(_real(seq, 0.2))
    assert state.snapshot().node("node0").reports == 6


# -- B3, B4, B5: the monitor's reconcile, with ray.nodes() and the agents' start faked ----------
def _monitor(monkeypatch, nodes: list, names: dict | None = None, now: list | None = None):
    """The monitor actor's own class, built without Ray: ``ray.nodes()`` answers ``nodes`` (edit
    the list between reconciles) and starting an agent returns a string."""
    import threading
    import types

    pytest.importorskip("ray")
    import deepshare.agents.monitor as m
    from deepshare.agents.config import AgentConfig

    monitor_class = m.ContentionMonitor.__ray_metadata__.modified_class
    mon = monitor_class.__new__(monitor_class)
    clock = (lambda: now[0]) if now is not None else (lambda: 0.0)
    mon._config = AgentConfig(reconcile_interval_s=0)
    mon._names_given, mon._agents, mon._names, mon._started_as = dict(names or {}), {}, {}, {}
    mon._reconcile_lock, mon._topology, mon._stop = threading.Lock(), None, threading.Event()
    mon._state = ClusterState(5.0, clock=clock, wall=lambda: 1.0, stale_retention_s=3600.0)
    mon._start_agent = lambda node_id, name: f"agent-{name}"
    mon._exporter = types.SimpleNamespace(stop=lambda: None)
    monkeypatch.setattr(m, "ray", types.SimpleNamespace(nodes=lambda: [dict(n) for n in nodes], kill=lambda h, no_restart: None))
    return monitor_class, mon


def _node(node_id: str, host: str, address: str = "", alive: bool = True) -> dict:
    return {"NodeID": node_id, "NodeManagerHostname": host, "NodeManagerAddress": address, "Alive": alive}


def _report_as(name: str, node_id: str, u: float, seq: int = 0, pid: int = 1) -> NodeReport:
    return NodeReport(name, node_id, seq, pid, 1.0, 1.0, links=(LinkStat("nic", 0, 0, u, None),))


def test_a_mapped_name_equal_to_another_hosts_hostname_is_not_shared(monkeypatch):
    """The topology's node3 is the host at 10.0.0.17; another, unmapped, host is called node3:
    both were named node3, and each one's reports overwrote the other's."""
    a, b = "aaaa1111" * 7, "bbbb2222" * 7
    nodes = [_node(b, "node3", "10.0.0.99"), _node(a, "gpu-host-17", "10.0.0.17")]  # the unmapped one first
    cls, mon = _monitor(monkeypatch, nodes, {"10.0.0.17": "node3"})
    cls.reconcile(mon)
    assert mon._names == {a: "node3", b: "node3-bbbb2222"}
    cls.report(mon, _report_as("node3", a, 0.95))
    cls.report(mon, _report_as("node3-bbbb2222", b, 0.05))
    cls.report(mon, _report_as("node3", b, 0.05))  # the other host under the topology's name: filed under its own
    assert mon._state.link_load() == {"node3/nic": 0.95, "node3-bbbb2222/nic": 0.05}
    assert mon._state.snapshot().node("node3").restarts == 0


def test_a_hostname_equal_to_another_nodes_suffixed_name_is_not_shared(monkeypatch):
    c, d, e = "cccc3333" * 7, "dddd4444" * 7, "eeee5555" * 7
    for order in ([c, d, e], [e, c, d]):
        hosts = {c: "h", d: "h", e: "h-cccc3333"}
        cls, mon = _monitor(monkeypatch, [_node(i, hosts[i]) for i in order])
        cls.reconcile(mon)
        assert len(set(mon._names.values())) == 3, mon._names
        assert mon._names[d] == "h-dddd4444"


def test_a_raylet_restarted_within_the_health_check_window_gets_its_hosts_name_back(monkeypatch):
    """``ray.nodes()`` listed the dead raylet alive beside its successor for one reconcile: the
    successor was named ``gpu-a-<id>`` and kept that name after the old one was declared dead."""
    old, new = "aa" * 14, "bb" * 14
    nodes = [_node(old, "gpu-a")]
    cls, mon = _monitor(monkeypatch, nodes)
    assert cls.reconcile(mon) == ["gpu-a"]
    cls.report(mon, _report_as("gpu-a", old, 0.5))
    nodes.append(_node(new, "gpu-a"))
    assert cls.reconcile(mon) == ["gpu-a-bbbbbbbb"]
    cls.report(mon, _report_as("gpu-a-bbbbbbbb", new, 0.7))
    nodes[0] = _node(old, "gpu-a", alive=False)
    assert cls.reconcile(mon) == []
    assert mon._names == {new: "gpu-a"}
    # the agent still sends the name it was started with: filed under the node's name now
    cls.report(mon, _report_as("gpu-a-bbbbbbbb", new, 0.9, seq=1))
    view = cls.view(mon)
    assert [n.node for n in view.nodes] == ["gpu-a"]
    assert view.node("gpu-a").node_id == new and view.node("gpu-a").report.node == "gpu-a"
    assert mon._state.link_load() == {"gpu-a/nic": 0.9}
    assert list(cls.agents(mon)) == ["gpu-a"]


def test_a_node_named_first_keeps_its_name_when_another_joins_on_its_host(monkeypatch):
    first, second = "aa" * 14, "bb" * 14
    nodes = [_node(first, "gpu-a")]
    cls, mon = _monitor(monkeypatch, nodes)
    cls.reconcile(mon)
    nodes.append(_node(second, "gpu-a"))
    cls.reconcile(mon)
    cls.reconcile(mon)
    assert mon._names == {first: "gpu-a", second: "gpu-a-bbbbbbbb"}


def test_an_alive_node_whose_agent_went_silent_is_never_forgotten(monkeypatch):
    """After stale + retention the node left ``view()``, ``agents status`` and ``/metrics`` (an
    alert on ``deepshare_node_stale`` resolved itself) though it was still alive in Ray and the
    monitor still held its agent; only nodes that left the cluster may be forgotten."""
    now = [0.0]
    nodes = [_node("aa" * 14, "gpu-a"), _node("cc" * 14, "gpu-c")]
    cls, mon = _monitor(monkeypatch, nodes, now=now)
    cls.reconcile(mon)
    cls.report(mon, _report_as("gpu-a", "aa" * 14, 0.3))
    exporter = MetricsExporter(mon._state.snapshot)
    nodes.pop()  # gpu-c leaves
    for t in (10.0, 3000.0, 3606.0, 7200.0):
        now[0] = t
        cls.reconcile(mon)
        page = generate_latest(exporter.registry).decode()
        assert [n.node for n in cls.view(mon).nodes] == (["gpu-a"] if t > 3605 else ["gpu-a", "gpu-c"])
        assert 'deepshare_node_stale{node="gpu-a"} 1.0' in page


# -- B6: one GPU's NVML error costs only that GPU -----------------------------------------------
def _fake_nvml():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from test_agents_probes import FakeGpu, FakeNvml, FakeNVMLError
    finally:
        sys.path.pop(0)
    return FakeGpu, FakeNvml, FakeNVMLError


def test_a_gpu_without_any_pcie_reading_has_no_pcie_link_and_the_others_are_sampled():
    """A GPU with neither the PCIe counter fields nor ``nvmlDeviceGetPcieThroughput`` (a vGPU) was
    accepted at detection, and then every sample raised: all GPUs' links and gauges were lost."""
    from deepshare.agents.probes.nvml import NvmlProbe
    from deepshare.agents.sampler import Sampler

    FakeGpu, FakeNvml, FakeNVMLError = _fake_nvml()
    good, vgpu = FakeGpu(nvlink_links=4, nvlink_kib=(0, 0), util=50), FakeGpu(util=10)

    class Nvml(FakeNvml):
        def nvmlDeviceGetPcieThroughput(self, gpu, counter):
            if gpu is vgpu:
                raise FakeNVMLError(3)  # NVML_ERROR_NOT_SUPPORTED
            return super().nvmlDeviceGetPcieThroughput(gpu, counter)

    probe = NvmlProbe(nvml=Nvml([good, vgpu]))
    assert probe.available and probe.gpus == 2
    sampler = Sampler("n", [probe])
    for i in range(3):
        report = sampler.step()
        assert report.probes[0].available, report.probes[0]
        assert {s.link for s in report.links} >= ({"gpu0/pcie", "gpu0/nvlink"} if i else {"gpu0/pcie"})
        assert not any(s.link.startswith("gpu1/pcie") for s in report.links)
        assert dict(report.gauges) == {"gpu0/util": 0.5, "gpu1/util": 0.1}


def test_a_gpu_lost_at_start_leaves_only_that_gpu_out():
    """``nvmlDeviceGetHandleByIndex`` raising for one GPU (GPU_IS_LOST) made the whole probe
    unavailable for the agent's lifetime, healthy GPUs included."""
    from deepshare.agents.probes.nvml import NvmlProbe

    FakeGpu, FakeNvml, FakeNVMLError = _fake_nvml()

    class Lost(FakeNvml):
        def nvmlDeviceGetHandleByIndex(self, i):
            if i == 1:
                raise FakeNVMLError(15)
            return super().nvmlDeviceGetHandleByIndex(i)

    probe = NvmlProbe(nvml=Lost([FakeGpu(util=30), FakeGpu(util=40), FakeGpu(util=50)]))
    assert probe.available and probe.gpus == 2 and probe.lost == {1: "NVML error 15"}
    sample = probe.sample()
    assert set(sample.links) == {"gpu0/pcie", "gpu2/pcie"}
    assert sample.gauges == {"gpu0/util": 0.3, "gpu2/util": 0.5}
    every = NvmlProbe(nvml=Lost([FakeGpu(), FakeGpu()]))
    every_lost = Lost([FakeGpu()])
    every_lost.nvmlDeviceGetHandleByIndex = lambda i: (_ for _ in ()).throw(FakeNVMLError(15))
    none = NvmlProbe(nvml=every_lost)
    assert every.available and not none.available and "GPU 0: NVML error 15" in none.reason


def test_a_gpu_whose_read_fails_mid_run_is_left_out_of_that_sample_only():
    from deepshare.agents.probes.nvml import NvmlProbe

    FakeGpu, FakeNvml, FakeNVMLError = _fake_nvml()
    healthy, failing = FakeGpu(util=20), FakeGpu(util=70)
    nvml = FakeNvml([healthy, failing])
    probe = NvmlProbe(nvml=nvml)
    read = nvml.nvmlDeviceGetPcieThroughput

    def lost(gpu, counter):
        if gpu is failing:
            raise FakeNVMLError(15)
        return read(gpu, counter)

    nvml.nvmlDeviceGetPcieThroughput = lost
    sample = probe.sample()
    assert set(sample.links) == {"gpu0/pcie"} and sample.gauges == {"gpu0/util": 0.2}
    nvml.nvmlDeviceGetPcieThroughput = read
    assert set(probe.sample().links) == {"gpu0/pcie", "gpu1/pcie"}


# -- B7: legacy 32-bit counters that saturate or reset ------------------------------------------
def _ib_sample(t: float, words: int, cap: float | None = 100e9 / 8):
    from deepshare.agents.samples import LinkReading, ProbeSample

    return ProbeSample(t, {"ib/mlx4_0/1": LinkReading(words, words, bits=32, unit_bytes=4, capacity_bytes_per_s=cap)})


def test_a_saturated_32_bit_counter_gives_no_rate_not_an_idle_link():
    """A legacy PortCounters counter stuck at 2**32 - 1 (busy, saturated) read 0 B/s: an idle
    port, pulling the node's ``nic`` down with it."""
    from deepshare.agents.samples import compute_rates

    assert compute_rates(_ib_sample(1.0, 2**32 - 1), _ib_sample(2.0, 2**32 - 1)) == ()
    assert compute_rates(_ib_sample(1.0, 2**32 - 1000), _ib_sample(2.0, 2**32 - 1)) == ()  # saturated meanwhile
    (rate,) = compute_rates(_ib_sample(1.0, 1000), _ib_sample(2.0, 2000))
    assert rate.rx_bytes_per_s == 4000.0


def test_a_reset_32_bit_counter_is_not_read_as_a_wrap():
    """A reset (driver reload, ``perfquery -R``) read as a wrap: a one-sample burst of ~17 GB/s on a
    100 Gb/s port. A wrap implying more than 1.1 x capacity is a reset: no rate for that sample."""
    from deepshare.agents.samples import compute_rates

    assert compute_rates(_ib_sample(0.0, 1_000_000), _ib_sample(1.0, 5)) == ()
    (wrap,) = compute_rates(_ib_sample(0.0, 2**32 - 1_000_000), _ib_sample(1.0, 5))  # a true wrap
    assert wrap.rx_bytes_per_s == (1_000_000 + 5) * 4
    (unknown_capacity,) = compute_rates(_ib_sample(0.0, 1_000_000, None), _ib_sample(1.0, 5, None))
    assert unknown_capacity.rx_bytes_per_s == (5 + 2**32 - 1_000_000) * 4  # nothing to judge by


def test_the_node_nic_is_left_out_while_a_port_is_saturated():
    from deepshare.agents.probes.base import Probe
    from deepshare.agents.sampler import Sampler

    values = iter([2**32 - 1, 2**32 - 1, 2**32 - 1])

    class Ib(Probe):
        name = "infiniband"

        def __init__(self):
            super().__init__(iter(range(10)).__next__)

        def _read(self):
            return _ib_sample(self.clock(), next(values))

    sampler = Sampler("n", [Ib()])
    for _ in range(3):
        links = {s.link for s in sampler.step().links}
        assert "nic" not in links and "ib/mlx4_0/1" not in links


# -- a link named twice in one report ---------------------------------------------------------
def test_a_link_listed_twice_is_kept_once_the_first_time():
    """Two ``nic`` entries in one report were taken and exported twice, one series with two values."""
    twice = replace(GOOD, links=(LinkStat("nic", 1.0, 1.0, 0.5, 1.0), LinkStat("pcie", 1.0, 1.0, 0.1, 0.1),
                                 LinkStat("nic", 9.0, 9.0, 0.9, 9.0)))
    state = ClusterState(10.0, clock=lambda: 0.0, wall=lambda: 1.0)
    assert state.update(twice)
    assert [s.link for s in state.snapshot().node("n1").report.links] == ["nic", "pcie"]
    assert state.link_load() == {"n1/nic": 0.5, "n1/pcie": 0.1}
    page = generate_latest(MetricsExporter(state.snapshot).registry).decode()
    assert page.count('deepshare_link_utilization_ratio{link="nic",node="n1"}') == 1
