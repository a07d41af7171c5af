"""Attacks on a real `deepshare serve` (a subprocess on a free loopback port, one for the module,
with small limits so each attack resolves in seconds): oversized and huge-but-admitted requests,
64 slow-body clients, clients that leave mid-body, and what the local Ray instance exposes."""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from serve_process import free_port, serve_process
from serve_process import metric as scraped

from deepshare.serving.client import PlacementClient, PlacementServiceError
from deepshare.serving.samples import small_request
from deepshare.serving.schemas import PlacementRequest

pytestmark = [pytest.mark.slow, pytest.mark.timing]  # a real `deepshare serve` subprocess; response times asserted

TOKEN = "adversarial-token-1"
DECISION_TIMEOUT_S = 0.2
"""Under what rl-hybrid needs for 4,096 nodes x MAX_PENDING (about 0.5 s of CPU on the 2-core
machine since the shipped file's anchor streak of 2026-12-06; 1.7 s before, when this was 0.4 s),
so the huge request still runs past the deadline on a machine 2x faster; 20x what a small
request needs."""
BODY_TIMEOUT_S = 2.0
MAX_PENDING = 9000
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    flags = ("--decision-timeout-s", str(DECISION_TIMEOUT_S), "--body-timeout-s", str(BODY_TIMEOUT_S),
             "--decision-threads", "2", "--max-pending", str(MAX_PENDING))
    with serve_process(tmp_path_factory, TOKEN, *flags, ready_timeout_s=180) as served:
        METRICS[served.url] = served.metrics_url
        yield served.url, served.port, served.proc


def huge(nodes: int, pending: int) -> str:
    """The issue's request: idle 8-GPU nodes and 1-GPU jobs (0.7 MB at 4096 x 10,000)."""
    return json.dumps({
        "now": 100.0,
        "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 8} for i in range(nodes)],
        "pending": [{"job_id": f"p{j}", "model": "FSDP", "gpus": 1} for j in range(pending)],
    })


def place(url: str, body: str, timeout: float = 30) -> tuple[requests.Response, float]:
    start = time.monotonic()
    reply = requests.post(url + "/v1/placements", data=body, headers=AUTH, timeout=timeout)
    return reply, time.monotonic() - start


METRICS: dict[str, str] = {}
"""Service URL -> its private Ray instance's metrics agent, where the replica's metrics are."""


def metric(url: str, name: str, **labels: str) -> float:
    """``ray_<name>`` summed over the series with ``labels``, as the service's Ray agent exports it."""
    return scraped(METRICS[url], "ray_" + name, **labels)


def at_least(url: str, name: str, value: float, **labels: str) -> float:
    """``metric(...)`` once it reaches ``value`` (the replica reports every second), or its last value after 30 s."""
    deadline = time.monotonic() + 30
    while (now := metric(url, name, **labels)) < value and time.monotonic() < deadline:
        time.sleep(0.25)
    return now


