"""``--address`` of ``evaluate`` and ``compare``: a bad address is one line and exit 2 before any
work, and without the flag the commands never import Ray (the local pool, as before)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
SUITE = "name: h\njobs_per_node: 2\nloads: [1.0]\nmixes: [heavy]\nclusters: [[2, 8]]\ncontention: [profiled]\nseeds: 1\n" \
        "heuristics: [srsf+packed]\n"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", [["evaluate", "--suite", "tiny"],
                                     ["evaluate", "--trace", TRACE, "--policies", "srsf+packed"],
                                     ["compare", "--trace", TRACE]], ids=["suite", "evaluate", "compare"])
@pytest.mark.parametrize("address, needles", [
    ("127.0.0.1:{closed}", ["--address 127.0.0.1:", "no Ray cluster answers there", "expected 'auto' or HOST:PORT"]),
    ("head-without-port", ["--address 'head-without-port'", "expected 'auto' or HOST:PORT"]),
    ("head:99999", ["--address 'head:99999'", "expected 'auto' or HOST:PORT"]),
    ("127.0.0.1:²", ["--address '127.0.0.1:²'", "expected 'auto' or HOST:PORT"]),  # '²'.isdigit() is True
], ids=["unreachable", "no-port", "port-out-of-range", "port-not-ascii"])
def test_a_bad_address_is_one_line_and_exit_2(capsys, command, address, needles):
    rc, out, err = cli(capsys, *command, "--address", address.format(closed=closed_port()))
    assert rc == 2 and out == ""
    one_error_line(err, *needles)


def test_workers_and_address_are_one_or_the_other(capsys):
    rc, _, err = cli(capsys, "evaluate", "--suite", "tiny", "--workers", "2", "--address", "auto")
    assert rc == 2
    one_error_line(err, "--workers", "--address")


@pytest.mark.parametrize("command", [["evaluate", "--suite", "SUITE"], ["compare", "--trace", str(TRACE)]],
                         ids=["suite", "compare"])
def test_without_address_no_ray_is_imported(tmp_path, command):
    """Every heuristic's compare runs (as by default) on the bundled trace's first 8 jobs: what is
    imported depends on the command and its policies, not on the trace's length."""
    suite = tmp_path / "h.yaml"
    suite.write_text(SUITE)
    short = tmp_path / "short.json"
    short.write_text(json.dumps(dict(list(json.loads(TRACE.read_text()).items())[:8])))
    args = [str(suite) if a == "SUITE" else str(short) if a == str(TRACE) else a for a in command]
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "deepshare", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "deepshare.cli" in imported and not {"ray", "deepshare.experiments.ray_runs"} & imported


@pytest.fixture
def http_listener():
    """A loopback web server: it accepts connections but is no Ray GCS (before, ``ray.init``
    retried it for ever)."""
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # the test reads the CLI's stderr alone
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("command", [["evaluate", "--suite", "tiny"], ["compare", "--trace", TRACE]], ids=["suite", "compare"])
def test_a_listener_that_is_not_ray_is_one_line_and_exit_2(capsys, http_listener, command, monkeypatch):
    monkeypatch.setattr("deepshare.agents.deploy.GRPC_READY_TIMEOUT_S", 1.5)
    rc, out, err = cli(capsys, *command, "--address", f"127.0.0.1:{http_listener}")
    assert rc == 2 and out == ""
    one_error_line(err, f"--address 127.0.0.1:{http_listener}: something listens there but it is not a Ray head "
                        "node's GCS (no gRPC answer within 1.5 s)")


def test_a_grpc_server_passes_the_probe_and_a_silent_listener_does_not():
    import grpc
    from concurrent.futures import ThreadPoolExecutor

    from deepshare.agents.deploy import speaks_grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        assert speaks_grpc("127.0.0.1", port, 10.0)
    finally:
        server.stop(None)
    with socket.socket() as silent:  # accepts (the backlog) but never answers the HTTP/2 preface
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        assert not speaks_grpc("127.0.0.1", silent.getsockname()[1], timeout_s=0.5)


def test_tls_clusters_are_not_probed_in_plain_text(monkeypatch, http_listener):
    from deepshare.agents import deploy

    monkeypatch.setenv("RAY_USE_TLS", "1")
    monkeypatch.setattr(deploy, "speaks_grpc", lambda *args: pytest.fail("probed"))
    deploy.check_reachable(f"127.0.0.1:{http_listener}")  # only the TCP connect is checked
