"""Tenants in the live scheduler, attacked through its real HTTP stack (uvicorn on loopback, the
guards of ``deepshare.runtime.api.guard``) and its CLI, over a journal (no Ray).

Tenant A must not see, cancel or read the logs of tenant B's jobs, and must not learn that they
exist: every route that takes a job id answers B's job exactly as a job that does not exist.
The routes are enumerated from the app itself, so a route added without a row in
:data:`ROUTES` (and so without a test here) fails :func:`test_every_route_is_classified`.

Also: submission only into one's own queues, per-tenant tokens (constant-time, hashes in the
file, the admin token kept), reloads of the tenants file (endpoint and SIGHUP; a bad file keeps
the old one), per-queue metrics, and admission in the control loop across a quota change.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

uvicorn = pytest.importorskip("uvicorn")

from deepshare.cli import main  # noqa: E402
from deepshare.core.errors import DeepShareError  # noqa: E402
from deepshare.runtime.api import guard, make_app  # noqa: E402
from deepshare.runtime.journal import JobState, Journal  # noqa: E402
from deepshare.runtime.logs import rank_log_path  # noqa: E402
from deepshare.runtime.metrics import SchedulerMetrics  # noqa: E402
from deepshare.runtime.service import api_server, bind  # noqa: E402
from deepshare.runtime.spec import spec_from_json  # noqa: E402
from deepshare.runtime.tenancy import ADMIN, LiveTenants, queue_usage  # noqa: E402

ADMIN_TOKEN = "admin-token-0123456789"
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789xx"
ALICE_NEW = "alice-rotated-token-0123"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def tenants_yaml(a_nominal: int = 2, alice: str = ALICE, extra_queue: bool = True) -> str:
    return (
        "queues:\n"
        f"  - {{name: a, cohort: main, nominal_gpus: {a_nominal}, borrowing_limit_gpus: 2}}\n"
        "  - {name: b, cohort: main, nominal_gpus: 2, borrowing_limit_gpus: 2}\n"
        + ("  - {name: c, nominal_gpus: 4}\n" if extra_queue else "")
        + "priority_classes: {low: 0, high: 100}\n"
        "default_queue: b\n"
        "tokens:\n"
        f"  - {{name: alice, queues: [a], sha256: {sha(alice)}}}\n"
        f"  - {{name: bob, queues: [b], sha256: {sha(BOB)}}}\n"
    )


def body(name: str, queue: str | None = None, gpus: int = 1, **extra) -> dict:  # type: ignore[no-untyped-def]
    spec = dict(name=name, gpus=gpus, model="DLRM", command=["/bin/true"], checkpoint_dir="/tmp/c", **extra)
    if queue is not None:
        spec["queue"] = queue
    return spec


class Server:
    def __init__(self, root: Path) -> None:
        self.state = root / "state"
        self.file = root / "tenants.yaml"
        self.file.write_text(tenants_yaml())
        self.journal = Journal(self.state)
        self.tenants = LiveTenants(ADMIN_TOKEN, self.file,
                                   lambda: self.journal.jobs(JobState.QUEUED, JobState.RUNNING))
        self.metrics = SchedulerMetrics(
            "9.9.9", "fifo", self.journal.counts,
            queues=lambda: queue_usage(self.journal.jobs(JobState.RUNNING, JobState.QUEUED), self.tenants.current),
            reloads=lambda: (self.tenants.reloads, self.tenants.refused))
        self.app = make_app(self.journal, lambda: (16, 2), state_dir=self.state, metrics=self.metrics,
                            contention=lambda: {"version": 0}, tenants=self.tenants)
        guarded = guard(self.app, tenants=self.tenants, bound_host="127.0.0.1", metrics=self.metrics)
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.srv = api_server(guarded)
        self.thread = threading.Thread(target=self.srv.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.srv.started and time.monotonic() < deadline:
            time.sleep(0.02)

    def call(self, method: str, path: str, token: str | None, payload: object = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            headers = {"Content-Type": "application/json"}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            data = None if payload is None else json.dumps(payload).encode()
            if data is None and method == "POST":
                data = b"{}"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def submit(self, token: str, spec: dict) -> dict:
        status, answer = self.call("POST", "/v1/jobs", token, spec)
        assert status == 201, answer
        return json.loads(answer)

    def close(self) -> None:
        self.srv.should_exit = True
        self.thread.join(timeout=5)
        self.sock.close()
        self.journal.close()


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.close()


def routes(app) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """Every (method, path) the app answers (HEAD aside: Starlette adds it to GET routes)."""
    return {(m, r.path) for r in app.routes for m in getattr(r, "methods", None) or () if m != "HEAD"}


JOB = "job"
"""Takes a job id: a foreign job is answered as a missing one."""
ROUTES = {
    ("GET", "/v1/jobs/{job_id}"): JOB,
    ("DELETE", "/v1/jobs/{job_id}"): JOB,
    ("GET", "/v1/jobs/{job_id}/logs"): JOB,
    ("GET", "/v1/jobs"): "list",             # only the caller's queues' jobs
    ("POST", "/v1/jobs"): "submit",          # only into the caller's queues
    ("GET", "/v1/queues"): "queues",         # only the caller's queues
    ("GET", "/metrics"): "admin",
    ("POST", "/v1/tenants/reload"): "admin",
    ("GET", "/healthz"): "open",
    ("GET", "/v1/contention"): "admin",      # fitted on every tenant's runs: their models and counts
    ("GET", "/openapi.json"): "shared",      # the API's description
    ("GET", "/docs"): "shared",
    ("GET", "/docs/oauth2-redirect"): "shared",
    ("GET", "/redoc"): "shared",
}


def test_every_route_is_classified(server):
    """A route added to the app without a row here (and so without a tenancy test) fails."""
    found = routes(server.app)
    assert found == set(ROUTES), (f"routes without a tenancy test: {sorted(found - set(ROUTES))}; "
                                  f"rows for routes that are gone: {sorted(set(ROUTES) - found)}")
    for (method, path), kind in ROUTES.items():
        assert ("{" in path) == (kind == JOB), f"{method} {path}: a route with a path parameter must be a job route"


def _foreign_vs_missing(server: Server, method: str, template: str, query: str) -> None:
    bobs = server.submit(BOB, body("secret", "b", gpus=2))["id"]
    log = rank_log_path(server.state, bobs, 0)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("bob's secret log line\n")
    missing = "secret-999"
    for q in (query, "", "?rank=1", "?rank=7", "?rank=x", "?limit=0", "?offset=-5", "?tail=1", "?tail=-1", "?tail=x",
              "?tail=1&offset=0"):
        got = server.call(method, template.replace("{job_id}", bobs) + q, ALICE)
        absent = server.call(method, template.replace("{job_id}", missing) + q, ALICE)
        assert got[0] == absent[0] == 404, (q, got, absent)
        assert json.loads(got[1]) == {"error": f"no job {bobs!r}"}
        assert json.loads(absent[1]) == {"error": f"no job {missing!r}"}  # same shape, only the asked id differs
        assert b"secret log" not in got[1]
    # Bob's job is untouched, and the route does work for its owner and the admin (the 404 is not a broken route).
    assert server.journal.get(bobs).state is JobState.QUEUED and not server.journal.get(bobs).cancel_requested
    for token in (ADMIN_TOKEN, BOB):  # (DELETE: the admin's GET, then Bob's own cancel)
        status, _ = server.call(method if token == BOB else "GET", template.replace("{job_id}", bobs) + query, token)
        assert status == 200
    # A finished foreign job (which its owner's cancel answers 409) is still 404.
    server.journal.cancel(bobs) if method != "DELETE" else None
    assert server.call(method, template.replace("{job_id}", bobs) + query, BOB)[0] == (409 if method == "DELETE" else 200)
    assert server.call(method, template.replace("{job_id}", bobs) + query, ALICE)[0] == 404


@pytest.mark.parametrize("route", sorted(r for r, kind in ROUTES.items() if kind == JOB))
def test_a_foreign_job_is_answered_as_a_missing_one_on_every_job_route(server, route):
    method, template = route
    _foreign_vs_missing(server, method, template, "?rank=0" if template.endswith("/logs") else "")


def test_the_foreign_job_routes_are_all_the_job_routes(server):
    """The parametrisation above covers exactly the app's routes that take a job id."""
    assert {r for r in routes(server.app) if "{job_id}" in r[1]} == {r for r, k in ROUTES.items() if k == JOB}


