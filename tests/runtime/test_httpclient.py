"""The scheduler's HTTP client against a scripted server on loopback: what it sends (token, paths,
query, JSON) and how each kind of answer becomes a result or one DeepShareError line."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.runtime.httpclient import SchedulerClient

TOKEN = "s3cret-token-0123"
SPEC = {"name": "j", "gpus": 1, "model": "DLRM", "command": ["/bin/true"], "checkpoint_dir": "/tmp/c"}


def answers_of_a_real_journal(tmp_path) -> tuple[str, bytes, bytes]:
    """(job id, its JobOut JSON, its JobDetailOut JSON) as the scheduler's own models write them."""
    from deepshare.runtime.journal import Journal
    from deepshare.runtime.models import job_detail, job_out
    from deepshare.runtime.spec import spec_from_json

    journal = Journal(tmp_path / "state")
    record = journal.submit(spec_from_json(SPEC))
    out = job_out(record).model_dump_json().encode()
    detail = job_detail(record, journal.runs(record.job_id), journal.transitions(record.job_id),
                        checkpoint_dir=journal.run_names.checkpoint_dir(record.spec, record.job_id)).model_dump_json().encode()
    journal.close()
    return record.job_id, out, detail


class Script(BaseHTTPRequestHandler):
    """Answers from ``server.answers[(method, path)]`` = (status, body bytes); records each request."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append((self.command, self.path, dict(self.headers), body))  # type: ignore[attr-defined]
        status, payload = self.server.answers.get((self.command, self.path.split("?")[0]), (404, b'{"error": "no route"}'))  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *_: object) -> None:  # quiet
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Script)
    srv.seen, srv.answers = [], {}  # type: ignore[attr-defined]
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def client(server: ThreadingHTTPServer, token: str = TOKEN) -> SchedulerClient:
    return SchedulerClient(f"http://127.0.0.1:{server.server_address[1]}", token, timeout_s=5)


def test_requests_carry_the_bearer_token_and_quote_the_job_id(server, tmp_path, monkeypatch):
    (tmp_path / ".netrc").write_text("machine 127.0.0.1 login someone password other\n")
    monkeypatch.setenv("HOME", str(tmp_path))  # a ~/.netrc entry must not replace the token
    job_id, _, detail = answers_of_a_real_journal(tmp_path)
    server.answers[("GET", "/v1/jobs/a%2F..%2Fb")] = (200, detail)
    server.answers[("GET", "/v1/jobs/j-1/logs")] = (
        200, b'{"job_id": "j-1", "rank": 1, "offset": 5, "next_offset": 5, "text": "", "size": 5}')
    assert client(server).job("a/../b").id == job_id
    assert client(server).logs("j-1", rank=1, offset=5).next_offset == 5
    (_, path1, headers1, _), (_, path2, headers2, _) = server.seen
    assert path1 == "/v1/jobs/a%2F..%2Fb" and path2 == "/v1/jobs/j-1/logs?rank=1&offset=5"
    assert headers1["Authorization"] == headers2["Authorization"] == f"Bearer {TOKEN}"


def test_a_submission_is_json(server, tmp_path):
    from deepshare.runtime.spec import spec_from_json

    job_id, out, _ = answers_of_a_real_journal(tmp_path)
    server.answers[("POST", "/v1/jobs")] = (201, out)
    assert client(server).submit(spec_from_json(SPEC)).id == job_id
    (method, _, headers, body), = server.seen
    assert method == "POST" and headers["Content-Type"] == "application/json" and json.loads(body)["name"] == "j"


@pytest.mark.parametrize("status, payload, message", [
    (401, b'{"error": "missing or wrong bearer token"}',
     "missing or wrong bearer token; give --token, set $DEEPSHARE_SCHEDULER_TOKEN or --state DIR of the scheduler (HTTP 401)"),
    (409, b'{"error": "job j-1 is finished"}', "job j-1 is finished (HTTP 409)"),
    (500, b"<html>oops</html>", "Internal Server Error (HTTP 500)"),
    (200, b"<html>not json</html>", "answered HTTP 200 with a body that is not JSON; is this a DeepShare scheduler?"),
])
def test_answers_become_one_line_naming_the_url(server, status, payload, message):
    server.answers[("GET", "/v1/jobs")] = (status, payload)
    with pytest.raises(DeepShareError) as info:
        client(server).jobs()
    assert str(info.value) == f"http://127.0.0.1:{server.server_address[1]}: {message}"


def test_no_scheduler_at_the_url_is_one_short_line():
    with pytest.raises(DeepShareError) as info:
        SchedulerClient("http://127.0.0.1:9", TOKEN).jobs()
    assert str(info.value) == "--url http://127.0.0.1:9: no scheduler answers (Connection refused)"


def test_an_answer_beyond_the_limit_is_one_line_not_the_clients_memory(server, monkeypatch):
    import deepshare.runtime.httpclient as httpclient

    monkeypatch.setattr(httpclient, "MAX_ANSWER_BYTES", 1000)
    server.answers[("GET", "/v1/jobs")] = (200, b"[" + b"1," * 5000 + b"1]")
    with pytest.raises(DeepShareError) as info:
        client(server).jobs()
    assert str(info.value).endswith("answered more than 1,000 bytes; is this a DeepShare scheduler?")


def test_a_compressed_answer_is_never_inflated(server, monkeypatch):
    """The client asks for no compressed answer; a server that sends one anyway (a gzip bomb of 1 MB
    of spaces in about 1 KB) is answered "not JSON" from its 1 KB, never inflated to its 1 MB."""
    import gzip

    import deepshare.runtime.httpclient as httpclient

    monkeypatch.setattr(httpclient, "MAX_ANSWER_BYTES", 10_000)
    bomb = gzip.compress(b" " * 1_000_000)

    class Gzip(Script):
        def _answer(self) -> None:
            self.server.seen.append(dict(self.headers))  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(bomb)))
            self.end_headers()
            self.wfile.write(bomb)

        do_GET = _answer

    server.RequestHandlerClass = Gzip
    with pytest.raises(DeepShareError, match="a body that is not JSON"):
        client(server).jobs()
    assert "gzip" not in server.seen[0].get("Accept-Encoding", "")


def test_a_server_that_trickles_its_answer_is_cut_off_at_the_deadline(server):
    """Headers at once, then the body a byte every 0.3 s (30 s in all): no single read waits a
    second, so a per-read timeout never fires; the whole exchange's deadline (1 s) does."""
    import time

    class Trickle(Script):
        def _answer(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.3)
            except OSError:  # the client hung up
                pass

        do_GET = _answer

    server.RequestHandlerClass = Trickle
    slow = SchedulerClient(f"http://127.0.0.1:{server.server_address[1]}", TOKEN, timeout_s=1)
    with pytest.raises(DeepShareError) as info:
        slow.jobs()
    assert str(info.value).endswith("no scheduler answers (no complete answer within 1 s)")


