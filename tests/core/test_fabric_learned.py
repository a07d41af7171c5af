"""The learned contention model on fabric uplinks (issue 36): with a ``link`` prior it learns a
slowdown that comes from a shared oversubscribed leaf uplink alone, in the simulator's
knowledge as in the model itself, and measured load on an uplink (by its name) slows the jobs
crossing it."""

from __future__ import annotations

import math

import pytest

from fabric_cases import TWO_LEAVES, TWO_LEAVES_SPEC

from deepshare.core.contention import make_contention
from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.learned import EXPONENT_PRIOR_WEIGHT, ContentionLearner, LearnedContention
from deepshare.core.contention.world import PerturbedContention
from deepshare.core.information import InformationModel
from deepshare.core.knowledge import SimulatedKnowledge
from deepshare.core.topology import parse_topology
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog

SPEC, TOPO = TWO_LEAVES_SPEC, TWO_LEAVES
NON_BLOCKING = parse_topology(SPEC.replace("uplink_gbps: 20", "uplink_gbps: 0"))
CATALOG = default_catalog()
PRIOR = make_contention("link")
WORLD = PerturbedContention(PRIOR, 0.0, given=(("FSDP", 2.0),))
"""The true world: FSDP twice as sensitive to sharing a link as the shipped parameters say."""
V = RunningJob("v", "FSDP", 4, Placement.of({0: 2, 2: 2}))  # a0 + b0
W = RunningJob("w", "FSDP", 4, Placement.of({1: 2, 3: 2}))  # a1 + b1: no node in common with v


def ratio_beside_w(model, topology=TOPO) -> float:
    """v's predicted ratio while w runs: they share only the two leaves' uplinks."""
    state = model.new_state(topology, CATALOG)
    state.add(W)
    return state.predict(V).ratio


def test_the_slowdown_comes_from_the_uplink() -> None:
    prior, truth = ratio_beside_w(PRIOR), ratio_beside_w(WORLD)
    assert (ratio_beside_w(PRIOR, NON_BLOCKING), ratio_beside_w(WORLD, NON_BLOCKING)) == (1.0, 1.0)
    assert (prior, truth) == pytest.approx((0.3576, 0.2146), abs=1e-4)


def test_the_learned_prediction_moves_to_the_truth_after_such_jobs_report() -> None:
    """Five exact reports of v at the truth where the prior said 0.3576: the exponent is the
    closed form ``(w + 5 x y) / (w + 5 x^2)``, and the learned ratio of a new gang crossing the
    shared uplink is within 0.01 of the truth (the prior was 0.14 off)."""
    prior, truth = ratio_beside_w(PRIOR), ratio_beside_w(WORLD)
    learner = ContentionLearner()
    for _ in range(5):
        learner.observe("FSDP", prior, truth)
    x, y = math.log(prior), math.log(truth)
    theta = (EXPONENT_PRIOR_WEIGHT + 5 * x * y) / (EXPONENT_PRIOR_WEIGHT + 5 * x * x)
    assert learner.fit("FSDP").exponent == pytest.approx(theta, rel=1e-12)
    learned = ratio_beside_w(LearnedContention(PRIOR, learner))
    assert learned == pytest.approx(prior ** theta, rel=1e-12)
    assert abs(learned - truth) < 0.01 < abs(prior - truth)
    assert ratio_beside_w(LearnedContention(PRIOR, learner), NON_BLOCKING) == 1.0  # no shared link: still none


def test_the_simulators_knowledge_learns_it_from_reports() -> None:
    """The simulator's path: v and w run on the fabric, report their true ratio (no noise) every
    ``report_s``, and the knowledge's ratio for v moves from the prior's toward the truth."""
    truth_state = WORLD.new_state(TOPO, CATALOG)
    truth_state.add(V)
    truth_state.add(W)
    truth = truth_state.ratio("v")
    knowledge = SimulatedKnowledge(PRIOR, TOPO, CATALOG,
                                   InformationModel(contention_knowledge="learned", measurement_noise=0.0))
    knowledge.add(V)
    knowledge.add(W)
    prior = knowledge.ratio("v")
    assert prior == pytest.approx(0.3576, abs=1e-4)
    knowledge.report_until(10 * knowledge.report_s, [(j, "FSDP", truth, 0.0) for j in ("v", "w")])
    assert abs(knowledge.ratio("v") - truth) < 0.01 < abs(prior - truth)


def test_measured_load_on_an_uplink_slows_the_jobs_crossing_it() -> None:
    """Load no managed job explains, by the uplink's name, reaches a ``link`` prior: v alone
    crossing uplinks half busy runs slower than alone; a name the fabric lacks is ignored."""
    alone = LearnedContention(PRIOR, ContentionLearner()).new_state(TOPO, CATALOG)
    assert alone.predict(V).ratio == 1.0
    busy = LearnedContention(PRIOR, ContentionLearner(), {"s0/l0/uplink": 0.5, "s0/l1/uplink": 0.5,
                                                          "s9/l9/uplink": 0.9}).new_state(TOPO, CATALOG)
    assert busy.predict(V).ratio == pytest.approx(0.6950, abs=1e-4)