def test_list_shows_only_the_callers_queues(server):
    a = server.submit(ALICE, body("mine"))
    b = server.submit(BOB, body("theirs"))
    assert a["queue"] == "a" and b["queue"] == "b"
    for token, seen in ((ALICE, {a["id"]}), (BOB, {b["id"]}), (ADMIN_TOKEN, {a["id"], b["id"]})):
        status, answer = server.call("GET", "/v1/jobs", token)
        assert status == 200 and {j["id"] for j in json.loads(answer)} == seen


def test_a_tenants_list_reads_its_pages_back_not_the_journal(server):
    # Bob's jobs and jobs whose spec fixed no queue (journalled without admission: the file's
    # rule, default_queue b, decides theirs) are interleaved with Alice's. Before, every tenant
    # listing read every row of the journal.
    from deepshare.runtime.spec import spec_from_json

    alice, bob = [], []
    for i in range(12):
        alice.append(server.submit(ALICE, body(f"a{i}"))["id"])
        bob.append(server.submit(BOB, body(f"b{i}"))["id"])
        bob.append(server.journal.submit(spec_from_json(body(f"n{i}"))).job_id)  # no queue: b by the rule
    reads = []
    page = server.journal.queue_page
    server.journal.queue_page = lambda *a: reads.append(a) or page(*a)  # type: ignore[method-assign]

    def listed(token: str, query: str) -> list[str]:
        status, answer = server.call("GET", "/v1/jobs" + query, token)
        assert status == 200, answer
        return [j["id"] for j in json.loads(answer)]

    assert listed(ALICE, "?limit=3") == alice[-3:] and listed(ALICE, "") == alice
    assert listed(BOB, "?limit=5") == bob[-5:] and listed(BOB, "?limit=100") == bob
    assert listed(ALICE, "?limit=5&state=queued") == alice[-5:]
    assert reads and all(size == 1000 for *_, size in reads)  # one page each: pages of 1,000 rows
    assert {queues for queues, *_ in reads} == {("a",), ("b",)}


def test_a_tenants_list_pages_back_through_many_jobs_of_no_queue_and_past_quarantined_rows(server):
    # 2,500 jobs whose spec fixed no queue (the rule gives them to b), Alice's one job the oldest;
    # and a quarantined row among them. A page used to cost the whole journal (a temp sort over
    # every matching row), and a page shortened by a quarantined row read as the last one.
    from deepshare.runtime.spec import spec_from_json, spec_json

    first = server.submit(ALICE, body("oldest"))["id"]
    db = server.journal._db
    spec = spec_json(spec_from_json(body("n")))
    db.executemany("INSERT INTO jobs (id, seq, spec, state, submit_time, queued_since) VALUES (?, ?, ?, 'queued', 0, 0)",
                   [(f"n-{i}", i, spec if i != 1500 else "{broken", ) for i in range(2, 2502)])
    status, answer = server.call("GET", "/v1/jobs?limit=1&state=queued", ALICE)
    assert status == 200 and [j["id"] for j in json.loads(answer)] == [first]
    status, answer = server.call("GET", "/v1/jobs?limit=2000&state=queued", BOB)
    assert status == 200 and len(json.loads(answer)) == 2000