class Custom(Script):
    """Answers every request with ``server.custom`` = (status, reason, headers, body)."""

    def _answer(self) -> None:
        self.server.seen.append((self.command, self.path))  # type: ignore[attr-defined]
        status, reason, headers, body = self.server.custom  # type: ignore[attr-defined]
        self.send_response(status, reason)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_one_line_naming_where_it_points_and_is_not_followed(server, status):
    server.RequestHandlerClass = Custom
    server.custom = (status, None, {"Location": "https://elsewhere.example/v1/jobs"}, b"")
    with pytest.raises(DeepShareError) as info:
        client(server).jobs()
    assert str(info.value) == (f"http://127.0.0.1:{server.server_address[1]}: answered HTTP {status}, a redirect to "
                               "'https://elsewhere.example/v1/jobs'; give that URL as --url (redirects are not "
                               "followed: the token would go with them)")
    assert len(server.seen) == 1


@pytest.mark.parametrize("call", ["jobs", "job", "cancel", "logs", "submit"])
def test_an_answer_that_is_not_what_the_route_returns_is_one_line(server, call):
    from deepshare.runtime.spec import spec_from_json

    server.RequestHandlerClass = Custom
    server.custom = (200, None, {"Content-Type": "application/json"}, b"")  # no body at all
    args = {"jobs": (), "job": ("j-1",), "cancel": ("j-1",), "logs": ("j-1", 0, 0), "submit": (spec_from_json(SPEC),)}
    with pytest.raises(DeepShareError, match="answered (NoneType, not a list|something that is not a)"):
        getattr(client(server), call)(*args[call])


@pytest.mark.parametrize(("status", "reason", "expected"), [
    (403, "Forbidden by policy gateway", "Forbidden by policy gateway (HTTP 403)"),  # the server's own words
    (502, None, "Bad Gateway (HTTP 502)"),
    (499, "", "answered HTTP 499"),  # no reason and no standard phrase: not "HTTP 499 (HTTP 499)"
])
def test_an_error_without_a_json_message_reads_the_status_line(server, status, reason, expected):
    server.RequestHandlerClass = Custom
    server.custom = (status, reason, {"Content-Type": "text/html"}, b"<html>no</html>")
    with pytest.raises(DeepShareError) as info:
        client(server).jobs()
    assert str(info.value) == f"http://127.0.0.1:{server.server_address[1]}: {expected}"


