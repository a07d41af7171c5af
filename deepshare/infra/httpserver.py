"""uvicorn for an API this project serves itself (the live scheduler's), with the limits its
defaults lack against slow or idle clients.

uvicorn's HTTP/1.1 protocol never times out a connection that has not sent a whole request's
headers: any process that can connect could hold connections open with half a header until the
server ran out of file descriptors (an adversarial review held 20,000 against the scheduler's
API, which then reset every connection). :class:`HeaderTimeoutH11` closes a connection that has
not sent a request's headers within ``header_timeout_s`` of connecting or of its last response;
``limit_concurrency`` answers 503 beyond that many connections, so a flood costs the API its
answers for a while but never the process its descriptors. Slow bodies are the guards'
(:class:`~deepshare.infra.httpauth.LimitBody`, 408); idle keep-alive connections close after
uvicorn's ``timeout_keep_alive``.
"""

from __future__ import annotations

from typing import Any

HEADER_TIMEOUT_S = 10.0
"""Seconds a connection may take to send a request's headers."""
MAX_CONNECTIONS = 512
"""Connections (and requests in progress) one server takes before it answers 503."""


def _protocol(header_timeout_s: float) -> type:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11(H11Protocol):  # type: ignore[misc]
        """uvicorn's h11 protocol, closing a connection whose request headers have not all
        arrived ``header_timeout_s`` after it connected or after its last response."""

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self.loop.call_later(header_timeout_s, self._headers_due)

        def _headers_due(self) -> None:
            # h11 leaves IDLE once a request's headers are in (then the body's timeout applies)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
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
                                         http=_protocol(header_timeout_s), limit_concurrency=max_connections))