def test_a_quarantined_job_stays_its_queues_tenants(server):
    # The stand-in spec of an unreadable row dropped its queue, so the file's rule (default_queue b)
    # gave Alice's job to Bob.
    job = server.submit(ALICE, body("mine"))["id"]
    server.journal._db.execute("UPDATE jobs SET spec = '{broken' WHERE id = ?", (job,))
    assert server.call("GET", f"/v1/jobs/{job}", BOB)[0] == 404
    status, answer = server.call("GET", f"/v1/jobs/{job}", ALICE)
    assert status == 200 and json.loads(answer)["state"] == "failed"


def test_an_older_journal_gets_the_queue_column_and_the_indexes(tmp_path):
    import sqlite3

    from deepshare.runtime.journal import INDEXES, SCHEMA

    old_schema = SCHEMA.replace(INDEXES, "").replace(",\n    queue TEXT\n", "\n")
    assert "queue TEXT" not in old_schema and "INDEX" not in old_schema
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = sqlite3.connect(state / "journal.sqlite", isolation_level=None)
    db.executescript(old_schema)
    db.execute("INSERT INTO meta VALUES ('epoch', '0.0')")
    # j-5's spec names two queues (a hand-edited journal): its job is read as b's (the last key,
    # as Python's JSON reads it), so the column must say b. SQLite's json_extract said a, and the
    # job was in neither tenant's list.
    twice = json.dumps(body("twice", queue="a"))[:-1] + ', "queue": "b"}'
    for seq, spec in enumerate([json.dumps(body("q", queue="a")), json.dumps(body("none")), "{not json",
                                json.dumps({**body("odd"), "queue": 7}), twice], 1):
        db.execute("INSERT INTO jobs (id, seq, spec, state, submit_time, queued_since) VALUES (?, ?, ?, 'queued', 0, 0)",
                   (f"j-{seq}", seq, spec))
    db.close()
    journal = Journal(state)
    try:
        raw = journal._db
        assert raw.execute("SELECT id, queue FROM jobs ORDER BY seq").fetchall() == [
            ("j-1", "a"), ("j-2", None), ("j-3", None), ("j-4", None), ("j-5", "b")]
        assert journal.get("j-5").spec.queue == "b"
        assert {"jobs_by_state", "jobs_by_queue", "jobs_by_queue_state"} <= {r[0] for r in raw.execute(
            "SELECT name FROM sqlite_master WHERE type='index'")}
        page, oldest = journal.queue_page(("a",), (), None, 10)
        assert [j.job_id for j in page] == ["j-1", "j-2", "j-3", "j-4"] and oldest is None
        assert "j-5" in [j.job_id for j in journal.queue_page(("b",), (), None, 10)[0]]
        assert "j-1" not in [j.job_id for j in journal.queue_page(("b",), (), None, 10)[0]]
        assert journal.get("j-1").spec.queue == "a"
    finally:
        journal.close()


def test_submission_only_into_ones_own_queues(server):
    before = len(server.journal.jobs())
    for queue in ("b", "c", "no-such-queue"):  # another's, nobody's, none: one answer, naming no other queue
        status, answer = server.call("POST", "/v1/jobs", ALICE, body("x", queue))
        assert status == 403 and json.loads(answer) == {"error": f"queue: {queue!r} is not one of your queues (a)"}
    status, answer = server.call("POST", "/v1/jobs", ALICE, body("x", "a", priority="urgent"))
    assert status == 422 and json.loads(answer)["error"].startswith("priority: class 'urgent' is not declared")
    status, answer = server.call("POST", "/v1/jobs", ALICE, body("x", "a", gpus=5))
    assert status == 422 and json.loads(answer)["error"].startswith("gpus: 5, but queue 'a' can never hold more than 4")
    assert len(server.journal.jobs()) == before  # nothing half-written
    # No queue named: the tenant's own first queue (not the file's default_queue, b), fixed in the journal.
    job = server.submit(ALICE, body("x", priority="high"))
    assert (job["queue"], job["priority"]) == ("a", "high") and server.journal.get(job["id"]).spec.queue == "a"
    # The admin submits anywhere; naming no queue, to the file's default queue.
    assert server.submit(ADMIN_TOKEN, body("y", "c"))["queue"] == "c"
    assert server.submit(ADMIN_TOKEN, body("z"))["queue"] == "b"
    status, answer = server.call("POST", "/v1/jobs", ADMIN_TOKEN, body("w", "nope"))
    assert status == 422 and "queue: 'nope' is not declared" in json.loads(answer)["error"]


def test_queue_from_user_cannot_smuggle_a_job_into_another_queue(server):
    server.file.write_text(tenants_yaml() + "queue_from: user\n")
    server.tenants.reload()
    job = server.submit(ALICE, body("x", user="b"))  # user b would resolve to queue b: not alice's
    assert job["queue"] == "a"


