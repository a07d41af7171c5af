"""Attacks on the live scheduler's HTTP API through its real ASGI stack (uvicorn on loopback, the
guards of ``deepshare.runtime.api.guard``), over a journal only (no Ray: nothing could run
anyway, so the assertion is that nothing reaches the journal).

Covered: the cross-origin "simple" POST, tokenless / wrong-token / malformed-header calls on every
route, DNS-rebinding Host headers, non-JSON bodies, deeply nested JSON, coercions and unbounded
strings in job specs, path traversal and bounds of the logs route, /healthz before and after the
loop runs, and exact metric counter deltas.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest
from api_serving import served

uvicorn = pytest.importorskip("uvicorn")

from deepshare.runtime.api import MAX_BODY_BYTES, guard, make_app  # noqa: E402
from deepshare.runtime.journal import Journal  # noqa: E402
from deepshare.runtime.logs import MAX_CHUNK, rank_log_path  # noqa: E402
from deepshare.runtime.metrics import SchedulerMetrics  # noqa: E402
from deepshare.infra.httpserver import HEADER_TIMEOUT_S, MAX_CONNECTIONS  # noqa: E402
from deepshare.runtime.service import api_server, bind  # noqa: E402

TOKEN = "s3cret-token-for-tests-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
GOOD = dict(name="x", gpus=1, model="DLRM", command=["/bin/sh", "-c", "id > /tmp/p"], checkpoint_dir="/tmp/c")


class Server:
    def __init__(self, root: Path) -> None:
        self.state = root / "state"
        self.journal = Journal(self.state)
        self.ready = False
        self.metrics = SchedulerMetrics("9.9.9", "fifo+consolidated", self.journal.counts)
        app = make_app(self.journal, lambda: (8, 2), state_dir=self.state, metrics=self.metrics,
                       ready=lambda: self.ready)
        guarded = guard(app, token=TOKEN, bound_host="127.0.0.1", allowed_hosts=("sched.internal",),
                        metrics=self.metrics)
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.srv = api_server(guarded)
        self.thread = threading.Thread(target=self.srv.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.srv.started and time.monotonic() < deadline:
            time.sleep(0.02)

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
             host: str | None = None) -> tuple[int, bytes]:
        """One request; ``host`` replaces the ``Host`` header (None: 127.0.0.1:PORT; "": none)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            if host != "":
                conn.putheader("Host", host if host is not None else f"127.0.0.1:{self.port}")
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def close(self) -> None:
        self.srv.should_exit = True
        self.thread.join(timeout=5)
        self.sock.close()
        self.journal.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("sched-http"))
    yield s
    s.close()


def error(body: bytes) -> str:
    return json.loads(body)["error"]


def test_cross_origin_simple_post_is_refused_and_nothing_is_submitted(server):
    before = len(server.journal.jobs())
    body = json.dumps(GOOD).encode()
    # Exactly what a page on evil.example can send without a preflight: text/plain, no credentials.
    status, answer = server.call("POST", "/v1/jobs", body, {"Content-Type": "text/plain", "Origin": "http://evil.example"})
    assert status == 401 and "bearer token" in error(answer)
    # Even with the token (a page cannot have it), text/plain is refused: the body is never read.
    status, answer = server.call("POST", "/v1/jobs", body, {**AUTH, "Content-Type": "text/plain",
                                                             "Origin": "http://evil.example"})
    assert status == 415 and "application/json" in error(answer)
    for ctype in ("application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx"):
        status, _ = server.call("POST", "/v1/jobs", body, {**AUTH, **({"Content-Type": ctype} if ctype else {})})
        assert status == 415, ctype
    assert len(server.journal.jobs()) == before
    # The control: the same body, JSON with the token, is accepted (so the refusals above are real).
    status, answer = server.call("POST", "/v1/jobs", body, {**AUTH, "Content-Type": "application/json; charset=utf-8"})
    assert status == 201 and json.loads(answer)["state"] == "queued"
    assert len(server.journal.jobs()) == before + 1


@pytest.mark.parametrize("method, path", [("GET", "/v1/jobs"), ("GET", "/v1/jobs/x-1"), ("DELETE", "/v1/jobs/x-1"),
                                          ("GET", "/v1/jobs/x-1/logs"), ("GET", "/metrics"), ("GET", "/docs"),
                                          ("GET", "/openapi.json"), ("POST", "/v1/jobs"), ("GET", "/nope")])
@pytest.mark.parametrize("auth", [None, "Bearer wrong-token-xxxxxxxxxx", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}",
                                  f"Bearer {TOKEN.upper()}", TOKEN, f"Basic {TOKEN}", f"Bearer{TOKEN}"])
