"""Plain-ASGI guards for the project's HTTP services: bearer token, Host allow-list, JSON bodies,
body size limit, and the shared JSON answer.

Shared by the live scheduler (``deepshare/runtime/api.py``) and the placement service
(``deepshare/serving/api.py``, which adds its ``/healthz`` fast path from ``serving/middleware.py``).
Plain ASGI rather than Starlette's ``BaseHTTPMiddleware``: no per-request task or body copy.

Why each guard exists (the scheduler runs commands, so its API must be closed):

- :class:`RequireToken`: ``Authorization: Bearer TOKEN``, compared in constant time
  (``hmac.compare_digest``), on every request but a ``GET`` or ``HEAD`` of an open path
  (``/healthz``); :class:`RequireCaller` the same for a service with several tokens, telling the
  app whose it is. Open paths are open for reading only: any other method there needs the token
  like any other route, so a caller without it never gets a body read (a ``POST /healthz`` would
  otherwise be read whole, up to the body limit, before the app's 405).
- :class:`AllowHosts`: a browser page can make a name it controls resolve to 127.0.0.1 (DNS
  rebinding) and then read the API as same-origin; its requests still carry that name in
  ``Host``, so only known names pass.
- :class:`RequireJSON`: a cross-origin "simple" request (no preflight) can only send
  ``text/plain``, form or multipart bodies; insisting on ``application/json`` refuses it (415).
- :class:`LimitBody`: bodies over a limit are refused (413) before the app reads them, and with
  a body timeout a slow client is cut off (408) instead of holding a request slot.
- :class:`ObserveRequests`: every request counted and timed, refused ones too; a client that left
  is 499, never a 500.

Each guard answers with ``error_body(message)`` so a service keeps its own error shape
(``{"error": ...}`` for the scheduler, ``{"detail": ...}`` for the placement service).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any, Awaitable, Callable, Iterable

from deepshare.core.errors import DeepShareError
from deepshare.core.hosts import HostNames

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ErrorBody = Callable[[str], dict[str, Any]]

MIN_TOKEN_CHARS = 8
MAX_TOKEN_CHARS = 4096
TOKEN_PATTERN = r"^[!-~]+$"
"""Printable ASCII without spaces: what an ``Authorization`` header can carry unchanged."""
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
OPEN_METHODS = frozenset({"GET", "HEAD"})
"""Methods an open path (``/healthz``) answers without a token; any other needs it (see :func:`is_open`)."""
CLIENT_CLOSED = 499
"""Status counted for a request whose client went away before it was answered (nginx's code)."""
CLIENT_GONE = "deepshare.client_gone"
"""Scope key :class:`LimitBody` sets when the client disconnected before sending its body."""


def check_token(token: str, source: str) -> str:
    """``token`` if a client can send it (8-4096 printable ASCII characters, no spaces), else a
    :class:`DeepShareError` naming ``source``. A token with a line break (a secret file's trailing
    newline) could never match any request's header: every call would be a silent 401."""
    if len(token) < MIN_TOKEN_CHARS:
        raise DeepShareError(f"{source}: the token must have at least {MIN_TOKEN_CHARS} characters, got {len(token)}")
    if len(token) > MAX_TOKEN_CHARS or not all(33 <= ord(c) < 127 for c in token):
        raise DeepShareError(f"{source}: the token must be at most {MAX_TOKEN_CHARS} printable ASCII characters without spaces")
    return token


def detail_body(message: str) -> dict[str, Any]:
    return {"detail": message}


def error_body(message: str) -> dict[str, Any]:
    return {"error": message}


async def send_json(send: Send, status: int, body: dict[str, Any],
                    headers: tuple[tuple[bytes, bytes], ...] = (), head: bool = False) -> None:
    """Answer ``body`` as JSON; with ``head`` (a HEAD request) the same headers and no body."""
    payload = json.dumps(body).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": b"" if head else payload})


def unread_body(scope: Scope, close: bool = True) -> tuple[tuple[bytes, bytes], ...]:
    """``Connection: close`` for an answer given before the request's body was read, when the
    request declares one (a length above 0, or chunks); nothing otherwise. After such a refusal
    the rest of the body would arrive on a connection that uvicorn no longer times (its
    keep-alive timer is cancelled by the first byte, its header timer is ours only in
    :mod:`deepshare.infra.httpserver`): behind Ray Serve's proxy, a client with no token held it
    open for good with one byte after its 401. Closing costs a client that streams a refused
    body its keep-alive, and at worst a reset before it reads the answer. ``close`` False:
    nothing (guards behind :func:`deepshare.infra.httpserver.api_server`, whose server closes such
    a connection itself once its header timeout passes, unless the body then came whole)."""
    if not close:
        return ()
    length = header(scope, b"content-length")
    if header(scope, b"transfer-encoding") is not None or (length is not None and length.strip() not in (b"", b"0")):
        return ((b"connection", b"close"),)
    return ()


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of request header ``name`` (lower-case bytes), or None."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return value
    return None


def token_matches(given: bytes | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header is ``Bearer TOKEN``: the scheme in any case (HTTP's
    schemes are case-insensitive, RFC 9110 11.1: ``bearer`` and ``BEARER`` are the same scheme)
    and one or more spaces before the token, which is compared in constant time."""
    scheme, _, credentials = (given or b"").partition(b" ")
    return hmac.compare_digest(credentials.lstrip(b" "), token) and scheme.lower() == b"bearer"


def bearer_credentials(given: bytes | None) -> bytes | None:
    """The token of an ``Authorization: Bearer TOKEN`` header (the scheme in any case, one or
    more spaces before the token), or None for no header, another scheme or an empty token."""
    scheme, _, credentials = (given or b"").partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.lstrip(b" ") or None


def is_open(scope: Scope, open_paths: frozenset[str]) -> bool:
    """Whether a request passes without a token: not HTTP (lifespan), or a ``GET`` / ``HEAD`` of
    one of ``open_paths``. Only reading methods: a ``POST`` to an open path would be read whole by
    the body guard before the app refused the method, so it needs the token first."""
    if scope["type"] != "http":
        return True
    return scope.get("path") in open_paths and scope.get("method") in OPEN_METHODS


CALLER = "deepshare.caller"
"""Scope key :class:`RequireCaller` sets to whoever the request's token identifies."""
UNAUTHORIZED = "missing or wrong bearer token (header Authorization: Bearer TOKEN)"


class RequireCaller:
    """Answers 401 to any request but a ``GET`` / ``HEAD`` of ``open_paths`` (:func:`is_open`) whose
    bearer token ``identify`` does not know; otherwise puts who it is (``identify``'s answer) in ``scope[CALLER]`` for the app.
    For services with more than one token (the live scheduler's admin and tenants):
    ``identify`` must compare in constant time (:meth:`deepshare.runtime.tenancy.LiveTenants.caller`)."""

    def __init__(self, app: ASGIApp, identify: Callable[[bytes | None], Any], open_paths: Iterable[str] = ("/healthz",),
                 error: ErrorBody = detail_body, close_unread: bool = True) -> None:
        self.app, self.identify, self.error, self.close_unread = app, identify, error, close_unread
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_open(scope, self.open_paths):
            await self.app(scope, receive, send)
            return
        who = self.identify(bearer_credentials(header(scope, b"authorization")))
        if who is not None:
            scope[CALLER] = who
            await self.app(scope, receive, send)
            return
        await send_json(send, 401, self.error(UNAUTHORIZED),
                        ((b"www-authenticate", b"Bearer"), *unread_body(scope, self.close_unread)))


class RequireToken:
    """Answers 401 to any request but a ``GET`` / ``HEAD`` of ``open_paths`` (:func:`is_open`)
    without ``Authorization: Bearer TOKEN``; ``token=None`` disables the check (the placement service without a configured token)."""

    def __init__(self, app: ASGIApp, token: str | None, open_paths: Iterable[str] = ("/healthz",),
                 error: ErrorBody = detail_body, close_unread: bool = True) -> None:
        self.app, self.error, self.close_unread = app, error, close_unread
        self.open_paths = frozenset(open_paths)
        self.expected = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.expected is None or is_open(scope, self.open_paths):
            await self.app(scope, receive, send)
            return
        if token_matches(header(scope, b"authorization"), self.expected):
            await self.app(scope, receive, send)
            return
        await send_json(send, 401, self.error("missing or wrong bearer token (header Authorization: Bearer TOKEN)"),
                        ((b"www-authenticate", b"Bearer"), *unread_body(scope, self.close_unread)))


class AllowHosts:
    """Answers 403 unless the ``Host`` header names this service.

    Accepted: ``localhost`` and loopback IPs, the address the service is bound to, the names in
    ``allowed``, and, when bound to a non-loopback address, any IP literal (an IP cannot be a
    rebinding name). Anything else, no ``Host`` at all or more than one, is refused.

    Why not Starlette's ``TrustedHostMiddleware`` (checked against Starlette 1.10): it matches
    exact names and ``*.domain`` patterns only, so it cannot accept "any IP literal" (how clients
    and Prometheus reach a scheduler bound to 0.0.0.0 by the machine's address, which the
    scheduler cannot list) nor the loopback range, and it answers 400 ``text/plain`` "Invalid host
    header" where this answers 403 in the service's own error shape, naming ``--allowed-host``.
    """

    def __init__(self, app: ASGIApp, bound_host: str, allowed: Iterable[str] = (), error: ErrorBody = detail_body,
                 close_unread: bool = True) -> None:
        self.app, self.error, self.close_unread = app, error, close_unread
        self.hosts = HostNames(bound_host, allowed)

    def allows(self, host: str) -> bool:
        return self.hosts.allows(host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = [value for key, value in scope.get("headers") or () if key == b"host"]
        # one Host header only (RFC 9112 3.2): with two, a proxy reading the last could disagree with this check
        host = hosts[0].decode("latin-1") if len(hosts) == 1 else ""
        if self.allows(host):
            await self.app(scope, receive, send)
            return
        shown = host[:100] if host else "(none)"
        await send_json(send, 403, self.error(
            f"Host header {shown!r} is not this service's (allow it with --allowed-host)"), unread_body(scope, self.close_unread))


class RequireJSON:
    """Answers 415 to a POST / PUT / PATCH whose ``Content-Type`` is not ``application/json``."""

    def __init__(self, app: ASGIApp, error: ErrorBody = detail_body, close_unread: bool = True) -> None:
        self.app, self.error, self.close_unread = app, error, close_unread

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in BODY_METHODS:
            ctype = (header(scope, b"content-type") or b"").decode("latin-1")
            if ctype.split(";", 1)[0].strip().lower() != "application/json":
                await send_json(send, 415, self.error(
                    f"Content-Type: expected application/json, got {ctype[:100]!r}"), unread_body(scope, self.close_unread))
                return
        await self.app(scope, receive, send)


class LimitBody:
    """Answers 413 to a body over ``max_bytes``, whether it declares its length or streams it,
    and, with ``timeout_s``, 408 (closing the connection) to one not received whole in time, so a
    slow client holds a request slot for seconds at most; a body within the limits is handed on
    whole. A client that goes away mid-body gets no answer and is marked with :data:`CLIENT_GONE`
    in the scope (for :class:`ObserveRequests`)."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float | None = None,
                 error: ErrorBody = detail_body, close_unread: bool = True) -> None:
        self.app, self.max_bytes, self.timeout_s, self.error = app, max_bytes, timeout_s, error
        self.close_unread = close_unread

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = header(scope, b"content-length")
        declared = declared.strip() if declared is not None else None  # httptools keeps trailing spaces
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send, unread_body(scope, self.close_unread))
            return
        try:
            body = await _within(self._read(receive), self.timeout_s)
        except asyncio.TimeoutError:
            await send_json(send, 408, self.error(
                f"request body not received within {self.timeout_s:g} s (the service's body timeout)"),
                ((b"connection", b"close"),))
            return
        except _TooLarge:  # the rest of the body is unread
            await self._too_large(send, ((b"connection", b"close"),) if self.close_unread else ())
            return
        if body is None:  # the client went away mid-body: nobody to answer
            scope[CLIENT_GONE] = True
            return
        whole = {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, replay([whole], receive), send)

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

    async def _too_large(self, send: Send, headers: tuple[tuple[bytes, bytes], ...]) -> None:
        await send_json(send, 413, self.error(f"request body larger than the limit of {self.max_bytes} bytes"), headers)


class _TooLarge(Exception):
    pass


async def _within(awaitable: Awaitable[Any], seconds: float | None) -> Any:
    """``await awaitable``, cancelled with ``asyncio.TimeoutError`` after ``seconds`` (None: no
    limit): in the current task where ``asyncio.timeout`` exists (Python 3.11+), saving
    ``wait_for``'s task per request."""
    if seconds is None:
        return await awaitable
    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:  # pragma: no cover - Python 3.10
        return await asyncio.wait_for(awaitable, seconds)
    async with timeout(seconds):
        return await awaitable


def replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that hands out ``messages`` first, then defers to ``receive``."""
    queue = list(messages)

    async def replayed() -> Message:
        return queue.pop(0) if queue else await receive()

    return replayed


class ObserveRequests:
    """Times every HTTP request and reports ``(path, method, status, seconds)`` to ``observe``
    (the outermost layer, so refused requests are counted too).

    No answer sent and the client gone (it disconnected mid-body, or the server cancelled the
    request because it did) is :data:`CLIENT_CLOSED` (499); no answer for any other reason is a
    500 (a bug)."""

    def __init__(self, app: ASGIApp, observe: Callable[[str, str, int, float], None]) -> None:
        self.app, self.observe = app, observe

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
            self.observe(scope.get("path", ""), scope.get("method", ""), status, time.perf_counter() - start)
