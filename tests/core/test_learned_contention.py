"""Contention learned online: the closed-form fit, convergence to a known perturbation on a tiny
hand-checkable case, and that under ``learned`` nothing of the simulation's own model reaches a view.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.contention.learned import (
    EXPONENT_PRIOR_WEIGHT, SCALE_PRIOR_WEIGHT, ContentionLearner, LearnedContention, Observation, mean_abs_error,
)
from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.world import PerturbedContention, perturbation_factors, shipped_of
from deepshare.core.errors import DeepShareError
from deepshare.core.information import InformationModel
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import Decision, JobSpec, Launch, Placement
from deepshare.core.view import JobView
from deepshare.core.workloads import default_catalog

LEARNED = InformationModel("exact", contention_knowledge="learned", measurement_noise=0.0)
TWO_BY_TWO = Placement(((0, 2), (1, 2)))
FSDP_PAIR = 0.64  # the measured table: FSDP on 4 GPUs of 2 nodes beside another such FSDP job


def fsdp_jobs(arrival_c: float = 600.5) -> list[JobSpec]:
    """Two 4-GPU FSDP jobs at t=0 (run for days) and a 12-GPU job that arrives later and waits."""
    return [JobSpec("a", "FSDP", 4, 0.0, duration_s=1e6), JobSpec("b", "FSDP", 4, 0.0, duration_s=1e6),
            JobSpec("c", "FSDP", 12, arrival_c, duration_s=100.0)]


def run_to_c(world, information=LEARNED):
    """Launch a and b across both nodes at t=0; return the simulator and the view at c's arrival."""
    sim = Simulator(uniform(2, 8), fsdp_jobs(), world, information=information)
    first = sim.advance()
    assert [j.job_id for j in first.queued] == ["a", "b", "c"][: len(first.queued)]
    sim.apply(Decision(launch=(Launch("a", TWO_BY_TWO), Launch("b", TWO_BY_TWO))))
    view = sim.advance()
    assert view.now == 600.5 and [j.job_id for j in view.queued] == ["c"]
    return sim, view


# -- the fit ---------------------------------------------------------------------------------
def test_closed_form_fit_by_hand():
    learner = ContentionLearner()
    learner.observe("m", 1.0, 0.5)  # uncontended: informs the scale only
    a = math.log(0.5) / (1 + SCALE_PRIOR_WEIGHT)
    assert learner.fit("m").log_scale == pytest.approx(a) and learner.fit("m").exponent == 1.0
    learner.observe("m", 0.8, 0.5 * 0.6)  # contended, at half the isolated speed
    x, y = math.log(0.8), math.log(0.3)
    theta = (EXPONENT_PRIOR_WEIGHT + x * (y - a)) / (EXPONENT_PRIOR_WEIGHT + x * x)
    fit = learner.fit("m")
    assert fit.exponent == pytest.approx(theta) and fit.observations == 2 and fit.contended == 1
    assert learner.correct("m", 0.8) == pytest.approx(0.8 ** theta)
    assert learner.correct("m", 1.0) == 1.0 and learner.correct("other", 0.8) == 0.8  # prior elsewhere
    assert learner.throughput("m", 100.0, 0.8) == pytest.approx(100.0 * math.exp(a) * 0.8 ** theta)
    # a refit from raw observations gives the same numbers
    again = ContentionLearner()
    again.fit_all([Observation("m", 1.0, 0.5), Observation("m", 0.8, 0.3)])
    assert again.fit("m") == fit
    assert mean_abs_error([Observation("m", 0.8, 0.3)], None) == pytest.approx(0.5)
    assert mean_abs_error([Observation("m", 0.8, 0.3)], again) == pytest.approx(abs(0.8 ** theta - 0.3))


@settings(max_examples=60, deadline=None)
@given(st.floats(0.05, 0.99), st.floats(0.2, 5.0), st.integers(1, 200))
def test_noise_free_reports_pull_the_exponent_to_the_truth(prior, truth, n):
    learner = ContentionLearner()
    learner.observe_sums("m", n, math.log(prior), n * truth * math.log(prior))
    s = n * math.log(prior) ** 2
    assert learner.fit("m").exponent == pytest.approx((EXPONENT_PRIOR_WEIGHT + truth * s) / (EXPONENT_PRIOR_WEIGHT + s))
    # always between the prior's 1 and the truth, closer with every report
    lo, hi = sorted((1.0, truth))
    assert lo - 1e-12 <= learner.fit("m").exponent <= hi + 1e-12


