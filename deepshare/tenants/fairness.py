"""Fairness of a finished run, per tenant (queue): GPU share against deserved share, finish-time
fairness, queueing delay. Computed from the run's job records, its jobs and its cluster size.

Definitions (times in seconds; a tenant is a queue, :meth:`~deepshare.tenants.spec.Tenants.queue_of`):

* **active** at time t: a tenant with a job submitted at or before t and not finished by t.
* **GPU share** of a tenant at t: the GPUs its jobs hold at t / the cluster's GPUs. A record
  keeps a job's total GPU time, not its run intervals, so a job is taken to hold its GPUs for
  one stretch ending at its finish (``finish - gpu_time / gpus`` to ``finish``): exact for a
  job never preempted, the last stretch compressed for one that was.
* **deserved share** at t: the weighted max-min fair division of the cluster among the active
  tenants, each capped by its demand (the GPUs of its jobs in the system at t) and, under a
  tenants file, by the most its queue can ever hold (:meth:`~deepshare.tenants.spec.Tenants.most_gpus`):
  weighted water filling, so a tenant asking less than its weight's part deserves only what it asks.
* Both are sampled at ``samples`` evenly spaced times from the first submission to the last
  finish; a tenant's averages are over the samples at which it is active.
* **finish-time fairness** of a job (Themis): ``rho = JCT / T_alone``, with ``T_alone`` the job's
  JCT alone on its tenant's part of the cluster: ``D x max(1, gpus / G)``, ``D`` its isolated run
  time (its ``duration_s``, or its samples at the catalog's reference throughput) and ``G`` =
  cluster GPUs x its tenant's weight / the total weight of the tenants active at its submission
  (its own included). With equal weights and N active tenants that is 1/N of the cluster: a job
  asking no more than G GPUs would start at once and run at full speed; a wider one would get
  G/gpus of the time. rho <= 1: no worse than alone on its share. Its tenant's other jobs are not
  part of "alone" (Themis' apps are one job here).
* **share gap** of a tenant: the mean over the samples at which it is active of ``|share -
  deserved share|``; the report's ``max_share_gap`` is the largest tenant's (how far the run
  strays from weighted max-min fairness, in shares of the cluster).
* **queueing** of a job: :attr:`~deepshare.core.metrics.JobRecord.queue_s`; per tenant its mean
  and its 95th percentile (linear interpolation).

:meth:`FairnessReport.metrics` flattens a report into the numbers a suite cell, ``compare`` and
``evaluate`` keep (:data:`FAIRNESS_METRICS`, and per queue :data:`QUEUE_METRICS`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np

from deepshare.core.metrics import JobRecord
from deepshare.core.types import JobSpec
from deepshare.core.view import Tenancy
from deepshare.core.workloads import Catalog
from deepshare.tenants.spec import Tenants

SAMPLES = 200
"""Sample times of the share timelines."""

FAIRNESS_METRICS = ("worst_rho", "share_rho_above_1", "max_share_gap", "worst_queue_avg_queue_s")
"""The run-wide fairness numbers of :meth:`FairnessReport.metrics`: the worst finish-time
fairness, the share of jobs with rho > 1, the largest tenant's share gap, and the largest
tenant's mean queueing delay."""

QUEUE_METRICS = ("jobs", "avg_share", "avg_deserved", "share_gap", "worst_rho", "share_rho_above_1", "avg_queue_s",
                 "p95_queue_s")
"""Per queue, what :meth:`FairnessReport.metrics` keeps under ``"queues"``."""


@dataclass(frozen=True)
class TenantFairness:
    queue: str
    jobs: int
    finished: int
    avg_share: float
    """Mean GPU share while active."""
    avg_deserved: float
    """Mean deserved share while active."""
    avg_rho: float | None
    worst_rho: float | None
    share_rho_above_1: float | None
    avg_queue_s: float | None
    share_gap: float = 0.0
    """Mean ``|share - deserved|`` while active."""
    p95_queue_s: float | None = None


