"""Summary statistics of a trace: what a user checks before simulating it.

Durations of jobs given in samples are converted at the catalog's reference throughput (the
same unit a duration in a trace has), so ``gpu_hours`` is the ideal, contention-free work.
``features`` says what the jobs' features offer a policy that does not know durations (see
:mod:`deepshare.core.traces.feature_stats`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from deepshare.core.traces.base import Trace
from deepshare.core.traces.feature_stats import FeatureStats, feature_stats
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog, default_catalog


@dataclass(frozen=True)
class TraceStats:
    jobs: int
    skipped: int
    span_s: float
    """Last submit time minus first."""
    arrival_rate_per_s: float | None
    """(jobs - 1) / span; None when every job arrives at once."""
    gpu_demand: dict[int, int]
    models: dict[str, int]
    comm_classes: dict[str, int]
    gpu_hours: float
    """Sum of gpus x duration at reference throughput, in hours."""
    mean_duration_s: float
    median_duration_s: float
    features: FeatureStats
    """Users, recurrence and the error of the jobs' own estimates."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: mapping keys are strings."""
        out = asdict(self)
        out["gpu_demand"] = {str(g): n for g, n in self.gpu_demand.items()}
        return out


def _by_count(counts: Counter) -> dict[str, int]:
    """Most frequent first; ties by name."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def job_duration_s(job: JobSpec, catalog: Catalog) -> float:
    """Isolated run time of ``job`` at its reference placement, in seconds."""
    if job.duration_s is not None:
        return job.duration_s
    assert job.total_samples is not None
    return job.total_samples / catalog.reference_throughput(job.model, job.gpus)


def trace_stats(trace: Trace, catalog: Catalog | None = None) -> TraceStats:
    """Counts, arrival span and rate, demand and model histograms, work and features of ``trace``."""
    catalog = catalog or default_catalog()
    jobs = trace.jobs
    submits = [j.submit_time for j in jobs]
    span = max(submits) - min(submits) if jobs else 0.0
    durations = [job_duration_s(j, catalog) for j in jobs]
    return TraceStats(
        jobs=len(jobs),
        skipped=len(trace.skipped),
        span_s=span,
        arrival_rate_per_s=(len(jobs) - 1) / span if span > 0 else None,
        gpu_demand=dict(sorted(Counter(j.gpus for j in jobs).items())),
        models=_by_count(Counter(j.model for j in jobs)),
        comm_classes=_by_count(Counter(catalog.class_of(j.model) for j in jobs)),
        gpu_hours=sum(j.gpus * d for j, d in zip(jobs, durations)) / 3600.0,
        mean_duration_s=statistics.fmean(durations) if durations else 0.0,
        median_duration_s=statistics.median(durations) if durations else 0.0,
        features=feature_stats(jobs, durations),
    )
