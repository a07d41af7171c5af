"""One HTTP request whose whole exchange has a deadline and whose answer has a size limit.

``requests`` (and urllib3, and httpx) time out each socket operation, not the request: a server
that sends its status line, headers or body a byte every few seconds keeps the caller waiting
for as long as it likes, and an answer of any size is read into memory. The live scheduler asks
its placement service once a tick, so either would stall or exhaust it. :func:`exchange` opens
its own connection, and a timer shuts that socket down at the deadline (which wakes a read
blocked in any phase, the TLS handshake included; each address tried while connecting gets the
time left, not a timeout of its own), so a request never takes much more than ``seconds``, and an
answer beyond ``max_bytes`` is refused as soon as its length is known or reached. Resolving the
host name shares the deadline too: ``getaddrinfo`` cannot be interrupted, so it runs on a small
pool of resolver threads, and the request stops waiting for it at the deadline (a stalled lookup
ends on the resolver's own timeout, in its thread).

One connection per request (no keep-alive pool) and no proxy from the environment: the callers
ask one service, once a tick or less. An https service is verified against ``$REQUESTS_CA_BUNDLE``
or ``$CURL_CA_BUNDLE`` when set (what ``requests`` read), else the system's store
(``$SSL_CERT_FILE`` too).
"""

from __future__ import annotations

import concurrent.futures
import functools
import http.client
import os
import socket
import ssl
import threading
import time
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
    reason: str = ""
    """The status line's reason phrase, as the server wrote it."""


def exchange(url: str, method: str, body: bytes | None = None, headers: Mapping[str, str] | None = None,
             seconds: float = 10.0, max_bytes: int = MAX_ANSWER_BYTES) -> Answer:
    """Send one request to ``url`` (http or https) and read its whole answer within ``seconds``.

    Raises :class:`ExchangeError` when the server cannot be reached, closes early, has not
    answered completely within ``seconds`` (``timed_out``), or answers more than ``max_bytes``."""
    if seconds <= 0:
        raise ExchangeError("no time left for the request", timed_out=True)
    host, port, target = split_url(url)
    tls = _tls_context() if url.lower().startswith("https:") else None
    if tls is not None:  # only sends and reads: the socket is _connect's
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=seconds, context=tls)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=seconds)
    end = time.monotonic() + seconds
    current: list[socket.socket] = []  # the socket the timer cuts, once there is one
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        for sock in current:
            try:  # the plain socket's shutdown, on a TLS socket too: it wakes a blocked read or
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # write without touching the TLS state
            except OSError:
                pass

    timer = threading.Timer(seconds, cut)
    timer.daemon = True
    timer.start()
    try:
        conn.sock = _connect(host, port, end, tls, current, expired)
        conn.request(method, target, body=body, headers=dict(headers or {}))
        reply = conn.getresponse()
        if reply.status < 200:  # an informational answer (103...) that http.client hands back as the answer
            raise http.client.HTTPException(f"an informational answer ({reply.status}) and no final one")
        content = _read(reply, max_bytes)
        if expired.is_set():  # a shut-down socket reads as the end of the answer
            raise OSError("deadline passed while reading")
        return Answer(reply.status, {k.lower(): v for k, v in reply.getheaders()}, content, reply.reason or "")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if expired.is_set() or isinstance(exc, TimeoutError):
            raise ExchangeError(f"no complete answer within {seconds:g} s", timed_out=True) from None
        raise ExchangeError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, unreachable=True) from None
    finally:
        timer.cancel()
        conn.close()


def split_url(url: str) -> tuple[str, int, str]:
    """(host, port, path and query) of an http or https URL, the port the scheme's when absent
    (given explicitly: ``http.client`` would read an IPv6 literal's last group as one); an
    :class:`ExchangeError` naming what is wrong otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ExchangeError(f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExchangeError("expected an http:// or https:// URL with a host")
    if port == 0:
        raise ExchangeError("port 0 is not a port to connect to")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80), target


CA_BUNDLE_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
"""Variables naming a CA bundle to verify https services with, as ``requests`` reads them (the
client used ``requests`` before); without them, the system's store (``SSL_CERT_FILE`` too)."""


def _tls_context() -> ssl.SSLContext:
    """The context to verify an https service with (built once per CA setting: it costs
    milliseconds); a bundle that cannot be read is the caller's set-up, never the request's."""
    setting = next(((name, os.environ[name]) for name in CA_BUNDLE_ENV if os.environ.get(name)), None)
    return _context_for(setting)


@functools.lru_cache(maxsize=4)
def _context_for(setting: tuple[str, str] | None) -> ssl.SSLContext:
    if setting is None:
        return ssl.create_default_context()
    name, bundle = setting
    try:  # a folder of hashed certificates too, as requests takes one
        return ssl.create_default_context(**({"capath": bundle} if os.path.isdir(bundle) else {"cafile": bundle}))
    except (OSError, ssl.SSLError) as exc:
        raise ExchangeError(f"${name}: cannot read the CA bundle {bundle!r} ({exc})", unreachable=True) from None


_RESOLVERS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="deepshare-resolve")
"""Threads that resolve host names for :func:`exchange`: a lookup that stalls holds one of them
until the resolver gives up, never the caller past its deadline."""


def _resolve(host: str, port: int, end: float) -> list[tuple]:
    """``getaddrinfo`` for a stream socket to ``host``:``port``, by ``end`` (a monotonic time)."""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        literal = True
    except OSError:
        literal = False
    if literal:  # an address: nothing to look up, nothing to wait for
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    lookup = _RESOLVERS.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        return lookup.result(timeout=max(0.0, end - time.monotonic()))
    except concurrent.futures.TimeoutError:
        lookup.cancel()  # still queued behind stalled lookups: never started
        raise TimeoutError(f"deadline passed while resolving {host}") from None


def _connect(host: str, port: int, end: float, tls: ssl.SSLContext | None, current: list[socket.socket],
             expired: threading.Event) -> socket.socket:
    """A connected socket (TLS handshake done with ``tls``) by ``end`` (a monotonic time): each
    address is tried with the time left, not a timeout of its own, and each socket is put in
    ``current`` before anything blocks on it, so the caller's timer can cut it."""
    last: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in _resolve(host, port, end):
        left = end - time.monotonic()
        if left <= 0 or expired.is_set():
            raise TimeoutError("deadline passed while connecting")
        sock = socket.socket(family, kind, proto)
        current[:] = [sock]
        try:
            sock.settimeout(left)
            sock.connect(address)
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
                current[:] = [sock]
                sock.settimeout(max(0.001, end - time.monotonic()))
                sock.do_handshake()
            if expired.is_set():
                raise TimeoutError("deadline passed while connecting")
            sock.settimeout(max(0.001, end - time.monotonic()))  # every later read and write: the time left at most
            return sock
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError) or expired.is_set():
                raise
            last = exc
    raise last


def _read(reply: http.client.HTTPResponse, max_bytes: int) -> bytes:
    """The body, refused once it is known or found to exceed ``max_bytes``."""
    length = reply.getheader("Content-Length")
    length = None if length is None else length.strip()
    if length and length.isascii() and length.isdigit() and int(length) > max_bytes:
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