# -- a world to learn ------------------------------------------------------------------------
def test_perturbation_factors_are_seeded_uniform_draws_in_sorted_order():
    f = perturbation_factors(["b", "a", "c"], 0.5, 3)
    draws = np.random.default_rng(3).uniform(0.5, 1.5, 3)
    assert f == {"a": draws[0], "b": draws[1], "c": draws[2]}
    assert perturbation_factors(["a"], 0.0, 9) == {"a": 1.0}
    with pytest.raises(DeepShareError, match="--perturb-contention"):
        perturbation_factors(["a"], 1.0, 0)


def test_perturbing_the_none_model_is_refused_as_it_has_no_contention_to_perturb():
    """`--contention none --perturb-contention 0.3` ran the unperturbed world without a word."""
    with pytest.raises(DeepShareError, match="'none' model predicts no contention"):
        PerturbedContention(make_contention("none"), 0.3)
    PerturbedContention(make_contention("profiled"), 0.3)  # a model with contention is perturbed


def test_a_perturbed_profiled_world_raises_a_victims_ratios_to_its_factor():
    shipped = make_contention("profiled")
    world = PerturbedContention(shipped, 0.0, given=(("FSDP", 1.5),))
    assert shipped_of(world) is shipped
    state = world.new_state(uniform(2, 8), default_catalog())
    state.add(RunningJob("a", "FSDP", 4, TWO_BY_TWO))
    state.add(RunningJob("b", "FSDP", 4, TWO_BY_TWO))
    assert state.ratio("a") == pytest.approx(FSDP_PAIR ** 1.5)


def test_a_perturbed_link_world_keeps_the_shipped_models_settings_and_scale():
    """The world was rebuilt as a bare LinkState with the factors as its catalog's scale: it
    dropped the shipped model's hardware_scaling=False (an H100 job ran at H100 speed, so its
    communication weighed far more) and replaced a scale the shipped catalog had instead of
    multiplying it."""
    from dataclasses import replace

    from deepshare.core.contention.link import LinkContention, default_link_catalog
    from deepshare.core.topology import load_topology

    def ratios(model, topology, placement):
        state = model.new_state(topology, default_catalog())
        state.add(RunningJob("a", "FSDP", placement.total_gpus, placement))
        state.add(RunningJob("b", "FSDP", placement.total_gpus, placement))
        return state.ratio("a"), state.ratio("b")

    h100 = load_topology("h100-64")
    eight = Placement(((0, 4), (1, 4)))
    reference = LinkContention(hardware_scaling=False)
    assert ratios(PerturbedContention(reference, 0.0), h100, eight) == ratios(reference, h100, eight)
    assert ratios(reference, h100, eight) != ratios(LinkContention(), h100, eight)  # the flag matters here
    links = default_link_catalog()
    scaled = LinkContention(replace(links, scale={"FSDP": 2.0}))
    world = PerturbedContention(scaled, 0.0, given=(("FSDP", 1.5),))
    truth = LinkContention(replace(links, scale={"FSDP": 3.0}))
    assert ratios(world, uniform(2, 8), TWO_BY_TWO) == ratios(truth, uniform(2, 8), TWO_BY_TWO)
    assert ratios(truth, uniform(2, 8), TWO_BY_TWO) != ratios(LinkContention(replace(links, scale={"FSDP": 1.5})),
                                                              uniform(2, 8), TWO_BY_TWO)


def test_learned_converges_to_a_known_perturbation_tiny_case():
    # a and b (FSDP, 4 GPUs over 2 nodes) share both nodes: the shipped table says 0.64 each; the
    # world runs them at 0.64 ** 1.5. Noise-free reports every 60 s from t=60: by c's arrival at
    # 600.5 each has reported 10 times, 20 contended reports at x = ln 0.64.
    world = PerturbedContention(make_contention("profiled"), 0.0, given=(("FSDP", 1.5),))
    sim, view = run_to_c(world)
    s = 20 * math.log(FSDP_PAIR) ** 2
    theta = (EXPONENT_PRIOR_WEIGHT + 1.5 * s) / (EXPONENT_PRIOR_WEIGHT + s)
    assert theta == pytest.approx(1.4705, abs=1e-4)
    fit = sim.knowledge.learner.fit("FSDP")
    assert fit.exponent == pytest.approx(theta) and fit.observations == 20 and fit.log_scale == 0.0
    assert [j.ratio for j in view.running] == pytest.approx([FSDP_PAIR ** theta] * 2)
    # a policy that asks about a third such job beside them gets the learned answer
    c = next(iter(view.queued))
    d = JobView("d", "FSDP", 4, 0.0, 1.0, 0.0, c.comm_class)
    assert view.predict(d, TWO_BY_TWO, ()).ratio == pytest.approx(FSDP_PAIR ** theta)
    # and with many more reports the fit reaches the truth
    learner = sim.knowledge.learner
    learner.observe_sums("FSDP", 10_000, math.log(FSDP_PAIR), 10_000 * 1.5 * math.log(FSDP_PAIR))
    assert learner.fit("FSDP").exponent == pytest.approx(1.5, abs=1e-3)
    assert view.predict(d, TWO_BY_TWO, ()).ratio == pytest.approx(FSDP_PAIR ** 1.5, abs=1e-3)


