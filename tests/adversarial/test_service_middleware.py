"""The service's ASGI guards in-process, with scripted clients: exact statuses and metrics for
slow bodies, oversized bodies, clients that leave, and health checks that must not wait."""

from __future__ import annotations

import asyncio

import pytest

from deepshare.infra.httpauth import LimitBody, ObserveRequests, RequireToken
from deepshare.serving.metrics import ServiceMetrics
from deepshare.serving.middleware import AnswerHealth


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
    value = metrics.registry.get_sample_value(
        "deepshare_serve_requests_total", {"route": "/v1/placements", "method": "POST", "code": code}
    )
    return value or 0.0


def run(coro):
    return asyncio.run(coro)


def test_a_body_in_pieces_within_the_limits_reaches_the_app_whole():
    metrics, app = ServiceMetrics("p", 0.0), App()
    client = Client(chunk(b'{"a":', True), chunk(b" 1}"))
    run(stack(app, metrics)(scope(), client.receive, client.send))
    assert app.bodies == [b'{"a": 1}'] and client.status == 200 and count(metrics, "200") == 1


def test_a_body_that_stops_arriving_gets_408_and_connection_close():
    metrics, app = ServiceMetrics("p", 0.0), App()
    client = Client(chunk(b"{", True), None)
    started = asyncio.run(_timed(stack(app, metrics, timeout_s=0.2)(scope(), client.receive, client.send)))
    assert 0.2 <= started < 1.0 and app.bodies == []
    assert client.status == 408 and client.header(b"connection") == b"close"
    assert count(metrics, "408") == 1
    assert metrics.registry.get_sample_value("deepshare_serve_errors_total", {"kind": "body_timeout"}) == 1


async def _timed(coro) -> float:
    start = asyncio.get_running_loop().time()
    await coro
    return asyncio.get_running_loop().time() - start


@pytest.mark.parametrize("declared", [True, False])
def test_a_body_over_the_limit_gets_413_declared_or_streamed(declared):
    metrics, app = ServiceMetrics("p", 0.0), App()
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
    metrics, app = ServiceMetrics("p", 0.0), App()
    client = Client(*script)
    run(stack(app, metrics)(scope(), client.receive, client.send))
    assert client.sent == [] and app.bodies == []
    assert count(metrics, "499") == 1 and count(metrics, "500") == 0
    assert metrics.registry.get_sample_value("deepshare_serve_errors_total", {"kind": "client_closed"}) == 1


def test_a_request_cancelled_because_its_client_left_is_499():
    metrics, app = ServiceMetrics("p", 0.0), App()

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
    metrics, app = ServiceMetrics("p", 0.0), App(fail=RuntimeError("bug"))
    client = Client(chunk(b"{}"))
    with pytest.raises(RuntimeError):
        run(stack(app, metrics)(scope(), client.receive, client.send))
    assert count(metrics, "500") == 1


def test_healthz_is_answered_without_token_body_or_app():
    metrics, app = ServiceMetrics("p", 0.0), App()
    client = Client(None)  # would hang if anything read a body
    run(stack(app, metrics, token="a-long-token")(scope("/healthz", "GET"), client.receive, client.send))
    assert client.status == 200 and client.sent[1]["body"] == b'{"status": "ok", "policy": "rl-hybrid"}'
    assert app.bodies == []
    assert metrics.registry.get_sample_value(
        "deepshare_serve_requests_total", {"route": "/healthz", "method": "GET", "code": "200"}
    ) == 1


def test_unknown_routes_and_methods_cannot_grow_the_series():
    metrics = ServiceMetrics("p", 0.0)
    metrics.observe("/random/1", "BREW", 404, 0.001)
    metrics.observe("/random/2", "XYZ", 404, 0.001)
    assert metrics.registry.get_sample_value(
        "deepshare_serve_requests_total", {"route": "other", "method": "other", "code": "404"}
    ) == 2


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
