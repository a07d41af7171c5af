"""Review of tenant isolation in the live scheduler's API: one tenant's submissions must not shut
the others out. Real HTTP stack (uvicorn on loopback behind ``guard``), a journal, no Ray."""

from __future__ import annotations

import hashlib
import http.client
import json
from pathlib import Path

import pytest
from api_serving import served

pytest.importorskip("uvicorn")

from deepshare.runtime.api import guard, make_app  # noqa: E402
from deepshare.runtime.journal import JobState, Journal  # noqa: E402
from deepshare.runtime.service import api_server  # noqa: E402
from deepshare.runtime.tenancy import LiveTenants  # noqa: E402

ADMIN = "admin-token-0123456789"
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789xx"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
def api(tmp_path: Path):
    (tmp_path / "tenants.yaml").write_text(
        "queues:\n  - {name: a, nominal_gpus: 4}\n  - {name: b, nominal_gpus: 4}\n"
        f"tokens:\n  - {{name: alice, queues: [a], sha256: {_sha(ALICE)}}}\n"
        f"  - {{name: bob, queues: [b], sha256: {_sha(BOB)}}}\n")
    journal = Journal(tmp_path / "state")
    tenants = LiveTenants(ADMIN, tmp_path / "tenants.yaml", lambda: journal.jobs(JobState.QUEUED, JobState.RUNNING))
    app = make_app(journal, lambda: (8, 2), state_dir=tmp_path / "state", tenants=tenants, max_queued=6)
    with served(api_server(guard(app, tenants=tenants, bound_host="127.0.0.1"))) as port:

        def submit(token: str, name: str) -> tuple[int, dict]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                spec = dict(name=name, gpus=1, model="DLRM", command=["/bin/true"], checkpoint_dir="/tmp/c")
                conn.request("POST", "/v1/jobs", body=json.dumps(spec),
                             headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())
            finally:
                conn.close()

        yield submit
    journal.close()


def test_one_tenant_filling_the_queue_does_not_lock_the_others_out(api):
    """``--max-queued`` was one bound for the whole scheduler: a tenant that queued that many jobs
    in its own queue (its quota keeps them waiting, so they stay queued) made every other
    tenant's submission a 429 ``the queue is full: N jobs queued`` until it relented, and the
    message told them how many jobs others had queued. Under ``--tenants`` each queue holds its
    share of the bound (6 over 2 queues: 3)."""
    for i in range(3):
        assert api(ALICE, f"a{i}")[0] == 201
    status, answer = api(ALICE, "a3")  # alice is at her queue's share
    assert status == 429 and answer == {"error": "queue 'a' is full: 3 jobs queued, at most 3 (its share of "
                                                 "--max-queued 6 over 2 queues); submit again when some have started"}
    for i in range(3):
        status, answer = api(BOB, f"b{i}")
        assert status == 201, f"bob, whose queue had room, was refused: {status} {answer}"
    status, answer = api(BOB, "b3")
    assert status == 429 and answer["error"].startswith("queue 'b' is full: 3 jobs queued")
