"""A request the scheduler's guards refuse before reading its body (401, 403, 413 on the declared
length, 415) must not leave the connection open for good.

Found by review: after the refusal, one byte of the unread body cancelled uvicorn's keep-alive
timer and the header timer found the request mid-body, so nothing ever closed the connection; a
client without a token held 20 of 20 connections for as long as it liked, and ``MAX_CONNECTIONS``
of them would shut everyone else out. Real loopback server, real guard stack, a 1 s header timer.
"""

from __future__ import annotations

import socket

import pytest
from api_serving import served

pytest.importorskip("uvicorn")

from deepshare.infra.httpserver import api_server  # noqa: E402
from deepshare.runtime.api import guard  # noqa: E402

TOKEN = "refusal-close-token-0123"
CLOSED_WITHIN_S = 15.0  # the server's timer is 1 s; generous for a loaded machine


async def ok_app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def port():
    with served(api_server(guard(ok_app, token=TOKEN, bound_host="127.0.0.1", max_body_bytes=1000),
                           header_timeout_s=1.0)) as p:
        yield p


def head(port: int, *, token: bool = False, ctype: str = "application/json", length: int = 100,
         host: str | None = None) -> bytes:
    return (f"POST /v1/jobs HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n"
            + (f"Authorization: Bearer {TOKEN}\r\n" if token else "")
            + f"Content-Type: {ctype}\r\nContent-Length: {length}\r\n\r\n").encode()


def closed_by_server(conn: socket.socket) -> bool:
    """Whether the server closes ``conn`` within :data:`CLOSED_WITHIN_S` (reading what it sends)."""
    conn.settimeout(CLOSED_WITHIN_S)
    try:
        while conn.recv(4096):
            pass
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True
    return True


@pytest.mark.parametrize("case, request_head, status", [
    ("no token", dict(), b"401"),
    ("foreign Host", dict(token=True, host="evil.example"), b"403"),
    ("declared body over the limit", dict(token=True, length=100_000), b"413"),
    ("not JSON", dict(token=True, ctype="text/plain"), b"415"),
])
def test_a_refused_request_whose_body_starts_arriving_is_closed(port, case, request_head, status):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head(port, **request_head))
        answer = conn.recv(4096)
        assert answer.split(b"\r\n")[0].split(b" ")[1] == status, (case, answer[:80])
        conn.sendall(b"x")  # one byte of the body the guard never read
        assert closed_by_server(conn), f"{case}: connection still open {CLOSED_WITHIN_S:g} s after the refusal"


def test_many_refused_connections_do_not_stay_open(port):
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(10)]
    try:
        for conn in held:
            conn.sendall(head(port, length=1_000_000))
        for conn in held:
            assert conn.recv(4096).startswith(b"HTTP/1.1 401 ")
            conn.sendall(b"x")
        assert all(closed_by_server(conn) for conn in held)
    finally:
        for conn in held:
            conn.close()


def test_a_client_that_sends_its_whole_body_after_a_refusal_keeps_its_connection(port):
    # the control: the refused body read to its end, the next request on the same connection is answered
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head(port, length=4))
        assert conn.recv(4096).startswith(b"HTTP/1.1 401 ")
        conn.sendall(b"{}  " + head(port, token=True, length=2) + b"{}")
        answer = b""
        while b"ok" not in answer:
            chunk = conn.recv(4096)
            assert chunk, answer
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 ")