# -- Ray exposure (issue 12, item 13) ----------------------------------------------------------
def _tree(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo.extend(children.get(pid, ()))
    return out


def _listening(pids: set[int]) -> list[str]:
    """Local addresses of the TCP sockets in LISTEN state that ``pids`` hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(_address(fields[1].split(":")[0], width))
    return found


def _address(hex_ip: str, width: int) -> str:
    raw = bytes.fromhex(hex_ip)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # little-endian words
    return socket.inet_ntop(socket.AF_INET if width == 8 else socket.AF_INET6, words)


def test_the_local_ray_instance_listens_on_loopback_only(service):
    _, _, proc = service
    addresses = _listening(_tree(proc.pid))
    assert len(addresses) >= 4, addresses  # GCS, raylet, workers, Serve's proxy at least
    exposed = [a for a in addresses if a not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
    assert exposed == [], addresses


# -- bounded work (item 6) ---------------------------------------------------------------------
def test_the_issue_request_is_refused_at_once_naming_the_limit(service):
    url, _, _ = service
    body = huge(4096, 10_000)
    assert len(body) > 600_000
    for _ in range(3):  # parsing counts against the decision timeout: a loaded machine may 503 first
        reply, took = place(url, body)
        if reply.status_code != 503:
            break
    assert reply.status_code == 413 and took < 5.0, (reply.status_code, took)
    assert reply.json()["detail"] == [{
        "loc": ["body", "pending"], "type": "too_large",
        "msg": f"10000 pending jobs exceed this service's limit of {MAX_PENDING} (--max-pending)",
    }]


def test_a_huge_admitted_request_gets_503_while_small_ones_answer_at_once(service):
    url, _, _ = service
    body = huge(4096, MAX_PENDING)
    small = json.dumps(small_request())
    with ThreadPoolExecutor(4) as pool:
        big = pool.submit(place, url, body)
        time.sleep(0.2)  # the huge request is being read or decided now
        quick = [place(url, small) for _ in range(3)]
        health = time.monotonic()
        assert requests.get(url + "/healthz", timeout=5).status_code == 200
        health = time.monotonic() - health
        reply, took = big.result()
    assert all(r.status_code == 200 for r, _ in quick), [r.text for r, _ in quick]
    assert max(t for _, t in quick) < 1.0 and health < 1.0, ([t for _, t in quick], health)
    assert reply.status_code == 503 and reply.headers["Retry-After"] == str(math.ceil(DECISION_TIMEOUT_S)), reply.text
    assert "decision timeout" in reply.json()["detail"]
    assert DECISION_TIMEOUT_S <= took < DECISION_TIMEOUT_S + 2.0, took

    # The work really stopped: two more at once take both decision threads and both get 503;
    # a small request right after finds a free thread (it would wait or 503 behind running work).
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: place(url, body), range(2)))
    assert [r.status_code for r, _ in both] == [503, 503]
    reply, took = place(url, small)
    assert reply.status_code == 200 and took < 1.0, took
    with PlacementClient(url, token=TOKEN, timeout_s=10) as client:  # the client reports when to retry
        with pytest.raises(PlacementServiceError, match=f"HTTP 503: no decision within {DECISION_TIMEOUT_S:g} s") as refused:
            client.place(PlacementRequest.model_validate_json(body))
    assert (refused.value.status, refused.value.retry_after_s) == (503, float(math.ceil(DECISION_TIMEOUT_S)))
    assert at_least(url, "deepshare_serve_decision_duration_seconds_count", 4, outcome="timeout") >= 4
    assert at_least(url, "deepshare_serve_requests_total", 3, route="/v1/placements", code="503") >= 3
    assert metric(url, "deepshare_serve_requests_total", code="500") == 0


# -- slow clients (item 7) ---------------------------------------------------------------------
def test_64_slow_body_clients_neither_block_health_checks_nor_stay_connected(service):
    url, port, _ = service
    clients = []
    head = (f"POST /v1/placements HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n").encode()
    stop = threading.Event()

    def trickle() -> None:  # a byte per client every half second
        while not stop.wait(0.5):
            for sock in clients:
                try:
                    sock.send(b" ")
                except OSError:
                    pass

    try:
        for _ in range(64):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(head + b"{")
            clients.append(sock)
        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        checks = []
        until = time.monotonic() + BODY_TIMEOUT_S + 1.5
        while time.monotonic() < until:
            start = time.monotonic()
            assert requests.get(url + "/healthz", timeout=5).status_code == 200
            checks.append(time.monotonic() - start)
            time.sleep(0.2)
        # Blocked behind the slow bodies, checks would wait for the body timeout (2 s); the median
        # tells that apart from one check a loaded machine delayed (max() failed now and then in CI,
        # and so did asking for 5 checks in the window: a busy machine made 4, one of them 2.1 s).
        assert len(checks) >= 3 and statistics.median(checks) < BODY_TIMEOUT_S / 2, checks
        stop.set()
        sender.join()
        answers = []
        for sock in clients:  # each got a 408 and was closed by the service
            sock.settimeout(10)
            data = b""
            try:
                while chunk := sock.recv(65536):
                    data += chunk
            except ConnectionResetError:  # a byte trickled after the service closed: its RST can drop the 408
                data = data or b"reset after the service closed"
            answers.append(data.split(b"\r\n", 1)[0])
        assert set(answers) <= {b"HTTP/1.1 408 Request Timeout", b"reset after the service closed"}, set(answers)
        assert answers.count(b"HTTP/1.1 408 Request Timeout") >= 1, set(answers)  # the metric below counts all 64
    finally:
        stop.set()
        for sock in clients:
            sock.close()
    assert at_least(url, "deepshare_serve_errors_total", 64, kind="body_timeout") >= 64


# -- clients that leave (item 8) ---------------------------------------------------------------
def test_a_client_that_disconnects_mid_body_is_499_never_500(service):
    """Serve may cancel such a request before the replica sees it (then it is not counted at
    all); those the replica sees are 499s, and none is ever a 500."""
    url, port, _ = service
    before = metric(url, "deepshare_serve_requests_total", route="/v1/placements", code="499")
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                (f"POST /v1/placements HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                 "Content-Length: 5000\r\n\r\n{\"now\": 1,").encode()
            )
            time.sleep(0.5)  # the request reached the replica, which waits for the rest
    deadline = time.monotonic() + 30
    while metric(url, "deepshare_serve_requests_total", route="/v1/placements", code="499") == before:
        page = requests.get(METRICS[url], timeout=10).text
        assert time.monotonic() < deadline, [line for line in page.splitlines() if "requests_total" in line]
        time.sleep(0.2)
    assert metric(url, "deepshare_serve_requests_total", code="500") == 0
    assert metric(url, "deepshare_serve_errors_total", kind="server") == 0
    assert at_least(url, "deepshare_serve_errors_total", 1, kind="client_closed") >= 1


# -- start-up failures are one line (item 11) --------------------------------------------------
def _serve(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deepshare", "serve", *argv], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--decision-timeout-s", "1e10", "seconds in [0.001, 3600]"),
        ("--body-timeout-s", "0", "seconds in [0.001, 3600]"),
        ("--body-timeout-s", "5e-324", "seconds in [0.001, 3600]"),
        ("--max-pending", "10001", "an integer in 1..10000"),
        ("--max-nodes", "0", "an integer in 1..4096"),
        ("--decision-threads", "65", "an integer in 1..64"),
    ],
)
def test_out_of_range_flags_exit_2_naming_the_range(flag, value, expected):
    proc = _serve(flag, value)
    assert proc.returncode == 2 and f"argument {flag}: expected {expected}, got '{value}'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unreachable_cluster_is_one_line_and_exit_2():
    proc = _serve("--port", str(free_port()), "--address", f"127.0.0.1:{free_port()}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("deepshare: error: --address 127.0.0.1:")


def test_a_ray_start_failure_is_one_line_and_exit_1(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    proc = _serve("--port", str(free_port()), env=dict(os.environ, RAY_TMPDIR=str(not_a_folder)))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("deepshare: error: the placement service did not start on a local Ray instance"), last