def test_every_route_but_healthz_needs_the_exact_token(server, method, path, auth):
    headers = {**JSON, **({"Authorization": auth} if auth else {})}
    status, answer = server.call(method, path, b"{}" if method == "POST" else None, headers)
    assert status == 401 and "bearer token" in error(answer)


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "Bearer "])
def test_the_scheme_is_case_insensitive_as_in_http(server, scheme):
    """RFC 9110: authentication schemes are case-insensitive, with one or more spaces before the credentials."""
    assert server.call("GET", "/v1/jobs", headers={"Authorization": f"{scheme} {TOKEN}"})[0] == 200


def test_cancel_without_token_changes_nothing(server):
    job = server.journal.submit(__import__("deepshare.runtime.spec", fromlist=["spec_from_json"]).spec_from_json(GOOD))
    assert server.call("DELETE", f"/v1/jobs/{job.job_id}")[0] == 401
    assert server.journal.get(job.job_id).state.value == "queued"
    assert server.call("DELETE", f"/v1/jobs/{job.job_id}", headers=AUTH)[0] == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8470", "127.0.0.1.evil.example", "localhost.evil",
                                  "10.1.2.3", "[fe80::1]:80", "sched.internal.evil", "evil.example.", "sched.internal..", "."])
def test_foreign_host_header_is_403_even_with_the_token(server, host):
    status, answer = server.call("GET", "/v1/jobs", headers=AUTH, host=host)
    assert status == 403 and "Host header" in error(answer)
    assert server.call("GET", "/healthz", host=host)[0] == 403  # rebinding cannot even probe liveness


def test_an_http_11_request_without_a_host_header_is_refused(server):
    # the HTTP parser refuses it (400) before the Host allow-list would (403)
    assert server.call("GET", "/v1/jobs", headers=AUTH, host="")[0] == 400
    assert server.call("GET", "/healthz", host="")[0] == 400


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost:1234", "LOCALHOST", "[::1]:8470", "127.0.0.2",
                                  "sched.internal", "sched.internal:443",
                                  # a fully qualified name's final dot: the same name to DNS
                                  "localhost.", "localhost.:8470", "sched.internal.:443"])
def test_own_host_names_pass(server, host):
    assert server.call("GET", "/v1/jobs", headers=AUTH, host=host)[0] == 200


def test_healthz_needs_no_token_and_says_when_the_loop_runs(server):
    server.ready = False
    status, answer = server.call("GET", "/healthz")
    assert status == 503 and json.loads(answer) == {"status": "starting"}
    server.ready = True
    status, answer = server.call("GET", "/healthz")
    assert status == 200 and json.loads(answer) == {"status": "ok"}
    assert server.call("HEAD", "/healthz") == (200, b"")  # load balancers probe with HEAD; it was 405


