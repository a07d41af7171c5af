"""Prometheus metrics of one service replica (its own registry, so replicas and tests never
collide on the process-global one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

ROUTES = ("/healthz", "/v1/policy", "/v1/placements", "/metrics", "/docs", "/openapi.json")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ServiceMetrics:
    def __init__(self, policy: str, load_seconds: float) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "deepshare_http_requests", "HTTP requests by route and status code", ("route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "deepshare_http_request_seconds", "Time from request to response, by route", ("route",),
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.errors = Counter(
            "deepshare_http_errors", "Requests answered with an error, by kind", ("kind",), registry=self.registry
        )
        self.decisions = Counter(
            "deepshare_placement_decisions", "Decisions answered, by action", ("action",), registry=self.registry
        )
        self.batch_size = Histogram(
            "deepshare_scorer_batch_size", "Observations per batched forward pass",
            buckets=(1, 2, 4, 8, 16, 32, 64), registry=self.registry,
        )
        load = Gauge(
            "deepshare_policy_load_seconds", "Time to load the policy at replica start", ("policy",),
            registry=self.registry,
        )
        load.labels(policy).set(load_seconds)

    @staticmethod
    def route(path: str) -> str:
        """The route label: a known path, or ``other`` (so random paths cannot grow the series)."""
        return path if path in ROUTES else "other"

    def observe(self, path: str, status: int, seconds: float) -> None:
        route = self.route(path)
        self.requests.labels(route, str(status)).inc()
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
    return {400: "malformed", 401: "unauthorized", 404: "not_found", 405: "method", 413: "too_large", 422: "invalid"}.get(
        status, "server" if status >= 500 else "client"
    )
