"""The monitor's metrics endpoint on the session's local Ray: part of its config, so a monitor
Ray restarts serves it again; ``agents start`` prints the address bound, and a port it cannot
bind is an error that says what runs on without it."""

from __future__ import annotations

import socket
import urllib.request

import pytest

ray = pytest.importorskip("ray")

import deepshare.cli.agents as cli  # noqa: E402
from deepshare.agents import AgentConfig, ReplayProbes  # noqa: E402
from deepshare.agents.config import NAMESPACE  # noqa: E402
from deepshare.agents.monitor import ContentionMonitor  # noqa: E402
from cli_run import agents_handler  # noqa: E402
from polling import wait_for  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_local")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(host: str, port: int) -> str | None:
    try:
        return urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None




def test_a_restarted_monitor_serves_its_metrics_again():
    port = _free_port()
    config = AgentConfig(reconcile_interval_s=1.0, metrics_port=port)
    monitor = ContentionMonitor.options(name="ds-test-metrics-restart", namespace=NAMESPACE).remote(
        config, ReplayProbes([{"nic": 0.5}]), None, None, False, NAMESPACE, "ds-test-metrics-restart-agent")
    try:
        assert ray.get(monitor.metrics_address.remote(), timeout=60) == ("127.0.0.1", port)
        pid = ray.get(monitor.__ray_call__.remote(lambda self: __import__("os").getpid()))
        ray.kill(monitor, no_restart=False)
        wait_for("the restarted monitor", lambda: ray.get(monitor.__ray_call__.remote(
            lambda self: __import__("os").getpid()), timeout=30) != pid, timeout=60)
        assert ray.get(monitor.metrics_address.remote(), timeout=30) == ("127.0.0.1", port)
        assert "deepshare_node_stale" in wait_for("a scrape of the restarted monitor",
                                                  lambda: _scrape("127.0.0.1", port), timeout=30)
    finally:
        ray.get(monitor.shutdown.remote(), timeout=60)
        ray.kill(monitor, no_restart=True)


def test_start_prints_the_address_bound_and_a_taken_port_says_what_runs_on():
    """A taken port; then a running monitor without metrics; then one on 127.0.0.2, which a second
    start asking for 127.0.0.1 reports as it is."""
    name = "ds-test-metrics-cli"
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    try:
        rc, out, err = agents_handler(cli.cmd_start, name=name, metrics_port=taken)
        assert rc == 2 and f"contention monitor {name!r} started" in out and err.count("\n") == 1
        assert f"--metrics-port {taken}: the monitor cannot serve metrics on 127.0.0.1:{taken}" in err
        assert f"the monitor {name!r} and its agents keep running without them" in err
        assert f"`deepshare agents stop --address auto --name {name}` stops them" in err
    finally:
        busy.close()
        rc, out, _ = agents_handler(cli.cmd_stop, name=name)
    assert rc == 0 and f"stopped contention monitor {name!r}" in out
    try:
        assert agents_handler(cli.cmd_start, name=name)[0] == 0
        rc, out, err = agents_handler(cli.cmd_start, name=name, metrics_port=0)
        assert rc == 0 and "already running" in out and "Prometheus" not in out
        assert err == (f"deepshare: warning: --metrics-port 0: the running monitor serves no metrics (its settings"
                       f" kept); `deepshare agents stop --address auto --name {name}` first to start one that does\n")
    finally:
        assert agents_handler(cli.cmd_stop, name=name)[0] == 0
    try:
        rc, out, _ = agents_handler(cli.cmd_start, name=name, metrics_port=0, metrics_host="127.0.0.2")
        assert rc == 0
        url = out.split("Prometheus metrics at ")[1].split()[0]
        assert url.startswith("http://127.0.0.2:") and _scrape(*url[len("http://"):-len("/metrics")].split(":"))
        rc, again, err = agents_handler(cli.cmd_start, name=name, metrics_port=0, metrics_host="127.0.0.1")
        assert rc == 0 and "already running (its settings kept)" in again and f"Prometheus metrics at {url}" in again
    finally:
        rc, out, _ = agents_handler(cli.cmd_stop, name=name)
    assert rc == 0