@dataclass(frozen=True)
class FairnessReport:
    tenants: tuple[TenantFairness, ...]
    worst_rho: float | None
    share_rho_above_1: float | None
    """Share of finished jobs with rho > 1."""
    times: tuple[float, ...]
    shares: Mapping[str, tuple[float, ...]]
    """Per tenant, the GPU share at each of ``times``."""
    deserved: Mapping[str, tuple[float, ...]]
    rho: Mapping[str, float]
    """Per finished job, its rho."""

    @property
    def max_share_gap(self) -> float | None:
        """The largest tenant's share gap (None without tenants)."""
        return max((t.share_gap for t in self.tenants), default=None)

    def metrics(self) -> dict[str, object]:
        """:data:`FAIRNESS_METRICS` and ``"queues"``: ``{queue: {QUEUE_METRICS...}}``."""
        waits = [t.avg_queue_s for t in self.tenants if t.avg_queue_s is not None]
        return {
            "worst_rho": self.worst_rho,
            "share_rho_above_1": self.share_rho_above_1,
            "max_share_gap": self.max_share_gap,
            "worst_queue_avg_queue_s": max(waits, default=None),
            "queues": {t.queue: {k: getattr(t, k) for k in QUEUE_METRICS} for t in self.tenants},
        }

    def to_dict(self) -> dict:
        return {
            "tenants": [asdict(t) for t in self.tenants],
            "worst_rho": self.worst_rho,
            "share_rho_above_1": self.share_rho_above_1,
            "max_share_gap": self.max_share_gap,
            "timeline": {"times": list(self.times), "shares": {q: list(v) for q, v in self.shares.items()},
                         "deserved": {q: list(v) for q, v in self.deserved.items()}},
        }


def isolated_s(spec: JobSpec, catalog: Catalog) -> float:
    """The job's isolated run time at its reference placement."""
    if spec.duration_s is not None:
        return spec.duration_s
    return spec.total_samples / catalog.reference_throughput(spec.model, spec.gpus)  # type: ignore[operator]


