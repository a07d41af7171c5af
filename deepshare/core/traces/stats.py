"""Summary statistics of a trace: what a user checks before simulating it.

Durations of jobs given in samples are converted at the catalog's reference throughput (the
same unit a duration in a trace has), so ``gpu_hours`` is the ideal, contention-free work.
``features`` says what the jobs' features offer a policy that does not know durations (see
:mod:`deepshare.core.traces.feature_stats`). ``topology`` counts the jobs that say where they must
or should run, per level, and how much of the trace large gangs are (the jobs whose traffic
crosses switches).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from deepshare.core.traces.base import Trace
from deepshare.core.traces.feature_stats import FeatureStats, feature_stats
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog, default_catalog


GANG_SIZES = (16, 64, 256)
"""The gang sizes ``trace stats`` reports shares at or above: two 8-GPU nodes, a leaf's worth on
common fabrics, and the top of the gang-heavy mixes (jobs of 16 to 256 GPUs)."""


@dataclass(frozen=True)
class GangShare:
    """The jobs of at least ``at_least`` GPUs."""

    at_least: int
    jobs: int
    job_share: float
    """Of all jobs (0 for an empty trace)."""
    gpu_share: float
    """Of the GPUs all jobs ask (the sum of their ``gpus``), as Crux counts GPUs held."""


@dataclass(frozen=True)
class TopologyStats:
    """What the jobs ask of the fabric: jobs per level named, and the large gangs' shares."""

    required_level: dict[str, int]
    """Level -> jobs that must run inside one domain of it."""
    preferred_level: dict[str, int]
    """Level -> jobs that would rather run inside one domain of it."""
    slice_level: dict[str, int]
    """Level -> jobs asking slices kept inside one domain of it."""
    gangs: tuple[GangShare, ...]
    """One per size of :data:`GANG_SIZES`, smallest first."""


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
    topology: TopologyStats
    """Topology requests per level and the large gangs' shares."""

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


def topology_stats(jobs: Sequence[JobSpec], sizes: Sequence[int] = GANG_SIZES) -> TopologyStats:
    """Jobs per level each topology field names (most frequent first) and, per size in ``sizes``,
    the share of jobs, and of the GPUs asked, of gangs at least that large."""
    def per_level(field: str) -> dict[str, int]:
        return _by_count(Counter(name for j in jobs if (name := getattr(j.topology, field)) is not None))

    total_gpus = sum(j.gpus for j in jobs)
    gangs = []
    for size in sorted(sizes):
        large = [j.gpus for j in jobs if j.gpus >= size]
        gangs.append(GangShare(size, len(large), len(large) / len(jobs) if jobs else 0.0,
                               sum(large) / total_gpus if total_gpus else 0.0))
    return TopologyStats(per_level("required_level"), per_level("preferred_level"), per_level("slice_level"),
                         tuple(gangs))


def trace_stats(trace: Trace, catalog: Catalog | None = None) -> TraceStats:
    """Counts, arrival span and rate, demand and model histograms, work, features and topology
    requests of ``trace``."""
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
        topology=topology_stats(jobs),
    )
