"""The information model: what a policy's views carry of job lengths, and that they carry nothing more.

Under ``estimated`` and ``unknown`` a view must carry no true remaining work: two traces that
differ only in their jobs' true lengths must give identical views (and so identical decisions)
until a job finishes, which is the first moment a live cluster learns anything of a length.
"""

from __future__ import annotations

import math
from dataclasses import astuple, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.information import (
    ESTIMATE_FLOOR_S, UNKNOWN_PRIOR_S, InformationModel, believed_remaining_s, within,
)
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.policies import make_policy


def test_believed_remaining_counts_down_from_the_estimate_to_a_floor():
    assert believed_remaining_s(1000.0, 300.0) == 700.0
    assert believed_remaining_s(1000.0, 990.0) == ESTIMATE_FLOOR_S == 60.0
    assert believed_remaining_s(None, 600.0) == UNKNOWN_PRIOR_S - 600.0 == 3000.0
    assert believed_remaining_s(None, 1e9) == ESTIMATE_FLOOR_S


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"durations": "oracle"}, "durations must be one of exact, estimated, unknown"),
        ({"durations": "estimated", "estimate_error": -0.1}, "estimate_error must be a number from 0 to 5"),
        ({"durations": "estimated", "estimate_error": 6}, "estimate_error must be a number from 0 to 5"),
        ({"durations": "estimated", "estimate_error": True}, "estimate_error"),
        ({"durations": "estimated", "estimate_seed": -1}, "estimate_seed must be a non-negative integer"),
    ],
)
def test_bad_information_models_are_refused_naming_the_field(kwargs, message):
    with pytest.raises(DeepShareError, match=message):
        InformationModel(**kwargs)


def test_estimates_use_requested_s_else_a_seeded_lognormal_draw():
    jobs = [JobSpec("a", "FSDP", 2, duration_s=100.0), JobSpec("b", "FSDP", 2, duration_s=100.0, requested_s=250.0),
            JobSpec("c", "FSDP", 2, duration_s=400.0)]
    model = InformationModel("estimated", 1.0, 7)
    z = np.random.default_rng(7).standard_normal(3)  # one draw per job, in trace order
    assert model.estimates(jobs, [100.0, 100.0, 400.0]) == [100.0 * math.exp(z[0]), 250.0, 400.0 * math.exp(z[2])]
    # a limit on one job leaves the others' estimates as they were
    without = [replace(j, requested_s=None) for j in jobs]
    assert model.estimates(without, [100.0, 100.0, 400.0])[::2] == model.estimates(jobs, [100.0, 100.0, 400.0])[::2]
    assert InformationModel("estimated", 0.0).estimates(without, [100.0, 100.0, 400.0]) == [100.0, 100.0, 400.0]
    assert InformationModel("unknown").estimates(jobs, [100.0, 100.0, 400.0]) == [None, None, None]
    assert InformationModel("estimated", 1.0, 8).estimates(without, [1.0] * 3) != model.estimates(without, [1.0] * 3)


def test_the_documented_error_of_sigma_one():
    """The figures the module doc compares with the Helios predictor's error."""
    assert round(within(0.1, 1.0), 2) == 0.08
    assert round(within(0.5, 1.0), 2) == 0.41
    assert round(within(1.0, 1.0), 2) == 0.76
    assert round(within(9.0, 1.0), 2) == 0.99
    draws = np.exp(np.random.default_rng(0).standard_normal(200_000))
    assert np.mean(np.abs(draws - 1) <= 0.5) == pytest.approx(within(0.5, 1.0), abs=0.005)


def _sim(jobs, durations="estimated", contention="none", seed=0, nodes=1, gpus=4):
    return Simulator(uniform(nodes, gpus), jobs, make_contention(contention),
                     information=InformationModel(durations, 1.0, seed))


def test_views_count_down_from_the_estimate_hand_checked():
    # one 4-GPU node, no contention: a runs 1,000 s but asked for 400; b waits behind it
    jobs = [JobSpec("a", "FSDP", 4, duration_s=1000.0, requested_s=400.0),
            JobSpec("b", "FSDP", 4, 10.0, duration_s=50.0)]
    sim = _sim(jobs, seed=3)
    view = sim.advance()
    assert view.durations == "estimated" and len(view.history) == 0
    (a,) = view.queued
    assert (a.remaining_s, a.estimate_s) == (400.0, 400.0)
    sim.apply(make_policy("fifo+consolidated").decide(view))
    view = sim.advance()  # b arrives at t = 10
    (b,) = view.queued
    (a,) = view.running
    assert a.remaining_s == 390.0 and a.ran_s == 10.0  # 400 - 10 s run, the truth (990 s) unseen
    b_estimate = 50.0 * math.exp(np.random.default_rng(3).standard_normal(2)[1])
    assert b.estimate_s == pytest.approx(b_estimate, rel=1e-12) and b.remaining_s == pytest.approx(max(b_estimate, 60.0))
    sim.apply(make_policy("fifo+consolidated").decide(view))  # the node is full: b waits
    view = sim.advance()  # a finishes at its true 1,000 s: the history learns its length then
    assert view.now == 1000.0 and [(h.job_id, h.run_s, h.finish_s) for h in view.history] == [("a", 1000.0, 1000.0)]
    sim.apply(make_policy("fifo+consolidated").decide(view))
    assert sim.advance() is None
    assert [(h.job_id, h.run_s) for h in sim.history] == [("a", 1000.0), ("b", 50.0)]


