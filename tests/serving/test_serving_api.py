"""The placement service's HTTP handlers in-process (the ASGI app, no Ray, no sockets): one path
per request with and without the routing bypass, what ``predicted_slowdown`` means, and tenants
(``queue``/``priority`` on jobs, admission behind ``--tenants``) answering as the simulator's
admission does on the same view."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from cli_run import cli
from serving_cases import canonical, small_request

from deepshare.core.contention import ProfiledContention
from deepshare.core.information import InformationModel
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.serving.api import PlacementAPI
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.metrics import ServiceMetrics
from deepshare.serving.schemas import PlacementRequest, PlacementResponse
from deepshare.serving.settings import ServiceSettings
from deepshare.serving.translate import response_to_decision, view_to_request
from deepshare.tenants import Admitted, parse_tenants

class Recorded:
    """A stand-in for Ray's metric instruments (no Ray in these tests)."""

    def __init__(self, spec: object) -> None:
        pass

    def inc(self, *_: object, **__: object) -> None:
        pass

    _record = observe = set = inc


TENANTS = """
queues:
  - {name: a, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 4}
  - {name: b, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 0}
priority_classes: {low: 0, high: 100}
default_queue: a
"""


def api(policy: str = "fifo+consolidated", skip_routing: bool = True, tenants: str | None = None,
        **settings: object) -> PlacementAPI:
    parsed = None if tenants is None else parse_tenants(tenants)
    engine = PlacementEngine(EngineSettings(policy=policy, tenants=parsed))
    return PlacementAPI(engine, ServiceSettings(policy=policy, tenants=tenants, **settings),
                        ServiceMetrics(engine.name, 0.0, instrument=Recorded), skip_routing=skip_routing)