def test_a_url_path_with_a_space_or_a_non_ascii_letter_is_percent_encoded(server):
    server.RequestHandlerClass = Custom
    server.custom = (200, None, {"Content-Type": "application/json"}, b"[]")
    port = server.server_address[1]
    assert SchedulerClient(f"http://127.0.0.1:{port}/a b", TOKEN).jobs() == []
    assert SchedulerClient(f"http://127.0.0.1:{port}/é", TOKEN).jobs() == []
    assert [path for _, path in server.seen] == ["/a%20b/v1/jobs", "/%C3%A9/v1/jobs"]


@pytest.mark.parametrize("chunk", [
    {"offset": 0, "next_offset": 0, "size": 10, "text": ""},   # more there, but it never moves
    {"offset": 0, "next_offset": 0, "size": 10, "text": "x"},  # text, and it never moves
    {"offset": 0, "next_offset": -1, "size": 10, "text": ""},
    {"offset": 0, "next_offset": 5, "size": -1, "text": "x"},
    {"offset": 0, "next_offset": 20, "size": 10, "text": "x"},
])
def test_a_log_chunk_that_does_not_move_on_is_one_line(server, chunk):
    """``deepshare logs`` asks again from ``next_offset``: a chunk standing still made it ask (and
    print) for ever."""
    server.answers[("GET", "/v1/jobs/a/logs")] = (200, json.dumps({"job_id": "a", "rank": 0, **chunk}).encode())
    with pytest.raises(DeepShareError, match="answered a log chunk that does not move on from offset 0"):
        client(server).logs("a", rank=0, offset=0)


def test_the_logs_command_ends_on_a_server_whose_offset_stands_still(server, capsys):
    from cli_run import cli, one_error_line

    server.answers[("GET", "/v1/jobs/a/logs")] = (
        200, b'{"job_id": "a", "rank": 0, "offset": 0, "next_offset": 0, "size": 10, "text": "x"}')
    url = f"http://127.0.0.1:{server.server_address[1]}"
    rc, out, err = cli(capsys, "logs", "a", "--url", url, "--token", TOKEN)
    assert rc == 2 and out == ""
    one_error_line(err, "does not move on")


@pytest.mark.parametrize("path, body", [
    ("/v1/queues", [1, 2]),
    ("/v1/queues", [{"queue": "q", "gpus_in_use": 0, "nominal_gpus": "abc", "borrowed_gpus": 0, "pending_jobs": 0,
                     "pending_gpus": 0}]),
    ("/v1/queues", [{"queue": "q"}]),
    ("/v1/contention", {"fitted_at": "x"}),
    ("/v1/contention", {"refit_s": "x"}),
    ("/v1/contention", {"models": [1]}),
    ("/v1/contention", {"models": {"m": 1}}),
    ("/v1/contention", {"models": {"m": {}}}),
])
def test_queues_and_contention_answers_of_the_wrong_shape_are_one_line(server, capsys, path, body):
    from cli_run import cli, one_error_line

    server.answers[("GET", path)] = (200, json.dumps(body).encode())
    url = f"http://127.0.0.1:{server.server_address[1]}"
    rc, _, err = cli(capsys, path.rsplit("/", 1)[1], "--url", url, "--token", TOKEN)
    assert rc == 2, err
    one_error_line(err, path, "is this a DeepShare scheduler?")


def test_well_formed_queues_and_contention_answers_print(server, capsys):
    from cli_run import cli

    server.answers[("GET", "/v1/queues")] = (200, json.dumps([
        {"queue": "[/q]", "gpus_in_use": 4, "nominal_gpus": None, "borrowed_gpus": 0, "pending_jobs": 1,
         "pending_gpus": 2}]).encode())
    server.answers[("GET", "/v1/contention")] = (200, json.dumps({
        "version": 2, "prior": "link", "fitted_at": 12.5, "runs": 3, "mae_learned": 0.01, "mae_prior": 0.02,
        "refit_s": 60, "models": {"[/m]": {"scale": 1, "exponent": 1.5, "observations": 7, "contended": 2}}}).encode())
    url = f"http://127.0.0.1:{server.server_address[1]}"
    rc, out, err = cli(capsys, "queues", "--url", url, "--token", TOKEN)
    assert rc == 0 and "[/q]" in out, err
    rc, out, err = cli(capsys, "contention", "--url", url, "--token", TOKEN)
    assert rc == 0 and "[/m]" in out and "v2" in out, err
