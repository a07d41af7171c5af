"""The placement service over HTTP: one `deepshare serve` process on a free loopback port for
the whole module (with a bearer token and a small body limit), stopped with SIGTERM at the end."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_process import free_port, metric, metric_settles_at, scrape, serve_process, settled, settled_all
from serving_cases import assert_feasible, canonical, large_request, small_request, valid_requests

from deepshare.serving.client import PlacementClient, PlacementServiceError
from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology
from deepshare.core.traces import load
from deepshare.policies import make_policy

pytestmark = pytest.mark.slow  # a real `deepshare serve` (Ray Serve) subprocess

TOKEN = "test-token-123"
BODY_LIMIT = 100_000
TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with serve_process(tmp_path_factory, TOKEN, "--max-body-bytes", str(BODY_LIMIT)) as process:
        yield process


@pytest.fixture(scope="module")
def service(served):
    return served.url, served.proc, served.log


@pytest.fixture(scope="module")
def http(service):
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {TOKEN}"
    return session


def post(http, url: str, body) -> requests.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return http.post(url + "/v1/placements", data=data, timeout=30)


def test_valid_request_gets_a_feasible_decision_per_pending_job(service, http):
    url, _, _ = service
    for request in (small_request(), large_request()):
        reply = post(http, url, request)
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert_feasible(request, answer)
        assert answer["policy"] == "rl-hybrid" and answer["policy_version"].startswith("deepshare-")


def test_served_decisions_equal_in_process_decisions(service):
    """Replay a simulation's decision points through HTTP: the same decisions as in-process."""
    url, _, _ = service
    local = make_policy("rl-hybrid")
    sim = Simulator(load_topology("testbed"), load(TRACE).jobs[:120], make_contention("profiled"))
    points = 0
    with PlacementClient(url, token=TOKEN) as client:
        assert client.name == "rl-hybrid"
        while (view := sim.advance()) is not None:
            decision = local.decide(view)
            assert canonical(client.decide(view)) == canonical(decision), view.now
            sim.apply(decision)
            points += 1
    assert points > 50 and sim.done


def test_concurrent_requests_batched_together_get_the_in_process_decisions(served, service, http):
    """Eight clients at once: their steps' forward passes share batches on the replica, and every
    answer is still exactly the in-process engine's for its own request."""
    from concurrent.futures import ThreadPoolExecutor

    from deepshare.serving.engine import EngineSettings, PlacementEngine
    from deepshare.serving.translate import view_to_request

    url, _, _ = service
    local = make_policy("rl-hybrid")
    engine = PlacementEngine(EngineSettings("rl-hybrid"))
    sim = Simulator(load_topology("testbed"), load(TRACE).jobs[:120], make_contention("profiled"))
    bodies, expected = [], []
    while len(bodies) < 48 and (view := sim.advance()) is not None:
        request = view_to_request(view)
        bodies.append(request.model_dump_json(exclude_none=True))
        expected.append(engine.place(request).model_dump(exclude_none=True))
        sim.apply(local.decide(view))
    passes = "ray_deepshare_serve_scorer_batch_size_count"
    before = settled(served.metrics_url, passes)

    def replay(start: int) -> list[tuple[int, dict]]:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {TOKEN}"
        return [(i, post(session, url, bodies[i]).json()) for i in range(start, len(bodies), 8) for _ in range(3)]

    with ThreadPoolExecutor(8) as pool:
        answers = [pair for part in pool.map(replay, range(8)) for pair in part]
    assert len(answers) == 3 * len(bodies) and sum(bool(e["decisions"]) for e in expected) > 40
    assert all(got == expected[i] for i, got in answers)
    deadline = time.monotonic() + 30  # some steps were scored in batches with other requests'
    while metric(served.metrics_url, passes) == before:
        assert time.monotonic() < deadline
        time.sleep(0.25)


def detail(reply: requests.Response) -> list[dict]:
    return reply.json()["detail"]