def call(app, method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
    """One request through the whole ASGI app: (status, JSON body)."""
    return asyncio.run(acall(app, method, path, body))


async def acall(app, method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
    """:func:`call` on the running event loop (requests side by side on one loop)."""
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "root_path": "", "scheme": "http", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    raw = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(raw)


def post(app, request: dict | bytes) -> tuple[int, dict]:
    return call(app, "POST", "/v1/placements", request if isinstance(request, bytes) else json.dumps(request).encode())


CASES = {
    "ok": small_request(),
    "not JSON": b"{not json",
    "a field of the wrong type": {**small_request(), "now": "soon"},
    "an inconsistent field": {**small_request(), "nodes": [{**small_request()["nodes"][0], "free_gpus": 99}]},
    "over the limits": {**small_request(), "nodes": small_request()["nodes"] * 2},
}


@pytest.mark.parametrize("case", CASES)
def test_the_routing_bypass_answers_as_the_route_does(case):
    """``skip_routing`` changes who calls :meth:`PlacementAPI.answer`, never the answer."""
    fast, routed = api(max_nodes=4), api(max_nodes=4, skip_routing=False)
    assert post(fast.app, CASES[case]) == post(routed.app, CASES[case])


def test_every_outcome_has_its_status_and_names_the_field():
    app = api(max_nodes=4).app
    assert post(app, CASES["ok"])[0] == 200
    status, body = post(app, CASES["not JSON"])
    assert status == 400 and body["detail"][0]["type"] == "json_invalid"
    status, body = post(app, CASES["a field of the wrong type"])
    assert status == 422 and body["detail"][0]["loc"] == ["body", "now"]
    status, body = post(app, CASES["an inconsistent field"])
    assert status == 422 and body["detail"][0]["loc"] == ["body", "nodes", 0, "free_gpus"]
    status, body = post(app, CASES["over the limits"])
    assert status == 413 and body["detail"][0]["loc"] == ["body", "nodes"] and "--max-nodes" in body["detail"][0]["msg"]



def test_lists_past_the_schemas_own_cap_get_the_limits_413_naming_the_flag():
    """At the defaults the flags' limits are the schema's caps (4,096 nodes, 10,000 running
    jobs): a list one longer is answered as any list over its flag, 413 naming it, not the
    schema's 422; the body's other errors do not turn it back into a 422."""
    from deepshare.serving.schemas import MAX_JOBS, MAX_NODES

    body = {
        "now": 100.0,
        "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 8} for i in range(MAX_NODES + 1)],
        "running": [{"job_id": f"r{j}", "model": "FSDP", "placement": {"n0": 1}} for j in range(MAX_JOBS + 1)],
        "pending": [{"job_id": "p0", "model": "FSDP", "gpus": 1}],
    }
    app = api().app
    status, answer = post(app, json.dumps(body).encode())
    assert status == 413, answer
    assert answer["detail"] == [
        {"loc": ["body", "nodes"], "type": "too_large",
         "msg": f"{MAX_NODES + 1} nodes exceed this service's limit of {MAX_NODES} (--max-nodes)"},
        {"loc": ["body", "running"], "type": "too_large",
         "msg": f"{MAX_JOBS + 1} running jobs exceed this service's limit of {MAX_JOBS} (--max-running)"},
    ]
    body["now"] = "soon"  # another error in the same body: the size still answers first
    assert post(app, json.dumps(body).encode())[0] == 413
    body["nodes"] = body["nodes"][:2]
    body["running"] = []
    status, answer = post(app, json.dumps(body).encode())  # the size fixed, the other error is the answer
    assert status == 422 and answer["detail"][0]["loc"] == ["body", "now"]

def test_the_openapi_document_is_the_same_with_and_without_the_bypass():
    fast, routed = api(), api(skip_routing=False)
    assert fast.app.openapi() == routed.app.openapi()
    schemas = fast.app.openapi()["components"]["schemas"]
    assert {"queue", "priority"} <= set(schemas["PendingIn"]["properties"]) & set(schemas["RunningIn"]["properties"])
    assert "contended / isolated" in schemas["DecisionOut"]["properties"]["predicted_slowdown"]["description"]


def test_predicted_slowdown_is_contended_over_isolated_time_at_least_one():
    """A job spread over two nodes beside another that crosses the same NICs is predicted to run
    longer than alone: the slowdown is 1 / its predicted throughput ratio, above 1 (the
    documentation once called it isolated / contended time, which is at most 1)."""
    engine = PlacementEngine(EngineSettings(policy="fifo+consolidated"))
    request = PlacementRequest.model_validate({
        "now": 10.0,
        "nodes": [{"name": "n0", "gpus": 8, "free_gpus": 4}, {"name": "n1", "gpus": 8, "free_gpus": 4}],
        "running": [{"job_id": "r0", "model": "FSDP", "placement": {"n0": 4, "n1": 4}}],
        "pending": [{"job_id": "p0", "model": "FSDP", "gpus": 8}],
    })
    response = engine.place(request)
    view = engine.view(request)
    [launch] = response_to_decision(response, view).launch
    ratio = view.predict(view.queued[0], launch.placement).ratio
    assert ratio < 1.0
    assert response.decisions[0].predicted_slowdown == pytest.approx(1.0 / ratio)
    assert response.decisions[0].predicted_slowdown > 1.2


@pytest.mark.parametrize("field, value, text", [
    ("queue", "c", "queue 'c' is not declared in the service's tenants file (declared: a, b)"),
    ("priority", "urgent", "priority class 'urgent' is not declared in the service's tenants file (declared: high, low)"),
    ("queue", "", "at least 1 character"),
    ("queue", "q" * 257, "at most 256 characters"),
    ("priority", 3, "valid string"),
])
@pytest.mark.parametrize("kind", ["pending", "running"])
def test_a_bad_queue_or_priority_is_a_422_naming_the_field(kind, field, value, text):
    request = small_request()
    request[kind][0][field] = value
    status, body = post(api(tenants=TENANTS).app, request)
    assert status == 422 and body["detail"][0]["loc"] == ["body", kind, 0, field]
    assert text in body["detail"][0]["msg"]


def test_without_tenants_any_queue_name_is_a_feature():
    request = small_request()
    request["pending"][0].update(queue="anything", priority="whatever")
    assert post(api().app, request)[0] == 200


def test_a_job_naming_no_queue_with_an_undeclared_default_is_a_422():
    status, body = post(api(tenants="queues: [{name: a, nominal_gpus: 8}]").app, small_request())
    assert status == 422 and body["detail"][0]["loc"] == ["body", "running", 0, "queue"]
    assert "names no queue, and the default queue 'default'" in body["detail"][0]["msg"]


def test_the_policy_route_names_the_queues():
    status, body = call(api(tenants=TENANTS).app, "GET", "/v1/policy")
    assert status == 200 and body["queues"] == ["a", "b"]
    assert call(api().app, "GET", "/v1/policy")[1].get("queues") is None


def _jobs() -> list[JobSpec]:
    """Queue a's burst borrows from b; b's later jobs reclaim; priorities within a."""
    jobs = []
    for i in range(10):
        jobs.append(JobSpec(f"a{i}", "MobileNetV3", 4, 5.0 * i, duration_s=400.0 + 37 * i, queue="a",
                            priority="high" if i % 3 == 0 else "low"))
    for i in range(6):
        jobs.append(JobSpec(f"b{i}", "FSDP", 2 + 2 * (i % 2), 60.0 + 40.0 * i, duration_s=300.0 + 11 * i, queue="b"))
    return jobs


@pytest.mark.parametrize("policy", ["fifo+consolidated", "las+contention-aware", "srsf+packed+preempt"])
def test_the_served_decision_is_the_simulators_admission_decision(policy):
    """Every decision point of a simulation behind the tenants' admission, sent as a request to a
    service with the same tenants file: the same decision (the request carries the queues' usage
    through its running jobs, so a stateless replica admits as the simulator does)."""
    tenants = parse_tenants(TENANTS)
    local = Admitted(make_policy(policy), tenants)
    served = PlacementEngine(EngineSettings(policy=policy, tenants=tenants))
    sim = Simulator(uniform(2, 8), _jobs(), ProfiledContention(), default_catalog(), SimConfig(),
                    information=InformationModel("estimated", 1.0, 3))
    points = held = 0
    while (view := sim.advance()) is not None and points < 80:
        decision = local.decide(view)
        request = view_to_request(view)
        assert {(j.queue, j.priority) for j in request.pending} <= {(j.queue, j.priority) for j in _jobs()}
        response = served.place(PlacementRequest.model_validate_json(request.model_dump_json()))
        assert canonical(response_to_decision(PlacementResponse.model_validate(response.model_dump()), view)) == \
            canonical(decision)
        held += len(view.queued) - len(decision.launch) > 0
        sim.apply(decision)
        points += 1
    assert points >= 10 and held >= 1  # quotas held jobs back at some decisions


def test_serve_tenants_file_errors_exit_2_in_one_line(capsys, tmp_path):
    bad = tmp_path / "tenants.yaml"
    bad.write_text("queues:\n  - {name: a, nominal_gpus: -1}\n")
    rc, _, err = cli(capsys, "serve", "--policy", "fifo+consolidated", "--tenants", str(bad))
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert str(bad) in err and "queues.0.nominal_gpus" in err and "Traceback" not in err
    rc, _, err = cli(capsys, "serve", "--policy", "fifo+consolidated", "--tenants", str(tmp_path / "missing.yaml"))
    assert rc == 2 and "missing.yaml" in err and len(err.strip().splitlines()) == 1


def test_the_settings_refuse_a_bad_tenants_text_naming_the_field():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="queues.0.nominal_gpus"):
        ServiceSettings(tenants="queues:\n  - {name: a, nominal_gpus: -1}\n")


def test_the_settings_bound_the_body_size_as_the_flag_does():
    """A Serve config (serve/config.yaml's args) gave any positive max_body_bytes; the flag took
    at most 1 GiB."""
    from pydantic import ValidationError

    assert ServiceSettings(max_body_bytes=1024**3).max_body_bytes == 1024**3
    with pytest.raises(ValidationError, match="max_body_bytes"):
        ServiceSettings(max_body_bytes=1024**3 + 1)


def _fake_serving(seen: list):  # type: ignore[no-untyped-def]
    """``serving`` without Ray: calls its hook and records the SIGTERM handler while 'running'."""
    import signal
    from contextlib import contextmanager

    from deepshare.serving.service import Endpoint

    @contextmanager
    def fake(settings, **options):  # type: ignore[no-untyped-def]
        options["on_ray_started"]()
        seen.append(signal.getsignal(signal.SIGTERM))
        yield Endpoint("http://127.0.0.1:1", None)

    return fake


def test_run_service_with_a_stop_event_touches_no_signal_handler(monkeypatch):
    import signal
    import threading

    from deepshare.serving import service

    seen: list = []
    monkeypatch.setattr(service, "serving", _fake_serving(seen))
    before, stop, ready = signal.getsignal(signal.SIGTERM), threading.Event(), []
    stop.set()
    service.run_service(ServiceSettings(policy="fifo+consolidated"), stop=stop, on_ready=ready.append)
    assert seen == [before] and [e.url for e in ready] == ["http://127.0.0.1:1"]


def test_run_service_as_an_entry_point_stops_on_sigterm_and_restores_the_handlers(monkeypatch):
    import signal

    from deepshare.serving import service

    seen: list = []
    monkeypatch.setattr(service, "serving", _fake_serving(seen))
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    service.run_service(ServiceSettings(policy="fifo+consolidated"),
                        on_ready=lambda _: signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None))  # "SIGTERM"
    assert seen[0] not in before  # its own handler while serving
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