def water_fill(capacity: float, weights: Mapping[str, float], demands: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fair division of ``capacity``, each tenant capped by its demand."""
    left = {q: d for q, d in demands.items() if d > 0}
    out = {q: 0.0 for q in demands}
    cap = capacity
    while left and cap > 1e-12:
        total_w = sum(weights[q] for q in left)
        satisfied = [q for q, d in left.items() if d <= cap * weights[q] / total_w]  # in the demands' order
        if not satisfied:
            for q in left:
                out[q] = cap * weights[q] / total_w
            return out
        for q in satisfied:
            out[q] = left.pop(q)
            cap -= out[q]
    return out


def _active_weights(kept: Sequence[JobRecord], queue: Mapping[str, str], weight: Mapping[str, float]) -> dict[str, float]:
    """Per finished record, the summed weight of the queues active at its submission (a job of
    theirs submitted then or before and not finished), its own included, in one sweep over the
    submissions in time order: a scan of every record for each took 59 s for 32,000 jobs."""
    by_submit = sorted(kept, key=lambda r: r.submit_s)
    finishes = sorted((max(r.finish_s, r.submit_s), queue[r.job_id]) for r in kept if r.finish_s is not None)
    count: dict[str, int] = {}
    active: set[str] = set()
    total: float | None = None  # fsum of the active queues' weights, until the set changes
    out: dict[str, float] = {}
    started = ended = 0
    for r in by_submit:
        now = r.submit_s
        while started < len(by_submit) and by_submit[started].submit_s <= now:
            q = queue[by_submit[started].job_id]
            count[q] = count.get(q, 0) + 1
            if count[q] == 1:
                active.add(q)
                total = None
            started += 1
        while ended < len(finishes) and finishes[ended][0] <= now:
            q = finishes[ended][1]
            count[q] -= 1
            if count[q] == 0:
                active.discard(q)
                total = None
            ended += 1
        if r.finish_s is None:
            continue
        own = queue[r.job_id]
        if own in active:
            if total is None:
                total = math.fsum(weight[q] for q in active)  # exact: whatever the set's order
            out[r.job_id] = total
        else:  # finished as it was submitted
            out[r.job_id] = math.fsum(weight[q] for q in active | {own})
    return out


def fairness_report(records: Sequence[JobRecord], jobs: Sequence[JobSpec], tenancy: Tenancy, total_gpus: int,
                    catalog: Catalog, samples: int = SAMPLES) -> FairnessReport:
    """The run's fairness (module doc). ``tenancy``: the tenants file (or ``NO_TENANCY``)."""
    specs = {spec.job_id: spec for spec in jobs}
    queue = {job_id: tenancy.queue_of(spec) for job_id, spec in specs.items()}  # type: ignore[arg-type]
    kept = [r for r in records if not r.rejected and r.job_id in specs]
    names = sorted({queue[r.job_id] for r in kept})
    weight = {q: tenancy.weight_of(q) for q in names}
    end = max((r.finish_s for r in kept if r.finish_s is not None), default=0.0)
    start = min((r.submit_s for r in kept), default=0.0)
    times = np.linspace(start, end, samples) if end > start else np.array([start])
    share = {q: np.zeros(len(times)) for q in names}
    demand = {q: np.zeros(len(times)) for q in names}
    for r in kept:
        q = queue[r.job_id]
        done = r.finish_s if r.finish_s is not None else np.inf
        demand[q] += np.where((times >= r.submit_s) & (times < done), r.gpus, 0)
        if r.finish_s is not None and r.gpu_time_s > 0:
            began = r.finish_s - r.gpu_time_s / r.gpus
            share[q] += np.where((times >= began) & (times < r.finish_s), r.gpus, 0)
    deserved = {q: np.zeros(len(times)) for q in names}
    if isinstance(tenancy, Tenants):
        for q in names:
            np.minimum(demand[q], tenancy.most_gpus(q), out=demand[q])
    for i in range(len(times)):
        fill = water_fill(total_gpus, weight, {q: float(demand[q][i]) for q in names})
        for q in names:
            deserved[q][i] = fill[q]
    rho: dict[str, float] = {}
    weights_then = _active_weights(kept, queue, weight)
    for r in kept:
        if r.finish_s is None:
            continue
        fair = total_gpus * weight[queue[r.job_id]] / weights_then[r.job_id]
        alone = isolated_s(specs[r.job_id], catalog) * max(1.0, r.gpus / fair)
        rho[r.job_id] = (r.finish_s - r.submit_s) / alone
    per = []
    for q in names:
        mine = [r for r in kept if queue[r.job_id] == q]
        active = demand[q] > 0
        rhos = [rho[r.job_id] for r in mine if r.job_id in rho]
        waits = [r.queue_s for r in mine if r.queue_s is not None]
        per.append(TenantFairness(
            q, len(mine), len(rhos),
            float(share[q][active].mean() / total_gpus) if active.any() else 0.0,
            float(deserved[q][active].mean() / total_gpus) if active.any() else 0.0,
            float(np.mean(rhos)) if rhos else None, max(rhos) if rhos else None,
            sum(x > 1 for x in rhos) / len(rhos) if rhos else None,
            float(np.mean(waits)) if waits else None,
            float(np.abs(share[q] - deserved[q])[active].mean() / total_gpus) if active.any() else 0.0,
            float(np.percentile(waits, 95)) if waits else None,
        ))
    values = list(rho.values())
    return FairnessReport(
        tuple(per), max(values) if values else None, sum(x > 1 for x in values) / len(values) if values else None,
        tuple(float(t) for t in times),
        {q: tuple(float(x) / total_gpus for x in share[q]) for q in names},
        {q: tuple(float(x) / total_gpus for x in deserved[q]) for q in names},
        rho,
    )
