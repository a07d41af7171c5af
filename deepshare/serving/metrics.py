"""Metrics of the placement service, recorded through Ray's metrics API so that replicas add up.

Each replica used to keep its own Prometheus registry behind ``GET /metrics``; through Serve's
proxy that page came from whichever replica answered, so with two replicas a counter read 1, 9,
9, 1, ... and Prometheus took every drop for a restart (every ``rate()`` and
``histogram_quantile()`` wrong). Now every replica records into :mod:`ray.serve.metrics`, which
tags each series with ``deployment``, ``replica`` and ``application``; the Ray metrics agent of
each node exports them, beside Ray Serve's own ``ray_serve_*``, on the node's metrics export port
(``ray start --metrics-export-port``, KubeRay's ``metrics`` port 8080, ``deepshare serve
--metrics-port``), and Ray prefixes every name with ``ray_``. A replica's counters only grow;
queries sum over replicas. Ray sends a replica's values to its agent every
``metrics_report_interval_ms`` (10 s by default), so a scrape lags by up to that. Ray 2.60's agent
rebuilds each histogram from its bucket counts, taking every observation at its bucket's
midpoint: the buckets and ``_count`` are exact, a histogram's ``_sum`` (and so a mean) is an
approximation; quantiles come from the buckets.

=================================================  ========= ==========================  ==================================
exported name (``_total``: counter)                type      labels (and Serve's three)  what
=================================================  ========= ==========================  ==================================
``ray_deepshare_serve_requests_total``             counter   ``route``, ``method``,      HTTP requests answered (499: the
                                                             ``code``                    client went away first)
``ray_deepshare_serve_request_duration_seconds``   histogram ``route``                   request to response
``ray_deepshare_serve_errors_total``               counter   ``kind``                    4xx/5xx answers by cause (every
                                                                                         kind starts at 0)
``ray_deepshare_serve_decision_duration_seconds``  histogram ``outcome``                 time a decision took (``ok``,
                                                                                         ``timeout``, ``invalid``,
                                                                                         ``error``)
``ray_deepshare_serve_decisions_total``            counter   ``action``                  place / wait / preempt / migrate
``ray_deepshare_serve_decisions_in_flight``        gauge                                 requests deciding or queued to
``ray_deepshare_serve_scorer_batch_size``          histogram                             observations per forward pass
``ray_deepshare_serve_policy_load_seconds``        gauge     ``policy``                  time to load the policy
``ray_deepshare_serve_build_info``                 gauge     ``version``, ``policy``,    always 1
                                                             ``policy_version``
=================================================  ========= ==========================  ==================================

Label values are bounded: routes outside :data:`ROUTES` are ``other``, methods outside
:data:`METHODS` are ``other``, so random paths cannot grow the series.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from deepshare.infra.httpauth import CLIENT_CLOSED

ROUTES = ("/healthz", "/v1/policy", "/v1/placements", "/docs", "/openapi.json")
METHODS = ("GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ACTIONS = ("place", "wait", "preempt", "migrate")
RAY_PREFIX = "ray_"
"""What Ray's metrics agent puts before every application metric's name."""
METRICS_PORT = 8080
"""The metrics export port the shipped deployments give Ray (KubeRay's default ``metrics`` port;
``deepshare serve --metrics-port 8080`` in ``deploy/prometheus/static.yaml``)."""

GAUGE_REFRESH_S = 1.0
"""How often a replica sets its gauges again: within Ray's floor of one report a second, so
within the two report intervals after which Ray's agent drops a gauge that was not refreshed."""

_KINDS = {
    400: "malformed", 401: "unauthorized", 404: "not_found", 405: "method", 408: "body_timeout",
    413: "too_large", 415: "media_type", 422: "invalid", CLIENT_CLOSED: "client_closed", 503: "decision_timeout",
}
ERROR_KINDS = (*_KINDS.values(), "client", "server")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str
    """``counter``, ``histogram`` or ``gauge``."""
    description: str
    tags: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


REQUESTS = MetricSpec("deepshare_serve_requests", "counter", "HTTP requests by route, method and status code",
                      ("route", "method", "code"))
LATENCY = MetricSpec("deepshare_serve_request_duration_seconds", "histogram", "Time from request to response, by route",
                     ("route",), LATENCY_BUCKETS)
ERRORS = MetricSpec("deepshare_serve_errors", "counter",
                    "Requests answered with an error (or abandoned by the client), by kind", ("kind",))
DECISION_LATENCY = MetricSpec("deepshare_serve_decision_duration_seconds", "histogram",
                              "Time to decide one placement request (no HTTP), by outcome", ("outcome",), LATENCY_BUCKETS)
DECISIONS = MetricSpec("deepshare_serve_decisions", "counter", "Decisions answered, by action", ("action",))
IN_FLIGHT = MetricSpec("deepshare_serve_decisions_in_flight", "gauge",
                       "Placement requests deciding or waiting for a decision thread")
BATCH_SIZE_BUCKETS = (*(k + 0.5 for k in range(17)), 24.5, 32.5, 48.5, 64.5)
"""Half-integer bounds: each size up to 16 (the default ``max_batch_size``) has its own bucket
whose midpoint is the size itself, so the ``_sum`` Ray rebuilds from midpoints is exact there."""
BATCH_SIZE = MetricSpec("deepshare_serve_scorer_batch_size", "histogram", "Observations per batched forward pass",
                        (), BATCH_SIZE_BUCKETS)
LOAD_SECONDS = MetricSpec("deepshare_serve_policy_load_seconds", "gauge", "Time to load the policy at replica start",
                          ("policy",))