# -- nothing of the world reaches a view -----------------------------------------------------
@pytest.mark.parametrize("kind", ["profiled", "link"])
def test_views_under_learned_carry_nothing_of_the_simulations_own_model(kind):
    # No report before c arrives (report_s > 600.5): the learned model is the prior alone, so two
    # worlds as different as can be give identical views, predictions included; under exact the
    # views carry each world's truth and differ.
    info = InformationModel("exact", contention_knowledge="learned", report_s=1000.0)
    shipped = make_contention(kind)
    worlds = [PerturbedContention(shipped, 0.0, given=(("FSDP", f),)) for f in (0.3, 3.0)]
    seen = []
    for world in worlds:
        sim, view = run_to_c(world, info)
        c = next(iter(view.queued))
        d = JobView("d", "FSDP", 4, 0.0, 1.0, 0.0, c.comm_class)
        prediction = view.predict(d, TWO_BY_TWO, ())
        seen.append(([j.ratio for j in view.running], prediction.ratio, dict(prediction.others), dict(view.link_load)))
        assert sim._state.ratio("a") != view.running[0].ratio  # the world's ratio is not what the view shows
    assert seen[0][:3] == seen[1][:3]
    prior = shipped.new_state(uniform(2, 8), default_catalog())
    prior.add(RunningJob("a", "FSDP", 4, TWO_BY_TWO))
    prior.add(RunningJob("b", "FSDP", 4, TWO_BY_TWO))
    assert seen[0][0] == [prior.ratio("a"), prior.ratio("b")]
    assert seen[0][1] == prior.predict(RunningJob("d", "FSDP", 4, TWO_BY_TWO)).ratio
    if kind == "link":  # the simulated probe reads the world's links: the one thing that differs
        assert seen[0][3] and set(seen[0][3]) == set(seen[1][3]) and seen[0][3] != seen[1][3]
    exact = [run_to_c(w, InformationModel("exact"))[1] for w in worlds]
    assert [j.ratio for j in exact[0].running] != [j.ratio for j in exact[1].running]
    assert dict(exact[0].link_load) == {}  # exact runs keep today's empty link load


def test_a_running_jobs_true_length_does_not_reach_the_learned_model_through_its_stale_completions():
    """Two worlds differ only in a's true length (the same estimate, arrivals and decisions; nothing
    finishes before c arrives at t=5000). b's start re-rates a, leaving a completion event at a's
    old finish time, which falls before 5000 in one world only. Reports are taken at live events
    alone, so with noisy reports both views at t=5000 are identical (reports taken at the stale
    completion too were split into other batches, other noise draws: the ratios differed in the
    7th digit)."""
    info = InformationModel("estimated", 1.0, 0, contention_knowledge="learned", report_s=60.0, measurement_noise=0.05)
    world = PerturbedContention(make_contention("profiled"), 0.0, given=(("FSDP", 3.0),))
    seen = []
    for a_length in (3000.0, 6000.0):
        jobs = [JobSpec("a", "FSDP", 4, 0.0, duration_s=a_length, requested_s=50_000.0),
                JobSpec("b", "FSDP", 4, 100.0, duration_s=1e6, requested_s=50_000.0),
                JobSpec("c", "FSDP", 12, 5000.0, duration_s=100.0, requested_s=100.0)]
        sim = Simulator(uniform(2, 8), jobs, world, information=info)
        for job_id, at in (("a", 0.0), ("b", 100.0)):
            view = sim.advance()
            assert view is not None and view.now == at
            sim.apply(Decision(launch=(Launch(job_id, TWO_BY_TWO),)))
        view = sim.advance()
        assert view is not None and view.now == 5000.0 and not view.history
        d = JobView("d", "FSDP", 4, 0.0, 1.0, 0.0, "heavy")
        seen.append(([(j.job_id, j.remaining_s, j.ratio) for j in view.running], view.predict(d, TWO_BY_TWO, ()).ratio))
    assert seen[0] == seen[1]
    prior = make_contention("profiled").new_state(uniform(2, 8), default_catalog())
    prior.add(RunningJob("a", "FSDP", 4, TWO_BY_TWO))
    prior.add(RunningJob("b", "FSDP", 4, TWO_BY_TWO))
    assert seen[0][0][0][2] != prior.ratio("a")  # the reports moved the model: the noise was drawn


