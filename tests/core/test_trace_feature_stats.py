"""``trace_stats(...).features`` on a hand-checkable trace: users, recurrence and estimate error."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from deepshare.core.traces import Trace, trace_stats
from deepshare.core.traces.feature_stats import describe, estimate_stats, feature_stats
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog

# requested / true: 1.1, 0.5, 3, (none), 20
JOBS = (
    JobSpec("j1", "MoE", 2, 0.0, duration_s=100.0, user="a", group="g1", requested_s=110.0),
    JobSpec("j2", "MoE", 2, 1.0, duration_s=200.0, user="a", group="g1", requested_s=100.0),
    JobSpec("j3", "DLRM", 4, 2.0, duration_s=100.0, user="b", group="g2", requested_s=300.0),
    JobSpec("j4", "DLRM", 4, 3.0, duration_s=50.0),
    JobSpec("j5", "FSDP", 8, 4.0, duration_s=10.0, user="a", group="g3", vc="v1", requested_s=200.0),
)


def test_hand_checked_features() -> None:
    stats = trace_stats(Trace(JOBS, "t", "t")).features
    assert (stats.users, stats.user_share, stats.top_user_share) == (2, 0.8, 0.6)
    assert (stats.groups, stats.recurring_groups, stats.recurrence_share) == (3, 1, 0.4)
    assert (stats.vcs, stats.requested_share) == (1, 0.8)
    est = stats.estimate
    assert est is not None
    # sorted ratios 0.5, 1.1, 3, 20: median (1.1 + 3) / 2; percentiles by linear interpolation
    assert est.ratio_median == pytest.approx(2.05)
    assert est.ratio_p10 == pytest.approx(0.5 + 0.3 * (1.1 - 0.5))
    assert est.ratio_p90 == pytest.approx(3 + 0.7 * (20 - 3))
    assert est.log_ratio_sigma == pytest.approx(statistics.pstdev(math.log(r) for r in (1.1, 0.5, 3, 20)))
    # |ratio - 1|: 0.1, 0.5, 2, 19
    assert est.within == {"10%": 0.25, "50%": 0.5, "100%": 0.5, "1000%": 0.75}


def test_json_ready_and_described() -> None:
    doc = json.loads(json.dumps(trace_stats(Trace(JOBS, "t", "t")).to_dict()))
    assert doc["features"]["recurrence_share"] == 0.4
    assert doc["features"]["estimate"]["within"]["1000%"] == 0.75
    rows = dict(describe(trace_stats(Trace(JOBS, "t", "t")).features))
    assert rows["groups"] == "3 (1 with 2+ jobs; recurrence share 40% of jobs)"
    assert rows["  within"] == "±10%: 25%, ±50%: 50%, ±100%: 50%, ±1000%: 75%"


def test_a_trace_without_features() -> None:
    stats = feature_stats([JobSpec("x", "MoE", 2, duration_s=5.0)], [5.0])
    assert (stats.users, stats.groups, stats.recurrence_share, stats.requested_share, stats.estimate) == (0, 0, 0.0, 0.0, None)
    assert dict(describe(stats))["estimates"] == "none (no job gives requested_s)"
    assert feature_stats([], []).recurrence_share == 0.0
    one = estimate_stats([2.0])
    assert one is not None and (one.ratio_median, one.ratio_p10, one.log_ratio_sigma) == (2.0, 2.0, 0.0)


def test_estimates_compare_with_the_isolated_run_time_of_jobs_given_in_samples() -> None:
    catalog = default_catalog()
    samples = catalog.reference_throughput("FSDP", 4) * 1000  # 1,000 s of work
    job = JobSpec("s", "FSDP", 4, total_samples=samples, requested_s=3000.0)
    est = trace_stats(Trace((job,), "t", "t"), catalog).features.estimate
    assert est is not None and est.ratio_median == pytest.approx(3.0)
