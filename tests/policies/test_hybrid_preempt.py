"""rl-hybrid-preempt: the preemptive heuristic's decision when it preempts, else the learned policy's,
through decide(), the stepped path (drive, the serving engine) and a simulation."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology, uniform
from deepshare.core.traces import load
from deepshare.core.types import Decision, JobSpec, Launch, Placement, WAIT
from deepshare.policies import make_policy, policy_info, policy_names
from deepshare.policies.checkpoint import shipped
from deepshare.policies.encoding import WAIT_INDEX, EncodingConfig
from deepshare.policies.hybrid_preempt import DEFAULT_PREEMPTIVE, PreemptiveHybrid
from deepshare.policies.learned import HybridRules, LearnedPolicy, drive
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import response_to_decision, view_to_request

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
PREEMPTIVE = "srsf+packed+preempt"
"""The heuristic of the hand-made cases below."""
SHIPPED_PREEMPTIVE = "bsrsf+uncontended+preempt"
"""What the shipped file defers to (its metadata); a file that names none defers to DEFAULT_PREEMPTIVE."""
"""What the shipped file and a file naming none defer to."""


def always_wait(obs):
    scores = np.zeros(len(obs["action_mask"]))
    scores[WAIT_INDEX] = 1.0
    return scores


def last_launch(obs):
    """The last unmasked launch row (not the anchor's pick, so it differs from the heuristic)."""
    mask = obs["action_mask"]
    scores = np.arange(len(mask), dtype=float)
    scores[WAIT_INDEX] = -1.0
    return scores


def hybrid(scorer, rules: HybridRules | None = None) -> PreemptiveHybrid:
    learned = LearnedPolicy("learned", scorer, EncodingConfig(), rules)
    return PreemptiveHybrid("rl-hybrid-preempt", learned, make_policy(PREEMPTIVE))


def view_at(jobs, topo, launches):
    """Launch ``launches`` at t=0 by hand, then return the simulator and its next view."""
    sim = Simulator(topo, jobs, make_contention("none"))
    sim.advance()
    sim.apply(Decision(launch=tuple(Launch(j, Placement(tuple(c.items()))) for j, c in launches)))
    return sim, sim.advance()


LONG_THEN_SHORT = (
    JobSpec("long", "FSDP", 2, submit_time=0.0, duration_s=1000.0),
    JobSpec("short", "FSDP", 2, submit_time=100.0, duration_s=100.0),
)


def preempting_view():
    """One 2-GPU node running ``long``; ``short`` arrives: SRSF preempts long for it."""
    return view_at(LONG_THEN_SHORT, uniform(1, 2), [("long", {0: 2})])[1]


def free_gpus_view():
    """Two 2-GPU nodes, ``long`` on node 0; ``short`` fits node 1: SRSF launches, preempts nothing."""
    return view_at(LONG_THEN_SHORT, uniform(2, 2), [("long", {0: 2})])[1]


def test_when_the_heuristic_preempts_its_decision_is_returned_exactly():
    view = preempting_view()
    expected = Decision(launch=(Launch("short", Placement(((0, 2),))),), preempt=("long",))
    assert make_policy(PREEMPTIVE).decide(view) == expected
    for scorer in (always_wait, last_launch):  # whatever the network would do
        assert hybrid(scorer).decide(view) == expected


def test_when_the_heuristic_does_not_preempt_the_learned_decision_is_returned_exactly():
    view = free_gpus_view()
    heuristic = make_policy(PREEMPTIVE).decide(view)
    assert heuristic == Decision(launch=(Launch("short", Placement(((1, 2),))),))
    # a network that waits (no safety net) waits, although the heuristic would launch
    assert hybrid(always_wait).decide(view) == WAIT
    # with the safety net it is rl-hybrid's decision, whatever that is
    for scorer in (always_wait, last_launch):
        rules = HybridRules()
        learned = LearnedPolicy("learned", scorer, EncodingConfig(), rules)
        assert hybrid(scorer, rules).decide(view) == learned.decide(view)


def test_steps_return_the_preemption_at_once_and_yield_the_learned_steps_otherwise():
    policy = hybrid(always_wait)
    run = policy.steps(preempting_view())
    with pytest.raises(StopIteration) as done:
        next(run)
    assert done.value.value.preempt == ("long",)
    view = free_gpus_view()
    run = policy.steps(view)
    obs = next(run)  # the learned policy's first observation
    assert set(obs) == {"observations", "action_mask"}
    assert drive(policy.steps(view), always_wait) == policy.decide(view) == WAIT


@pytest.fixture(scope="module")
def engine() -> PlacementEngine:
    return PlacementEngine(EngineSettings(policy="rl-hybrid-preempt"))


def served(engine: PlacementEngine, view) -> Decision:
    request = PlacementRequest.model_validate_json(view_to_request(view).model_dump_json())
    return response_to_decision(engine.place(request), view)


def test_registered_policy_answers_through_the_engine_as_decide(engine):
    policy = engine.policy
    assert isinstance(policy, PreemptiveHybrid) and engine.batch_scorer is not None
    assert engine.metadata["preemptive"] == SHIPPED_PREEMPTIVE and engine.metadata["checkpoint"].endswith("rl_est_hybrid_preempt.pt")
    for view in (preempting_view(), free_gpus_view()):
        assert served(engine, view) == policy.decide(view)
    assert served(engine, preempting_view()).preempt == ("long",)


def test_async_path_takes_a_decision_made_without_scoring(engine):
    view = preempting_view()
    request = PlacementRequest.model_validate_json(view_to_request(view).model_dump_json())

    async def score(obs):
        raise AssertionError("a preempting decision needs no forward pass")

    response = asyncio.run(engine.place_async(request, score=score))
    assert response_to_decision(response, view).preempt == ("long",)


def simulate(policy):
    """80 generated jobs at load 1.3 on 4 x 8 GPUs (arrivals over time, so SRSF preempts)."""
    from deepshare.core.traces import generate

    jobs = generate(80, load=1.3, total_gpus=32, duration_sigma=1.0, seed=1).jobs
    return Simulator(uniform(4, 8), jobs, make_contention("profiled")).run(policy)


def test_a_short_simulation_finishes_preempts_and_is_deterministic():
    first, second = simulate(make_policy("rl-hybrid-preempt")), simulate(make_policy("rl-hybrid-preempt"))
    assert first.finished == 80 and first.preemptions >= 1  # 40: the heuristic's preemptions happen
    assert first.to_dict() == second.to_dict()
    assert first.to_dict()["policy"] == "rl-hybrid-preempt"


def test_registry_lists_it_as_a_learned_policy_taking_a_checkpoint():
    assert "rl-hybrid-preempt" in policy_names()
    assert "rl-hybrid-preempt" not in policy_names(heuristics_only=True)
    info = policy_info("rl-hybrid-preempt")
    assert info.takes_argument and not info.heuristic and SHIPPED_PREEMPTIVE in info.description
    policy = make_policy(f"rl-hybrid-preempt={shipped()}")
    assert policy.name == "rl-hybrid-preempt" and policy.metadata["checkpoint"] == str(shipped())


def test_min_gain_defers_only_for_a_clear_win():
    # long has 900 s x 2 GPUs left, short 100 s x 2: a gain of 9
    view = preempting_view()
    assert {j.job_id: j.remaining_s * j.gpus for j in (*view.running, *view.queued)} == {"long": 1800.0, "short": 200.0}
    assert replace(hybrid(always_wait), min_gain=9.0).decide(view).preempt == ("long",)
    assert replace(hybrid(always_wait), min_gain=9.5).decide(view) == WAIT  # the network's wait


def test_its_heuristic_is_the_registered_one_of_that_name():
    from deepshare.policies.hybrid_preempt import preemptive_heuristic

    ours, registered = preemptive_heuristic(PREEMPTIVE, "f.pt"), make_policy(PREEMPTIVE)
    assert ours == registered
    sim = Simulator(load_topology("testbed"), load(TRACE).jobs[:80], make_contention("profiled"))
    assert sim.run(ours).to_dict() == Simulator(
        load_topology("testbed"), load(TRACE).jobs[:80], make_contention("profiled")
    ).run(registered).to_dict()


def test_min_pressure_defers_only_while_the_queue_asks_for_enough_gpus():
    # short (2 GPUs) is queued on a 2-GPU cluster: the queue asks for 1.0 x the cluster's GPUs
    view = preempting_view()
    assert sum(j.gpus for j in view.queued) == 2 and view.total_gpus == 2
    assert replace(hybrid(always_wait), min_pressure=1.0).decide(view).preempt == ("long",)
    assert replace(hybrid(always_wait), min_pressure=1.01).decide(view) == WAIT  # the network's wait
    # both gates must pass: pressure enough, gain not (9 < 9.5)
    assert replace(hybrid(always_wait), min_pressure=1.0, min_gain=9.5).decide(view) == WAIT


def test_min_pressure_on_a_free_gpu_view_changes_nothing():
    # the heuristic does not preempt there, so the learned decision is returned whatever the gate
    view = free_gpus_view()
    assert replace(hybrid(last_launch), min_pressure=0.0).decide(view) == hybrid(last_launch).decide(view)


def _file(tmp_path, metadata):
    from policy_files import write_policy_file

    return write_policy_file(tmp_path / "policy.pt", metadata)


def test_a_files_preempt_rules_set_the_gates_and_no_rules_mean_none(tmp_path):
    path = _file(tmp_path, {"preempt_rules": {"min_pressure": 0.5, "min_gain": 2}})
    policy = make_policy(f"rl-hybrid-preempt={path}")
    assert (policy.min_pressure, policy.min_gain) == (0.5, 2.0)
    policy = make_policy(f"rl-hybrid-preempt={_file(tmp_path, {'name': 'old'})}")
    assert (policy.min_pressure, policy.min_gain) == (None, None)


def test_the_shipped_rl_hybrid_preempt_is_the_imitation_network_with_its_rules():
    """``rl_est_hybrid_preempt.pt``: rl-base's network (the same weights), the safety net off
    (min_ratio 1.01, no utilisation floor), deferring to bsrsf+uncontended+preempt with no gate."""
    import torch

    from deepshare.policies.checkpoint import SHIPPED_BASE, SHIPPED_PREEMPT, shipped
    from deepshare.policies.learned import HybridRules

    policy = make_policy("rl-hybrid-preempt")
    assert policy.learned.metadata["checkpoint"] == str(shipped(SHIPPED_PREEMPT))
    assert (policy.min_pressure, policy.min_gain) == (None, None)
    assert policy.preemptive == make_policy(SHIPPED_PREEMPTIVE)
    assert policy.learned.hybrid == HybridRules(min_ratio=1.01, utilisation_floor=0.0, anchor_streak=4)
    base = make_policy("rl-base")
    assert base.metadata["checkpoint"] == str(shipped(SHIPPED_BASE))
    ours, theirs = policy.learned.scorer.net.state_dict(), base.scorer.net.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert policy.learned.encoding == base.encoding


@pytest.mark.parametrize(("rules", "named"), [
    ({"min_presure": 0.5}, "unknown \\['min_presure'\\]"),
    ([0.5], "expected a mapping"),
    ({"min_pressure": "high"}, "preempt_rules.min_pressure: expected a number >= 0, got 'high'"),
    ({"min_gain": -1}, "preempt_rules.min_gain: expected a number >= 0"),
    ({"min_pressure": float("inf")}, "preempt_rules.min_pressure"),
    ({"min_pressure": True}, "preempt_rules.min_pressure"),
])
def test_bad_preempt_rules_are_refused_in_one_line_naming_the_key(tmp_path, rules, named):
    from deepshare.core.errors import DeepShareError

    with pytest.raises(DeepShareError, match=named):
        make_policy(f"rl-hybrid-preempt={_file(tmp_path, {'preempt_rules': rules})}")


def test_a_files_preemptive_names_the_heuristic_deferred_to_and_no_key_means_the_default(tmp_path):
    policy = make_policy(f"rl-hybrid-preempt={_file(tmp_path, {'preemptive': 'las+packed+preempt'})}")
    assert policy.preemptive == make_policy("las+packed+preempt")
    assert policy.metadata["preemptive"] == "las+packed+preempt"
    assert make_policy(f"rl-hybrid-preempt={_file(tmp_path, {})}").preemptive == make_policy(DEFAULT_PREEMPTIVE)


@pytest.mark.parametrize("preemptive", ["drf+uncontended+preempt", "themis+topo-aware+preempt", "srsf+packed+preempt"])
def test_a_files_preemptive_may_be_any_registered_preemptive_heuristic(tmp_path, preemptive):
    """The tenants' fairness orders are registered with +preempt too; they were refused."""
    policy = make_policy(f"rl-hybrid-preempt={_file(tmp_path, {'preemptive': preemptive})}")
    assert policy.preemptive == make_policy(preemptive)


@pytest.mark.parametrize("given", ["srsf+uncontended", "srsf+nowhere+preempt", "nope+packed+preempt", 7, None, "rl-base",
                                   "fifo+packed+preempt", "srsf+packed+preempt+fill"])
def test_a_bad_preemptive_is_refused_in_one_line_naming_the_key(tmp_path, given):
    from deepshare.core.errors import DeepShareError

    with pytest.raises(DeepShareError, match=r"metadata preemptive: expected a preemptive heuristic ORDER\+PLACEMENT\+preempt"):
        make_policy(f"rl-hybrid-preempt={_file(tmp_path, {'preemptive': given})}")


@pytest.mark.parametrize("margin", ["nan", "-1", "inf", "abc"])
def test_with_margin_takes_only_a_finite_number_at_least_0(margin):
    """The same rule a policy file's ``preempt_rules`` obey (NaN never preempted, -1 always did)."""
    with pytest.raises(DeepShareError, match=rf"with_margin='{margin}': expected a number >= 0"):
        make_policy(f"deepshare.policies.hybrid_preempt:with_margin={margin}")
    assert make_policy("deepshare.policies.hybrid_preempt:with_margin=2").min_gain == 2.0
