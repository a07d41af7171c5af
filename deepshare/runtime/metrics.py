"""Prometheus metrics of the live scheduler, on its own registry (never the process-global one).

Names follow the project's convention: prefix ``deepshare_scheduler_``, counters ``*_total``,
latencies as ``*_duration_seconds`` histograms, HTTP status as the ``code`` label, a
``*_build_info`` gauge, and the default process collector on the same registry. Job counts and
GPUs in use are read from the journal when scraped, so they are never stale; so are the
per-queue gauges (label ``queue``: GPUs in use, nominal quota, borrowed GPUs, pending jobs and
their GPUs), which follow the tenants file in force (a queue a reload removes disappears).
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deepshare.runtime.tenancy import QueueUsage

PREFIX = "deepshare_scheduler_"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def route_of(path: str) -> str:
    """The ``route`` label of a request path (job ids folded into ``{id}``, anything else ``other``),
    so that arbitrary paths cannot grow the number of series."""
    if path in ("/healthz", "/metrics", "/v1/jobs", "/v1/contention", "/v1/queues", "/v1/tenants/reload"):
        return path
    parts = path.split("/")
    if len(parts) == 4 and parts[1:3] == ["v1", "jobs"] and parts[3]:
        return "/v1/jobs/{id}"
    if len(parts) == 5 and parts[1:3] == ["v1", "jobs"] and parts[3] and parts[4] == "logs":
        return "/v1/jobs/{id}/logs"
    return "other"


class QueueCollector(Collector):
    """The per-queue gauges and the tenants file's reload counter, computed at scrape time."""

    def __init__(self, usage: Callable[[], Sequence[QueueUsage]], reloads: Callable[[], tuple[int, int]]) -> None:
        self.usage, self.reloads = usage, reloads

    def collect(self) -> Iterator[Metric]:
        gauges = {
            "gpus_in_use": GaugeMetricFamily(PREFIX + "queue_gpus_in_use", "GPUs held by the queue's running jobs",
                                             labels=("queue",)),
            "nominal_gpus": GaugeMetricFamily(PREFIX + "queue_nominal_gpus", "The queue's nominal GPU quota "
                                              "(tenants file)", labels=("queue",)),
            "borrowed_gpus": GaugeMetricFamily(PREFIX + "queue_borrowed_gpus", "GPUs the queue holds above its "
                                               "nominal quota", labels=("queue",)),
            "pending_jobs": GaugeMetricFamily(PREFIX + "queue_pending_jobs", "The queue's queued jobs",
                                              labels=("queue",)),
            "pending_gpus": GaugeMetricFamily(PREFIX + "queue_pending_gpus", "GPUs the queue's queued jobs ask",
                                              labels=("queue",)),
        }
        for row in self.usage():
            for name, family in gauges.items():
                value = getattr(row, name)
                if value is not None:
                    family.add_metric((row.queue,), float(value))
        yield from gauges.values()
        done, refused = self.reloads()
        reloads = CounterMetricFamily(PREFIX + "tenants_reloads", "Reloads of the tenants file, by result",
                                      labels=("result",))
        reloads.add_metric(("ok",), float(done))
        reloads.add_metric(("refused",), float(refused))
        yield reloads


class SchedulerMetrics:
    """Every metric the scheduler exports; ``counts()`` gives (jobs by state, GPUs in use) at scrape
    time, ``queues()`` the per-queue usage and ``reloads()`` (tenants file reloads done, refused)."""

    def __init__(self, version: str, policy: str, counts: Callable[[], tuple[dict[str, int], int]],
                 queues: Callable[[], Sequence[QueueUsage]] = lambda: (),
                 reloads: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(QueueCollector(queues, reloads))
        ProcessCollector(registry=self.registry)
        reg = self.registry
        info = Gauge(PREFIX + "build_info", "Version and policy of this scheduler (always 1)", ("version", "policy"),
                     registry=reg)
        info.labels(version, policy).set(1)
        self._counts = counts
        Gauge(PREFIX + "queue_length", "Jobs queued now", registry=reg).set_function(lambda: self._state("queued"))
        Gauge(PREFIX + "running_jobs", "Jobs running now", registry=reg).set_function(lambda: self._state("running"))
        Gauge(PREFIX + "gpus_in_use", "GPUs held by this scheduler's running jobs", registry=reg).set_function(
            lambda: float(self._counts()[1]))
        self.launches = Counter(PREFIX + "launches", "Runs started (a job's launch that succeeded)", registry=reg)
        self.launch_failures = Counter(PREFIX + "launch_failures", "Launches that failed before the job ran",
                                       registry=reg)
        self.jobs_ended = Counter(PREFIX + "jobs_ended", "Jobs that ended, by final state", ("state",), registry=reg)
        self.preemptions = Counter(PREFIX + "preemptions", "Running jobs preempted by the policy", registry=reg)
        self.migrations = Counter(PREFIX + "migrations", "Running jobs migrated by the policy", registry=reg)
        self.decision_latency = Histogram(PREFIX + "decision_duration_seconds", "Time the policy took to decide",
                                          buckets=LATENCY_BUCKETS, registry=reg)
        self.tick_latency = Histogram(PREFIX + "tick_duration_seconds", "Time one control-loop tick took",
                                      buckets=LATENCY_BUCKETS, registry=reg)
        self.tick_errors = Counter(PREFIX + "tick_errors", "Ticks that failed or whose decision was refused",
                                   registry=reg)
        self.bad_reports = Counter(PREFIX + "bad_reports", "Job progress reports dropped (a field out of its domain)",
                                   registry=reg)
        self.isolated_jobs = Counter(PREFIX + "isolated_jobs",
                                     "Jobs failed because the scheduler could not handle their data", registry=reg)
        self.http_requests = Counter(PREFIX + "http_requests", "HTTP requests by route and status code",
                                     ("route", "code"), registry=reg)
        self.http_latency = Histogram(PREFIX + "http_request_duration_seconds", "Time from request to response",
                                      ("route",), buckets=LATENCY_BUCKETS, registry=reg)
        for state in ("finished", "failed", "cancelled"):
            self.jobs_ended.labels(state)  # present at 0 from the start, so rate() works

    def _state(self, state: str) -> float:
        return float(self._counts()[0].get(state, 0))

    def observe_http(self, path: str, method: str, code: int, seconds: float) -> None:
        """One answered request, as :class:`deepshare.infra.httpauth.ObserveRequests` reports it
        (``method`` is not one of the scheduler's labels)."""
        route = route_of(path)
        self.http_requests.labels(route, str(code)).inc()
        self.http_latency.labels(route).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