@pytest.mark.parametrize(
    "body, status, loc",
    [
        ('{"now": 1, "nodes": [', 400, ["body"]),
        ("not json at all", 400, ["body"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": "8", "free_gpus": 8}]}, 422, ["body", "nodes", 0, "gpus"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": -8, "free_gpus": 0}]}, 422, ["body", "nodes", 0, "gpus"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": 8, "free_gpus": 8}], "pending": [{"job_id": "x", "model": "FSDP", "gpus": -2}]},
         422, ["body", "pending", 0, "gpus"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": 8, "free_gpus": 4}],
          "running": [{"job_id": "r", "model": "FSDP", "placement": {"b": 4}}]}, 422, ["body", "running", 0, "placement", "b"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": 8, "free_gpus": 4}], "running": [{"job_id": "x", "model": "FSDP", "placement": {"a": 4}}],
          "pending": [{"job_id": "x", "model": "FSDP", "gpus": 2}]}, 422, ["body", "running", 0, "job_id"]),
        ({"now": 1, "nodes": []}, 422, ["body", "nodes"]),
        ({"nodes": [{"name": "a", "gpus": 8, "free_gpus": 8}]}, 422, ["body", "now"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": 8, "free_gpus": 8, "fabirc": "pcie"}]}, 422, ["body", "nodes", 0, "fabirc"]),
        ([1, 2, 3], 422, ["body"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": 8, "free_gpus": 8}],
          "pending": [{"job_id": "x", "model": "FSDP", "gpus": 2, "requested_s": 0}]}, 422, ["body", "pending", 0, "requested_s"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": 8, "free_gpus": 8}],
          "pending": [{"job_id": "x", "model": "FSDP", "gpus": 2, "user": ""}]}, 422, ["body", "pending", 0, "user"]),
        ({"now": 1, "nodes": [{"name": "a", "gpus": 8, "free_gpus": 8}], "history": [{"gpus": 2, "run_s": -5}]},
         422, ["body", "history", 0, "run_s"]),
    ],
)
def test_bad_input_gets_a_4xx_naming_the_field(service, http, body, status, loc):
    url, _, _ = service
    reply = post(http, url, body)
    assert reply.status_code == status, reply.text
    assert loc in [e["loc"] for e in detail(reply)]


def test_body_over_the_limit_gets_413_declared_or_streamed(service, http):
    url, _, _ = service
    big = json.dumps(large_request(2000, 10))
    assert len(big) > BODY_LIMIT
    assert post(http, url, big).status_code == 413
    chunks = (big[i:i + 4096].encode() for i in range(0, len(big), 4096))  # no Content-Length: chunked
    reply = http.post(url + "/v1/placements", data=chunks, timeout=30)
    assert reply.status_code == 413 and "limit of 100000 bytes" in reply.json()["detail"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
            max_leaves=20,
        ),
        valid_requests().flatmap(lambda r: st.just(r) | mutated(r)),
    )
)
def test_fuzzed_bodies_never_get_a_5xx(service, http, body):
    url, _, _ = service
    reply = post(http, url, json.dumps(body, allow_nan=True))
    assert reply.status_code in (200, 400, 422), (reply.status_code, reply.text)
    if reply.status_code == 200:
        assert_feasible(body, reply.json())


def mutated(request: dict) -> st.SearchStrategy:
    """A valid request with one field replaced by something arbitrary."""
    paths = [("now",)] + [("nodes", i, k) for i, n in enumerate(request["nodes"]) for k in n]
    paths += [("pending", i, k) for i, p in enumerate(request["pending"]) for k in p]
    paths += [("running", i, k) for i, p in enumerate(request["running"]) for k in p]
    junk = st.none() | st.integers(-10, 10**12) | st.floats() | st.text(max_size=6) | st.lists(st.integers(), max_size=2)

    def apply(path_and_value):
        path, value = path_and_value
        body = json.loads(json.dumps(request))
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return body

    return st.tuples(st.sampled_from(paths), junk).map(apply)


@pytest.mark.parametrize("path", ["/v1/policy", "/docs", "/openapi.json"])
def test_every_route_but_healthz_needs_the_token(service, path):
    url, _, _ = service
    assert requests.get(url + path, timeout=10).status_code == 401
    assert requests.get(url + path, headers={"Authorization": "Bearer wrong-token"}, timeout=10).status_code == 401
    assert requests.get(url + path, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).status_code == 200
    assert requests.post(url + "/v1/placements", data=json.dumps(small_request()), timeout=10).status_code == 401
    assert requests.get(url + "/healthz", timeout=10).json() == {"status": "ok", "policy": "rl-hybrid"}


