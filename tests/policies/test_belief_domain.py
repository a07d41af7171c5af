"""The belief and Gittins maths are total on the documented domain (issue 35): whatever run times
a history holds for one group, user or size (a nanosecond beside a year), whatever the estimates
and the time a job has run, the expected remaining time is a finite number of seconds from
``ESTIMATE_FLOOR_S`` to a year, and the Gittins index is finite."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.bounds import MAX_DURATION_S, MAX_GPU_SERVICE_S, MAX_JOB_GPUS
from deepshare.core.history import FinishedJob, JobHistory
from deepshare.core.information import ESTIMATE_FLOOR_S
from deepshare.core.view import JobView
from deepshare.policies.gittins import gittins_index
from deepshare.policies.posterior import belief, expected_remaining_s, remaining_given_ran

durations = st.one_of(st.sampled_from([5e-324, 1e-10, 1.0, MAX_DURATION_S]),
                      st.floats(min_value=5e-324, max_value=MAX_DURATION_S, allow_nan=False))
ran = st.one_of(st.sampled_from([0.0, 5e-324, MAX_DURATION_S, MAX_GPU_SERVICE_S]),
                st.floats(min_value=0.0, max_value=MAX_GPU_SERVICE_S, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(runs=st.lists(st.tuples(durations, st.none() | durations, st.sampled_from(["g", "h", None]),
                               st.sampled_from([1, 8, MAX_JOB_GPUS])), min_size=0, max_size=12),
       estimate=st.none() | durations, ran_s=ran, gpus=st.sampled_from([1, 8, MAX_JOB_GPUS]))
def test_expected_remaining_is_finite_and_within_a_year(runs, estimate, ran_s, gpus):
    history = JobHistory([FinishedJob(f"h{i}", "m", g, run, 0.0, "u", group, "v", est)
                          for i, (run, est, group, g) in enumerate(runs)])
    job = JobView("j", "m", gpus, 0.0, 60.0, ran_s * gpus, "c", estimate_s=estimate, user="u", group="g", vc="v")
    mu, sigma = belief(job, history)
    assert math.isfinite(mu) and 0 < sigma < math.inf
    left = expected_remaining_s(job, history)
    assert ESTIMATE_FLOOR_S <= left <= MAX_DURATION_S


def test_the_issues_history_spread_no_longer_overflows():
    """The reported case: one group's run times from 1e-10 s to a year, a job that has not run."""
    history = JobHistory([FinishedJob(f"h{i}", "m", 1, run, 0.0, group="g") for i, run in enumerate([1e-10, MAX_DURATION_S] * 3)])
    job = JobView("j", "m", 1, 0.0, 60.0, 0.0, "c", estimate_s=MAX_DURATION_S, group="g")
    assert ESTIMATE_FLOOR_S <= expected_remaining_s(job, history) <= MAX_DURATION_S
    assert remaining_given_ran(700.0, 50.0, 0.0) == MAX_DURATION_S  # past the domain: capped, not an overflow


@given(st.lists(durations, min_size=1, max_size=20), st.floats(min_value=0.0, max_value=MAX_GPU_SERVICE_S))
def test_gittins_index_is_finite(samples, attained):
    assert math.isfinite(gittins_index(np.sort(np.array(samples) * 8), attained))
