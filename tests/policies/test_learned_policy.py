"""RL-base and RL-hybrid decision logic with hand-made scorers (no trained network needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology
from deepshare.core.traces import load
from deepshare.core.types import JobSpec
from deepshare.policies import make_policy
from deepshare.policies.encoding import WAIT_INDEX, EncodingConfig
from deepshare.policies.learned import HybridRules, LearnedPolicy

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
ENCODING = EncodingConfig()


def always_wait(obs):
    scores = np.zeros(len(obs["action_mask"]))
    scores[WAIT_INDEX] = 1.0
    return scores


def first_launch(obs):
    return -np.arange(len(obs["action_mask"]), dtype=float) + np.where(np.arange(len(obs["action_mask"])) == 0, -100, 0)


def run(policy):
    sim = Simulator(load_topology("testbed"), load(TRACE).jobs, make_contention("profiled"))
    return sim.run(policy)


def test_rl_base_that_always_waits_still_finishes_because_waits_on_an_idle_cluster_are_masked():
    report = run(LearnedPolicy("rl-base", always_wait, ENCODING))
    assert report.finished == 256
    assert report.gpu_util < 0.5  # it only launches when the cluster is wholly idle


def test_rl_hybrid_safety_net_fills_the_cluster_when_the_scorer_waits():
    base = run(LearnedPolicy("rl-base", always_wait, ENCODING))
    hybrid = run(LearnedPolicy("rl-hybrid", always_wait, ENCODING, HybridRules()))
    assert hybrid.finished == 256
    assert hybrid.gpu_util > 0.9 > base.gpu_util
    assert hybrid.avg_jct_s < base.avg_jct_s


def test_a_scorer_that_always_launches_keeps_the_cluster_busy():
    report = run(LearnedPolicy("rl-base", first_launch, ENCODING))
    assert report.finished == 256 and report.gpu_util > 0.9


def test_hybrid_rules_that_never_fire_make_hybrid_equal_base():
    never = HybridRules(min_ratio=2.0, utilisation_floor=0.0)
    a = run(LearnedPolicy("x", first_launch, ENCODING, never))
    b = run(LearnedPolicy("x", first_launch, ENCODING))
    assert a.to_dict() == b.to_dict()


# -- the anchor heuristic (srsf+packed): offered as a candidate, the safety net's fallback ------
def same_report(a, b) -> None:
    """Equal reports but for the policy name (floats to the last few ulps: the order in which
    the launches of one decision are re-rated differs)."""
    import pytest

    da, db = a.to_dict(), b.to_dict()
    del da["policy"], db["policy"]
    unset = sorted(k for k, v in da.items() if v is None)  # e.g. no large gangs: nothing to average
    assert unset == sorted(k for k, v in db.items() if v is None)
    assert {k: v for k, v in da.items() if v is not None} == pytest.approx(
        {k: v for k, v in db.items() if v is not None}, rel=1e-12)
    assert [(r.job_id, r.first_start_s) for r in a.records] == [(r.job_id, r.first_start_s) for r in b.records]


def pick_anchor_row(obs):
    """Row 1 (the anchor's pick) when it is offered, else wait."""
    scores = np.zeros(len(obs["action_mask"]))
    scores[1] = 1.0
    return scores


def test_rl_hybrid_that_always_waits_is_exactly_the_anchor_heuristic():
    from deepshare.policies import make_policy

    packed = ("srsf", "packed")
    hybrid = run(LearnedPolicy("x", always_wait, ENCODING, HybridRules(min_ratio=0.0, anchor=packed)))
    heuristic = run(make_policy("srsf+packed"))
    same_report(hybrid, heuristic)
    # with the default thresholds it also waits where the pick would be slowed down (ratio < 0.9)
    gated = run(LearnedPolicy("x", always_wait, ENCODING, HybridRules(anchor=packed)))
    assert gated.finished == 256 and gated.avg_slowdown < heuristic.avg_slowdown


def test_the_default_safety_net_is_srsf_uncontended_whose_picks_pass_its_own_gate():
    from deepshare.policies import make_policy

    assert HybridRules().anchor == ("srsf", "uncontended")
    heuristic = run(make_policy("srsf+uncontended"))
    same_report(run(LearnedPolicy("x", always_wait, ENCODING, HybridRules(min_ratio=0.0))), heuristic)
    # uncontended launches only at a predicted ratio >= 0.9 (or on an idle cluster, utilisation 0)
    same_report(run(LearnedPolicy("x", always_wait, ENCODING, HybridRules())), heuristic)


def test_a_scorer_that_takes_the_anchor_row_imitates_the_heuristic():
    from deepshare.policies import make_policy

    base = run(LearnedPolicy("x", pick_anchor_row, ENCODING))
    heuristic = run(make_policy("srsf+packed"))
    same_report(base, heuristic)


def test_row_one_is_the_anchor_heuristics_next_launch_at_every_decision_point():
    from deepshare.policies import make_policy
    from deepshare.policies.encoding import PartialDecision, encode

    heuristic = make_policy("srsf+packed")
    sim = Simulator(load_topology("testbed"), load(TRACE).jobs[:80], make_contention("profiled"))
    checked = 0
    while (view := sim.advance()) is not None:
        decision = heuristic.decide(view)
        obs, rows = encode(PartialDecision(view), ENCODING)
        if decision.launch:
            first = decision.launch[0]
            assert (rows[1].job.job_id, rows[1].placement) == (first.job_id, first.placement)
            checked += 1
        sim.apply(decision)
    assert checked > 20
    # without an anchor the rows are the generators' only
    plain = EncodingConfig(anchor=None)
    assert plain.anchor is None and EncodingConfig().anchor == ("srsf", "packed")


def test_bad_anchor_is_refused():
    import pytest

    for anchor in (("srsf",), ("nope", "packed"), ("srsf", "nowhere")):
        with pytest.raises(ValueError):
            EncodingConfig(anchor=anchor)


@pytest.mark.parametrize("name", ["rl-base", "rl-hybrid", "rl-hybrid-preempt"])
def test_learned_policies_decide_while_no_gpu_node_is_up(name):
    """An autoscaler with min_nodes 0 has no GPU up at the first arrival: the encoding's and the
    safety net's utilisation divided by the view's total GPUs, 0 there (ZeroDivisionError)."""
    from deepshare.core.autoscaling import AutoscaleSpec, simulate_autoscaled

    spec = AutoscaleSpec.model_validate({"name": "t", "idle_timeout_s": 100.0, "node_types": {
        "a": {"gpus": 4, "price_usd_per_hour": 1.0, "min_nodes": 0, "max_nodes": 2, "provisioning_s": 60.0}}})
    jobs = [JobSpec("j0", "MobileNetV3", 2, 0.0, duration_s=100.0)]
    report, _ = simulate_autoscaled(spec, jobs, make_policy(name), "demand", make_contention("profiled"))
    assert report.metrics.finished == 1
