"""Prometheus metrics of one service replica, named by Prometheus' conventions.

Everything is in a registry of the replica's own (replicas and tests never collide on the
process-global one), which also carries the default process, platform and GC collectors
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ``python_info``, ...).

==============================================  ========= ==========================  ==================================
name                                            type      labels                      what
==============================================  ========= ==========================  ==================================
``deepshare_serve_requests_total``              counter   ``route``, ``method``,      HTTP requests answered (499: the
                                                          ``code``                    client went away first)
``deepshare_serve_request_duration_seconds``    histogram ``route``                   request to response
``deepshare_serve_errors_total``                counter   ``kind``                    4xx/5xx answers by cause
``deepshare_serve_decision_duration_seconds``   histogram ``outcome``                 time a decision took (``ok``,
                                                                                      ``timeout``, ``invalid``,
                                                                                      ``error``)
``deepshare_serve_decisions_total``             counter   ``action``                  place / wait / preempt / migrate
``deepshare_serve_decisions_in_flight``         gauge                                 requests deciding or queued to
``deepshare_serve_scorer_batch_size``           histogram                             observations per forward pass
``deepshare_serve_policy_load_seconds``         gauge     ``policy``                  time to load the policy
``deepshare_serve_build_info``                  gauge     ``version``, ``policy``,    always 1
                                                          ``policy_version``
==============================================  ========= ==========================  ==================================

Label values are bounded: routes outside :data:`ROUTES` are ``other``, methods outside
:data:`METHODS` are ``other``, so random paths cannot grow the series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from deepshare.infra.httpauth import CLIENT_CLOSED

ROUTES = ("/healthz", "/v1/policy", "/v1/placements", "/metrics", "/docs", "/openapi.json")
METHODS = ("GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_KINDS = {
    400: "malformed", 401: "unauthorized", 404: "not_found", 405: "method", 408: "body_timeout",
    413: "too_large", 415: "media_type", 422: "invalid", CLIENT_CLOSED: "client_closed", 503: "decision_timeout",
}


class ServiceMetrics:
    def __init__(self, policy: str, load_seconds: float, version: str = "", policy_version: str = "") -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.requests = Counter(
            "deepshare_serve_requests", "HTTP requests by route, method and status code", ("route", "method", "code"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "deepshare_serve_request_duration_seconds", "Time from request to response, by route", ("route",),
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.errors = Counter(
            "deepshare_serve_errors", "Requests answered with an error (or abandoned by the client), by kind", ("kind",),
            registry=self.registry,
        )
        self.decision_latency = Histogram(
            "deepshare_serve_decision_duration_seconds", "Time to decide one placement request (no HTTP), by outcome",
            ("outcome",), buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.decisions = Counter(
            "deepshare_serve_decisions", "Decisions answered, by action", ("action",), registry=self.registry
        )
        self.in_flight = Gauge(
            "deepshare_serve_decisions_in_flight", "Placement requests deciding or waiting for a decision thread",
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "deepshare_serve_scorer_batch_size", "Observations per batched forward pass",
            buckets=(1, 2, 4, 8, 16, 32, 64), registry=self.registry,
        )
        load = Gauge(
            "deepshare_serve_policy_load_seconds", "Time to load the policy at replica start", ("policy",),
            registry=self.registry,
        )
        load.labels(policy).set(load_seconds)
        info = Gauge(
            "deepshare_serve_build_info", "Always 1: the package version and the policy this replica serves",
            ("version", "policy", "policy_version"), registry=self.registry,
        )
        info.labels(version, policy, policy_version).set(1)

    @staticmethod
    def route(path: str) -> str:
        """The route label: a known path, or ``other``."""
        return path if path in ROUTES else "other"

    def observe(self, path: str, method: str, status: int, seconds: float) -> None:
        route = self.route(path)
        self.requests.labels(route, method if method in METHODS else "other", str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if status >= 400:
            self.errors.labels(_kind(status)).inc()

    def count_decisions(self, actions: dict[str, int]) -> None:
        for action, n in actions.items():
            if n:
                self.decisions.labels(action).inc(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _kind(status: int) -> str:
    return _KINDS.get(status, "server" if status >= 500 else "client")
