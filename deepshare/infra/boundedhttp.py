"""One HTTP request whose whole exchange has a deadline and whose answer has a size limit.

``requests`` (and urllib3, and httpx) time out each socket operation, not the request: a server
that sends its status line, headers or body a byte every few seconds keeps the caller waiting
for as long as it likes, and an answer of any size is read into memory. The live scheduler asks
its placement service once a tick, so either would stall or exhaust it. :func:`exchange` opens
its own connection, and a timer shuts that socket down at the deadline (which wakes a read
blocked in any phase; opening the connection has the same timeout), so a request never takes
much more than ``seconds``, and an answer beyond ``max_bytes`` is refused as soon as its length
is known or reached.

One connection per request (no keep-alive pool) and no proxy from the environment: the callers
ask one service, once a tick or less.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from deepshare.core.errors import DeepShareError

READ_CHUNK = 64 * 1024
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""Default limit on an answer's body (a placement answer for 10,000 jobs is about 2 MB)."""


class ExchangeError(DeepShareError):
    """The exchange did not complete: unreachable or cut off (``unreachable``), too slow
    (``timed_out``) or too large. The message does not repeat the URL."""

    def __init__(self, message: str, timed_out: bool = False, unreachable: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.unreachable = unreachable


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    """Header names in lower case."""
    body: bytes


def exchange(url: str, method: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
             seconds: float = 10.0, max_bytes: int = MAX_ANSWER_BYTES) -> Answer:
    """Send one request to ``url`` (http or https) and read its whole answer within ``seconds``.

    Raises :class:`ExchangeError` when the server cannot be reached, closes early, has not
    answered completely within ``seconds`` (``timed_out``), or answers more than ``max_bytes``."""
    if seconds <= 0:
        raise ExchangeError("no time left for the request", timed_out=True)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExchangeError("expected an http:// or https:// URL")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=seconds, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=seconds)
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked read or write in the caller
            except OSError:
                pass

    timer = threading.Timer(seconds, cut)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        if expired.is_set():  # the timer fired while the connection opened
            raise OSError("deadline passed while connecting")
        conn.request(method, target, body=body, headers=dict(headers or {}))
        reply = conn.getresponse()
        content = _read(reply, max_bytes)
        if expired.is_set():  # a shut-down socket reads as the end of the answer
            raise OSError("deadline passed while reading")
        return Answer(reply.status, {k.lower(): v for k, v in reply.getheaders()}, content)
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set() or isinstance(exc, TimeoutError):
            raise ExchangeError(f"no complete answer within {seconds:g} s", timed_out=True) from None
        raise ExchangeError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, unreachable=True) from None
    finally:
        timer.cancel()
        conn.close()


def _read(reply: http.client.HTTPResponse, max_bytes: int) -> bytes:
    """The body, refused once it is known or found to exceed ``max_bytes``."""
    length = reply.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > max_bytes:
        raise ExchangeError(f"the answer is {int(length):,} bytes, more than the {max_bytes:,} accepted")
    chunks, size = [], 0
    while True:
        chunk = reply.read1(READ_CHUNK)
        if not chunk:
            if reply.length:  # what Content-Length promised and never came (read1 does not say)
                raise http.client.IncompleteRead(b"", reply.length)
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise ExchangeError(f"the answer is more than the {max_bytes:,} bytes accepted")
        chunks.append(chunk)
