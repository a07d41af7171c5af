"""The service's ASGI guards in-process, with scripted clients: exact statuses and metrics for
slow bodies, oversized bodies, clients that leave, and health checks that must not wait."""

from __future__ import annotations

import asyncio
import time

import pytest

from deepshare.infra.httpauth import LimitBody, ObserveRequests, RequireCaller, RequireToken
from deepshare.serving.metrics import MetricSpec, ServiceMetrics
from deepshare.serving.middleware import AnswerHealth


class Recorded:
    """A stand-in for one of Ray's metric instruments: keeps each series' value by its tags."""

    def __init__(self, spec: MetricSpec) -> None:
        self.spec, self.values = spec, {}

    def _key(self, tags):
        return tuple(sorted((tags or {}).items()))

    def inc(self, value=1.0, tags=None):
        assert value > 0  # Ray's Counter.inc refuses anything else
        self.values[self._key(tags)] = self.values.get(self._key(tags), 0.0) + value

    def _record(self, value, tags=None):  # what Ray's inc calls after its check (start_at_zero)
        self.values[self._key(tags)] = self.values.get(self._key(tags), 0.0) + value

    def observe(self, value, tags=None):
        self.values.setdefault(self._key(tags), []).append(value)

    def set(self, value, tags=None):
        self.values[self._key(tags)] = value


def recorded_metrics() -> ServiceMetrics:
    return ServiceMetrics("p", 0.0, instrument=Recorded)


def sample(metrics: ServiceMetrics, name: str, flush: bool = True, **tags: str):
    """The value (or the observations) of one series of ``name`` (a MetricSpec name) once the
    replica's totals are handed over (``flush``), or None."""
    if flush:
        metrics.flush()
    return metrics.made[name].values.get(tuple(sorted(tags.items())))


def scope(path: str = "/v1/placements", method: str = "POST", headers: dict[bytes, bytes] | None = None) -> dict:
    return {"type": "http", "path": path, "method": method, "headers": list((headers or {}).items())}


class Client:
    """A scripted client: messages (or exceptions, or None for "never sends more") in order."""

    def __init__(self, *script) -> None:
        self.script = list(script)
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        item = self.script.pop(0) if self.script else None
        if item is None:
            await asyncio.sleep(3600)  # a client that stopped sending
        if isinstance(item, BaseException):
            raise item
        return item

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None

    def header(self, name: bytes) -> bytes | None:
        return dict(self.sent[0]["headers"]).get(name)


def chunk(body: bytes, more: bool = False) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