@pytest.mark.parametrize("kind", ["inconsistent fields", "unknown keys"])
def test_an_answer_lists_at_most_100_errors_whatever_the_body_holds(kind):
    # Before: one error per bad field, each unknown node's naming up to 8 node names; a 1.3 MB
    # body got a 327 MB answer and held the replica's loop for seconds.
    names = [f"{'n' * 200}{i}" for i in range(9)]
    nodes = [{"name": name, "gpus": 8, "free_gpus": 8} for name in names]
    if kind == "inconsistent fields":
        running = [{"job_id": f"r{j}", "model": "FSDP", "placement": {str(k): 1 for k in range(j * 100, j * 100 + 100)}}
                   for j in range(30)]
        body = {"now": 100, "nodes": nodes, "running": running, "pending": []}
    else:
        body = {"now": 100, "nodes": nodes, "pending": [], **{f"x{i}": 0 for i in range(3000)}}
    raw = json.dumps(body).encode()
    status, answer = post(api(max_body_bytes=4 * 1024 * 1024).app, raw)
    detail = answer["detail"]
    assert status == 422 and len(detail) == 101
    assert detail[-1]["loc"] == ["body"] and detail[-1]["msg"].startswith("and 2900 more errors not listed")
    assert detail[-1]["type"] == "too_many_errors" and detail[-2]["type"] != "too_many_errors"
    assert len(json.dumps(answer)) < 20_000  # bounded whatever the body holds (4 MiB here could hold 400,000)
    if kind == "inconsistent fields":
        assert "nodes are" in detail[0]["msg"] and all("nodes are" not in d["msg"] for d in detail[1:])


