"""The scheduler's HTTP API and the submit / jobs / cancel CLI against it (no Ray: the journal only)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from api_serving import served

from deepshare.cli import main
from deepshare.runtime.journal import JobState, Journal
from deepshare.runtime.service import api_server
from deepshare.runtime.spec import spec_from_json

uvicorn = pytest.importorskip("uvicorn")
from deepshare.runtime.api import guard, make_app  # noqa: E402

EXAMPLES = Path(__file__).parents[2] / "examples" / "jobs"
BODY = dict(name="a", gpus=2, model="GraphSage", entrypoint="pkg.mod:main", checkpoint_dir="/ckpt/a")
TOKEN = "test-token-0123456789"


@contextmanager
def serving(journal: Journal, **app_options):  # type: ignore[no-untyped-def]
    """The API over ``journal`` on a free loopback port, for the ``with`` block: its URL."""
    app = guard(make_app(journal, **app_options), token=TOKEN, bound_host="127.0.0.1")
    with served(api_server(app)) as port:
        yield f"http://127.0.0.1:{port}"



@pytest.fixture(scope="module")
def server(tmp_path_factory):
    journal = Journal(tmp_path_factory.mktemp("api") / "state")
    with serving(journal, cluster_gpus=lambda: (8, 2)) as url:
        yield url, journal
    journal.close()


def call(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
    req = urllib.request.Request(url + path, data=body, method=method,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_submit_list_get_cancel(server):
    url, journal = server
    status, job = call(url, "POST", "/v1/jobs", json.dumps(BODY).encode())
    assert status == 201 and job["state"] == "queued" and job["gpus"] == 2 and job["model"] == "GraphSage"
    job_id = job["id"]
    status, jobs = call(url, "GET", "/v1/jobs")
    assert status == 200 and job_id in [j["id"] for j in jobs]
    status, detail = call(url, "GET", f"/v1/jobs/{job_id}")
    assert status == 200 and detail["checkpoint_dir"] == f"/ckpt/a/{journal.run_names.instance}-{job_id}" and detail["runs"] == []
    assert [t["to_state"] for t in detail["transitions"]] == ["queued"]
    status, cancelled = call(url, "DELETE", f"/v1/jobs/{job_id}")
    assert status == 200 and cancelled["state"] == "cancelled"
    status, again = call(url, "DELETE", f"/v1/jobs/{job_id}")
    assert status == 409 and "already cancelled" in again["error"]


def test_cancel_running_job_is_accepted_and_marked(server):
    url, journal = server
    job = journal.submit(spec_from_json(BODY))
    journal.start_run(job.job_id, (("node0", 2),), None)
    status, body = call(url, "DELETE", f"/v1/jobs/{job.job_id}")
    assert status == 202 and body["cancel_requested"] is True and body["state"] == "running"
    assert journal.get(job.job_id).state is JobState.RUNNING  # the control loop stops it


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"{not json", 400, "body: not valid JSON"),
        (b"[1, 2]", 422, "body: expected a JSON object"),
        (json.dumps({**BODY, "gpus": 0}).encode(), 422, "gpus: Input should be greater than 0"),
        (json.dumps({**BODY, "gpus": 9}).encode(), 422, "gpus: 9 exceeds the cluster's 8 GPUs on 2 node(s)"),
        (json.dumps({**BODY, "checkpoint_dir": "rel/dir"}).encode(), 422, "checkpoint_dir: expected an absolute path"),
        (json.dumps({**BODY, "working_dir": "rel"}).encode(), 422, "working_dir: expected an absolute path"),
        (json.dumps({**BODY, "checkpoint_dir": "/dev/zero"}).encode(), 422,
         "checkpoint_dir: '/dev/zero' is in the system folder /dev, not a place for a job's files"),
        (json.dumps({**BODY, "checkpoint_dir": "//proc/self/./x"}).encode(), 422, "in the system folder /proc"),
        (json.dumps({**BODY, "checkpoint_dir": "/tmp/../sys/kernel"}).encode(), 422, "in the system folder /sys"),
        (json.dumps({**BODY, "working_dir": "/dev"}).encode(), 422, "working_dir: '/dev' is in the system folder /dev"),
        (json.dumps({k: v for k, v in BODY.items() if k != "model"}).encode(), 422, "model: Field required"),
        (json.dumps({**BODY, "entrypoint": "x"}).encode(), 422, "entrypoint: Value error"),
        # names the placement service refuses: with --placement-url the job failed at its first decision
        (json.dumps({**BODY, "user": "al\tice"}).encode(), 422, "user: control characters (line breaks, tabs, escapes, bidirectional marks)"),
        (json.dumps({**BODY, "model": "Res\nNet50"}).encode(), 422, "model: control characters"),
        (json.dumps({**BODY, "vc": "\u001b[31mteam"}).encode(), 422, "vc: control characters"),
        (json.dumps({**BODY, "group": "g\u0085"}).encode(), 422, "group: control characters"),
        (json.dumps({**BODY, "queue": "\u202eq"}).encode(), 422, "queue: control characters (line breaks, tabs, escapes, bidirectional marks)"),
        # Python's parser keeps the last of a repeated key, others the first: a tenant's proxy could
        # check one queue and the scheduler act on the other
        (b'{"queue": "a", ' + json.dumps(BODY).encode()[1:-1] + b', "queue": "b"}', 422,
         "body: the key 'queue' is given twice in one object"),
        (b'{"env": {"A": "1", "A": "2"}, ' + json.dumps({k: v for k, v in BODY.items() if k != "env"}).encode()[1:], 422,
         "body: the key 'A' is given twice"),
    ],
)
def test_bad_bodies_are_4xx_naming_the_field(server, body, status, message):
    url, journal = server
    before = len(journal.jobs())
    got, answer = call(url, "POST", "/v1/jobs", body)
    assert got == status and message in answer["error"]
    assert len(journal.jobs()) == before  # nothing half-written


def test_unknown_job_is_404(server):
    url, _ = server
    assert call(url, "GET", "/v1/jobs/nope")[0] == 404
    assert call(url, "DELETE", "/v1/jobs/nope")[0] == 404


def test_cli_submit_jobs_cancel(server, capsys, monkeypatch):
    url, journal = server
    assert main(["submit", "--url", url, "--token", TOKEN, str(EXAMPLES / "small.yaml")]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("submitted small-") and line.endswith("(2 GPUs, GraphSage)")
    job_id = line.split()[1]
    assert journal.get(job_id).spec.checkpoint_dir == str((EXAMPLES.parent.parent / "runs" / "jobs" / "small").resolve())
    assert main(["jobs", "--url", url, "--token", TOKEN, "--json", "-"]) == 0
    listed = {j["id"]: j for j in json.loads(capsys.readouterr().out)}
    assert listed[job_id]["state"] == "queued"
    monkeypatch.setenv("DEEPSHARE_SCHEDULER_TOKEN", TOKEN)  # the token from the environment
    assert main(["jobs", "--url", url]) == 0
    monkeypatch.delenv("DEEPSHARE_SCHEDULER_TOKEN")
    assert job_id in capsys.readouterr().out
    assert main(["jobs", "--url", url, "--token", TOKEN, job_id]) == 0
    assert capsys.readouterr().out.startswith(f"{job_id}: queued, 2 GPUs (GraphSage)")
    assert main(["cancel", "--url", url, "--token", TOKEN, job_id]) == 0
    assert capsys.readouterr().out.strip() == f"cancelled {job_id}"
    assert main(["cancel", "--url", url, "--token", TOKEN, job_id]) == 2
    err = capsys.readouterr().err
    assert f"job '{job_id}' is already cancelled (HTTP 409)" in err and len(err.strip().splitlines()) == 1
    assert main(["jobs", "--url", url, "--token", TOKEN, "nope"]) == 2
    assert "no job 'nope' (HTTP 404)" in capsys.readouterr().err


def test_max_gpus_admits_jobs_an_autoscaling_cluster_will_grow_to():
    from deepshare.core.topology import uniform
    from deepshare.runtime.cluster import ClusterState
    from deepshare.runtime.service import submission_capacity

    up = ClusterState(uniform(2, 4), ())
    assert submission_capacity(up, 0) == (8, 0)
    assert submission_capacity(up, 32) == (32, 0)
    assert submission_capacity(up, 4) == (8, 0)


def test_placement_url_makes_the_service_the_policy():
    from deepshare.serving.client import PlacementClient
    from deepshare.cli.scheduler import scheduling_policy

    policy = scheduling_policy(None, "http://127.0.0.1:9/", "t" * 8)
    assert isinstance(policy, PlacementClient) and policy.url == "http://127.0.0.1:9"
    assert policy._auth == {"Authorization": "Bearer " + "t" * 8}
    assert scheduling_policy("las+spread", None, None).name == "las+spread"
    assert scheduling_policy(None, None, None).name == "rl-hybrid"


@pytest.fixture(scope="module")
def fabric_server(tmp_path_factory):
    """A scheduler API whose topology has the levels ``leaf`` < ``spine`` (``--level``)."""
    from deepshare.runtime.cluster import label_levels

    journal = Journal(tmp_path_factory.mktemp("fabric-api") / "state")
    levels = label_levels(["leaf=example.com/leaf", "spine=example.com/spine"])
    with serving(journal, cluster_gpus=lambda: (64, 8), fabric_levels=levels.names) as url:
        yield url, journal
    journal.close()


@pytest.mark.parametrize("field, extra", [
    ("required_level", {}),
    ("preferred_level", {}),
    ("slice_level", {"slice_size": 2}),
])
def test_a_job_naming_a_level_the_scheduler_lacks_is_refused_at_submit(fabric_server, field, extra):
    """Accepted, it could never be placed and failed at its first decision; it is a 422 naming the
    field, the level and the scheduler's own levels, and nothing is journalled."""
    url, journal = fabric_server
    before = len(journal.jobs())
    status, body = call(url, "POST", "/v1/jobs", json.dumps({**BODY, field: "rack", **extra}).encode())
    assert status == 422, body
    assert body["error"] == (f"{field}: unknown fabric level 'rack'; this scheduler's levels are leaf, spine "
                             "(scheduler start --level)")
    assert len(journal.jobs()) == before
    status, job = call(url, "POST", "/v1/jobs", json.dumps({**BODY, field: "leaf", **extra}).encode())
    assert status == 201, job


