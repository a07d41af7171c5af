"""Metrics of a placement service with two replicas, scraped as Prometheus scrapes them.

The defect: each replica kept its own registry behind ``GET /metrics``, so through Serve's proxy
a scrape showed whichever replica answered (``requests_total`` read 1, 9, 9, 9, 1, 9, 1, 1 after
ten requests) and Prometheus saw counter resets. Now the replicas record through Ray's metrics
and the private Ray instance's metrics agent exports each replica's series (``replica`` label):
every scraped counter only grows, and the sum over replicas is what was served.
"""

from __future__ import annotations

import json
import time

import pytest
import requests
from serve_process import REPORT_INTERVAL_MS, metric, metric_settles_at, scrape, serve_process

from deepshare.serving.metrics import ACTIONS, BATCH_SIZE, ERROR_KINDS, RAY_PREFIX, SPECS, exported_samples
from deepshare.serving.samples import small_request

pytestmark = pytest.mark.slow  # a real `deepshare serve --replicas 2` (Ray Serve) subprocess

TOKEN = "replica-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
OK = dict(route="/v1/placements", method="POST", code="200")
REQUESTS = RAY_PREFIX + "deepshare_serve_requests_total"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with serve_process(tmp_path_factory, TOKEN, "--replicas", "2", "--policy", "fifo+consolidated",
                       ready_timeout_s=240) as served:
        yield served


def series(metrics_url: str, name: str, **labels: str) -> dict[str, float]:
    """``replica`` -> value of ``name`` in one scrape."""
    return {have["replica"]: v for n, have, v in scrape(metrics_url)
            if n == name and all(have.get(k) == w for k, w in labels.items())}


def both_replicas_report(metrics_url: str) -> set[str]:
    deadline = time.monotonic() + 60
    while len(found := set(series(metrics_url, RAY_PREFIX + "deepshare_serve_build_info"))) < 2:
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
    return found


def test_scraped_request_counters_only_grow_and_add_up_over_replicas(service):
    replicas = both_replicas_report(service.metrics_url)
    before = metric(service.metrics_url, REQUESTS, **OK)
    body = json.dumps(small_request())
    totals, per_replica = [], []
    for round_ in range(2):  # ten requests, then eight scrapes (the sequence), twice
        for _ in range(10):
            assert requests.post(service.url + "/v1/placements", data=body, headers=AUTH, timeout=30).status_code == 200
        for _ in range(8):
            totals.append(metric(service.metrics_url, REQUESTS, **OK))
            per_replica.append(series(service.metrics_url, REQUESTS, **OK))
            time.sleep(REPORT_INTERVAL_MS / 1000 / 2)
    assert totals == sorted(totals), totals  # never a drop: no counter reset for Prometheus
    for earlier, later in zip(per_replica, per_replica[1:]):
        assert all(later.get(r, 0.0) >= v for r, v in earlier.items()), (earlier, later)
    assert metric_settles_at(service.metrics_url, REQUESTS, before + 20, **OK) == before + 20
    assert set(per_replica[-1]) <= replicas


def test_every_metric_is_exported_under_its_documented_name_by_both_replicas(service):
    replicas = both_replicas_report(service.metrics_url)
    names = {n for n, _, _ in scrape(service.metrics_url)}
    # fifo+consolidated has no scorer, so no batch is ever observed (a histogram has no series before)
    expected = {n for n, name in exported_samples().items() if name != BATCH_SIZE.name}
    assert expected <= names, sorted(expected - names)
    assert any(n.startswith("ray_serve_") for n in names)  # Serve's own metrics, on the same page
    info = series(service.metrics_url, RAY_PREFIX + "deepshare_serve_build_info")
    assert set(info) == replicas and set(info.values()) == {1.0}
    assert {s.name for s in SPECS} == set(exported_samples().values())


def test_error_and_decision_series_exist_at_zero_before_the_first_one(service):
    """Prometheus' advice for labels known in advance: a series that appears at its first
    increment hides that increment from rate() and increase()."""
    replicas = both_replicas_report(service.metrics_url)
    for kind in ("server", "decision_timeout", "too_large"):
        assert set(series(service.metrics_url, RAY_PREFIX + "deepshare_serve_errors_total", kind=kind)) == replicas
        assert metric(service.metrics_url, RAY_PREFIX + "deepshare_serve_errors_total", kind=kind) == 0.0
    kinds = {have["kind"] for n, have, _ in scrape(service.metrics_url) if n == RAY_PREFIX + "deepshare_serve_errors_total"}
    assert kinds == set(ERROR_KINDS)
    actions = {have["action"] for n, have, _ in scrape(service.metrics_url) if n == RAY_PREFIX + "deepshare_serve_decisions_total"}
    assert actions == set(ACTIONS)


def test_the_service_no_longer_answers_metrics_itself(service):
    """/metrics through the proxy was the defect; it is a 404 now, like any unknown route."""
    assert requests.get(service.url + "/metrics", headers=AUTH, timeout=10).status_code == 404


def test_serve_says_where_to_scrape(service):
    lines = service.log.read_text().splitlines()
    ready = next(i for i, line in enumerate(lines) if line.startswith("placement service ready: "))
    assert lines[ready + 1].startswith(f"metrics: {service.metrics_url} (the service's ray_deepshare_serve_* ")