def test_policy_and_openapi_describe_the_service(service, http):
    url, _, _ = service
    info = http.get(url + "/v1/policy", timeout=10).json()
    assert info["name"] == "rl-hybrid" and info["checkpoint"].endswith("rl_est_ppo.pt")
    assert info["trained_on"]["env"]["cluster"] == "testbed" and info["load_seconds"] > 0
    spec = http.get(url + "/openapi.json", timeout=10).json()
    body = spec["paths"]["/v1/placements"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/PlacementRequest"}
    assert {"PlacementRequest", "NodeIn", "PendingIn", "RunningIn", "PlacementResponse"} <= set(spec["components"]["schemas"])


def test_metrics_count_what_was_served(served, http):
    """Read from the private Ray instance's metrics agent, where the replica's metrics go (the
    service's own /metrics is gone); each value is polled until the replica's report arrives."""
    url, metrics_url = served.url, served.metrics_url
    requests_total = "ray_deepshare_serve_requests_total"
    counted = {
        "ok": (requests_total, dict(route="/v1/placements", method="POST", code="200")),
        "invalid": (requests_total, dict(route="/v1/placements", method="POST", code="422")),
        "waits": ("ray_deepshare_serve_decisions_total", dict(action="wait")),
        "places": ("ray_deepshare_serve_decisions_total", dict(action="place")),
    }
    before = settled_all(metrics_url, counted)
    answers = [post(http, url, small_request()).json() for _ in range(3)]
    assert post(http, url, {"now": -1}).status_code == 422
    placed = sum(d["action"] == "place" for a in answers for d in a["decisions"])
    expected = {"ok": 3, "invalid": 1, "waits": 9 - placed, "places": placed}
    for key, (name, labels) in counted.items():
        assert metric_settles_at(metrics_url, name, before[key] + expected[key], **labels) == before[key] + expected[key], key
    assert metric(metrics_url, "ray_deepshare_serve_policy_load_seconds", policy="rl-hybrid") > 0
    assert metric(metrics_url, "ray_deepshare_serve_request_duration_seconds_count", route="/v1/placements") >= 4
    assert metric(metrics_url, "ray_deepshare_serve_decision_duration_seconds_count", outcome="ok") >= 3
    assert metric(metrics_url, "ray_deepshare_serve_decision_duration_seconds_count", outcome="invalid") >= 1
    assert metric_settles_at(metrics_url, "ray_deepshare_serve_decisions_in_flight", 0.0) == 0.0


def test_metrics_follow_prometheus_conventions(served):
    """Build info with version and policy, histograms in seconds, beside Ray Serve's own metrics."""
    import deepshare

    requests.get(served.url + "/healthz", timeout=10)  # a request of this test's own to be measured
    deadline = time.monotonic() + 60  # Ray exports a replica's metrics every few seconds
    while "# TYPE ray_deepshare_serve_request_duration_seconds histogram" not in (
            text := requests.get(served.metrics_url, timeout=10).text) and time.monotonic() < deadline:
        time.sleep(1)
    (labels,) = [have for name, have, value in scrape(served.metrics_url)
                 if name == "ray_deepshare_serve_build_info" and value == 1.0]
    assert labels["version"] == deepshare.__version__ and labels["policy"] == "rl-hybrid"
    assert labels["policy_version"].startswith(f"deepshare-{deepshare.__version__}+")
    assert labels["deployment"] == "PlacementService" and labels["application"] == "deepshare" and labels["replica"]
    assert "# TYPE ray_deepshare_serve_request_duration_seconds histogram" in text
    assert "# TYPE ray_deepshare_serve_requests_total counter" in text
    assert "ray_serve_" in text  # Serve's own metrics on the same page
    assert "deepshare_http_" not in text and "deepshare_placement_" not in text  # the old names are gone


def test_client_reports_refusals_with_the_field(service):
    url, _, _ = service
    from deepshare.serving.schemas import PlacementRequest

    with PlacementClient(url) as anonymous:
        with pytest.raises(PlacementServiceError, match="HTTP 401"):
            anonymous.place(PlacementRequest.model_validate(small_request()))
    with PlacementClient("http://127.0.0.1:9", timeout_s=2) as nowhere:
        with pytest.raises(PlacementServiceError, match="cannot reach"):
            nowhere.health()


def test_sigterm_stops_the_service_cleanly(service):
    """Runs last in this module: SIGTERM ends `deepshare serve` with status 0 and frees the port,
    after answering the request in flight. That request's body is half sent when the signal comes
    and the rest 1.5 s later; before, the proxy stopped first and dropped the connection."""
    import socket
    import threading
    from urllib.parse import urlsplit

    url, proc, log = service
    body = json.dumps(small_request()).encode()
    parts = urlsplit(url)
    answers = []

    def slow_request() -> None:
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as conn:
            conn.sendall(b"POST /v1/placements HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                         % (parts.netloc.encode(), TOKEN.encode(), len(body)))
            conn.sendall(body[:len(body) // 2])
            sent.set()
            time.sleep(1.5)
            conn.sendall(body[len(body) // 2:])
            answers.append(conn.recv(64))

    sent = threading.Event()
    client = threading.Thread(target=slow_request)
    client.start()
    assert sent.wait(30)
    time.sleep(0.3)  # the request reaches its replica
    proc.send_signal(signal.SIGTERM)
    client.join(60)
    assert answers and answers[0].startswith(b"HTTP/1.1 200 "), answers
    assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    assert "stopping the placement service" in log.read_text()
    with pytest.raises(requests.ConnectionError):
        requests.get(url + "/healthz", timeout=5)


def test_serve_run_with_the_repo_config_serves_the_same_application(tmp_path):
    """`serve run serve/config.yaml` (here with a free port and no token) answers like `deepshare serve`."""
    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "serve" / "config.yaml").read_text())
    port = free_port()
    config["http_options"]["port"] = port
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "DEEPSHARE_SERVE_TOKEN"}
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray")  # short: Ray's socket paths have a length limit
    serve_bin = Path(sys.executable).parent / "serve"
    log = tmp_path / "serve-run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(serve_bin), "run", str(path)], stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        PlacementClient(url).wait_ready(alive=lambda: proc.poll() is None)
        reply = requests.post(url + "/v1/placements", data=json.dumps(small_request()), timeout=30)
        assert reply.status_code == 200
        assert_feasible(small_request(), reply.json())
        assert requests.get(url + "/v1/policy", timeout=10).json()["name"] == "rl-hybrid"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
