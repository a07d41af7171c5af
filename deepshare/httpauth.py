"""Plain-ASGI guards for the project's HTTP services: bearer token, Host allow-list, JSON bodies,
body size limit, and the shared JSON answer.

Shared by the live scheduler (``deepshare/runtime/api.py``) and meant for the placement service
too (``deepshare/serving/middleware.py`` has its own older copies of the token and size guards).
Plain ASGI rather than Starlette's ``BaseHTTPMiddleware``: no per-request task or body copy.

Why each guard exists (the scheduler runs commands, so its API must be closed):

- :class:`RequireToken`: ``Authorization: Bearer TOKEN``, compared in constant time
  (``hmac.compare_digest``), on every path but the open ones (``/healthz``).
- :class:`AllowHosts`: a browser page can make a name it controls resolve to 127.0.0.1 (DNS
  rebinding) and then read the API as same-origin; its requests still carry that name in
  ``Host``, so only known names pass.
- :class:`RequireJSON`: a cross-origin "simple" request (no preflight) can only send
  ``text/plain``, form or multipart bodies; insisting on ``application/json`` refuses it (415).
- :class:`LimitBody`: bodies over a limit are refused (413) before the app reads them.

Each guard answers with ``error_body(message)`` so a service keeps its own error shape
(``{"error": ...}`` for the scheduler, ``{"detail": ...}`` for the placement service).
"""

from __future__ import annotations

import hmac
import time
import ipaddress
import json
from typing import Any, Awaitable, Callable, Iterable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ErrorBody = Callable[[str], dict[str, Any]]

MIN_TOKEN_CHARS = 8
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def detail_body(message: str) -> dict[str, Any]:
    return {"detail": message}


def error_body(message: str) -> dict[str, Any]:
    return {"error": message}


async def send_json(send: Send, status: int, body: dict[str, Any],
                    headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    payload = json.dumps(body).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": payload})


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of request header ``name`` (lower-case bytes), or None."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return value
    return None


def token_matches(given: bytes | None, expected: bytes) -> bool:
    """Constant-time comparison of an ``Authorization`` header with ``Bearer TOKEN``."""
    return hmac.compare_digest(given or b"", expected)


class RequireToken:
    """Answers 401 to any request but ``open_paths`` without ``Authorization: Bearer TOKEN``;
    ``token=None`` disables the check (the placement service without a configured token)."""

    def __init__(self, app: ASGIApp, token: str | None, open_paths: Iterable[str] = ("/healthz",),
                 error: ErrorBody = detail_body) -> None:
        self.app, self.error = app, error
        self.open_paths = frozenset(open_paths)
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.expected is None or scope["type"] != "http" or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        if token_matches(header(scope, b"authorization"), self.expected):
            await self.app(scope, receive, send)
            return
        await send_json(send, 401, self.error("missing or wrong bearer token (header Authorization: Bearer TOKEN)"),
                        ((b"www-authenticate", b"Bearer"),))


def host_name(value: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:8470`` -> ``::1``, ``a.b:80`` -> ``a.b``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class AllowHosts:
    """Answers 403 unless the ``Host`` header names this service.

    Accepted: ``localhost`` and loopback IPs, the address the service is bound to, the names in
    ``allowed``, and, when bound to a non-loopback address, any IP literal (an IP cannot be a
    rebinding name). Anything else, or no ``Host`` at all, is refused.
    """

    def __init__(self, app: ASGIApp, bound_host: str, allowed: Iterable[str] = (), error: ErrorBody = detail_body) -> None:
        self.app, self.error = app, error
        bound = host_name(bound_host) if bound_host.startswith("[") else bound_host.strip().lower()
        self.names = {"localhost", bound, *(a.strip().lower() for a in allowed if a.strip())}
        self.any_ip = not is_loopback(bound)

    def allows(self, host: str) -> bool:
        name = host_name(host)
        return bool(name) and (name in self.names or is_loopback(name) or (self.any_ip and _is_ip(name)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = header(scope, b"host")
        host = raw.decode("latin-1") if raw is not None else ""
        if self.allows(host):
            await self.app(scope, receive, send)
            return
        shown = host[:100] if host else "(none)"
        await send_json(send, 403, self.error(
            f"Host header {shown!r} is not this service's (allow it with --allowed-host)"))


class RequireJSON:
    """Answers 415 to a POST / PUT / PATCH whose ``Content-Type`` is not ``application/json``."""

    def __init__(self, app: ASGIApp, error: ErrorBody = detail_body) -> None:
        self.app, self.error = app, error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in BODY_METHODS:
            ctype = (header(scope, b"content-type") or b"").decode("latin-1")
            if ctype.split(";", 1)[0].strip().lower() != "application/json":
                await send_json(send, 415, self.error(
                    f"Content-Type: expected application/json, got {ctype[:100]!r}"))
                return
        await self.app(scope, receive, send)


class LimitBody:
    """Answers 413 to a body over ``max_bytes``, whether it declares its length or streams it;
    a body within the limit is handed on whole."""

    def __init__(self, app: ASGIApp, max_bytes: int, error: ErrorBody = detail_body) -> None:
        self.app, self.max_bytes, self.error = app, max_bytes, error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = header(scope, b"content-length")
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
        await send_json(send, 413, self.error(f"request body larger than the limit of {self.max_bytes} bytes"))


def _replay(messages: list[Message], receive: Receive) -> Receive:
    queue = list(messages)

    async def replay() -> Message:
        return queue.pop(0) if queue else await receive()

    return replay


class ObserveRequests:
    """Times every HTTP request and reports ``(path, status, seconds)`` to ``observe`` (the outermost
    layer, so refused requests are counted too; a client that left before an answer counts as 499)."""

    def __init__(self, app: ASGIApp, observe: Callable[[str, int, float], None]) -> None:
        self.app, self.observe = app, observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 499

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        except Exception:
            status = 500 if status == 499 else status
            raise
        finally:
            self.observe(scope.get("path", ""), status, time.perf_counter() - start)