def test_the_planner_decides_off_the_event_loop():
    # A small request (16 nodes x 250 jobs: cheap by size) on which the planner's candidates
    # disagree: its rollouts take seconds, whatever the size. On the replica's event loop they
    # held /healthz and every other request until they ended.
    from tests.adversarial.test_service_deadline import contested

    planner = api("planner=8")
    assert not planner.engine.sized and api("fifo+consolidated").engine.sized and api("rl-hybrid").engine.sized
    raw = contested(250).model_dump_json(exclude_defaults=True).encode()  # 23.5 KB: under the inline bound

    async def scenario() -> tuple[int, float, int, float]:
        start = time.monotonic()
        deciding = asyncio.ensure_future(acall(planner.app, "POST", "/v1/placements", raw))
        await asyncio.sleep(0.3)
        health, _ = await acall(planner.app, "GET", "/healthz")
        answered = time.monotonic() - start
        status, _ = await deciding
        return health, answered, status, time.monotonic() - start

    health, answered, status, decided = asyncio.run(scenario())
    assert health == 200 and status == 200
    assert decided > 1.0 and answered < 0.8 < decided  # while it decided, not after


@pytest.mark.parametrize("policy", ["fifo+consolidated", "las+contention-aware+preempt", "rl-hybrid"])
def test_any_policy_behind_tenants_decides_in_a_thread(policy, monkeypatch):
    # a heuristic behind --tenants was sized by its registry name and decided small requests
    # on the replica's event loop, where the documentation promises a decision thread
    import threading

    service = api(policy, tenants=TENANTS)
    threads: list[str] = []
    policy_class = type(service.engine.inner)  # a frozen dataclass: patched on its class
    decide = policy_class.decide

    def recorded(self, view):
        threads.append(threading.current_thread().name)
        return decide(self, view)

    monkeypatch.setattr(policy_class, "decide", recorded)
    assert not service.engine.sized and service.engine.batch_scorer is None
    assert post(service.app, small_request())[0] == 200
    assert len(threads) == 1 and threads[0] != threading.main_thread().name


