"""One HTTP exchange, bounded as a whole: a server that drips or floods cannot hold or exhaust the caller.

Each test runs a raw socket server on loopback that answers one connection with a script of
(bytes, pause) steps, then closes.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import pytest

from deepshare.infra.boundedhttp import ExchangeError, exchange

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


class Scripted:
    """A loopback server answering every connection with ``script``: (bytes, seconds to wait after)."""

    def __init__(self, script: list[tuple[bytes, float]]) -> None:
        self.script = script
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/v1/x"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)  # the request (small in these tests)
                    for data, pause in self.script:
                        if self.stop.is_set():
                            break
                        conn.sendall(data)
                        self.stop.wait(pause)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.server.close()


@pytest.fixture
def serve() -> Iterator:
    servers: list[Scripted] = []

    def start(script: list[tuple[bytes, float]]) -> Scripted:
        servers.append(Scripted(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def drip(data: bytes, every: float) -> list[tuple[bytes, float]]:
    return [(data[i:i + 1], every) for i in range(len(data))]


def test_a_whole_answer_is_read(serve):
    server = serve([(OK + b"Content-Length: 11\r\nRetry-After: 3\r\n\r\n{\"a\": true}", 0)])
    answer = exchange(server.url, "POST", b"{}", {"Content-Type": "application/json"}, seconds=5)
    assert (answer.status, answer.body, answer.headers["retry-after"]) == (200, b'{"a": true}', "3")


def test_a_chunked_answer_is_read(serve):
    server = serve([(OK + b"Transfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n5\r\n: 1}\n\r\n0\r\n\r\n", 0)])
    assert exchange(server.url, "GET", seconds=5).body == b'{"a": 1}\n'


@pytest.mark.parametrize("phase", ["status line and headers", "body"])
def test_a_server_that_drips_its_answer_is_cut_off_at_the_deadline(serve, phase):
    # a byte every 0.1 s: each read gets its byte well within any per-read timeout
    head = OK + b"Content-Length: 200\r\n\r\n"
    script = drip(head + b"x" * 200, 0.1) if phase != "body" else [(head, 0)] + drip(b"x" * 200, 0.1)
    server = serve(script)
    start = time.monotonic()
    with pytest.raises(ExchangeError, match="no complete answer within 1 s") as caught:
        exchange(server.url, "GET", seconds=1.0)
    assert caught.value.timed_out
    assert time.monotonic() - start < 1.6


def test_a_server_that_never_answers_is_cut_off_at_the_deadline(serve):
    server = serve([(b"", 30)])
    start = time.monotonic()
    with pytest.raises(ExchangeError) as caught:
        exchange(server.url, "GET", seconds=0.5)
    assert caught.value.timed_out and time.monotonic() - start < 1.2


def test_an_answer_announced_too_large_is_refused_unread(serve):
    server = serve([(OK + b"Content-Length: 999999999999\r\n\r\n", 5)])
    start = time.monotonic()
    with pytest.raises(ExchangeError, match="the answer is 999,999,999,999 bytes, more than the 1,000 accepted"):
        exchange(server.url, "GET", seconds=5, max_bytes=1000)
    assert time.monotonic() - start < 1.0


def test_a_chunked_answer_that_grows_too_large_is_refused(serve):
    chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
    server = serve([(OK + b"Transfer-Encoding: chunked\r\n\r\n", 0)] + [(chunk, 0)] * 100)
    with pytest.raises(ExchangeError, match="more than the 10,000 bytes accepted") as caught:
        exchange(server.url, "GET", seconds=5, max_bytes=10_000)
    assert not caught.value.timed_out


def test_an_answer_cut_short_is_an_error_not_a_short_body(serve):
    server = serve([(OK + b"Content-Length: 100\r\n\r\n" + b"x" * 10, 0)])
    with pytest.raises(ExchangeError, match="IncompleteRead") as caught:
        exchange(server.url, "GET", seconds=5)
    assert caught.value.unreachable and not caught.value.timed_out


def test_a_closed_port_and_a_bad_url_are_errors():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(ExchangeError) as caught:
        exchange(f"http://127.0.0.1:{port}/", "GET", seconds=2)
    assert caught.value.unreachable
    with pytest.raises(ExchangeError, match="expected an http:// or https:// URL"):
        exchange("ftp://127.0.0.1/", "GET")
    with pytest.raises(ExchangeError, match="no time left") as caught:
        exchange("http://127.0.0.1:9/", "GET", seconds=0)
    assert caught.value.timed_out


# -- the placement client (what the live scheduler's --placement-url asks through) -------------
def test_the_client_gives_up_at_its_callers_deadline_with_the_callers_timeout(serve):
    from deepshare.core.deadline import Deadline, DecisionTimeout, bounded
    from deepshare.serving.client import PlacementClient

    server = serve(drip(OK + b"Content-Length: 200\r\n\r\n" + b"x" * 200, 0.1))
    client = PlacementClient(server.url.rsplit("/v1/x", 1)[0], timeout_s=30)
    start = time.monotonic()
    with pytest.raises(DecisionTimeout), bounded(Deadline(0.5)):
        client.policy()
    assert time.monotonic() - start < 1.1  # the decision's 0.5 s, not the client's 30 s


WHY = b'{"detail": "why"}'
POLICY_FAILED = b'{"detail": "why", "error": "policy"}'


@pytest.mark.parametrize("head, body, unavailable, retry_after", [
    (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\n", WHY, True, 2.0),
    (b"HTTP/1.1 504 Gateway Timeout\r\n", WHY, True, None),
    (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: inf\r\n", WHY, True, None),
    (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 99999999\r\n", WHY, True, None),
    (b"HTTP/1.1 401 Unauthorized\r\n", WHY, True, None),
    (b"HTTP/1.1 408 Request Timeout\r\n", WHY, True, None),
    (b"HTTP/1.1 422 Unprocessable Entity\r\n", WHY, False, None),
    (b"HTTP/1.1 500 Internal Server Error\r\n", WHY, True, None),  # a bare 500: a replica that died, not the request
    (b"HTTP/1.1 500 Internal Server Error\r\n", POLICY_FAILED, False, None),  # the service's: its policy failed on it
])
def test_the_client_tells_a_service_that_cannot_answer_from_one_that_refuses_the_request(serve, head, body, unavailable,
                                                                                         retry_after):
    from deepshare.core.errors import Unavailable
    from deepshare.serving.client import PlacementClient, PlacementServiceError

    server = serve([(head + b"Content-Length: %d\r\n\r\n" % len(body) + body, 0)])
    with pytest.raises(PlacementServiceError, match="why") as caught:
        PlacementClient(server.url.rsplit("/v1/x", 1)[0]).policy()
    assert isinstance(caught.value, Unavailable) is unavailable
    assert caught.value.retry_after_s == retry_after


def test_the_client_refuses_a_flood_and_calls_a_closed_port_unavailable(serve):
    from deepshare.core.errors import Unavailable
    from deepshare.serving.client import PlacementClient, PlacementServiceError

    server = serve([(OK + b"Content-Length: 5000000\r\n\r\n", 5)])
    with pytest.raises(PlacementServiceError, match="more than the 1,000,000 accepted") as caught:
        PlacementClient(server.url.rsplit("/v1/x", 1)[0], max_answer_bytes=1_000_000).policy()
    assert not isinstance(caught.value, Unavailable)
    with pytest.raises(PlacementServiceError, match="cannot reach the placement service") as caught:
        PlacementClient("http://127.0.0.1:9", timeout_s=2).policy()
    assert isinstance(caught.value, Unavailable)


def test_an_answer_of_the_wrong_shape_is_one_line_naming_its_field(serve):
    # a service of another version, or not a placement service: the scheduler's start printed a
    # pydantic traceback (the client asks /v1/policy for the policy's name)
    from deepshare.serving.client import PlacementClient, PlacementServiceError

    body = b'{"name": "other", "kind": "heuristic"}'
    server = serve([(OK + b"Content-Length: %d\r\n\r\n" % len(body) + body, 0)])
    with pytest.raises(PlacementServiceError, match=r"/v1/policy: unexpected answer: \w+: Field required "
                                                    r"\(and \d+ more\); is this a DeepShare placement service"):
        PlacementClient(server.url.rsplit("/v1/x", 1)[0]).name


def test_a_non_ascii_length_and_an_informational_answer_are_errors_not_crashes(serve):
    # "¹" passes str.isdigit() and int() refuses it: a ValueError escaped, which the live loop
    # took for a job's data error; a 103 was handed back as the answer itself
    server = serve([(OK + "Content-Length: ¹\r\n\r\n".encode("latin-1") + b"{}", 0)])
    assert exchange(server.url, "GET", seconds=2).body == b"{}"  # no length, as http.client reads it: to the end
    server = serve([(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n", 0)])
    with pytest.raises(ExchangeError, match=r"informational answer \(103\)") as caught:
        exchange(server.url, "GET", seconds=2)
    assert caught.value.unreachable


def test_connecting_shares_the_deadline_across_addresses(serve, monkeypatch):
    # Three addresses whose connection attempts hang (a listener whose backlog is full drops the
    # SYNs), then a live one: each attempt got the whole timeout of its own (3 s for 1 s).
    server = serve([(OK + b"Content-Length: 2\r\n\r\n{}", 0)])
    full = socket.create_server(("127.0.0.1", 0), backlog=0)
    parked = []
    try:
        for _ in range(8):  # fill the accept queue; later SYNs go unanswered
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(full.getsockname())
            parked.append(s)
        time.sleep(0.1)
        hole, live = full.getsockname(), ("127.0.0.1", int(server.url.split(":")[2].split("/")[0]))
        monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", hole)] * 3 + [(socket.AF_INET, socket.SOCK_STREAM, 6, "", live)])
        start = time.monotonic()
        with pytest.raises(ExchangeError) as caught:
            exchange("http://service.invalid:1/v1/x", "GET", seconds=1.0)
        assert caught.value.timed_out and time.monotonic() - start < 1.5
    finally:
        for s in parked:
            s.close()
        full.close()


def test_a_tls_handshake_that_never_ends_is_cut_at_the_deadline(serve):
    server = serve([(b"", 30)])  # accepts, reads the ClientHello, answers nothing
    start = time.monotonic()
    with pytest.raises(ExchangeError) as caught:
        exchange(server.url.replace("http://", "https://"), "GET", seconds=0.8)
    assert caught.value.timed_out and time.monotonic() - start < 1.3


def _self_signed(folder) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """(cert, key) PEM files of a self-signed certificate for 127.0.0.1."""
    import datetime
    import ipaddress

    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


def test_https_is_verified_against_the_ca_bundle_requests_read(tmp_path, monkeypatch):
    import ssl

    cert, key = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_once() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(65536)
                    tls.sendall(OK + b"Content-Length: 2\r\n\r\n{}")
            except (OSError, ssl.SSLError):
                pass  # the unverified client hangs up during the handshake

    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    try:
        for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
            monkeypatch.delenv(name, raising=False)
        with pytest.raises(ExchangeError, match="CERTIFICATE_VERIFY_FAILED") as caught:
            exchange(f"https://127.0.0.1:{port}/v1/x", "GET", seconds=5)
        assert caught.value.unreachable
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", cert)
        assert exchange(f"https://127.0.0.1:{port}/v1/x", "GET", seconds=5).body == b"{}"
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "missing.pem"))
        with pytest.raises(ExchangeError, match=r"\$REQUESTS_CA_BUNDLE: cannot read the CA bundle"):
            exchange(f"https://127.0.0.1:{port}/v1/x", "GET", seconds=5)
    finally:
        thread.join(5)
        listener.close()


@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:99999/", "not a URL"), ("http://127.0.0.1:abc/", "not a URL"), ("http://[::1/", "not a URL"),
    ("http://127.0.0.1:0/", "port 0"), ("ftp://127.0.0.1/", "expected an http:// or https:// URL"),
    ("http:///x", "expected an http:// or https:// URL"),
])
def test_a_bad_url_is_an_exchange_error_and_the_client_refuses_it_when_given(url, message):
    # a ValueError escaped before, which the live loop took for a job's data error
    from deepshare.serving.client import PlacementClient, PlacementServiceError

    with pytest.raises(ExchangeError, match=message):
        exchange(url, "GET", seconds=1)
    with pytest.raises(PlacementServiceError, match=message):
        PlacementClient(url)


def test_an_ipv6_literal_without_a_port_goes_to_the_schemes_port_with_a_bracketed_host(monkeypatch):
    from deepshare.infra import boundedhttp

    seen = {}

    def fake_connect(host, port, *rest):  # type: ignore[no-untyped-def]
        seen["to"] = (host, port)
        raise ConnectionRefusedError("no one here")

    monkeypatch.setattr(boundedhttp, "_connect", fake_connect)
    with pytest.raises(ExchangeError):
        exchange("http://[::1]/healthz", "GET", seconds=1)
    assert seen["to"] == ("::1", 80)  # http.client read the last group as the port: ("::", 1)
    assert boundedhttp.split_url("https://[2001:db8::8080]/v1?x=1") == ("2001:db8::8080", 443, "/v1?x=1")


def test_a_stalled_name_lookup_is_cut_at_the_deadline(monkeypatch):
    # getaddrinfo cannot be interrupted; it ran on the caller's thread, so a stalled resolver
    # held a --placement-url request for as long as the resolver took
    released = threading.Event()

    def stalled(*args, **kwargs):  # type: ignore[no-untyped-def]
        released.wait(10)
        raise socket.gaierror("resolver gave up")

    monkeypatch.setattr(socket, "getaddrinfo", stalled)
    start = time.monotonic()
    try:
        with pytest.raises(ExchangeError, match="no complete answer within 0.5 s") as caught:
            exchange("http://placement.example:8000/v1/policy", "GET", seconds=0.5)
        assert caught.value.timed_out and time.monotonic() - start < 1.0
    finally:
        released.set()
