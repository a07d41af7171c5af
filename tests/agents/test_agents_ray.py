"""Node agents on a fake 3-node Ray cluster (``ray.cluster_utils.Cluster``, one machine).

Agents replay simulated link loads (``ReplayProbes``), so the monitor's numbers are exact; the
CLI test at the end runs the real local probes. One cluster serves the whole module (starting
it is most of this file's run time); every endpoint binds loopback.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest

ray = pytest.importorskip("ray")

from deepshare.agents import AgentConfig, ReplayProbes  # noqa: E402
from deepshare.agents.monitor import ContentionMonitor  # noqa: E402
from deepshare.agents.report import LinkStat, NodeReport  # noqa: E402
from raytools import ray_tmpdir, start_cluster, stop_cluster  # noqa: E402
from test_agents_probes import run_cli  # noqa: E402  (this folder is on sys.path under pytest)
from polling import wait_for  # noqa: E402

pytestmark = pytest.mark.slow  # a fake 3-node Ray cluster for the whole module

NODE_ARGS = dict(num_cpus=1, object_store_memory=80 * 1024**2)
LOADS = {
    "node0/nic": 0.25, "node0/pcie": 0.5, "node0/gpu3/nvlink": 0.75,
    "node1/nic": 0.125,
    "node2/pcie": 1.0,
}




@pytest.fixture(scope="module")
def cluster():
    with ray_tmpdir():
        c = start_cluster(dict(NODE_ARGS, resources={"n0": 1}), [dict(NODE_ARGS, resources={f"n{i}": 1}) for i in (1, 2)],
                          connect={})
        try:
            yield c
        finally:
            stop_cluster(c)


@pytest.fixture(scope="module")
def names(cluster) -> dict[str, str]:
    """Ray node id -> topology-style name, head first."""
    return {node.node_id: f"node{i}" for i, node in enumerate(cluster.list_all_nodes())}


@pytest.fixture(scope="module")
def monitor(cluster, names):
    config = AgentConfig(interval_s=0.1, report_interval_s=0.3, stale_after_s=1.0, reconcile_interval_s=0.5)
    handle = ContentionMonitor.options(name="test-monitor").remote(
        config, ReplayProbes([LOADS]), None, names, False, None, "test-agent"
    )
    ray.get(handle.reconcile.remote())
    yield handle
    ray.get(handle.shutdown.remote())
    ray.kill(handle, no_restart=True)


def fresh(monitor, *nodes: str):
    """The monitor's view once every one of ``nodes`` has reported and is not stale, else None."""
    view = ray.get(monitor.view.remote())
    states = [view.node(n) for n in nodes]
    ok = all(s is not None and s.report is not None and not s.stale for s in states)
    return view if ok else None


def test_one_agent_per_node_and_the_view_covers_every_node(monitor, names) -> None:
    view = wait_for("reports from all three nodes", lambda: fresh(monitor, "node0", "node1", "node2"))
    assert [n.node for n in view.nodes] == ["node0", "node1", "node2"]
    agents = ray.get(monitor.agents.remote())
    assert sorted(agents) == ["node0", "node1", "node2"]
    infos = ray.get([a.info.remote() for a in agents.values()])
    assert {i["node_id"]: i["node"] for i in infos} == names  # each agent sits on its own node
    assert len({i["pid"] for i in infos}) == 3
    assert ray.get(monitor.reconcile.remote()) == []  # nothing to add: still one per node
    def three():
        reports = ray.get(agents["node0"].recent.remote(3))
        return reports if len(reports) == 3 else None

    recent = wait_for("three buffered reports", three)
    assert recent[0].seq < recent[1].seq < recent[2].seq


def test_agents_sample_every_interval_but_report_every_report_period(monitor) -> None:
    agent = ray.get(monitor.agents.remote())["node1"]
    info = ray.get(agent.info.remote())
    assert (info["interval_s"], info["report_period_s"]) == (0.1, pytest.approx(0.3))

    def after(seq: int):
        state = ray.get(monitor.view.remote()).node("node1")
        return state if state.report is not None and state.report.seq >= seq else None

    state = wait_for("a few reports from node1", lambda: after(12))
    buffered = ray.get(agent.recent.remote(600))
    seqs = [r.seq for r in buffered]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # every sample is buffered
    # ...but only the first two and then about one sample in three reach the monitor (one in
    # two at worst, when late ticks are skipped)
    assert 3 <= state.reports <= state.report.seq // 2 + 2