def test_unknown_views_show_the_flat_prior_and_no_estimate():
    jobs = [JobSpec("a", "FSDP", 4, duration_s=1000.0, requested_s=400.0)]
    (a,) = _sim(jobs, "unknown").advance().queued
    assert (a.remaining_s, a.estimate_s) == (UNKNOWN_PRIOR_S, None)


def test_exact_views_carry_the_truth_and_the_estimate():
    jobs = [JobSpec("a", "FSDP", 4, duration_s=1000.0, requested_s=400.0)]
    (a,) = _sim(jobs, "exact").advance().queued
    assert (a.remaining_s, a.estimate_s) == (1000.0, 400.0)


class Recorder:
    """A policy that records every view it gets (its jobs' fields, free GPUs, history length)
    and decides as ``inner``."""

    def __init__(self, inner: str) -> None:
        self.inner = make_policy(inner)
        self.name = inner
        self.views: list[tuple] = []

    def decide(self, view):
        jobs = tuple(astuple(j) for j in (*view.queued, *view.running))
        self.views.append((view.now, view.free, jobs, len(view.history)))
        return self.inner.decide(view)


def _before_first_completion(views: list[tuple]) -> list[tuple]:
    return [v for v in views if v[-1] == 0]


JOBS = st.lists(
    st.tuples(st.sampled_from([1, 2, 4]), st.floats(0.0, 3000.0), st.floats(10.0, 20_000.0), st.floats(10.0, 20_000.0),
              st.floats(30.0, 20_000.0)),
    min_size=2, max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JOBS, st.sampled_from(["estimated", "unknown"]), st.sampled_from(["srsf+consolidated+preempt", "qssf+packed",
                                                                        "rl-hybrid", "srtf+uncontended"]))
def test_views_carry_no_true_length_until_a_job_finishes(rows, durations, policy):
    """Two traces that differ only in true lengths give identical views and decisions until the
    first completion; under exact they do not (the check can tell)."""
    def trace(which: int) -> list[JobSpec]:
        return [JobSpec(f"j{i}", "FSDP" if i % 2 else "MoE", gpus, submit, duration_s=(a, b)[which], requested_s=req)
                for i, (gpus, submit, a, b, req) in enumerate(rows)]

    seen = []
    for which in (0, 1):
        recorder = Recorder(policy)
        _sim(trace(which), durations, contention="profiled", nodes=2).run(recorder)
        seen.append(_before_first_completion(recorder.views))
    shorter = min(len(seen[0]), len(seen[1]))  # the first completion may come at a different decision
    assert seen[0][:shorter] == seen[1][:shorter]


def test_exact_views_differ_where_true_lengths_differ():
    jobs = [JobSpec("a", "FSDP", 4, duration_s=1000.0), JobSpec("b", "FSDP", 4, 5.0, duration_s=100.0)]
    views = []
    for scale in (1.0, 2.0):
        recorder = Recorder("srsf+consolidated")
        _sim([replace(j, duration_s=j.duration_s * scale) for j in jobs], "exact").run(recorder)
        views.append(recorder.views[0])
    assert views[0] != views[1]


def test_history_holds_only_jobs_finished_by_the_view():
    jobs = [JobSpec(f"j{i}", "FSDP", 2, 100.0 * i, duration_s=300.0 + 50 * i, user=f"u{i % 2}") for i in range(8)]

    class Check(Recorder):
        def decide(self, view):
            assert all(h.finish_s <= view.now for h in view.history)
            ids = {j.job_id for j in (*view.queued, *view.running)}
            assert not ids & {h.job_id for h in view.history}
            return super().decide(view)

    policy = Check("qssf+consolidated")
    _sim(jobs, nodes=1, gpus=2).run(policy)
    assert [v[-1] for v in policy.views] == sorted(v[-1] for v in policy.views) and policy.views[-1][-1] > 0


def test_the_same_seed_gives_the_same_run_and_another_seed_other_estimates():
    jobs = [JobSpec(f"j{i}", "MoE", 2 * (1 + i % 3), 60.0 * i, duration_s=500.0 + 97 * i) for i in range(20)]
    a = _sim(jobs, seed=1, contention="profiled", nodes=2, gpus=8).run(make_policy("srsf+packed+preempt"))
    b = _sim(jobs, seed=1, contention="profiled", nodes=2, gpus=8).run(make_policy("srsf+packed+preempt"))
    c = _sim(jobs, seed=2, contention="profiled", nodes=2, gpus=8).run(make_policy("srsf+packed+preempt"))
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != c.to_dict()
