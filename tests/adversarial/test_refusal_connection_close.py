"""A request refused before its body is read is answered with ``Connection: close`` when it
declares a body: behind Ray Serve's proxy (uvicorn, whose keep-alive timer the first body byte
cancels) a client with no token kept the placement service's connection open for good with one
byte after its 401 (5 of 5 connections still open after 60 s, ``deepshare serve`` on loopback)."""

from __future__ import annotations

import asyncio

import pytest

from deepshare.infra.httpauth import AllowHosts, LimitBody, RequireCaller, RequireJSON, RequireToken, unread_body


async def _never(scope, receive, send):  # the app behind a guard: never reached here
    raise AssertionError("the guard let the request through")


def _answer(guard, method: str, headers: list[tuple[bytes, bytes]], body: bytes = b"",
            path: str = "/v1/placements") -> tuple[int, dict]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "query_string": b"", "headers": headers, "scheme": "http",
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5555), "root_path": ""}
    asyncio.run(guard(scope, receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"])


BODY = [(b"content-length", b"1000000"), (b"content-type", b"application/json"), (b"host", b"127.0.0.1")]
CHUNKED = [(b"transfer-encoding", b"chunked"), (b"content-type", b"application/json"), (b"host", b"127.0.0.1")]
NO_BODY = [(b"host", b"127.0.0.1")]


@pytest.mark.parametrize("guard, status", [
    (RequireToken(_never, "s3cret-token-1"), 401),
    (RequireCaller(_never, lambda given: None), 401),
    (RequireJSON(_never), 415),
    (LimitBody(_never, 1000), 413),
    (AllowHosts(_never, "127.0.0.1", ()), 403),
])
def test_a_refusal_before_the_body_closes_a_connection_that_declared_one(guard, status):
    headers = BODY if status != 415 else [(b"content-length", b"10"), (b"content-type", b"text/plain")]
    if status == 403:
        headers = [(b"content-length", b"10"), (b"host", b"evil.example")]
    got, answered = _answer(guard, "POST", headers)
    assert got == status and answered.get(b"connection") == b"close"


def test_a_chunked_body_counts_and_a_request_without_one_keeps_its_connection():
    guard = RequireToken(_never, "s3cret-token-1")
    assert _answer(guard, "POST", CHUNKED)[1].get(b"connection") == b"close"
    status, headers = _answer(guard, "GET", NO_BODY)
    assert status == 401 and b"connection" not in headers
    assert unread_body({"headers": [(b"content-length", b"0")]}) == ()


def test_a_streamed_body_over_the_limit_closes_its_connection():
    """No declared length: the body streams past the limit, the rest is unread."""
    status, headers = _answer(LimitBody(_never, 10), "POST", [(b"transfer-encoding", b"chunked")], body=b"x" * 11)
    assert status == 413 and headers.get(b"connection") == b"close"


def test_a_health_probe_declaring_a_body_is_closed_after_its_answer():
    """``GET``/``HEAD /healthz`` needs no token and is answered before any body is read: with a
    declared body and one byte of it, the connection stayed open for good behind Serve's proxy."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serving"))
    from test_serving_api import api

    app = api(token="s3cret-token-123456").app
    for method, headers in (("GET", [(b"host", b"127.0.0.1"), (b"content-length", b"500")]),
                            ("HEAD", [(b"host", b"127.0.0.1"), (b"transfer-encoding", b"chunked")])):
        status, answered = _answer(app, method, headers, path="/healthz")
        assert status == 200 and answered.get(b"connection") == b"close"
    status, answered = _answer(app, "GET", [(b"host", b"127.0.0.1")], path="/healthz")
    assert status == 200 and b"connection" not in answered  # a plain probe keeps its connection


def test_a_declared_length_with_trailing_spaces_over_the_limit_is_refused_before_the_body():
    status, headers = _answer(LimitBody(_never, 10), "POST", [(b"content-length", b"5000  ")])
    assert status == 413 and headers.get(b"connection") == b"close"