def test_link_load_is_the_cluster_view_mapping(monitor) -> None:
    view = wait_for("fresh reports", lambda: fresh(monitor, "node0", "node1", "node2"))
    assert ray.get(monitor.link_load.remote()) == LOADS
    node0 = view.node("node0").report
    assert node0.gpus == {3: 3.0}  # nvlink at 0.75 -> 0.75 / 0.25
    assert node0.link("pcie").contention == 1.0 and node0.link("nic").rx_bytes_per_s == 0.25e9


def test_reports_for_nodes_the_monitor_does_not_run_an_agent_for_are_dropped(monitor, names) -> None:
    """Anyone can call the actor: a report under a made-up name, one under a real name from another
    Ray node, and one that is not a report at all leave the view and link load as they were."""
    wait_for("fresh reports", lambda: fresh(monitor, "node0", "node1", "node2"))
    other_id = next(i for i, n in names.items() if n == "node2")
    forged = NodeReport("node1", other_id, 10**6, 1, 1.0, time.time(), links=(LinkStat("nic", 0.0, 0.0, 0.99, 1.0),))
    made_up = NodeReport("forged", other_id, 0, 1, 1.0, time.time(), links=(LinkStat("nic", 0.0, 0.0, 0.99, 1.0),))
    ray.get([monitor.report.remote(forged), monitor.report.remote(made_up), monitor.report.remote({"node": "x"})])
    view = ray.get(monitor.view.remote())
    assert [n.node for n in view.nodes] == ["node0", "node1", "node2"]
    assert view.node("node1").report.seq < 10**6
    assert ray.get(monitor.link_load.remote()) == LOADS


def test_a_killed_agent_is_restarted_and_the_monitor_recovers(monitor) -> None:
    wait_for("fresh reports", lambda: fresh(monitor, "node1"))
    agent = ray.get(monitor.agents.remote())["node1"]
    old_pid = ray.get(agent.info.remote())["pid"]
    ray.kill(agent, no_restart=False)

    def recovered():
        view = fresh(monitor, "node1")
        state = view and view.node("node1")
        return state and state.restarts >= 1 and state.report.pid != old_pid

    wait_for("the restarted agent's reports", recovered)
    assert ray.get(agent.info.remote())["pid"] != old_pid  # the same handle reaches the new process
    assert ray.get(monitor.link_load.remote())["node1/nic"] == 0.125


def test_a_joining_node_gets_an_agent_and_a_removed_one_turns_stale(cluster, monitor) -> None:
    before = set(ray.get(monitor.agents.remote()))
    node = cluster.add_node(**NODE_ARGS, resources={"n3": 1})
    new = wait_for("an agent on the new node", lambda: set(ray.get(monitor.agents.remote())) - before)
    (name,) = new
    assert name.endswith(node.node_id[:8])  # same hostname as the others: the id tells them apart
    wait_for("the new node's first report", lambda: fresh(monitor, name))
    cluster.remove_node(node)
    def stale():
        view = ray.get(monitor.view.remote())
        return view if view.node(name).stale else None

    view = wait_for("the removed node to turn stale", stale)
    assert not view.node("node0").stale
    assert name not in ray.get(monitor.agents.remote())
    assert not any(key.startswith(f"{name}/") for key in ray.get(monitor.link_load.remote()))


def test_prometheus_endpoint_on_loopback(monitor) -> None:
    wait_for("fresh reports", lambda: fresh(monitor, "node0", "node1", "node2"))
    host, port = ray.get(monitor.start_metrics.remote(0))
    assert host == "127.0.0.1" and ray.get(monitor.metrics_address.remote()) == (host, port)

    def sent_bytes() -> str | None:
        """The page once node2's pcie has carried bytes (its first report has no interval yet)."""
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        sent = re.search(r'deepshare_link_transmit_bytes_total\{link="pcie",node="node2"\} (\S+)', page)
        return page if sent is not None and float(sent.group(1)) > 0 else None

    try:
        text = wait_for("a transmit byte total", sent_bytes)  # 1 GB/s replayed, held over each interval
    finally:
        ray.get(monitor.stop_metrics.remote())
    assert 'deepshare_link_utilization_ratio{link="nic",node="node0"} 0.25' in text
    assert 'deepshare_link_utilization_ratio{link="gpu3/nvlink",node="node0"} 0.75' in text
    assert 'deepshare_link_contention{link="pcie",node="node0"} 1.0' in text
    assert 'deepshare_probe_available{node="node1",probe="simulated"} 1.0' in text
    assert 'deepshare_node_stale{node="node2"} 0.0' in text


