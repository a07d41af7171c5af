"""``POST /v1/jobs`` under a slow or failing Ray and under concurrent submissions.

The route asked Ray for the cluster's size (``ray.nodes()``, blocking) on the server's event
loop, so every other request waited behind it, and a Ray error was a 500 with a traceback; and
without ``--tenants`` the queue's count and the insert were not under one lock, so concurrent
submissions all passed ``--max-queued``. Blocking stand-ins (events) make each interleaving
happen; the waits on them are guards only."""

from __future__ import annotations

import http.client
import json
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest
from api_serving import served

pytest.importorskip("uvicorn")
from deepshare.runtime.api import guard, make_app  # noqa: E402
from deepshare.runtime.journal import JobState, Journal  # noqa: E402
from deepshare.runtime.service import api_server  # noqa: E402

TOKEN = "test-token-0123456789"
GOOD = {"name": "t", "gpus": 1, "model": "DLRM", "command": ["/bin/true"], "checkpoint_dir": "/tmp/ckpt"}
GUARD_S = 30.0
"""How long a stand-in or a client waits at most (a guard: every wait ends on its event)."""


@contextmanager
def serving(journal: Any, cluster_gpus: Callable[[], tuple[int, int]], **options: Any) -> Iterator[Callable[..., tuple[int, Any]]]:
    """The guarded API over ``journal`` on a free loopback port: a caller ``(method, path, body)``."""
    app = guard(make_app(journal, cluster_gpus, **options), token=TOKEN, bound_host="127.0.0.1")
    with served(api_server(app)) as port:

        def call(method: str, path: str, body: object = None) -> tuple[int, Any]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD_S)
            try:
                conn.request(method, path, None if body is None else json.dumps(body),
                             {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())
            finally:
                conn.close()

        yield call


def test_other_requests_are_answered_while_a_submission_waits_for_ray(tmp_path):
    asked, release = threading.Event(), threading.Event()

    def slow_ray() -> tuple[int, int]:  # ray.nodes() while the GCS is slow to answer
        asked.set()
        release.wait(GUARD_S)
        return 8, 2

    journal = Journal(tmp_path / "state")
    try:
        with serving(journal, slow_ray) as call:
            submitted: list[tuple[int, Any]] = []
            sub = threading.Thread(target=lambda: submitted.append(call("POST", "/v1/jobs", GOOD)))
            sub.start()
            assert asked.wait(GUARD_S)
            try:
                # on the event loop, these waited for Ray: the client's guard ran out first
                assert call("GET", "/healthz") == (200, {"status": "ok"})
                assert call("GET", "/v1/jobs") == (200, [])
            finally:
                release.set()
                sub.join(GUARD_S)
            assert submitted[0][0] == 201
    finally:
        journal.close()


def test_a_ray_error_while_submitting_is_503_with_one_line_and_nothing_journalled(tmp_path):
    def ray_down() -> tuple[int, int]:
        raise ConnectionError("GCS unreachable\nmore detail")

    journal = Journal(tmp_path / "state")
    try:
        with serving(journal, ray_down) as call:
            status, answer = call("POST", "/v1/jobs", GOOD)
            assert status == 503
            assert answer == {"error": "cluster: cannot read the cluster's GPUs from Ray now "
                                       "(ConnectionError: GCS unreachable); submit again later"}
            assert call("POST", "/v1/jobs", {**GOOD, "gpus": 0})[0] == 422  # bad input is still the caller's
        assert journal.jobs() == []
    finally:
        journal.close()


class CountWaitsForASecond:
    """The journal, whose first ``count`` waits until a second submission counts too: with the
    count and the insert under one lock that second one cannot count before the first inserts,
    and the first goes on when its guard runs out."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.counts = 0
        self.second = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.journal, name)

    def count(self, state: JobState) -> int:
        n = self.journal.count(state)
        self.counts += 1
        if self.counts == 1:
            self.second.wait(2.0)  # a guard: the assertions do not depend on it
        else:
            self.second.set()
        return n


def test_concurrent_submissions_do_not_pass_max_queued_without_tenants(tmp_path):
    journal = Journal(tmp_path / "state")
    try:
        with serving(CountWaitsForASecond(journal), lambda: (8, 2), max_queued=1) as call:
            answers: list[tuple[int, Any]] = []
            threads = [threading.Thread(target=lambda i=i: answers.append(call("POST", "/v1/jobs", {**GOOD, "name": f"j{i}"})))
                       for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(GUARD_S)
        assert sorted(status for status, _ in answers) == [201, 429]
        assert journal.count(JobState.QUEUED) == 1
    finally:
        journal.close()
