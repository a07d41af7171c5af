"""Statistics of a trace's job features: users, recurrence and how good the time limits are.

What a policy that does not know durations can lean on: how many jobs recur (their group has
run before, so history predicts them) and how far the users' own estimates (``requested_s``)
are from the truth. The estimate error is stated the way the Helios artifact states its
predictor's (``framework/QSSF Service/estimators/philly_estimate.py``: 10% of jobs within
±10%, 50% within ±50%, 70% within ±100%, 90% within ±1000%), on the ratio
``requested_s / true duration`` (the isolated run time; samples converted at the catalog's
reference throughput).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from deepshare.core.types import JobSpec

ERROR_BANDS = (0.1, 0.5, 1.0, 10.0)
"""Relative errors ``|requested / true - 1|`` the estimate statistics count jobs within."""


@dataclass(frozen=True)
class EstimateStats:
    """Error of ``requested_s`` against the true duration, over the jobs that give one."""

    ratio_median: float
    """Median of requested / true."""
    ratio_p10: float
    """10th percentile of requested / true (linear interpolation)."""
    ratio_p90: float
    """90th percentile of requested / true."""
    log_ratio_sigma: float
    """Standard deviation of ln(requested / true) over the jobs (0 for one job)."""
    within: dict[str, float]
    """Share of jobs with ``|requested / true - 1|`` at most 10%, 50%, 100% and 1000%."""


@dataclass(frozen=True)
class FeatureStats:
    users: int
    """Distinct users."""
    user_share: float
    """Share of jobs that name a user."""
    top_user_share: float
    """Share of all jobs submitted by the busiest user (0 without users)."""
    vcs: int
    """Distinct virtual clusters."""
    groups: int
    """Distinct groups (recurring-job tags)."""
    recurring_groups: int
    """Groups with 2 or more jobs in the trace."""
    recurrence_share: float
    """Share of jobs whose group has 2 or more jobs in the trace (jobs without a group: none)."""
    requested_share: float
    """Share of jobs that give ``requested_s``."""
    estimate: EstimateStats | None
    """Error of ``requested_s``; None when no job gives one."""


def _band(limit: float) -> str:
    return f"{limit * 100:g}%"


def estimate_stats(ratios: Sequence[float], log_ratios: Sequence[float] | None = None) -> EstimateStats | None:
    """Error statistics of requested / true ratios (None for none); ``log_ratios``: their logs,
    when known as differences of logs (a tiny ``requested_s`` over a long run rounds its ratio
    to 0, whose log is -inf: the log-sigma printed ``nan``)."""
    if not ratios:
        return None
    r = np.asarray(ratios, dtype=float)
    logs = np.log(r) if log_ratios is None else np.asarray(log_ratios, dtype=float)
    error = np.abs(r - 1.0)
    return EstimateStats(
        ratio_median=float(np.median(r)),
        ratio_p10=float(np.percentile(r, 10)),
        ratio_p90=float(np.percentile(r, 90)),
        log_ratio_sigma=float(np.std(logs)),
        # a tiny slack so that a ratio of exactly 1.1 counts as within 10% despite rounding
        within={_band(b): float(np.mean(error <= b * (1 + 1e-9))) for b in ERROR_BANDS},
    )


def feature_stats(jobs: Sequence[JobSpec], durations: Sequence[float]) -> FeatureStats:
    """Feature statistics of ``jobs`` whose true durations (seconds) are ``durations``."""
    n = len(jobs)
    users = Counter(j.user for j in jobs if j.user is not None)
    groups = Counter(j.group for j in jobs if j.group is not None)
    recurring = sum(c for c in groups.values() if c >= 2)
    given = [(j.requested_s, d) for j, d in zip(jobs, durations) if j.requested_s is not None]
    ratios = [q / d for q, d in given]

    def share(count: int) -> float:
        return count / n if n else 0.0

    return FeatureStats(
        users=len(users),
        user_share=share(sum(users.values())),
        top_user_share=share(max(users.values(), default=0)),
        vcs=len({j.vc for j in jobs if j.vc is not None}),
        groups=len(groups),
        recurring_groups=sum(1 for c in groups.values() if c >= 2),
        recurrence_share=share(recurring),
        requested_share=share(len(ratios)),
        estimate=estimate_stats(ratios, [math.log(q) - math.log(d) for q, d in given]),
    )


def describe(stats: FeatureStats) -> list[tuple[str, str]]:
    """(name, value) rows for the human table of ``deepshare trace stats``."""
    rows = [
        ("users", f"{stats.users} ({stats.user_share:.0%} of jobs name one; the busiest submits "
         f"{stats.top_user_share:.0%})" if stats.users else "none (no job names a user)"),
        ("groups", f"{stats.groups} ({stats.recurring_groups} with 2+ jobs; recurrence share "
         f"{stats.recurrence_share:.0%} of jobs)" if stats.groups else "none (no job names a group)"),
    ]
    if stats.vcs:
        rows.append(("VCs", f"{stats.vcs} virtual clusters"))
    est = stats.estimate
    if est is None:
        rows.append(("estimates", "none (no job gives requested_s)"))
    else:
        rows.append(("estimates", f"{stats.requested_share:.0%} of jobs give requested_s; requested/true median "
                     f"{est.ratio_median:.3g} (p10 {est.ratio_p10:.3g}, p90 {est.ratio_p90:.3g}, "
                     f"log-sigma {est.log_ratio_sigma:.3g})"))
        rows.append(("  within", ", ".join(f"±{band}: {share:.0%}" for band, share in est.within.items())))
    return rows