def test_a_restarted_detached_monitor_adopts_the_running_agents(cluster, names) -> None:
    config = AgentConfig(interval_s=0.1, report_interval_s=0.3, stale_after_s=1.0, reconcile_interval_s=0.3)
    handle = ContentionMonitor.options(name="restart-monitor", lifetime="detached").remote(
        config, ReplayProbes([LOADS]), None, names, True, None, "restart-agent"
    )
    try:
        ray.get(handle.reconcile.remote())
        wait_for("reports", lambda: fresh(handle, "node0", "node1", "node2"))
        pids = {n: ray.get(a.info.remote())["pid"] for n, a in ray.get(handle.agents.remote()).items()}
        ray.kill(handle, no_restart=False)
        wait_for("the restarted monitor's view", lambda: fresh(handle, "node0", "node1", "node2"), timeout=30)
        wait_for("the agents adopted", lambda: len(ray.get(handle.agents.remote())) == 3)
        after = {n: ray.get(a.info.remote())["pid"] for n, a in ray.get(handle.agents.remote()).items()}
        assert after == pids  # found by name, not started again
        # (the view just read may still have been the old process's, before the kill took effect)
        wait_for("every node's link load from the restarted monitor",
                 lambda: ray.get(handle.link_load.remote()) == LOADS, timeout=30)
    finally:
        ray.get(handle.shutdown.remote())
        ray.kill(handle, no_restart=True)


def test_an_agent_whose_probes_cannot_be_built_still_runs_and_says_why(cluster) -> None:
    from deepshare.agents.agent import NodeAgent

    def broken(node: str, spec: object) -> list:
        raise RuntimeError("no probes today")

    agent = NodeAgent.remote("lonely", None, broken, None, 0.1)
    try:
        info = ray.get(agent.info.remote())
        assert info["probes"] == [("probes", False, "building probes failed: no probes today")]
        report = wait_for("a report", lambda: ray.get(agent.recent.remote(1)))[0]
        assert report.probes[0].reason == "building probes failed: no probes today" and report.links == ()
    finally:
        ray.kill(agent, no_restart=True)


def test_cli_start_status_stop(cluster) -> None:
    args = ("--address", cluster.address, "--name", "cli-monitor")
    rc, out, err = run_cli("start", *args, "--interval", "0.2", "--report-interval", "0.5", "--metrics-port", "0")
    try:
        assert rc == 0, err
        assert "contention monitor 'cli-monitor' started; agents on 3 node(s)" in out
        assert "sampling every 0.2 s, reporting every 0.6 s, stale after 5 s" in out  # 0.5 s: 3 samples
        assert "Prometheus metrics at http://127.0.0.1:" in out

        def reported():
            code, text, _ = run_cli("status", *args, "--json", "-")
            doc = json.loads(text) if code == 0 else {"nodes": []}
            ok = len(doc["nodes"]) == 3 and all(n["links"] and not n["stale"] for n in doc["nodes"])
            return doc if ok else None

        doc = wait_for("real-probe reports from the three agents", reported)
        for node in doc["nodes"]:
            probes = {p["name"]: p for p in node["probes"]}
            assert probes["ethernet"]["available"] and set(probes) == {"nvml", "infiniband", "ethernet"}
            assert any(link["link"] == "nic" for link in node["links"])
        rc, out, _ = run_cli("status", *args)
        assert rc == 0 and "utilisation" in out and "contention" in out and "nic" in out
        rc, out, _ = run_cli("start", *args)
        assert rc == 0 and "already running" in out
    finally:
        rc, out, err = run_cli("stop", *args)
    assert rc == 0 and "stopped contention monitor 'cli-monitor' and 3 agent(s)" in out, err
    rc, _, err = run_cli("status", *args)
    assert rc == 2 and "no contention monitor 'cli-monitor'" in err and err.count("\n") == 1
