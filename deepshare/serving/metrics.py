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
                                                                                         ``disconnected``: the
                                                                                         client left, ``error``)
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
"""How often a replica hands its totals to Ray and sets its gauges again: within Ray's floor of
one report a second, so within the two report intervals after which Ray's agent drops a gauge
that was not refreshed."""

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
    """One replica's metrics (``instrument`` makes each Ray instrument from its :class:`MetricSpec`;
    Ray's by default).

    The request path only adds to plain Python totals under a lock; :meth:`flush` hands them to
    Ray's instruments, from a daemon thread once a second (:meth:`report_every`). Measured with
    ``bench/serve_load.py``, alternating with main's code on the loaded 2-core machine (load
    4-9): calling Ray's instruments on every request (five calls through Ray's C++ recorder,
    25-30 us of CPU measured in an actor) gave the small request's sequential p50 over the Serve
    floor 1.20-1.34x (four runs) against main's 1.18-1.26x, and 8-client throughput 0.74x
    (twice) against 0.82-0.84x; handing the totals over once a second gave 1.15-1.25x against
    1.16-1.23x and 0.82-0.99x against 0.76-0.83x (two runs each). Ray exports every 10 s
    anyway, so a second's delay loses nothing. The flush also sets the gauges again: Ray's agent
    drops a gauge that no report refreshed for two report intervals."""

    def __init__(self, policy: str, load_seconds: float, version: str = "", policy_version: str = "",
                 instrument: Callable[[MetricSpec], Any] = ray_instrument) -> None:
        self.made = {spec.name: instrument(spec) for spec in SPECS}
        """Each metric's instrument, by :class:`MetricSpec` name."""
        self.in_flight = self.made[IN_FLIGHT.name]
        for kind in ERROR_KINDS:
            start_at_zero(self.made[ERRORS.name], {"kind": kind})
        for action in ACTIONS:
            start_at_zero(self.made[DECISIONS.name], {"action": action})
        self._constant = ((self.made[LOAD_SECONDS.name], load_seconds, {"policy": policy}),
                          (self.made[BUILD_INFO.name], 1, {"version": version, "policy": policy, "policy_version": policy_version}))
        self._deciding = 0
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._observed: list[tuple[str, float, tuple[tuple[str, str], ...]]] = []
        self._stop = threading.Event()
        self.flush()

    def flush(self) -> None:
        """Hand everything recorded since the last flush to Ray's instruments, and set the gauges."""
        with self._lock:
            counts, observed = self._counts, self._observed
            self._counts, self._observed = {}, []
        for (name, tags), n in counts.items():
            self.made[name].inc(n, dict(tags))
        for name, value, tags in observed:
            self.made[name].observe(value, dict(tags) if tags else None)
        for gauge, value, gauge_tags in self._constant:
            gauge.set(value, gauge_tags)
        self.in_flight.set(self._deciding)

    def report_every(self, every_s: float = GAUGE_REFRESH_S) -> threading.Thread:
        """Call :meth:`flush` every ``every_s`` in a daemon thread until :meth:`close`."""
        def loop() -> None:
            while not self._stop.wait(every_s):
                self.flush()

        thread = threading.Thread(target=loop, name="deepshare-metrics", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        """Stop the reporting thread and hand over what is left."""
        self._stop.set()
        self.flush()

    def _count(self, name: str, tags: tuple[tuple[str, str], ...], n: float = 1) -> None:
        key = (name, tags)
        self._counts[key] = self._counts.get(key, 0) + n

    @staticmethod
    def route(path: str) -> str:
        """The route label: a known path, or ``other``."""
        return path if path in ROUTES else "other"

    def observe(self, path: str, method: str, status: int, seconds: float) -> None:
        """One answered HTTP request (every route, refusals included)."""
        route = self.route(path)
        with self._lock:
            self._count(REQUESTS.name, (("code", str(status)), ("method", method if method in METHODS else "other"),
                                        ("route", route)))
            self._observed.append((LATENCY.name, seconds, (("route", route),)))
            if status >= 400:
                self._count(ERRORS.name, (("kind", _kind(status)),))

    def deciding(self, delta: int) -> None:
        """``delta`` placement requests started (+1) or finished (-1) deciding (the gauge is set
        by :meth:`flush`)."""
        self._deciding += delta

    def decided(self, outcome: str, seconds: float) -> None:
        with self._lock:
            self._observed.append((DECISION_LATENCY.name, seconds, (("outcome", outcome),)))

    def count_decisions(self, actions: dict[str, int]) -> None:
        with self._lock:
            for action, n in actions.items():
                if n:
                    self._count(DECISIONS.name, (("action", action),), n)

    def batch(self, size: int) -> None:
        """One batched forward pass over ``size`` observations."""
        with self._lock:
            self._observed.append((BATCH_SIZE.name, size, ()))


def _kind(status: int) -> str:
    return _KINDS.get(status, "server" if status >= 500 else "client")