@pytest.mark.parametrize("body, message", [
    (b"[" * 100_000 + b"]" * 100_000, "body: JSON nested too deeply"),
    (b'{"name": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "body: JSON nested too deeply"),
    (b"{not json", "body: not valid JSON"),
    (b"\xff\xfe", "body: not valid JSON"),
])
def test_malformed_and_deeply_nested_json_is_400(server, body, message):
    before = len(server.journal.jobs())
    status, answer = server.call("POST", "/v1/jobs", body, {**AUTH, **JSON})
    assert status == 400 and error(answer).startswith(message)
    assert len(server.journal.jobs()) == before


def test_body_over_the_limit_is_413_without_reading_it(server):
    status, answer = server.call("POST", "/v1/jobs", b" " * (MAX_BODY_BYTES + 1), {**AUTH, **JSON})
    assert status == 413 and str(MAX_BODY_BYTES) in error(answer)


LONG = "a" * 4097


@pytest.mark.parametrize("patch, field", [
    ({"gpus": True}, "gpus: Input should be a valid integer"),
    ({"gpus": "1"}, "gpus: Input should be a valid integer"),
    ({"gpus": 1.0}, "gpus: Input should be a valid integer"),
    ({"gpus": 5000}, "gpus: Input should be less than or equal to 4096"),
    ({"expected_duration_s": "10"}, "expected_duration_s: Input should be a valid number"),
    ({"expected_duration_s": 1e999}, "expected_duration_s: Input should be a finite number"),
    ({"total_samples": True}, "total_samples: Input should be a valid number"),
    ({"name": "x" * 64}, "name: Value error"),
    ({"name": "../x"}, "name: Value error"),
    ({"model": "m" * 65}, "model: String should have at most 64 characters"),
    ({"command": ["/bin/true", LONG]}, "command.1: String should have at most 4096 characters"),
    ({"command": ["/bin/true"] * 257}, "command: List should have at most 256 items"),
    ({"command": ["/bin/true", 1]}, "command.1: Input should be a valid string"),
    ({"command": ["/bin/true", "a\x00b"]}, "command: Value error, NUL characters are not allowed"),
    ({"args": [LONG]}, "args.0: String should have at most 4096 characters"),
    ({"args": ["x"] * 257}, "args: List should have at most 256 items"),
    ({"env": {"K": LONG}}, "env.K: String should have at most 4096 characters"),
    ({"env": {"K" * 129: "v"}}, "env.KKKK"),
    ({"env": {f"K{i}": "v" for i in range(129)}}, "env: Dictionary should have at most 128 items"),
    ({"env": {"K": 1}}, "env.K: Input should be a valid string"),
    ({"env": {"BAD-KEY": "v"}}, "env: Value error, invalid environment variable name"),
    ({"checkpoint_dir": "/" + LONG}, "checkpoint_dir: String should have at most 4096 characters"),
    ({"working_dir": ""}, "working_dir: String should have at least 1 character"),
    ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
])
def test_strict_specs_name_the_field(server, patch, field):
    before = len(server.journal.jobs())
    status, answer = server.call("POST", "/v1/jobs", json.dumps({**GOOD, **patch}).encode(), {**AUTH, **JSON})
    assert status == 422 and field in error(answer), error(answer)
    assert len(server.journal.jobs()) == before


def test_logs_route_is_bounded_and_never_leaves_the_logs_folder(server):
    spec = __import__("deepshare.runtime.spec", fromlist=["spec_from_json"]).spec_from_json({**GOOD, "gpus": 2})
    job = server.journal.submit(spec)
    path = rank_log_path(server.state, job.job_id, 1)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"0123456789" * 10_000)  # 100,000 bytes
    (server.state / "secret").write_text("do not serve")
    status, answer = server.call("GET", f"/v1/jobs/{job.job_id}/logs?rank=1", headers=AUTH)
    doc = json.loads(answer)
    assert status == 200 and doc["offset"] == 0 and doc["next_offset"] == MAX_CHUNK and doc["size"] == 100_000
    assert len(doc["text"]) == MAX_CHUNK
    status, answer = server.call("GET", f"/v1/jobs/{job.job_id}/logs?rank=1&offset={MAX_CHUNK}", headers=AUTH)
    doc = json.loads(answer)
    assert doc["next_offset"] == 100_000 and len(doc["text"]) == 100_000 - MAX_CHUNK
    status, answer = server.call("GET", f"/v1/jobs/{job.job_id}/logs?rank=1&offset=-15", headers=AUTH)
    assert json.loads(answer)["text"] == "567890123456789"
    status, answer = server.call("GET", f"/v1/jobs/{job.job_id}/logs?rank=0", headers=AUTH)
    assert status == 200 and json.loads(answer)["text"] == "" and json.loads(answer)["size"] == 0  # nothing yet
    for query, message in [("rank=2", "rank: expected 0..1"), ("rank=-1", "rank: expected 0..1"),
                           ("rank=../../secret", "rank: expected an integer"), ("rank=1&limit=0", "limit: expected"),
                           (f"rank=1&limit={MAX_CHUNK + 1}", "limit: expected"), ("offset=x", "offset: expected"),
                           # int() alone took these: other scripts' digits, underscores, spaces, huge
                           ("rank=%D9%A0", "rank: expected an integer"), ("offset=1_0", "offset: expected an integer"),
                           ("offset=%201", "offset: expected an integer"), ("offset=" + "9" * 19, "offset: expected an integer")]:
        status, answer = server.call("GET", f"/v1/jobs/{job.job_id}/logs?{query}", headers=AUTH)
        assert status == 422 and message in error(answer), query
    for bad in ("..%2F..%2Fsecret", "%2E%2E", "..", "nope-1"):
        status, answer = server.call("GET", f"/v1/jobs/{bad}/logs", headers=AUTH)
        assert status == 404 and "do not serve" not in answer.decode(), bad


