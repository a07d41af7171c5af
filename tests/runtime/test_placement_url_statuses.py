"""What the live scheduler does when a served policy answers an error for the requests holding
one job: it isolates that job only when the answer blames the request (400, 422, a 500 saying the
policy failed on it); a 404 while Serve redeploys, a bare 500 from a replica that died, a 503,
a redirect fail the tick and blame no job."""

from __future__ import annotations

import json

import pytest
from test_hostile_reports import Rig

import deepshare.serving.client as client_mod
from deepshare.infra.boundedhttp import Answer
from deepshare.runtime.journal import JobState
from deepshare.serving.client import PlacementClient


def _service(bad_job: str, status: int, body: bytes):
    """A fake exchange: ``status``/``body`` for every request holding ``bad_job``, else all wait."""
    def exchange(url, method, body_sent=None, headers=None, seconds=10.0, max_bytes=0):
        doc = json.loads(body_sent)
        ids = [p["job_id"] for p in doc.get("pending", [])] + [r["job_id"] for r in doc.get("running", [])]
        if bad_job in ids:
            return Answer(status, {}, body)
        waits = [{"job_id": p["job_id"], "action": "wait"} for p in doc.get("pending", [])]
        return Answer(200, {}, json.dumps({"decisions": waits, "policy": "x", "policy_version": "1"}).encode())
    return exchange


@pytest.mark.parametrize("status, body, blamed", [
    (500, b'{"detail": "the policy failed on this request (ValueError)", "error": "policy"}', True),
    (422, b'{"detail": "pending.0.gpus: bad"}', True),
    (500, b"Internal Server Error", False),  # a replica that died mid-request
    (500, b'{"detail": "x", "error": "infeasible"}', False),  # the policy's fault, not the job's
    (404, b'{"detail": "Not Found"}', False),  # Serve's proxy while the application redeploys
    (503, b'{"detail": "busy"}', False),
    (302, b"", False),
])
def test_only_an_answer_that_blames_the_request_isolates_a_job(tmp_path, monkeypatch, status, body, blamed):
    rig = Rig(tmp_path / "state")
    jobs = [rig.submit(f"j{i}", 1) for i in range(4)]
    monkeypatch.setattr(client_mod, "exchange", _service(jobs[2], status, body))
    rig.loop.policy = PlacementClient("http://placement.invalid")
    report = rig.loop.tick()
    states = [rig.journal.get(job).state for job in jobs]
    assert (states[2] is JobState.FAILED) is blamed
    assert all(state is JobState.QUEUED for i, state in enumerate(states) if i != 2)
    assert (report.error is None) is blamed  # blaming no job, the tick says why it failed