def test_learned_runs_are_deterministic_under_a_seed():
    world = PerturbedContention(make_contention("profiled"), 0.5, seed=4)
    info = InformationModel("exact", estimate_seed=2, contention_knowledge="learned")
    jobs = [JobSpec(f"j{i}", ("FSDP", "MoE", "DLRM")[i % 3], 4 + 4 * (i % 3), 200.0 * i, duration_s=3000.0 + 500 * i)
            for i in range(24)]
    from deepshare.policies import make_policy

    runs = []
    for _ in range(2):
        sim = Simulator(uniform(4, 8), jobs, world, information=info)
        report = sim.run(make_policy("las+spread"))
        runs.append((report.avg_jct_s, sim.knowledge.learner.fits, len(sim.knowledge.log)))
    assert runs[0] == runs[1]
    assert any(f.contended for f in runs[0][1].values())


def test_learned_state_forwards_add_remove_and_isolation():
    shipped = make_contention("profiled")
    learner = ContentionLearner()
    learner.observe_sums("FSDP", 100, math.log(FSDP_PAIR), 100 * 2.0 * math.log(FSDP_PAIR))
    state = LearnedContention(shipped, learner).new_state(uniform(2, 8), default_catalog())
    assert state.isolated(Placement(((0, 4),)))  # the prior's: a single node neither suffers nor causes
    state.add(RunningJob("a", "FSDP", 4, TWO_BY_TWO))
    p = state.predict(RunningJob("b", "FSDP", 4, TWO_BY_TWO))
    theta = learner.fit("FSDP").exponent
    assert p.ratio == pytest.approx(FSDP_PAIR ** theta)
    assert p.others == {"a": pytest.approx(FSDP_PAIR ** theta)} and p.others_loss == pytest.approx(1 - FSDP_PAIR ** theta)
    state.add(RunningJob("b", "FSDP", 4, TWO_BY_TWO))
    assert state.ratio("a") == pytest.approx(FSDP_PAIR ** theta) and state.prior_ratio("a") == FSDP_PAIR
    state.remove("b")
    assert state.ratio("a") == 1.0


# -- link loads: what the simulated probe reads, and load no job explains ---------------------
def test_link_loads_and_background_on_the_link_model():
    link = make_contention("link")
    topo = uniform(2, 8)
    state = link.new_state(topo, default_catalog())
    state.add(RunningJob("a", "FSDP", 4, TWO_BY_TWO))
    alone = state.link_loads()
    assert set(alone) == {"node0/nic", "node1/nic", "node0/pcie", "node1/pcie"}
    assert all(0 < v <= 1 for v in alone.values())
    state.add(RunningJob("b", "FSDP", 4, TWO_BY_TWO))
    shared = state.link_loads()
    assert shared["node0/nic"] > alone["node0/nic"] and shared["node0/nic"] <= 1 + 1e-9
    # unmanaged traffic on node0's NIC slows a job that crosses it, not one that stays on node 1
    quiet = link.new_state(topo, default_catalog())
    busy = LearnedContention(link, ContentionLearner(), {"node0/nic": 0.6, "nowhere/nic": 1.0}).new_state(topo, default_catalog())
    across = RunningJob("x", "FSDP", 4, TWO_BY_TWO)
    assert busy.predict(across).ratio < quiet.predict(across).ratio
    inside = RunningJob("y", "FSDP", 4, Placement(((1, 4),)))
    assert busy.predict(inside).ratio == quiet.predict(inside).ratio
    state = link.new_state(topo, default_catalog())
    state.add(across)
    with pytest.raises(DeepShareError, match="before any job"):
        state.set_background({"node0/nic": 0.5})


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 1.0), st.floats(0.01, 2.0)), min_size=1, max_size=30),
       st.floats(0.001, 1.0), st.floats(0.001, 1.0))
def test_learned_ratios_stay_in_range_and_keep_the_priors_order(reports, r1, r2):
    learner = ContentionLearner()
    learner.fit_all(Observation("m", prior, measured) for prior, measured in reports)
    lo, hi = sorted((r1, r2))
    a, b = learner.correct("m", lo), learner.correct("m", hi)
    assert 0 < a <= b <= 1  # a more contended prior stays more contended
    assert learner.correct("m", 1.0) == 1.0
