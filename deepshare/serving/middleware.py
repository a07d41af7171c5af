"""ASGI middleware of the placement service, outermost first (assembled in ``serving/api.py``):

1. :class:`~deepshare.infra.httpauth.ObserveRequests` counts and times every request by route, method
   and status code; a request whose client went away before the answer is counted as 499, never
   as a 500.
2. :class:`AnswerHealth` (here) answers ``GET`` and ``HEAD /healthz`` itself, before anything that reads a
   body, checks a token or waits for a decision thread, so a health check costs microseconds
   whatever the placement requests are doing.
3. :class:`~deepshare.infra.httpauth.RequireToken` answers 401 without ``Authorization: Bearer TOKEN``
   to every request but ``GET`` and ``HEAD`` of :data:`OPEN_PATHS`: other methods on ``/healthz``
   (which :class:`AnswerHealth` passes on) need the token too, so no body is read without it.
4. :class:`~deepshare.infra.httpauth.LimitBody` reads the body whole, within ``max_bytes`` (else 413)
   and within ``timeout_s`` (else 408, and the connection is closed), so a slow client holds a
   replica's request slot for seconds at most.

The guards are the ones the live scheduler uses too (:mod:`deepshare.infra.httpauth`), answering in this
service's error shape ``{"detail": ...}``. Plain ASGI (no per-request task or body copy as in
Starlette's ``BaseHTTPMiddleware``), because every request of a latency-bound service passes
through them.
"""

from __future__ import annotations

from deepshare.infra.httpauth import ASGIApp, Receive, Scope, Send, send_json, unread_body

HEALTH_PATH = "/healthz"
OPEN_PATHS = frozenset({HEALTH_PATH})
"""Routes answered without the token for ``GET`` and ``HEAD`` only (liveness probes carry no
credentials; any other method there needs the token, see :func:`deepshare.infra.httpauth.is_open`)."""


class AnswerHealth:
    """``GET /healthz`` -> ``{"status": "ok", "policy": NAME}`` without going further in (``HEAD``:
    the same status and headers, no body; load balancers probe with either)."""

    def __init__(self, app: ASGIApp, policy: str) -> None:
        self.app = app
        self.payload = {"status": "ok", "policy": policy}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") == HEALTH_PATH and scope.get("method") in ("GET", "HEAD"):
            # a probe declaring a body is closed after its answer (the body is never read: see unread_body)
            await send_json(send, 200, self.payload, unread_body(scope), head=scope["method"] == "HEAD")
            return
        await self.app(scope, receive, send)
