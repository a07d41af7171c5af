"""``MetricsExporter.start``/``stop``: concurrent calls (the monitor runs 8 at once) leave no
server behind."""

from __future__ import annotations

import socket
import threading

from deepshare.agents.exporter import MetricsExporter
from deepshare.agents.view import ClusterState


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_concurrent_starts_bind_one_server_and_stop_closes_it():
    exporter = MetricsExporter(ClusterState(5.0).snapshot)
    gate = threading.Barrier(8)
    got: list[int] = []

    def start() -> None:
        gate.wait()
        got.append(exporter.start(0, "127.0.0.1"))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    exporter.stop()
    assert len(got) == 8 and not any(_listening(port) for port in set(got))
    assert len(set(got)) == 1