def test_a_slice_level_above_the_required_level_is_refused_at_submit(fabric_server):
    """No domain of the required level holds a whole slice: the job could never be placed."""
    url, journal = fabric_server
    before = len(journal.jobs())
    status, body = call(url, "POST", "/v1/jobs", json.dumps(
        {**BODY, "required_level": "leaf", "slice_level": "spine", "slice_size": 2}).encode())
    assert status == 422, body
    assert body["error"] == "slice_level 'spine' is above required_level 'leaf'; a slice must fit inside the required domain"
    assert len(journal.jobs()) == before
    status, job = call(url, "POST", "/v1/jobs", json.dumps(
        {**BODY, "required_level": "spine", "slice_level": "leaf", "slice_size": 2}).encode())
    assert status == 201, job


def test_without_levels_the_one_level_is_rack():
    from deepshare.runtime.cluster import NO_LEVELS, label_levels

    assert NO_LEVELS.names == ("rack",)
    assert label_levels(["leaf=a", "spine=b"]).names == ("leaf", "spine")


def test_a_journal_locked_by_another_process_is_503_with_retry_after(tmp_path, caplog):
    import sqlite3

    journal = Journal(tmp_path / "state")  # not closed: on a failure its lock is held for good
    journal._db.execute("PRAGMA busy_timeout=50")  # SQLite's wait for the other writer: 50 ms, not 5 s
    with caplog.at_level(logging.WARNING, logger="deepshare.runtime.api"), serving(journal, cluster_gpus=lambda: (8, 2)) as url:
        other = sqlite3.connect(tmp_path / "state" / "journal.sqlite", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # an operator's sqlite3 shell in the middle of an UPDATE
        req = urllib.request.Request(url + "/v1/jobs", data=json.dumps(BODY).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(req, timeout=10)
        body = json.loads(caught.value.read())
        assert caught.value.code == 503 and caught.value.headers["Retry-After"] == "5"
        assert body["error"].startswith("journal: held by another process (database is locked)")
        assert "\n" not in body["error"]
        logged = [r for r in caplog.records if r.name == "deepshare.runtime.api"]
        assert [(r.levelno, r.exc_info) for r in logged] == [(logging.WARNING, None)]  # logged, no traceback
        assert "POST /v1/jobs: journal held by another process (database is locked)" in logged[0].getMessage()
        other.execute("ROLLBACK")
        other.close()
        assert call(url, "GET", "/v1/jobs") == (200, [])  # nothing journalled, and the journal answers again
        assert call(url, "POST", "/v1/jobs", json.dumps(BODY).encode())[0] == 201


@pytest.mark.parametrize("message", ["disk I/O error", "database or disk is full"])
def test_a_failing_journal_is_500_in_one_line_and_logged_with_its_traceback(tmp_path, caplog, message):
    """Answered by the API's own handler, Starlette logs nothing: a failing disk was a one-line
    500 to the client and no line in the scheduler's log."""
    import sqlite3

    journal = Journal(tmp_path / "state")

    def failing(*_args, **_kwargs):
        raise sqlite3.OperationalError(message)

    journal.jobs = failing  # type: ignore[method-assign]
    journal.queue_page = failing  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="deepshare.runtime.api"), serving(journal, cluster_gpus=lambda: (8, 2)) as url:
        assert call(url, "GET", "/v1/jobs") == (500, {"error": f"journal: {message}"})
    logged = [r for r in caplog.records if r.name == "deepshare.runtime.api"]
    assert [r.levelno for r in logged] == [logging.ERROR]
    assert logged[0].getMessage() == f"GET /v1/jobs: journal error ({message}); answered 500"
    assert logged[0].exc_info is not None and logged[0].exc_info[0] is sqlite3.OperationalError
