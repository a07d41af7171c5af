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
