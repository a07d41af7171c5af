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


def _answer(guard, method: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> tuple[int, dict]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/v1/placements", "headers": headers}
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
