"""History-based orders for unknown durations: the Gittins index, the history forecast (QSSF's
predictor) and the orders built on them, hand-checked on tiny distributions."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.errors import DeepShareError
from deepshare.core.history import FinishedJob, JobHistory, history_from_jobs
from deepshare.core.information import UNKNOWN_PRIOR_S
from deepshare.core.types import JobSpec
from deepshare.core.view import JobView
from deepshare.policies.gittins import GITTINS_STEP, MIN_SERVICE_S, attained_bin, gittins_index
from deepshare.policies.order import gittins, qssf


def done(job_id: str, run_s: float, gpus: int = 1, **features) -> FinishedJob:
    return FinishedJob(job_id, "FSDP", gpus, run_s, **features)


def jv(job_id: str, gpus: int = 1, attained: float = 0.0, submit: float = 0.0, estimate: float | None = None,
       **features) -> JobView:
    return JobView(job_id, "FSDP", gpus, submit, 0.0, attained, "heavy", estimate_s=estimate, **features)


def at(history: JobHistory) -> SimpleNamespace:
    return SimpleNamespace(now=0.0, history=history)


def ranked(order, jobs, history) -> list[str]:
    return [j.job_id for j in sorted(jobs, key=order(at(history)))]


# -- the Gittins index -------------------------------------------------------------------------
def test_gittins_index_on_two_samples():
    s = np.array([1.0, 3.0])
    # a = 0: a quantum of 1 finishes half the jobs for 1 unit of expected service; one of 3
    # finishes all for an expected 2: both rates are 0.5
    assert gittins_index(s, 0.0) == 0.5
    assert gittins_index(s, 1.0) == 0.5  # only the 3 survives: 2 more units finish it surely
    assert gittins_index(s, 2.0) == 1.0
    assert gittins_index(s, 3.0) == 0.0  # outlived every finished job


def test_gittins_index_on_a_heavy_tail():
    s = np.array([1.0, 1.0, 10.0])
    assert gittins_index(s, 0.0) == pytest.approx(2 / 3)  # quantum 1: P = 2/3 for E[min(S, 1)] = 1
    assert gittins_index(s, 1.0) == pytest.approx(1 / 9)  # past the short ones only the 10 is left


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.5, 1e5), min_size=1, max_size=30), st.floats(0.0, 2e5))
def test_gittins_index_is_the_best_quantum_by_the_definition(samples, attained):
    s = np.sort(np.array(samples))
    left = s[s > attained]
    best = 0.0
    for quantum in np.unique(left - attained):
        p = np.mean(left - attained <= quantum)
        e = np.mean(np.minimum(left - attained, quantum))
        # at least MIN_SERVICE_S of service in all (samples a hair above ``attained``: 0.5 + 1e-16)
        best = max(best, p / (max(e * left.size, MIN_SERVICE_S) / left.size))
    assert gittins_index(s, attained) == pytest.approx(best, rel=1e-9)


def test_attained_service_is_binned_at_powers_of_the_step():
    assert attained_bin(0.0) == attained_bin(0.99) == 0.0
    assert attained_bin(1.0) == 1.0
    assert attained_bin(1.18) == 1.0 and attained_bin(1.2) == pytest.approx(GITTINS_STEP)
    assert attained_bin(16.0) == pytest.approx(16.0) and attained_bin(17.0) == pytest.approx(16.0)


def test_gittins_order_serves_the_likeliest_to_finish_first():
    history = JobHistory([done("a", 1.0), done("b", 1.0), done("c", 10.0)])  # GPU-service 1, 1, 10
    fresh, midway, outlived = jv("fresh", submit=3.0), jv("midway", attained=1.5, submit=1.0), jv("old", attained=12.0)
    assert ranked(gittins, [outlived, midway, fresh], history) == ["fresh", "midway", "old"]
    # nothing finished: every index is 0 and the order is LAS (least attained first)
    assert ranked(gittins, [outlived, midway, fresh], JobHistory()) == ["fresh", "midway", "old"]
    assert ranked(gittins, [jv("x", attained=5.0), jv("y", attained=2.0)], JobHistory()) == ["y", "x"]


def test_gittins_uses_two_dimensional_service():
    # jobs of 4 GPUs for 1 s and of 1 GPU for 10 s: service 4 and 10
    history = JobHistory([done("a", 1.0, gpus=4), done("b", 10.0)])
    assert history.service_samples().tolist() == [4.0, 10.0]


# -- the history forecast ----------------------------------------------------------------------
def test_forecast_takes_the_finest_level_with_enough_jobs():
    history = JobHistory([
        done("a", 100.0, 2, user="ann", group="g1"),
        done("b", 400.0, 2, user="ann"),
        done("c", 900.0, 2, user="ann"),
        done("d", 50.0, 4, user="bob", vc="vc1"),
        done("e", 200.0, 4, user="cy", vc="vc1"),
    ])
    f = history.forecast(2, user="ann", group="g1")
    assert (f.level, f.jobs, f.spread) == ("group", 1, 0.0) and f.run_s == pytest.approx(100.0)
    f = history.forecast(2, user="ann", group="g2")  # a new group: the user's 2-GPU jobs (3 of them)
    assert (f.level, f.jobs) == ("user+gpus", 3) and f.run_s == pytest.approx((100 * 400 * 900) ** (1 / 3))
    assert f.spread == pytest.approx(np.std(np.log([100.0, 400.0, 900.0])))
    f = history.forecast(4, user="ann")  # ann never ran 4 GPUs: her jobs of any size
    assert (f.level, f.jobs) == ("user", 3)
    f = history.forecast(4, user="dee", vc="vc1")  # an unknown user of vc1: vc1's 4-GPU jobs
    assert (f.level, f.jobs) == ("vc+gpus", 2) and f.run_s == pytest.approx(100.0)
    f = history.forecast(4, user="dee")
    assert (f.level, f.jobs) == ("gpus", 2)
    f = history.forecast(8)
    assert (f.level, f.jobs) == ("any", 5)
    assert JobHistory().forecast(2) is None


def test_forecast_and_service_forget_jobs_outside_the_window():
    history = JobHistory(window=2)
    for i, run_s in enumerate((10.0, 20.0, 40.0, 80.0)):
        history.add(done(f"j{i}", run_s, user="u"))
        history.forecast(1, "u")  # index as they come, so the window slides through removals
    f = history.forecast(1, "u")
    assert f.jobs == 2 and f.run_s == pytest.approx(math.sqrt(40.0 * 80.0))
    assert history.service_samples().tolist() == [40.0, 80.0]
    fresh = JobHistory(list(history), window=2)  # the same window read at once
    assert fresh.forecast(1, "u") == pytest.approx(f)


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.floats(1.0, 1e5), st.sampled_from(["u", "v"]), st.booleans()), min_size=1, max_size=40),
       window=st.integers(1, 6))
def test_a_long_history_keeps_at_most_two_windows_and_answers_as_its_window(runs, window):
    """Memory stays bounded in a long run; whether or not it was asked on the way, its answers are
    those of a history made from its last ``window`` jobs, and its version counts every job."""
    history = JobHistory(window=window)
    added = []
    for i, (run_s, user, ask) in enumerate(runs):
        added.append(done(f"j{i}", run_s, user=user, estimate_s=run_s * 2))
        history.add(added[-1])
        assert len(history) < 2 * window and history.version == i + 1
        if ask:
            history.forecast(1, user)
    fresh = JobHistory(added[-window:], window=window)
    assert list(history)[-window:] == added[-window:]
    for user in ("u", "v"):
        got, want = history.forecast(1, user), fresh.forecast(1, user)
        assert (got is None) == (want is None)
        if want is not None:  # moments kept by adding and taking out: equal up to rounding
            assert (got.level, got.jobs) == (want.level, want.jobs) and got.run_s == pytest.approx(want.run_s)
            assert got.spread == pytest.approx(want.spread, abs=1e-4)
    assert history.service_samples().tolist() == fresh.service_samples().tolist()
    got, want = history.estimate_error(), fresh.estimate_error()
    assert got.jobs == want.jobs and got.bias == pytest.approx(want.bias, abs=1e-9)
    assert got.spread == pytest.approx(want.spread, abs=1e-4)


def test_memo_is_emptied_when_the_history_grows():
    history = JobHistory()
    history.memo()["x"] = 1
    assert history.memo() == {"x": 1}
    history.add(done("a", 5.0))
    assert history.memo() == {}


def test_finished_jobs_are_checked():
    with pytest.raises(DeepShareError, match="run_s must be a positive number"):
        done("a", 0.0)
    with pytest.raises(DeepShareError, match="gpus must be a positive integer"):
        FinishedJob("a", "FSDP", 0, 1.0)
    with pytest.raises(DeepShareError, match="window must be a positive integer"):
        JobHistory(window=0)


def test_history_from_a_trace_of_past_jobs():
    jobs = [JobSpec("a", "FSDP", 2, 50.0, duration_s=100.0, user="u"), JobSpec("b", "FSDP", 2, 0.0, duration_s=300.0)]
    history = history_from_jobs(jobs)
    assert [(j.job_id, j.run_s, j.finish_s, j.user) for j in history] == [("a", 100.0, 150.0, "u"), ("b", 300.0, 300.0, None)]


# -- QSSF --------------------------------------------------------------------------------------
def test_qssf_orders_by_predicted_remaining_gpu_service():
    history = JobHistory([done("r1", 100.0, 2, group="short"), done("r2", 5000.0, 2, group="long")])
    jobs = [jv("long", 2, group="long"), jv("short", 2, group="short", submit=9.0),
            jv("half-done", 2, group="long", attained=9000.0)]
    # predicted remaining GPU-service: long 10,000; short 200; half-done 10,000 - 9,000 = 1,000
    assert ranked(qssf, jobs, history) == ["short", "half-done", "long"]
    key = qssf(at(history))
    assert key(jobs[1])[0] == pytest.approx(200.0)
    assert key(jobs[2])[0] == pytest.approx(1000.0)


def test_qssf_without_history_falls_back_to_the_estimate_then_the_prior():
    jobs = [jv("none", 1, submit=0.0), jv("small", 1, estimate=100.0, submit=5.0), jv("big", 1, estimate=9000.0)]
    key = qssf(at(JobHistory()))
    assert [key(j)[0] for j in jobs] == [UNKNOWN_PRIOR_S, 100.0, 9000.0]
    assert ranked(qssf, jobs, JobHistory()) == ["small", "none", "big"]


def test_estimate_error_is_the_bias_and_spread_of_log_run_over_estimate_in_the_window():
    history = JobHistory(window=3)
    assert history.estimate_error() == (0, 0.0, 0.0)
    for i, (run_s, estimate) in enumerate([(100.0, 50.0), (200.0, 400.0), (300.0, None), (800.0, 200.0)]):
        history.add(done(f"j{i}", run_s, estimate_s=estimate))
    jobs, bias, spread = history.estimate_error()  # the window: 200/400, (none), 800/200
    assert jobs == 2
    assert bias == pytest.approx((math.log(0.5) + math.log(4.0)) / 2)
    assert spread == pytest.approx(abs(math.log(4.0) - math.log(0.5)) / 2)
    with pytest.raises(DeepShareError, match="estimate_s must be a positive number"):
        done("x", 5.0, estimate_s=0.0)


def test_level_spread_pools_the_spread_within_the_keys_of_a_level():
    history = JobHistory([
        done("a", 100.0, group="g1"), done("b", 400.0, group="g1"),   # log-spread within g1: log 2
        done("c", 1000.0, group="g2"), done("d", 1000.0, group="g2"),  # within g2: 0
        done("e", 50.0, group="g3"),                                   # one run: no spread to pool
    ])
    # pooled: (2 x (log 2)^2 + 0) / ((2 - 1) + (2 - 1)) = (log 2)^2
    assert history.level_spread("group") == pytest.approx(math.log(2.0))
    assert history.level_spread("user") is None  # no job names a user
    assert history.level_spread("any") == pytest.approx(np.std(np.log([100, 400, 1000, 1000, 50]), ddof=1))


def test_the_belief_trusts_a_tight_group_over_a_loose_estimate():
    from deepshare.policies.posterior import belief

    # groups whose runs are alike (run times within 10%), and a job of g1 whose estimate says 10x less
    runs = [done(f"{g}-{i}", base * (1.1 if i % 2 else 1.0), group=g) for g, base in (("g1", 1000.0), ("g2", 5000.0))
            for i in range(4)]
    history = JobHistory(runs)
    mu, sigma = belief(jv("x", group="g1", estimate=100.0), history)
    assert math.log(900.0) < mu < math.log(1100.0) and sigma < 0.1  # the group wins: its spread is ~0.05
    mu, sigma = belief(jv("y", estimate=100.0), history)  # a one-off: the estimate and the population compromise
    assert math.log(100.0) < mu < math.log(2500.0)


def test_gittins_index_of_a_sample_a_hair_above_the_attained_service_is_bounded():
    # Found by the property above: 0.5 + 1e-16 over 0.5 attained would be a rate of 9e15.
    assert gittins_index(np.array([0.5000000000000001]), 0.5) == pytest.approx(1 / MIN_SERVICE_S)


def test_a_run_shorter_than_a_millisecond_counts_as_one_millisecond_in_the_forecast():
    """A history entry of 1e-20 s beside a year's run gave a log-space spread of 32, and the
    learned policies left a free cluster idle (review: a placement request's ``history``). The
    forecast takes such a run as 1 ms; runs of a millisecond and more are as they were."""
    from deepshare.core.history import MIN_RUN_S
    from deepshare.serving.engine import EngineSettings, PlacementEngine
    from deepshare.serving.samples import small_request
    from deepshare.serving.schemas import PlacementRequest

    def spread(run_s: float) -> float:
        history = JobHistory([FinishedJob("a", "FSDP", 2, run_s), FinishedJob("b", "FSDP", 2, 3.15e7)])
        return history.forecast(2).spread

    assert MIN_RUN_S == 1e-3 and spread(1e-20) == spread(1e-3) == pytest.approx(math.log(3.15e10) / 2)
    assert spread(60.0) == pytest.approx(math.log(3.15e7 / 60.0) / 2)
    body = small_request()  # 4 x 8-GPU nodes, 28 GPUs free, 3 pending jobs
    body["history"] = [{"gpus": 1, "run_s": 1e-20}, {"gpus": 8, "run_s": 3.15e7}]
    for policy in ("rl-base", "rl-hybrid-preempt"):
        response = PlacementEngine(EngineSettings(policy=policy)).place(PlacementRequest.model_validate(body))
        assert [d.action for d in response.decisions] == ["place"] * 3, policy
