"""uvicorn for an API this project serves itself (the live scheduler's), with the limits its
defaults lack against slow or idle clients.

uvicorn's HTTP/1.1 protocol never times out a connection that has not sent a whole request's
headers, and accepts connections without bound (its ``limit_concurrency`` only answers 503 to
requests once that many are open): any process that can connect could hold connections open with
half a header until the server ran out of file descriptors (an adversarial review held 20,000
against the scheduler's API, which then reset every connection). :class:`HeaderTimeoutH11` closes
a connection that has not sent a request's headers within ``header_timeout_s`` of connecting or
of its last response, and closes a new connection at once while ``max_connections`` are open. A
flood of connections still costs the API its answers while it lasts (a client on loopback needs
no token to connect), never the process its descriptors; a reverse proxy in front is the place
for per-client limits. Slow bodies are the guards' (:class:`~deepshare.infra.httpauth.LimitBody`,
408); idle keep-alive connections close after uvicorn's ``timeout_keep_alive``.

A request refused before its body was read (401, 403, 413 on the declared length, 415) leaves
the body on the wire: uvicorn reads and drops it, and one byte of it cancels uvicorn's keep-alive
timer for good. Such a connection is closed ``header_timeout_s`` after the answer unless its body
has all arrived (and the next request's headers) by then: otherwise a client without a token
could hold every one of the ``max_connections`` by sending one body byte after its 401.
"""

from __future__ import annotations

from typing import Any

HEADER_TIMEOUT_S = 10.0
"""Seconds a connection may take to send a request's headers."""
MAX_CONNECTIONS = 512
"""Connections one server keeps open at most; one more is closed as soon as it is accepted."""


def _protocol(header_timeout_s: float, max_connections: int) -> type:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11(H11Protocol):  # type: ignore[misc]
        """uvicorn's h11 protocol, closing a connection at once when ``max_connections`` are open
        already, and one whose request headers have not all arrived ``header_timeout_s`` after it
        connected or after its last response."""

        _headers_timer: Any = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)  # counted in the server's connections from here
            if len(self.connections) > max_connections:
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._headers_timer = self.loop.call_later(header_timeout_s, self._headers_due)

        def _disarm(self) -> None:
            if self._headers_timer is not None:
                self._headers_timer.cancel()
                self._headers_timer = None

        def _headers_due(self) -> None:
            self._headers_timer = None
            # h11 leaves IDLE once a request's headers are in (then the body's timeout applies),
            # unless the answer went out already (our DONE) before the body was read: a refusal
            # whose body is still arriving is dropped here, not held open without a timer
            if ((self.conn.their_state is h11.IDLE or self.conn.our_state is h11.DONE)
                    and not self.transport.is_closing()):
                self.transport.close()

    return HeaderTimeoutH11


def api_server(app: Any, *, header_timeout_s: float = HEADER_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS) -> Any:
    """A ``uvicorn.Server`` for ``app`` with the limits of the module doc, that leaves the process's
    logging alone: uvicorn's default ``log_config`` runs ``logging.config.dictConfig``, which
    closes every logging handler of the process; a library must not do that to its host. (It broke
    this project's test suite: absl's handler closes its stream when closed, and that stream was
    pytest's capture file.) uvicorn's warnings go to the host's handlers instead (or to stderr when
    it has none)."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=None, lifespan="off", proxy_headers=False,
                                         http=_protocol(header_timeout_s, max_connections)))