@pytest.mark.parametrize("token", [None, "", "wrong-token-xxxxxxxx", sha(ALICE), ALICE + "x", ALICE[:-1], ALICE.upper()])
def test_unknown_tokens_are_401_on_every_route_but_healthz(server, token):
    """Among them the tenant's hash as it stands in the file: reading the file gives no access."""
    for method, path in ROUTES:
        status, answer = server.call(method, path.replace("{job_id}", "x-1"), token)
        if path == "/healthz":
            assert status == 200
        else:
            assert status == 401 and "bearer token" in json.loads(answer)["error"], (method, path)


def test_admin_only_routes(server):
    for token in (ALICE, BOB):
        assert server.call("GET", "/metrics", token) == (403, b'{"error":"/metrics needs the admin token"}')
        status, answer = server.call("POST", "/v1/tenants/reload", token)
        assert status == 403 and json.loads(answer)["error"] == "reloading the tenants file needs the admin token"
        assert server.call("GET", "/v1/contention", token) == (403, b'{"error":"/v1/contention needs the admin token"}')
    assert server.tenants.reloads == 0
    assert server.call("GET", "/metrics", ADMIN_TOKEN)[0] == 200
    assert server.call("POST", "/v1/tenants/reload", ADMIN_TOKEN)[0] == 200
    assert server.call("GET", "/v1/contention", ADMIN_TOKEN)[0] == 200
    for path in ("/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"):
        assert server.call("GET", path, ALICE)[0] == 200, path


def test_queues_show_only_the_callers(server):
    server.submit(ALICE, body("p", gpus=2))
    status, answer = server.call("GET", "/v1/queues", ALICE)
    assert status == 200 and json.loads(answer) == [{"queue": "a", "gpus_in_use": 0, "nominal_gpus": 2,
                                                      "borrowed_gpus": 0, "pending_jobs": 1, "pending_gpus": 2}]
    assert [q["queue"] for q in json.loads(server.call("GET", "/v1/queues", ADMIN_TOKEN)[1])] == ["a", "b", "c"]


def test_tokens_compare_in_constant_time_against_every_tenant(server, monkeypatch):
    """No early exit: every known token is compared whichever matches (and so for an unknown one)."""
    import hmac as hmac_module

    import deepshare.runtime.tenancy as tenancy

    calls: list[int] = []
    real = hmac_module.compare_digest

    def counting(a, b):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(tenancy.hmac, "compare_digest", counting)
    for token in (ADMIN_TOKEN, ALICE, BOB, "unknown-token-xxxx"):
        calls.clear()
        server.tenants.caller(token.encode())
        assert len(calls) == 3, token  # the admin token and both tenants' hashes
    assert server.tenants.caller(ADMIN_TOKEN.encode()) is ADMIN
    assert server.tenants.caller(ALICE.encode()).queues == ("a",)


# -- the CLI -----------------------------------------------------------------------------------
def test_cli_list_cancel_logs_as_a_tenant(server, capsys):
    mine = server.submit(ALICE, body("mine"))["id"]
    theirs = server.submit(BOB, body("theirs"))["id"]
    as_alice = ["--url", server.url, "--token", ALICE]
    assert main(["jobs", *as_alice, "--json", "-"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)] == [mine]
    assert main(["jobs", *as_alice]) == 0
    table = capsys.readouterr().out
    assert mine in table and theirs not in table and "queue" in table and "borrowed" in table
    for argv in (["cancel", theirs], ["logs", theirs], ["jobs", theirs]):
        assert main([argv[0], *as_alice, *argv[1:]]) == 2
        foreign = capsys.readouterr().err
        assert main([argv[0], *as_alice, "nothing-42"]) == 2
        missing = capsys.readouterr().err
        assert foreign.replace(theirs, "ID") == missing.replace("nothing-42", "ID"), argv
        assert f"no job '{theirs}' (HTTP 404)" in foreign
    assert server.journal.get(theirs).state is JobState.QUEUED
    assert main(["cancel", *as_alice, mine]) == 0 and capsys.readouterr().out.strip() == f"cancelled {mine}"
    assert main(["submit", *as_alice, "--json", "-", str(_spec_file(server, "b"))]) == 2
    assert "queue: 'b' is not one of your queues (a) (HTTP 403)" in capsys.readouterr().err


def _spec_file(server: Server, queue: str) -> Path:
    path = server.state.parent / f"spec-{queue}.yaml"
    path.write_text(json.dumps(body("cli", queue)))
    return path


