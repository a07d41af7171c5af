"""``MetricsExporter.start``/``stop``: the address it returns is the one bound, a second start
never claims another, and concurrent calls (the monitor runs 8 at once) leave no server behind."""

from __future__ import annotations

import socket
import threading

import pytest

from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.view import ClusterState


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_start_returns_the_host_and_port_bound_and_a_second_start_keeps_or_refuses():
    exporter = MetricsExporter(ClusterState(5.0).snapshot)
    try:
        host, port = exporter.start(0, "127.0.0.1")
        assert host == "127.0.0.1" and port > 0 and exporter.address == (host, port) and exporter.port == port
        assert exporter.start(0, "127.0.0.1") == (host, port)
        assert exporter.start(port, "127.0.0.1") == (host, port)
        with pytest.raises(ValueError, match=f"already served at 127.0.0.1:{port}"):
            exporter.start(0, "0.0.0.0")
        with pytest.raises(ValueError, match="already served"):
            exporter.start(port + 1 if port < 65535 else port - 1, "127.0.0.1")
    finally:
        exporter.stop()
    assert exporter.address is None and exporter.port is None and not _listening(port)


def test_a_second_start_with_other_allowed_hosts_is_refused_not_ignored():
    """Started again on its address with other ``allowed_hosts``, the endpoint kept checking the
    first start's list and said nothing."""
    exporter = MetricsExporter(ClusterState(5.0).snapshot)
    try:
        host, port = exporter.start(0, "127.0.0.1", ("grafana.internal",))
        assert exporter.start(port, "127.0.0.1", ("grafana.internal",)) == (host, port)
        with pytest.raises(ValueError, match=r"allowing the hosts \['grafana.internal'\] \(asked for \[\]\)"):
            exporter.start(port, "127.0.0.1")
        with pytest.raises(ValueError, match="stop them first to change them"):
            exporter.start(0, "127.0.0.1", ("grafana.internal", "evil.example"))
        assert exporter.start(port, "127.0.0.1", ["Grafana.Internal.", "localhost"]) == (host, port)  # the same names
    finally:
        exporter.stop()
    host, port = exporter.start(0, "127.0.0.1", iter(["grafana.internal"]))  # after a stop, a new list is taken
    try:
        import http.client
        conn = http.client.HTTPConnection(host, port, timeout=5)
        conn.request("GET", "/metrics", headers={"Host": "grafana.internal"})
        assert conn.getresponse().status == 200  # an iterator's names were read once, not lost
    finally:
        exporter.stop()


def test_every_interface_is_reported_as_such():
    exporter = MetricsExporter(ClusterState(5.0).snapshot)
    try:
        host, port = exporter.start(0, "0.0.0.0")
        assert host == "0.0.0.0" and _listening(port)
    finally:
        exporter.stop()


def test_concurrent_starts_bind_one_server_and_stop_closes_it():
    exporter = MetricsExporter(ClusterState(5.0).snapshot)
    gate = threading.Barrier(8)
    got: list[tuple[str, int]] = []

    def start() -> None:
        gate.wait()
        got.append(exporter.start(0, "127.0.0.1"))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    exporter.stop()
    assert len(got) == 8 and len(set(got)) == 1
    assert not _listening(got[0][1])


def _get(port: int, host_header: str | None) -> tuple[int, bytes]:
    """GET /metrics on loopback with this Host header (None: none at all)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", "/metrics", skip_host=True)
        if host_header is not None:
            conn.putheader("Host", host_header)
        conn.endheaders()
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_a_loopback_endpoint_answers_only_a_host_that_names_it():
    """DNS rebinding: a page's own name resolving to 127.0.0.1 read every node's names and loads
    from a loopback endpoint, which answered any Host. Now such a Host is a 403; localhost,
    loopback IPs and the names allowed are answered."""
    exporter = MetricsExporter(ClusterState(5.0).snapshot)
    try:
        _, port = exporter.start(0, "127.0.0.1", ("prom.internal",))
        for host in (f"127.0.0.1:{port}", "localhost", f"[::1]:{port}", "127.0.0.2", "prom.internal:9479"):
            assert _get(port, host)[0] == 200, host
        for host in ("attacker.example", f"attacker.example:{port}", "10.1.2.3", None, f"127.0.0.1:{port},evil.example"):
            status, body = _get(port, host)
            assert status == 403 and b"metrics-allowed-host" in body, host
    finally:
        exporter.stop()


def test_an_endpoint_bound_everywhere_answers_ip_literals_and_this_nodes_names():
    exporter = MetricsExporter(ClusterState(5.0).snapshot)
    try:
        _, port = exporter.start(0, "0.0.0.0")
        for host in ("10.1.2.3:9479", socket.gethostname(), "localhost"):
            assert _get(port, host)[0] == 200, host
        assert _get(port, "attacker.example")[0] == 403
    finally:
        exporter.stop()


@pytest.mark.parametrize("names", [("a b",), ("x/y",), ("",), ("ok", "t\tab"), ["list"]])
def test_allowed_metrics_hosts_must_be_a_tuple_of_host_names(names):
    from deepshare.agents.config import AgentConfig

    with pytest.raises(ValueError, match="metrics_allowed_hosts must be a tuple of host names"):
        AgentConfig(metrics_allowed_hosts=names)
    assert AgentConfig(metrics_allowed_hosts=("prom.internal", "10.0.0.1")).metrics_allowed_hosts == ("prom.internal", "10.0.0.1")


def test_a_bad_metrics_allowed_host_flag_is_a_usage_error(capsys):
    from test_agents_probes import run_cli  # this folder is on sys.path under pytest

    rc, _, _ = run_cli("start", "--metrics-port", "0", "--metrics-allowed-host", "a b")
    assert rc == 2 and "argument --metrics-allowed-host: expected a host name" in capsys.readouterr().err


def test_a_config_pickled_before_metrics_allowed_hosts_existed_unpickles_with_its_default():
    """Ray restarts a detached monitor from the arguments it was created with, pickled by the
    deepshare of that day: the field it lacked must read as its default, not fail every read."""
    import pickle

    from deepshare.agents.config import AgentConfig

    config = AgentConfig(metrics_port=9479, metrics_allowed_hosts=("prom.internal",))
    assert pickle.loads(pickle.dumps(config)) == config
    older = AgentConfig.__new__(AgentConfig)
    older.__setstate__(config.__getstate__()[:-1])  # the state as a config without the last field pickled it
    assert older == AgentConfig(metrics_port=9479) and older.metrics_allowed_hosts == ()