BUILD_INFO = MetricSpec("deepshare_serve_build_info", "gauge",
                        "Always 1: the package version and the policy this replica serves", ("version", "policy", "policy_version"))
SPECS = (REQUESTS, LATENCY, ERRORS, DECISION_LATENCY, DECISIONS, IN_FLIGHT, BATCH_SIZE, LOAD_SECONDS, BUILD_INFO)

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_samples() -> dict[str, str]:
    """Every sample name Ray's agent exports for these metrics -> the metric it belongs to."""
    return {RAY_PREFIX + spec.name + suffix: spec.name for spec in SPECS for suffix in _SUFFIXES[spec.kind]}


class Instrument(Protocol):
    """What :class:`ServiceMetrics` calls: Ray's ``Counter.inc``, ``Histogram.observe``, ``Gauge.set``."""

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None: ...
    def observe(self, value: float, tags: dict[str, str] | None = None) -> None: ...
    def set(self, value: float, tags: dict[str, str] | None = None) -> None: ...


def ray_instrument(spec: MetricSpec) -> Any:
    """The :mod:`ray.serve.metrics` instrument for ``spec`` (inside a replica it adds Serve's
    ``deployment``, ``replica`` and ``application`` tags)."""
    from ray.serve import metrics

    if spec.kind == "counter":
        return metrics.Counter(spec.name, spec.description, spec.tags)
    if spec.kind == "histogram":
        return metrics.Histogram(spec.name, spec.description, list(spec.buckets), spec.tags)
    return metrics.Gauge(spec.name, spec.description, spec.tags)


def start_at_zero(counter: Any, tags: dict[str, str]) -> None:
    """Create ``counter``'s series for ``tags`` at 0 (Prometheus' advice for labels known in
    advance: otherwise the series appears at its first increment and ``rate()`` / ``increase()``
    never count that one). Ray's public ``Counter.inc`` refuses 0, so this calls the ``_record``
    it calls after that check; ``test_serving_replicas`` fails if a Ray upgrade drops it."""
    record = getattr(counter, "_record", None)
    if callable(record):
        record(0.0, tags)


class ServiceMetrics:
    """One replica's instruments (``instrument`` makes each from its :class:`MetricSpec`; Ray's by default)."""

    def __init__(self, policy: str, load_seconds: float, version: str = "", policy_version: str = "",
                 instrument: Callable[[MetricSpec], Any] = ray_instrument) -> None:
        made = {spec.name: instrument(spec) for spec in SPECS}
        self.requests, self.latency, self.errors = made[REQUESTS.name], made[LATENCY.name], made[ERRORS.name]
        self.decision_latency, self.decisions = made[DECISION_LATENCY.name], made[DECISIONS.name]
        self.in_flight, self.batch_size = made[IN_FLIGHT.name], made[BATCH_SIZE.name]
        self._deciding = 0
        for kind in ERROR_KINDS:
            start_at_zero(self.errors, {"kind": kind})
        for action in ACTIONS:
            start_at_zero(self.decisions, {"action": action})
        self.load_seconds, self.build_info = made[LOAD_SECONDS.name], made[BUILD_INFO.name]
        self._constant = ((self.load_seconds, load_seconds, {"policy": policy}),
                          (self.build_info, 1, {"version": version, "policy": policy, "policy_version": policy_version}))
        self._stop = threading.Event()
        self.refresh_gauges()

    def refresh_gauges(self) -> None:
        """Set every gauge to its current value again. Ray's agent drops a gauge series that no
        report has refreshed for two report intervals, so a value set once (build info, load
        time) or an in-flight count that stays 0 would vanish from the scrape."""
        for gauge, value, tags in self._constant:
            gauge.set(value, tags)
        self.in_flight.set(self._deciding)

    def keep_gauges(self, every_s: float = GAUGE_REFRESH_S) -> threading.Thread:
        """Call :meth:`refresh_gauges` every ``every_s`` in a daemon thread until :meth:`close`."""
        def loop() -> None:
            while not self._stop.wait(every_s):
                self.refresh_gauges()

        thread = threading.Thread(target=loop, name="deepshare-metrics-gauges", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stop.set()

    @staticmethod
    def route(path: str) -> str:
        """The route label: a known path, or ``other``."""
        return path if path in ROUTES else "other"

    def observe(self, path: str, method: str, status: int, seconds: float) -> None:
        """One answered HTTP request (every route, refusals included)."""
        route = self.route(path)
        self.requests.inc(1, {"route": route, "method": method if method in METHODS else "other", "code": str(status)})
        self.latency.observe(seconds, {"route": route})
        if status >= 400:
            self.errors.inc(1, {"kind": _kind(status)})

    def deciding(self, delta: int) -> None:
        """``delta`` placement requests started (+1) or finished (-1) deciding. The gauge itself is
        set by :meth:`refresh_gauges` (every second): Ray exports it every report interval
        anyway, so setting it on every request would only add to each request's time."""
        self._deciding += delta

    def decided(self, outcome: str, seconds: float) -> None:
        self.decision_latency.observe(seconds, {"outcome": outcome})

    def count_decisions(self, actions: dict[str, int]) -> None:
        for action, n in actions.items():
            if n:
                self.decisions.inc(n, {"action": action})

    def batch(self, size: int) -> None:
        """One batched forward pass over ``size`` observations."""
        self.batch_size.observe(size)


def _kind(status: int) -> str:
    return _KINDS.get(status, "server" if status >= 500 else "client")