def test_a_client_that_leaves_during_its_decision_is_recorded_as_disconnected_not_error(monkeypatch):
    # Serve cancels a request whose client went away: the HTTP metrics counted it 499, the
    # decision histogram as outcome "error", a bug of the service
    service = api()
    outcomes: list[str] = []
    monkeypatch.setattr(service.metrics, "decided", lambda outcome, seconds: outcomes.append(outcome))

    async def deciding_forever(*args, **kwargs):
        await asyncio.sleep(3600)

    monkeypatch.setattr(service.engine, "place_async", deciding_forever)

    async def scenario() -> None:
        task = asyncio.ensure_future(acall(service.app, "POST", "/v1/placements", json.dumps(small_request()).encode()))
        await asyncio.sleep(0.05)
        task.cancel()  # what Serve does when the proxy sees the disconnect
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert outcomes == ["disconnected"] and service.deciding == 0


@pytest.mark.parametrize("field, value, words", [
    ("nic_gbps", 5e-324, "greater than or equal to 0.001"), ("intra_node_gbps", 1e-6, "greater than or equal to 0.001"),
    ("nvlink_gbps", 1e-9, "expected 0 or at least 0.001"), ("nic_gbps", 1e10, "less than or equal to 1000000000"),
])
def test_a_link_bandwidth_outside_its_domain_is_a_422_naming_it(field, value, words):
    # 5e-324 Gbit/s (> 0) gave NaN slowdowns, answered as null, under --contention link
    request = small_request()
    request["nodes"][0][field] = value
    status, body = post(api().app, request)
    assert status == 422 and body["detail"][0]["loc"] == ["body", "nodes", 0, field]
    assert words in body["detail"][0]["msg"]


@pytest.mark.parametrize("raised, error", [(ValueError("secret internals /srv/x"), "policy"),
                                           ("infeasible", "infeasible")])
def test_a_policy_failure_is_a_500_saying_whose_it_is_without_its_message(monkeypatch, raised, error):
    """A 500 the policy caused says so (``error``), so a client can tell it from a 500 of a Serve
    replica that died mid-request, which says nothing about the request."""
    from deepshare.core.errors import InfeasibleDecision

    service = api()
    failure = InfeasibleDecision("asked 9 GPUs of node n0") if raised == "infeasible" else raised

    async def failing(*args, **kwargs):
        raise failure

    monkeypatch.setattr(service.engine, "place_async", failing)
    monkeypatch.setattr(service.engine, "place", lambda *a, **k: (_ for _ in ()).throw(failure))
    status, body = post(service.app, small_request())
    assert status == 500 and body["error"] == error
    assert type(failure).__name__ in body["detail"] and "secret internals" not in body["detail"]


def test_running_out_of_memory_is_a_503_not_the_requests_fault(monkeypatch):
    """A MemoryError was answered as the policy failing on the request (``"error": "policy"``),
    which a live scheduler reads as the request's fault and sets its jobs aside; the replica's
    memory is the service's state: 503 with Retry-After, as an overloaded service."""
    service = api()

    async def failing(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(service.engine, "place_async", failing)
    monkeypatch.setattr(service.engine, "place", lambda *a, **k: (_ for _ in ()).throw(MemoryError()))
    status, body = post(service.app, small_request())
    assert status == 503 and "error" not in body and "out of memory" in body["detail"]
    monkeypatch.undo()
    status, body = post(service.app, small_request())  # the next request is decided as before
    assert status == 200 and body["decisions"]