def test_a_job_folder_replaced_by_a_link_to_another_jobs_is_not_followed(server):
    """A job's process can write the logs folder: it replaced its own ``logs/<job>`` with a link
    to another job's folder, and its owner read that job's log through its own job's route
    (``O_NOFOLLOW`` covered the file name only). Now it reads as no log."""
    spec = __import__("deepshare.runtime.spec", fromlist=["spec_from_json"]).spec_from_json(GOOD)
    other, own = server.journal.submit(spec), server.journal.submit(spec)
    theirs = rank_log_path(server.state, other.job_id, 0)
    theirs.parent.mkdir(parents=True)
    theirs.write_text("the other job's secret output\n")
    rank_log_path(server.state, own.job_id, 0).parent.symlink_to(theirs.parent)
    status, answer = server.call("GET", f"/v1/jobs/{own.job_id}/logs?rank=0", headers=AUTH)
    assert status == 200 and json.loads(answer)["text"] == "" and b"secret" not in answer
    status, answer = server.call("GET", f"/v1/jobs/{other.job_id}/logs?rank=0", headers=AUTH)
    assert json.loads(answer)["text"] == "the other job's secret output\n"  # its own route still reads it


def test_metrics_count_requests_by_code_exactly(server):
    def value(name: str, **labels: str) -> float:
        got = server.metrics.registry.get_sample_value(name, labels)
        return 0.0 if got is None else got

    before = {code: value("deepshare_scheduler_http_requests_total", route="/v1/jobs", code=code)
              for code in ("200", "401", "403", "415")}
    server.call("GET", "/v1/jobs", headers=AUTH)
    server.call("GET", "/v1/jobs", headers=AUTH)
    server.call("GET", "/v1/jobs")
    server.call("GET", "/v1/jobs", headers=AUTH, host="evil.example")
    server.call("POST", "/v1/jobs", b"x", {**AUTH, "Content-Type": "text/plain"})
    after = {code: value("deepshare_scheduler_http_requests_total", route="/v1/jobs", code=code) for code in before}
    assert {c: after[c] - before[c] for c in before} == {"200": 2.0, "401": 1.0, "403": 1.0, "415": 1.0}
    count = value("deepshare_scheduler_http_request_duration_seconds_count", route="/v1/jobs")
    server.call("GET", "/v1/jobs/some-1", headers=AUTH)  # a job id folds into one route label
    assert value("deepshare_scheduler_http_requests_total", route="/v1/jobs/{id}", code="404") >= 1
    assert value("deepshare_scheduler_http_request_duration_seconds_count", route="/v1/jobs") == count
    status, text = server.call("GET", "/metrics", headers=AUTH)
    text = text.decode()
    assert status == 200
    assert 'deepshare_scheduler_build_info{policy="fifo+consolidated",version="9.9.9"} 1.0' in text
    assert "process_cpu_seconds_total" in text  # the process collector, on this registry
    queued = sum(1 for j in server.journal.jobs() if j.state.value == "queued")
    assert f"deepshare_scheduler_queue_length {float(queued)}" in text
    for name in ("running_jobs", "gpus_in_use", "launches_total", "launch_failures_total", "preemptions_total",
                 "migrations_total", "decision_duration_seconds_bucket", "tick_duration_seconds_bucket"):
        assert f"deepshare_scheduler_{name}" in text, name


