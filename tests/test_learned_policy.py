"""RL-base and RL-hybrid decision logic with hand-made scorers (no trained network needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology
from deepshare.core.traces import load
from deepshare.policies.encoding import WAIT_INDEX, EncodingConfig
from deepshare.policies.learned import HybridRules, LearnedPolicy

TRACE = Path(__file__).resolve().parent.parent / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
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


def test_rl_base_that_always_waits_still_finishes_because_stalling_waits_are_masked():
    report = run(LearnedPolicy("rl-base", always_wait, ENCODING))
    assert report.finished == 256
    assert report.gpu_util < 0.5  # it only launches when the cluster would otherwise idle forever


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
