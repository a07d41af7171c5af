"""ASGI middleware of the placement service: request metrics, the bearer-token guard and the
body size limit. Plain ASGI (no per-request task or body copy as in Starlette's
``BaseHTTPMiddleware``), because every request of a latency-bound service passes through them."""

from __future__ import annotations

import hmac
import json
import time
from typing import Any, Awaitable, Callable

from deepshare.serving.metrics import ServiceMetrics

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/healthz"})
"""Routes answered without the token (liveness probes carry no credentials)."""


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
    """Counts every HTTP request by route and status and times it (the outermost layer)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            self.metrics.observe(scope.get("path", ""), status, time.perf_counter() - start)


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
    """Answers 413 to a body over ``max_bytes``, whether it declares its length or streams it;
    a body within the limit is handed on whole."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([whole], receive), send)

    async def _refuse(self, send: Send) -> None:
        await send_json(send, 413, {"detail": f"request body larger than the limit of {self.max_bytes} bytes"})


def _replay(messages: list[Message], receive: Receive) -> Receive:
    queue = list(messages)

    async def replay() -> Message:
        return queue.pop(0) if queue else await receive()

    return replay
