"""ASGI middleware of the placement service, outermost first:

1. :class:`ObserveRequests` counts and times every request by route, method and status code;
   a request whose client went away before the answer is counted as 499, never as a 500.
2. :class:`AnswerHealth` answers ``GET /healthz`` itself, before anything that reads a body,
   checks a token or waits for a decision thread, so a health check costs microseconds whatever
   the placement requests are doing.
3. :class:`RequireToken` answers 401 without ``Authorization: Bearer TOKEN``.
4. :class:`LimitBody` reads the body whole, within ``max_bytes`` (else 413) and within
   ``timeout_s`` (else 408, and the connection is closed), so a slow client holds a replica's
   request slot for seconds at most.

Plain ASGI (no per-request task or body copy as in Starlette's ``BaseHTTPMiddleware``), because
every request of a latency-bound service passes through them.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any, Awaitable, Callable

from deepshare.serving.metrics import CLIENT_CLOSED, ServiceMetrics

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEALTH_PATH = "/healthz"
OPEN_PATHS = frozenset({HEALTH_PATH})
"""Routes answered without the token (liveness probes carry no credentials)."""
CLIENT_GONE = "deepshare.client_gone"
"""Scope key :class:`LimitBody` sets when the client disconnected before sending its body."""


async def send_json(send: Send, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class ObserveRequests:
    """Counts every HTTP request by route, method and status and times it (the outermost layer).

    No answer sent and the client gone (it disconnected mid-body, or Serve cancelled the request
    because it did) is 499; no answer for any other reason is a 500 (a bug here)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status: int | None = None
        cancelled = False

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            if status is None:
                status = CLIENT_CLOSED if cancelled or scope.get(CLIENT_GONE) else 500
            self.metrics.observe(scope.get("path", ""), scope.get("method", ""), status, time.perf_counter() - start)


class AnswerHealth:
    """``GET /healthz`` -> ``{"status": "ok", "policy": NAME}`` without going further in."""

    def __init__(self, app: ASGIApp, policy: str) -> None:
        self.app = app
        self.payload = {"status": "ok", "policy": policy}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") == HEALTH_PATH and scope.get("method") == "GET":
            await send_json(send, 200, self.payload)
            return
        await self.app(scope, receive, send)


class RequireToken:
    """Answers 401 to any request but :data:`OPEN_PATHS` without ``Authorization: Bearer TOKEN``."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.expected is None or scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        await send_json(
            send, 401, {"detail": "missing or wrong bearer token (header Authorization: Bearer TOKEN)"},
            ((b"www-authenticate", b"Bearer"),),
        )


class LimitBody:
    """Answers 413 to a body over ``max_bytes``, whether it declares its length or streams it,
    and 408 (closing the connection) to one not received whole within ``timeout_s``; a body
    within both limits is handed on whole."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        try:
            body = await _within(self._read(receive), self.timeout_s)
        except asyncio.TimeoutError:
            await send_json(
                send, 408,
                {"detail": f"request body not received within {self.timeout_s:g} s (the service's body timeout)"},
                ((b"connection", b"close"),),
            )
            return
        except _TooLarge:
            await self._too_large(send)
            return
        if body is None:  # the client went away mid-body: nobody to answer
            scope[CLIENT_GONE] = True
            return
        whole = {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, _replay([whole], receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or ``None`` when the client went away first: an ``http.disconnect``,
        or ``receive`` failing (Serve's replica pulls the body from its proxy, and that call
        fails when the proxy has already dropped the request of a client that left)."""
        chunks, size = [], 0
        while True:
            try:
                message = await receive()
            except Exception:  # noqa: BLE001 - only the way to the client can fail here
                return None
            if message["type"] != "http.request":  # http.disconnect
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, send: Send) -> None:
        await send_json(send, 413, {"detail": f"request body larger than the limit of {self.max_bytes} bytes"})


class _TooLarge(Exception):
    pass


async def _within(awaitable: Awaitable[Any], seconds: float) -> Any:
    """``await awaitable``, cancelled with ``asyncio.TimeoutError`` after ``seconds``: in the
    current task where ``asyncio.timeout`` exists (Python 3.11+), saving ``wait_for``'s task per
    request."""
    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:  # pragma: no cover - Python 3.10
        return await asyncio.wait_for(awaitable, seconds)
    async with timeout(seconds):
        return await awaitable


def _replay(messages: list[Message], receive: Receive) -> Receive:
    queue = list(messages)

    async def replay() -> Message:
        return queue.pop(0) if queue else await receive()

    return replay