class App:
    """The inner application: records the body it got and answers 200 (or raises)."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.bodies: list[bytes] = []
        self.fail = fail

    async def __call__(self, scope, receive, send) -> None:
        message = await receive()
        self.bodies.append(message["body"])
        if self.fail is not None:
            raise self.fail
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def stack(app: App, metrics: ServiceMetrics, timeout_s: float = 0.2, token: str | None = None):
    inner = LimitBody(app, max_bytes=100, timeout_s=timeout_s)
    return ObserveRequests(AnswerHealth(RequireToken(inner, token), "rl-hybrid"), metrics.observe)


def count(metrics: ServiceMetrics, code: str) -> float:
    return sample(metrics, "deepshare_serve_requests", route="/v1/placements", method="POST", code=code) or 0.0


def run(coro):
    return asyncio.run(coro)


def test_a_body_in_pieces_within_the_limits_reaches_the_app_whole():
    metrics, app = recorded_metrics(), App()
    client = Client(chunk(b'{"a":', True), chunk(b" 1}"))
    run(stack(app, metrics)(scope(), client.receive, client.send))
    assert app.bodies == [b'{"a": 1}'] and client.status == 200 and count(metrics, "200") == 1


def test_a_body_that_stops_arriving_gets_408_and_connection_close():
    metrics, app = recorded_metrics(), App()
    client = Client(chunk(b"{", True), None)
    started = asyncio.run(_timed(stack(app, metrics, timeout_s=0.2)(scope(), client.receive, client.send)))
    assert 0.2 <= started < 1.0 and app.bodies == []
    assert client.status == 408 and client.header(b"connection") == b"close"
    assert count(metrics, "408") == 1
    assert sample(metrics, "deepshare_serve_errors", kind="body_timeout") == 1


async def _timed(coro) -> float:
    start = asyncio.get_running_loop().time()
    await coro
    return asyncio.get_running_loop().time() - start


@pytest.mark.parametrize("declared", [True, False])
def test_a_body_over_the_limit_gets_413_declared_or_streamed(declared):
    metrics, app = recorded_metrics(), App()
    headers = {b"content-length": b"101"} if declared else {}
    client = Client(chunk(b"x" * 60, True), chunk(b"x" * 41))
    run(stack(app, metrics)(scope(headers=headers), client.receive, client.send))
    assert client.status == 413 and app.bodies == [] and count(metrics, "413") == 1


@pytest.mark.parametrize(
    "script",
    [
        (chunk(b"{", True), {"type": "http.disconnect"}),  # the ASGI way
        (chunk(b"{", True), KeyError("request gone")),  # Serve's receive failing once the proxy dropped it
    ],
)
def test_a_client_that_leaves_mid_body_is_499_not_500(script):
    metrics, app = recorded_metrics(), App()
    client = Client(*script)
    run(stack(app, metrics)(scope(), client.receive, client.send))
    assert client.sent == [] and app.bodies == []
    assert count(metrics, "499") == 1 and count(metrics, "500") == 0
    assert sample(metrics, "deepshare_serve_errors", kind="client_closed") == 1


def test_a_request_cancelled_because_its_client_left_is_499():
    metrics, app = recorded_metrics(), App()

    async def scenario():
        client = Client(chunk(b"{", True), None)
        task = asyncio.ensure_future(stack(app, metrics, timeout_s=10)(scope(), client.receive, client.send))
        await asyncio.sleep(0.05)
        task.cancel()  # what Serve does when the proxy sees the disconnect
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    assert count(metrics, "499") == 1 and count(metrics, "500") == 0


def test_a_bug_inside_is_still_a_500():
    metrics, app = recorded_metrics(), App(fail=RuntimeError("bug"))
    client = Client(chunk(b"{}"))
    with pytest.raises(RuntimeError):
        run(stack(app, metrics)(scope(), client.receive, client.send))
    assert count(metrics, "500") == 1


def test_healthz_is_answered_without_token_body_or_app():
    metrics, app = recorded_metrics(), App()
    client = Client(None)  # would hang if anything read a body
    run(stack(app, metrics, token="a-long-token")(scope("/healthz", "GET"), client.receive, client.send))
    assert client.status == 200 and client.sent[1]["body"] == b'{"status": "ok", "policy": "rl-hybrid"}'
    assert app.bodies == []
    assert sample(metrics, "deepshare_serve_requests", route="/healthz", method="GET", code="200") == 1


def test_healthz_answers_head_with_the_get_headers_and_no_body():
    # load balancers probe with HEAD; it was 405
    metrics, app = recorded_metrics(), App()
    client = Client(None)
    run(stack(app, metrics, token="a-long-token")(scope("/healthz", "HEAD"), client.receive, client.send))
    length = str(len(b'{"status": "ok", "policy": "rl-hybrid"}')).encode()
    assert client.status == 200 and (b"content-length", length) in client.sent[0]["headers"]
    assert client.sent[1]["body"] == b"" and app.bodies == []
    assert sample(metrics, "deepshare_serve_requests", route="/healthz", method="HEAD", code="200") == 1


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_healthz_is_open_for_get_and_head_only_so_no_body_is_read_without_the_token(method):
    # a POST /healthz without the token was let through as an open path, AnswerHealth passed it on
    # and LimitBody read the whole body (up to max_body_bytes) before FastAPI's 405
    metrics, app = recorded_metrics(), App()
    client = Client(chunk(b"x" * 50, True), chunk(b"x" * 50))
    run(stack(app, metrics, token="a-long-token")(scope("/healthz", method), client.receive, client.send))
    assert client.status == 401 and app.bodies == [] and len(client.script) == 2  # not one chunk read


@pytest.mark.parametrize("method, status", [("GET", 200), ("HEAD", 200), ("POST", 401), ("PUT", 401)])
def test_the_schedulers_guard_opens_healthz_for_get_and_head_only(method, status):
    app = App()
    client = Client(chunk(b"x" * 50, True), chunk(b"x" * 50))
    guard = RequireCaller(LimitBody(app, max_bytes=100), lambda token: None, open_paths=("/healthz",))
    run(guard(scope("/healthz", method), client.receive, client.send))
    assert client.status == status and (app.bodies == [b"x" * 100]) == (status == 200)


def test_unknown_routes_and_methods_cannot_grow_the_series():
    metrics = recorded_metrics()
    metrics.observe("/random/1", "BREW", 404, 0.001)
    metrics.observe("/random/2", "XYZ", 404, 0.001)
    assert sample(metrics, "deepshare_serve_requests", route="other", method="other", code="404") == 2


@pytest.mark.parametrize("value, status", [
    (b"Bearer a-long-token", 200), (b"bearer a-long-token", 200), (b"BEARER a-long-token", 200),
    (b"Bearer  a-long-token", 200),  # one or more spaces (RFC 9110's 1*SP)
    (b"Basic a-long-token", 401), (b"Bearera-long-token", 401), (b"Bearer a-long-token2", 401),
    (b"Bearer", 401), (b"a-long-token", 401), (b"Bearer a-long-toke", 401), (b"Bearer A-LONG-TOKEN", 401),
])
def test_the_bearer_scheme_is_case_insensitive_and_the_token_is_not(value, status):
    app, client = App(), Client(chunk(b"{}"))
    guard = RequireToken(app, "a-long-token")
    run(guard(scope(headers={b"authorization": value}), client.receive, client.send))
    assert client.status == status


def test_every_error_kind_and_action_starts_at_zero_and_gauges_have_values():
    from deepshare.serving.metrics import ACTIONS, ERROR_KINDS

    metrics = ServiceMetrics("rl-hybrid", 1.5, "0.1.0", "v7", instrument=Recorded)
    assert all(sample(metrics, "deepshare_serve_errors", kind=kind) == 0.0 for kind in ERROR_KINDS)
    assert all(sample(metrics, "deepshare_serve_decisions", action=action) == 0.0 for action in ACTIONS)
    metrics.observe("/v1/placements", "POST", 500, 0.01)
    assert sample(metrics, "deepshare_serve_errors", kind="server") == 1
    assert sample(metrics, "deepshare_serve_build_info", version="0.1.0", policy="rl-hybrid", policy_version="v7") == 1
    assert sample(metrics, "deepshare_serve_policy_load_seconds", policy="rl-hybrid") == 1.5


def test_the_request_path_only_adds_up_and_a_flush_hands_totals_and_gauges_to_ray():
    """Nothing reaches Ray's instruments until a flush; then counters get one increment per series
    with the total, histograms every observation, and every gauge its current value again (Ray's
    agent drops a gauge nobody set for two report intervals)."""
    metrics = recorded_metrics()
    requests_total = metrics.made["deepshare_serve_requests"]
    in_flight = metrics.made["deepshare_serve_decisions_in_flight"]
    for _ in range(3):
        metrics.observe("/v1/placements", "POST", 200, 0.002)
    metrics.deciding(+1)
    metrics.deciding(+1)
    metrics.deciding(-1)
    metrics.decided("ok", 0.001)
    metrics.count_decisions({"place": 2, "wait": 0})
    assert requests_total.values == {} and in_flight.values == {(): 0}  # only the first flush so far
    in_flight.values.clear()
    metrics.flush()
    assert sample(metrics, "deepshare_serve_requests", flush=False, route="/v1/placements", method="POST", code="200") == 3
    assert sample(metrics, "deepshare_serve_request_duration_seconds", flush=False, route="/v1/placements") == [0.002] * 3
    assert sample(metrics, "deepshare_serve_decision_duration_seconds", flush=False, outcome="ok") == [0.001]
    assert sample(metrics, "deepshare_serve_decisions", flush=False, action="place") == 2
    assert sample(metrics, "deepshare_serve_decisions", flush=False, action="wait") == 0  # its zero start only
    assert sample(metrics, "deepshare_serve_decisions_in_flight", flush=False) == 1
    metrics.flush()  # nothing new: the totals are not handed over twice
    assert sample(metrics, "deepshare_serve_requests", flush=False, route="/v1/placements", method="POST", code="200") == 3


def test_the_reporting_thread_flushes_until_closed():
    metrics = recorded_metrics()
    thread = metrics.report_every(every_s=0.01)
    metrics.observe("/healthz", "GET", 200, 0.001)
    deadline = time.monotonic() + 5
    while sample(metrics, "deepshare_serve_requests", flush=False, route="/healthz", method="GET", code="200") is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    metrics.observe("/healthz", "GET", 200, 0.001)
    metrics.close()  # stops the thread and hands over the rest
    thread.join(5)
    assert not thread.is_alive()
    assert sample(metrics, "deepshare_serve_requests", flush=False, route="/healthz", method="GET", code="200") == 2


def test_batch_size_buckets_make_rays_rebuilt_sum_exact_up_to_16():
    """Ray's agent takes each observation at its bucket's midpoint (lower bound 0 for the first);
    with half-integer bounds every size 1..16 is its own bucket's midpoint."""
    from deepshare.serving.metrics import BATCH_SIZE_BUCKETS

    bounds = (0.0, *BATCH_SIZE_BUCKETS)
    for size in range(1, 17):
        upper = next(i for i, b in enumerate(bounds) if size <= b)
        assert (bounds[upper - 1] + bounds[upper]) / 2 == size