def test_cli_jobs_shows_queue_priority_and_borrowing(server, capsys):
    job = server.submit(ADMIN_TOKEN, body("big", "a", gpus=3, priority="high"))["id"]
    server.journal.start_run(job, (("node0", 3),), None)  # a's nominal quota is 2: 1 GPU borrowed
    assert main(["jobs", "--url", server.url, "--token", ALICE, "--json", "-"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["queue"], row["priority"], row["borrowed_gpus"]) == ("a", "high", 1)
    assert main(["jobs", "--url", server.url, "--token", ALICE, job]) == 0
    assert "queue a, priority high, borrowed yes (1)" in capsys.readouterr().out
    assert main(["queues", "--url", server.url, "--token", ALICE]) == 0
    assert "a" in capsys.readouterr().out


# -- reloads -----------------------------------------------------------------------------------
def test_reload_rotates_tokens_and_quotas_and_keeps_the_journal(server, capsys):
    job = server.submit(ALICE, body("kept", "a", gpus=3))["id"]
    server.journal.start_run(job, (("node0", 3),), None)
    before = (server.journal.get(job), server.journal.transitions(job), server.journal.runs(job))
    server.file.write_text(tenants_yaml(a_nominal=4, alice=ALICE_NEW))
    assert main(["scheduler", "reload", "--url", server.url, "--token", ADMIN_TOKEN]) == 0
    assert capsys.readouterr().out.strip() == "tenants file reloaded: 3 queue(s), 2 tenant token(s)"
    assert server.call("GET", "/v1/jobs", ALICE)[0] == 401  # the old token is gone at once
    status, answer = server.call("GET", f"/v1/jobs/{job}", ALICE_NEW)
    assert status == 200 and json.loads(answer)["borrowed_gpus"] == 0  # within the raised quota now
    assert (server.journal.get(job), server.journal.transitions(job), server.journal.runs(job)) == before


@pytest.mark.parametrize("bad, message", [
    ("queues: [{name: a, nominal_gpus: -1}]\n", "queues.0.nominal_gpus"),
    ("not: [valid\n", "tenants.yaml"),
    (None, "queue 'a' of running job"),  # a queue with a live job removed
    ("admin", "tokens.0.sha256: is the hash of the admin token"),
])
def test_a_bad_file_is_refused_and_the_old_one_stays(server, bad, message, caplog):
    job = server.submit(ALICE, body("live", "a"))["id"]
    server.journal.start_run(job, (("node0", 1),), None)
    if bad is None:
        bad = tenants_yaml().replace("  - {name: a, cohort: main, nominal_gpus: 2, borrowing_limit_gpus: 2}\n", "") \
            .replace("queues: [a]", "queues: [c]")
    elif bad == "admin":
        bad = tenants_yaml(alice=ADMIN_TOKEN)
    server.file.write_text(bad)
    old = server.tenants.current
    with caplog.at_level(logging.INFO, logger="deepshare.runtime.tenancy"):
        status, answer = server.call("POST", "/v1/tenants/reload", ADMIN_TOKEN)
    assert status == 422 and message in json.loads(answer)["error"]
    assert "the previous tenants file stays in force" in json.loads(answer)["error"]
    assert server.tenants.current is old and server.call("GET", "/v1/jobs", ALICE)[0] == 200
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("tenants file not reloaded")
    assert ADMIN_TOKEN not in lines[0] and ALICE not in lines[0]
    assert b'deepshare_scheduler_tenants_reloads_total{result="refused"} 1.0' in server.call("GET", "/metrics", ADMIN_TOKEN)[1]


@pytest.mark.parametrize("running", [False, True])
def test_a_reload_that_shrinks_a_queue_below_a_live_job_is_refused(tmp_path, running):
    # Before, the file was swapped in: the queued 4-GPU job then waited forever with nothing said
    # (a running one could never resume once stopped), though submission refuses such a job.
    file = tmp_path / "t.yaml"
    file.write_text("queues:\n  - {name: a, nominal_gpus: 4}\n")
    journal = Journal(tmp_path / "state")
    live = LiveTenants(ADMIN_TOKEN, file, lambda: journal.jobs(JobState.QUEUED, JobState.RUNNING))
    job = journal.submit(live.admit_submission(spec_from_json(body("x", "a", gpus=4)), ADMIN)).job_id
    if running:
        journal.start_run(job, (("node0", 4),), None)
    old = live.current
    file.write_text("queues:\n  - {name: a, nominal_gpus: 2}\n")
    state = "running" if running else "queued"
    with pytest.raises(DeepShareError) as refused:
        live.reload()
    assert str(refused.value) == (f"{file}: {state} job 'x-1' asks 4 GPUs, but queue 'a' could then never hold more "
                                  "than 2 (its nominal quota, borrowing limit and cohort; let the job end, or cancel it, first)")
    assert live.current is old and live.refused == 1
    file.write_text("queues:\n  - {name: a, nominal_gpus: 2}\n  - {name: b, nominal_gpus: 0}\n")
    with pytest.raises(DeepShareError, match="could then never hold more than 2"):  # no cohort to borrow from
        live.reload()
    file.write_text("queues:\n  - {name: a, nominal_gpus: 2, borrowing_limit_gpus: 2}\n  - {name: b, nominal_gpus: 0}\n")
    with pytest.raises(DeepShareError, match=r"queues\.0\.borrowing_limit_gpus: needs a cohort"):  # refused as a file
        live.reload()
    assert live.current is old
    file.write_text("queues:\n  - {name: a, cohort: m, nominal_gpus: 2}\n  - {name: b, cohort: m, nominal_gpus: 2}\n")
    assert live.reload().most_gpus("a") == 4  # its cohort lends the rest: accepted


def test_sighup_reloads_and_the_old_handler_comes_back(server):
    from deepshare.runtime.service import _install_signals

    stop = threading.Event()
    previous = signal.getsignal(signal.SIGHUP)
    server.file.write_text(tenants_yaml(a_nominal=3))
    with ExitStack() as cleanup:
        _install_signals(stop, server.tenants, cleanup)
        os.kill(os.getpid(), signal.SIGHUP)
        deadline = time.monotonic() + 10
        while server.tenants.reloads == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.tenants.current.queues["a"].nominal_gpus == 3 and not stop.is_set()
    assert signal.getsignal(signal.SIGHUP) == previous


# -- metrics -----------------------------------------------------------------------------------
def test_per_queue_metrics(server):
    running = server.submit(ALICE, body("r", "a", gpus=3))["id"]
    server.journal.start_run(running, (("node0", 3),), None)
    server.submit(BOB, body("q", "b", gpus=2))
    status, text = server.call("GET", "/metrics", ADMIN_TOKEN)
    lines = set(text.decode().splitlines())
    for line in ('deepshare_scheduler_queue_gpus_in_use{queue="a"} 3.0', 'deepshare_scheduler_queue_nominal_gpus{queue="a"} 2.0',
                 'deepshare_scheduler_queue_borrowed_gpus{queue="a"} 1.0', 'deepshare_scheduler_queue_pending_jobs{queue="b"} 1.0',
                 'deepshare_scheduler_queue_pending_gpus{queue="b"} 2.0', 'deepshare_scheduler_queue_gpus_in_use{queue="c"} 0.0',
                 'deepshare_scheduler_tenants_reloads_total{result="ok"} 0.0'):
        assert line in lines, line


# -- admission in the control loop --------------------------------------------------------------
def test_the_loop_admits_by_quota_and_a_reload_applies_without_a_restart(tmp_path):
    from fake_launcher import FakeLauncher

    from deepshare.core.contention import make_contention
    from deepshare.core.workloads import default_catalog
    from deepshare.policies import make_policy
    from deepshare.runtime.loop import ControlLoop, LoopConfig

    file = tmp_path / "tenants.yaml"
    file.write_text("queues:\n  - {name: a, nominal_gpus: 1}\n  - {name: b, nominal_gpus: 1}\n")
    journal = Journal(tmp_path / "state")
    live = LiveTenants(ADMIN_TOKEN, file, lambda: journal.jobs(JobState.QUEUED, JobState.RUNNING))
    loop = ControlLoop(journal, live.policy(make_policy("fifo+consolidated")), default_catalog(),
                       make_contention("profiled"), LoopConfig(interval_s=0.01),
                       launcher=FakeLauncher({"node0": 2, "node1": 2}))
    ids = [journal.submit(live.admit_submission(spec_from_json(body(f"a{i}", "a")), ADMIN)).job_id for i in range(3)]
    loop.tick()
    assert [journal.get(i).state for i in ids] == [JobState.RUNNING, JobState.QUEUED, JobState.QUEUED]  # quota 1
    records = [(journal.get(i).submit_time, journal.transitions(i), journal.runs(i)) for i in ids]
    file.write_text("queues:\n  - {name: a, nominal_gpus: 3}\n  - {name: b, nominal_gpus: 1}\n")
    live.reload()
    assert [(journal.get(i).submit_time, journal.transitions(i), journal.runs(i)) for i in ids] == records
    loop.tick()
    assert [journal.get(i).state for i in ids] == [JobState.RUNNING] * 3  # the raised quota, no restart
    assert journal.get(ids[0]).attempt == 1 and journal.transitions(ids[0]) == records[0][1]  # untouched


def test_a_journal_job_in_an_undeclared_queue_stops_the_start(tmp_path):
    journal = Journal(tmp_path / "state")
    journal.submit(spec_from_json(body("old", "gone")))
    file = tmp_path / "t.yaml"
    file.write_text("queues: [{name: a, nominal_gpus: 1}]\n")
    with pytest.raises(DeepShareError, match="queue 'gone' of queued job 'old-1' is not declared"):
        LiveTenants(ADMIN_TOKEN, file, lambda: journal.jobs(JobState.QUEUED, JobState.RUNNING))


def test_scheduler_start_passes_tenants_to_run_scheduler_and_a_bad_file_stops_before_ray(tmp_path, capsys, monkeypatch):
    from deepshare.runtime import service

    seen = {}

    def fake_run(config, policy, **_):  # type: ignore[no-untyped-def]
        seen["config"] = config
        return 0

    monkeypatch.setattr(service, "run_scheduler", fake_run)
    file = tmp_path / "t.yaml"
    file.write_text(tenants_yaml())
    argv = ["scheduler", "start", "--local", "--port", "0", "--state", str(tmp_path / "s"), "--policy", "fifo+consolidated"]
    assert main([*argv, "--tenants", str(file)]) == 0 and seen["config"].tenants_file == str(file)
    monkeypatch.undo()
    monkeypatch.setattr(service, "start_ray", lambda *a, **k: pytest.fail("Ray must not start"))
    monkeypatch.delenv("DEEPSHARE_SCHEDULER_TOKEN", raising=False)
    file.write_text("queues: [{name: a, nominal_gpus: 1}]\ntokens: [{name: x, queues: [b], sha256: " + sha("t" * 9) + "}]\n")
    assert main([*argv, "--tenants", str(file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"deepshare: error: {file}: tokens.0.queues.0: queue 'b' is not declared in queues"


def test_a_reload_and_a_submission_never_interleave(server):
    # The reload is held inside its check of the live jobs (which sees no job of queue c) while
    # a job is submitted into c. Before, the submission was admitted under the old file and
    # journalled, and the reload then put in force a file without c: a queued job in an
    # undeclared queue (isolated by the next tick; a restart refused to start).
    server.file.write_text(tenants_yaml(extra_queue=False))
    checking, proceed = threading.Event(), threading.Event()
    live_jobs = server.tenants._live_jobs

    def held() -> list:  # type: ignore[type-arg]
        jobs = live_jobs()
        checking.set()
        proceed.wait(10)
        return jobs

    server.tenants._live_jobs = held
    reloaded: list[object] = []
    reload = threading.Thread(target=lambda: reloaded.append(server.tenants.reload()))
    reload.start()
    assert checking.wait(10)
    answered: list[tuple[int, bytes]] = []
    submit = threading.Thread(target=lambda: answered.append(server.call("POST", "/v1/jobs", ADMIN_TOKEN,
                                                                         body("late", "c"))))
    submit.start()
    submit.join(0.5)
    assert submit.is_alive()  # waiting for the reload, not admitted under the old file
    proceed.set()
    reload.join(10)
    submit.join(10)
    assert reloaded and "c" not in server.tenants.current.queues
    status, answer = answered[0]
    assert status == 422 and b"queue: 'c' is not declared" in answer
    assert not [j for j in server.journal.jobs() if j.spec.queue == "c"]


def test_an_upgrade_another_process_finished_first_is_not_done_twice(tmp_path, monkeypatch):
    # Two processes opening an older journal: the second read the schema before the first's
    # upgrade committed, then failed with "duplicate column name: queue" (a raw sqlite error).
    import deepshare.runtime.journal as journal_module

    Journal(tmp_path / "state").close()  # an up-to-date journal: what the other process left
    real, calls = journal_module._has_queue, []

    def stale_then_real(db):  # type: ignore[no-untyped-def]
        calls.append(db)
        return False if len(calls) == 1 else real(db)

    monkeypatch.setattr(journal_module, "_has_queue", stale_then_real)
    Journal(tmp_path / "state").close()
    assert len(calls) == 2  # read again inside the transaction


def test_a_page_of_more_queues_than_sqlite_takes_in_one_query(tmp_path):
    # One compound SELECT term per queue: a tenant owning 500 queues or more got HTTP 500
    # ("too many terms in compound SELECT").
    from deepshare.runtime.spec import spec_from_json

    journal = Journal(tmp_path / "state")
    try:
        queues = tuple(f"q{i}" for i in range(600))
        ids = [journal.submit(spec_from_json(body(f"j{i}", queue=f"q{i * 7 % 600}"))).job_id for i in range(50)]
        ids.append(journal.submit(spec_from_json(body("none"))).job_id)  # no queue: the rule decides
        page, oldest = journal.queue_page(queues, (), None, 20)
        assert [j.job_id for j in page] == ids[-20:] and oldest == page[0].seq
        page, oldest = journal.queue_page(queues, (JobState.QUEUED,), oldest, 1000)
        assert [j.job_id for j in page] == ids[:-20] and oldest is None
    finally:
        journal.close()


def test_a_journal_with_the_older_indexes_gets_the_queue_state_index(tmp_path):
    # Journals of the last version had the queue column and two indexes, not the third: a
    # state-filtered list walked every row of the tenant's queues.
    from deepshare.runtime.spec import spec_from_json

    journal = Journal(tmp_path / "state")
    job = journal.submit(spec_from_json(body("j", queue="a"))).job_id
    journal._db.execute("DROP INDEX jobs_by_queue_state")
    journal.close()
    journal = Journal(tmp_path / "state")
    try:
        assert "jobs_by_queue_state" in {r[0] for r in journal._db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert [j.job_id for j in journal.queue_page(("a",), (JobState.QUEUED,), None, 10)[0]] == [job]
    finally:
        journal.close()


def test_state_filtered_pages_equal_filtering_every_job(tmp_path):
    # A page is read per (queue, state) pair: walked back page by page, the filtered lists must be
    # exactly the jobs of those queues (and of no queue) in those states, newest last, whatever
    # the page size and however many pairs (600 queues x 2 states: more terms than one query takes).
    import random

    from deepshare.runtime.spec import spec_from_json

    rng = random.Random(7)
    journal = Journal(tmp_path / "state")
    try:
        for i in range(300):
            queue = rng.choice([None, "a", "b", "c"] + [f"q{n}" for n in range(5)])
            journal.submit(spec_from_json(body(f"j{i}", **({"queue": queue} if queue else {}))))
        ids = [j.job_id for j in journal.jobs()]
        for job_id in rng.sample(ids, 120):
            journal.cancel(job_id)
        every = journal.jobs()
        for queues, states, size in [(("a",), (JobState.CANCELLED,), 7), (("a", "b"), (JobState.QUEUED,), 1),
                                     (("c", "q1", "q4"), (JobState.QUEUED, JobState.CANCELLED), 13),
                                     (tuple(f"q{n}" for n in range(600)), (JobState.QUEUED, JobState.CANCELLED), 50),
                                     (("b",), (), 11)]:
            got: list[str] = []
            before = None
            while True:
                page, before = journal.queue_page(queues, states, before, size)
                got = [j.job_id for j in page] + got
                if before is None:
                    break
            expected = [j.job_id for j in every if j.spec.queue in (*queues, None) and (not states or j.state in states)]
            assert got == expected, (queues, states, size)
    finally:
        journal.close()


def test_a_tenants_job_naming_no_queue_goes_where_the_files_rule_puts_it_when_that_queue_is_the_tenants(tmp_path):
    """The rule the docs state: the file's rule (``queue_from``, ``default_queue``) when the tenant
    owns the queue it gives, else the tenant's first queue (not "always the tenant's first")."""
    from deepshare.runtime.spec import LiveJobSpec

    file = tmp_path / "tenants.yaml"
    file.write_text(tenants_yaml().replace("queues: [b], sha256", "queues: [c, b], sha256"))  # bob: c first, b default
    live = LiveTenants(ADMIN_TOKEN, file, lambda: [])
    bob, alice = live.caller(BOB.encode()), live.caller(ALICE.encode())
    assert live.admit_submission(spec_from_json(body("x")), bob).queue == "b"  # the file's default_queue: bob's
    assert live.admit_submission(spec_from_json(body("x")), alice).queue == "a"  # b is not alice's: her first
    described = LiveJobSpec.model_json_schema()["properties"]["queue"]["description"]
    assert "the tenants file's rule" in described and "when that queue is the tenant's" in described
    assert "that tenant's first queue)" not in described


def test_one_tenants_jobs_tagged_with_anothers_group_leave_that_groups_forecasts_alone(tmp_path):
    """Review: bob (his own queue, his own quota) tagged a 100,000 s job with alice's recurring
    ``group: nightly``; once it finished, alice's next nightly was forecast at 7,746 s instead of
    600 s and ran after carol's 3,000 s job. Under a tenants file the history reads the tags
    within each job's queue."""
    from fake_launcher import FakeLauncher

    from deepshare.core.contention import make_contention
    from deepshare.core.workloads import default_catalog
    from deepshare.policies import make_policy
    from deepshare.runtime.loop import ControlLoop, LoopConfig

    def first_to_run(attack: bool) -> str:
        root = tmp_path / ("attack" if attack else "plain")
        root.mkdir()
        file = root / "tenants.yaml"
        file.write_text("queues:\n  - {name: a, nominal_gpus: 1}\n  - {name: b, nominal_gpus: 1}\n"
                        "  - {name: c, nominal_gpus: 1}\n")
        now = [1000.0]
        journal = Journal(root / "state", clock=lambda: now[0])
        live = LiveTenants(ADMIN_TOKEN, file, lambda: journal.jobs(JobState.QUEUED, JobState.RUNNING))
        fake = FakeLauncher({"n0": 1})
        loop = ControlLoop(journal, live.policy(make_policy("qssf+consolidated")), default_catalog(),
                           make_contention("profiled"), LoopConfig(interval_s=0.01), launcher=fake, scope_history=True)

        def submit(queue: str, name: str, group: str) -> str:
            return journal.submit(live.admit_submission(spec_from_json(body(name, queue, group=group)), ADMIN)).job_id

        def run_for(job: str, seconds: float) -> None:
            loop.tick()
            assert journal.get(job).state is JobState.RUNNING
            now[0] += seconds
            fake.finish(job)
            loop.tick()
            assert journal.get(job).state is JobState.FINISHED

        run_for(submit("a", "nightly", "nightly"), 600)
        run_for(submit("c", "carol", "cx"), 3000)
        if attack:
            run_for(submit("b", "x", "nightly"), 100_000)
        alice = submit("a", "nightly", "nightly")
        now[0] += 1
        carol = submit("c", "carol", "cx")
        loop.tick()
        running = [j for j in (alice, carol) if journal.get(j).state is JobState.RUNNING]
        journal.close()
        return running[0].rsplit("-", 1)[0]

    assert first_to_run(attack=False) == "nightly"
    assert first_to_run(attack=True) == "nightly"  # carol's ran first before


def test_a_spec_past_64_kib_is_refused_before_it_is_journalled(server):
    """Review: every queued spec is read back from the journal several times per tick; specs of
    about 1 MiB each (256 args of 4,096 characters) made a tick of 100 queued jobs take 199 ms."""
    status, answer = server.call("POST", "/v1/jobs", ALICE, body("big", "a", args=["x" * 4096] * 20))
    assert status == 422 and b"at most 65536" in answer, answer
    assert server.journal.jobs() == []
    server.submit(ALICE, body("fine", "a", args=["x" * 4096] * 10))


def test_scoped_tags_stay_within_what_the_placement_service_takes(tmp_path):
    """Second read: a 256-character ``user`` in a 253-character queue made a 513-character scoped
    tag, over the placement service's 256: a finished job holding one sat in every request's
    history and no decision was ever placed again (``--placement-url``). Long scoped tags are cut
    and end in a digest of the whole, so equal tags stay equal and others apart."""
    from fake_launcher import FakeLauncher

    from deepshare.core.contention import make_contention
    from deepshare.core.workloads import default_catalog
    from deepshare.policies import make_policy
    from deepshare.runtime.loop import MAX_SCOPED_CHARS, ControlLoop, LoopConfig

    journal = Journal(tmp_path / "state")
    loop = ControlLoop(journal, make_policy("fifo+consolidated"), default_catalog(), make_contention("profiled"),
                       LoopConfig(interval_s=0.01), launcher=FakeLauncher({"n0": 1}), scope_history=True)

    def scoped(queue: str, user: str) -> str:
        job = journal.submit(spec_from_json(body("j", queue, user=user)))
        return loop._known(journal.get(job.job_id), None).user  # type: ignore[return-value]

    assert scoped("a", "u") == "1:a:u"
    long_a, long_b = scoped("q" * 253, "u" * 256), scoped("q" * 253, "u" * 255 + "v")
    assert len(long_a) == len(long_b) == MAX_SCOPED_CHARS and long_a != long_b
    assert scoped("q" * 253, "u" * 256) == long_a
    journal.close()


def test_the_size_bound_counts_the_queue_admission_writes():
    """Second read: the 64 KiB check ran before admission wrote the queue in (up to 253
    characters where the JSON held ``null``); it runs again after admission."""
    from deepshare.runtime.api import MAX_SPEC_BYTES, check_spec_size
    from deepshare.runtime.spec import spec_json

    spec = spec_from_json(body("edge", None, args=["x" * 4000] * 16))
    pad = MAX_SPEC_BYTES - len(spec_json(spec).encode())
    spec = spec.model_copy(update={"args": [*spec.args, "y" * (pad - 10)]})
    check_spec_size(spec)  # under the bound without a queue
    with pytest.raises(DeepShareError, match=f"bytes as journalled .*at most {MAX_SPEC_BYTES}"):
        check_spec_size(spec.model_copy(update={"queue": "q" * 253}))