def test_a_connection_that_never_finishes_its_headers_is_closed(tmp_path):
    # uvicorn never timed these out: 20,000 of them (one file descriptor each) made the API reset
    # every connection. A short header timeout here; the server's default is 10 s.
    import socket

    with fresh_server(tmp_path, header_timeout_s=0.5) as (_, call, port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as half, \
                socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
            half.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: headers never end
            start = time.monotonic()
            assert half.recv(100) == b"" and silent.recv(100) == b""  # closed by the server
            assert time.monotonic() - start < 5
        assert call("GET", "/healthz")[0] in (200, 503)  # a whole request still answers


def test_a_busy_keep_alive_connection_outlives_the_header_timeout(tmp_path):
    # the timer armed at connect was never cancelled: it closed a connection busy with requests
    # one timeout after it connected
    with fresh_server(tmp_path, header_timeout_s=0.5) as (_, _call, port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        start = time.monotonic()
        while time.monotonic() - start < 1.5:  # three timeouts, a request every 0.1 s on one connection
            conn.request("GET", "/healthz", headers={"Host": f"127.0.0.1:{port}"})
            response = conn.getresponse()
            response.read()
            assert response.status in (200, 503) and not response.will_close
            time.sleep(0.1)
        conn.close()


def test_connections_past_the_cap_are_closed_at_once(tmp_path):
    import socket

    with fresh_server(tmp_path, max_connections=4) as (_, call, port):
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            start = time.monotonic()
            assert extra.recv(100) == b"" and time.monotonic() - start < 2  # closed, not held 10 s
        for sock in held:
            sock.close()
        time.sleep(0.2)
        assert call("GET", "/healthz")[0] in (200, 503)  # room again


def test_a_body_that_never_arrives_gets_408(server):
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall((f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {TOKEN}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{").encode())
        start = time.monotonic()
        answer = conn.recv(200)
    assert answer.startswith(b"HTTP/1.1 408 ") and 9 < time.monotonic() - start < 20


def test_two_host_headers_are_refused_whichever_comes_first(server):
    # only the first was checked: 127.0.0.1 then evil.com passed, which a proxy reading the last
    # Host header would have routed as evil.com's
    for hosts in (("127.0.0.1", "evil.com"), ("evil.com", "127.0.0.1"), ("127.0.0.1", "127.0.0.1")):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.putrequest("GET", "/v1/jobs", skip_host=True, skip_accept_encoding=True)
        for host in hosts:
            conn.putheader("Host", host)
        conn.putheader("Authorization", f"Bearer {TOKEN}")
        conn.endheaders()
        status = conn.getresponse().status
        conn.close()
        assert status in (400, 403), hosts


@contextmanager
def fresh_server(root: Path, header_timeout_s: float = HEADER_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
                 **app_options: object) -> Iterator[tuple[Journal, Callable[..., tuple[int, bytes]], int]]:
    """A scheduler API of its own over a new journal (``make_app``'s options): the journal, a
    caller with the token, the port."""
    journal = Journal(root / "state")
    app = guard(make_app(journal, lambda: (8, 2), state_dir=root / "state", **app_options), token=TOKEN,
                bound_host="127.0.0.1")
    try:
        with served(api_server(app, header_timeout_s=header_timeout_s, max_connections=max_connections)) as port:

            def call(method: str, path: str, body: object = None) -> tuple[int, bytes]:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    conn.request(method, path, None if body is None else json.dumps(body),
                                 {**AUTH, **JSON, "Host": f"127.0.0.1:{port}"})
                    resp = conn.getresponse()
                    return resp.status, resp.read()
                finally:
                    conn.close()

            yield journal, call, port
    finally:  # after the server stopped: no request reaches a closed journal
        journal.close()


def test_a_full_queue_refuses_submissions_with_429(tmp_path):
    # nothing bounded the queue: a token holder's loop left 14,000 queued jobs, and every reload
    # and listing read them all
    with fresh_server(tmp_path, max_queued=2) as (journal, call, _):
        assert [call("POST", "/v1/jobs", {**GOOD, "name": f"j{i}"})[0] for i in range(2)] == [201, 201]
        status, answer = call("POST", "/v1/jobs", {**GOOD, "name": "j2"})
        assert status == 429 and "2 jobs queued, at most 2 (--max-queued)" in error(answer)
        assert len(journal.jobs()) == 2
        journal.cancel(journal.jobs()[0].job_id)  # a job leaves the queue: room again
        assert call("POST", "/v1/jobs", {**GOOD, "name": "j3"})[0] == 201


def test_the_job_list_is_bounded_and_filtered(tmp_path, monkeypatch):
    # it listed every job the journal ever held: 12 MB for 14,000 jobs
    from deepshare.runtime import api

    monkeypatch.setattr(api, "LIST_LIMIT", 3)
    with fresh_server(tmp_path) as (journal, call, _):
        ids = [json.loads(call("POST", "/v1/jobs", {**GOOD, "name": f"j{i}"})[1])["id"] for i in range(5)]
        journal.cancel(ids[4])
        listed = lambda query: [j["id"] for j in json.loads(call("GET", f"/v1/jobs{query}")[1])]  # noqa: E731
        assert listed("") == ids[2:]  # the default: the 3 most recently submitted, in submission order
        assert listed("?limit=5") == ids and listed("?limit=1") == ids[4:]
        assert listed("?state=queued") == ids[1:4] and listed("?state=cancelled&state=queued&limit=2") == ids[3:]
        for query, message in (("?state=done", "state: expected one of queued, running, finished, failed, cancelled"),
                               ("?limit=0", "limit: expected 1..100000"), ("?limit=100001", "limit: expected 1..100000")):
            status, answer = call("GET", f"/v1/jobs{query}")
            assert status == 422 and message in error(answer), query


def test_the_cli_knows_the_journals_job_states():
    from deepshare.cli.scheduler import JOB_STATES
    from deepshare.runtime.journal import JobState

    assert JOB_STATES == tuple(s.value for s in JobState)


def test_unknown_routes_and_methods_answer_in_the_apis_error_shape(server):
    for method, path, status in (("GET", "/v1/nope", 404), ("GET", "/v1/jobs/..%2F..%2Ftoken/logs", 404),
                                 ("PUT", "/v1/jobs", 405)):
        got, answer = server.call(method, path, b"{}" if method == "PUT" else None, headers={**AUTH, **JSON})
        assert got == status and isinstance(error(answer), str) and "detail" not in json.loads(answer), path
