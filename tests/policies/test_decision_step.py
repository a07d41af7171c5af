"""The one decision step (:func:`deepshare.policies.learned.take`) on a hand-made decision point,
and the equivalence it exists for: training (the env), evaluation (``LearnedPolicy.decide``) and
serving (``PlacementEngine.place``) take the same decisions for the same scorer."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from serving_cases import canonical

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import uniform
from deepshare.core.types import WAIT, Decision, JobSpec, Launch, Placement
from deepshare.policies import make_policy
from deepshare.policies.base import BatchScorer, Policy, SteppedPolicy
from deepshare.policies.encoding import FEATURES, JOB_FEATURES, WAIT_INDEX, EncodingConfig, PartialDecision, encode
from deepshare.policies.learned import HybridRules, LearnedPolicy, best_row, take
from deepshare.rl.env import DeepShareEnv
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import response_to_decision, view_to_request

ENCODING = EncodingConfig(max_candidates=8, jobs_considered=2)
NEVER = HybridRules(min_ratio=2.0, utilisation_floor=0.0)
"""Safety-net rules that never fire."""


def first_point(jobs: list[JobSpec]) -> PartialDecision:
    """The first decision point of ``jobs`` on two 8-GPU nodes, nothing chosen yet."""
    view = Simulator(uniform(2, 8), jobs, make_contention("profiled")).advance()
    assert view is not None
    return PartialDecision(view)


A = JobSpec("a", "FSDP", 4, 0.0, duration_s=1000.0)
B = JobSpec("b", "MoE", 8, 0.0, duration_s=500.0)
LATER = JobSpec("c", "MobileNetV3", 2, 50.0, duration_s=100.0)


RUNNING = JobSpec("r", "FSDP", 8, 0.0, duration_s=10_000.0)


@pytest.fixture(scope="module")
def point():
    """a (4 GPUs) and b (8 GPUs) queued at t=1 on two free 8-GPU nodes while r holds a third
    (something runs, so wait is allowed)."""
    sim = Simulator(uniform(3, 8), [RUNNING, replace(A, submit_time=1.0), replace(B, submit_time=1.0)], make_contention("profiled"))
    assert sim.advance() is not None
    sim.apply(Decision(launch=(Launch("r", Placement(((2, 8),))),)))
    view = sim.advance()
    assert view is not None and view.now == 1.0 and view.free == (8, 8, 0)
    partial = PartialDecision(view)
    obs, rows = encode(partial, ENCODING)
    return partial, obs["action_mask"], rows


def test_the_hand_made_point_offers_wait_then_four_launches(point):
    partial, mask, rows = point
    assert mask.tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert [(r.job and r.job.job_id, r.placement and r.placement.alloc) for r in rows] == [
        (None, None), ("a", ((0, 4),)), ("a", ((0, 2), (1, 2))), ("b", ((0, 8),)), ("b", ((0, 4), (1, 4))),
    ]


def test_a_chosen_launch_row_is_taken(point):
    partial, mask, rows = point
    step = take(partial, rows, mask, 3, HybridRules())
    assert step.launched == rows[3] and not step.safety_net and not step.invalid
    assert step.partial.launches == (Launch("b", Placement(((0, 8),))),)
    assert step.partial.free == (0, 8, 0) and partial.free == (8, 8, 0)


def test_wait_without_safety_net_ends_the_decision(point):
    partial, mask, rows = point
    for rules in (None, NEVER):
        step = take(partial, rows, mask, WAIT_INDEX, rules)
        assert step.launched is None and step.partial is partial
        assert not step.safety_net and not step.invalid


def test_wait_with_safety_net_launches_the_anchor_pick_on_an_underused_cluster(point):
    partial, mask, rows = point
    step = take(partial, rows, mask, WAIT_INDEX, HybridRules())  # utilisation 1/3 < 0.5
    assert step.safety_net and not step.invalid
    assert step.launched is not None and step.launched.job.job_id == "a"
    assert step.launched.placement == Placement(((0, 4),)) == rows[1].placement  # srsf+packed = row 1
    assert step.partial.free == (4, 8, 0)


@pytest.mark.parametrize("action", [5, 7, 8, 99, -1])
def test_a_masked_or_out_of_range_row_counts_as_wait(point, action):
    partial, mask, rows = point
    plain = take(partial, rows, mask, action, None)
    assert plain.invalid and plain.launched is None
    netted = take(partial, rows, mask, action, HybridRules())
    assert netted.invalid and netted.safety_net and netted.launched.job.job_id == "a"


@pytest.mark.parametrize("jobs", [[A, B], [A, B, LATER]], ids=["nothing-to-come", "an-arrival-to-come"])
def test_where_waiting_would_idle_the_cluster_a_masked_choice_is_the_first_launch(jobs):
    """Nothing runs and a job fits: wait is masked whether or not more jobs will arrive (which
    the view does not tell: a simulator's views said so, and the mask told it to the policy)."""
    partial = first_point(jobs)
    assert partial.view.future_events
    obs, rows = encode(partial, ENCODING)
    mask = obs["action_mask"]
    assert mask[WAIT_INDEX] == 0
    step = take(partial, rows, mask, WAIT_INDEX, None)
    assert step.invalid and step.launched == rows[1] and not step.safety_net


def test_wait_stays_offered_where_gpus_are_taken_by_work_the_view_does_not_list():
    """A live view may show GPUs taken with no running job listed (work the scheduler does not
    manage, a job whose node left): the cluster is not idle, so wait is not masked."""
    idle = first_point([A, B]).view
    view = build_view(idle.topology, idle.catalog, make_contention("profiled"), 0.0, [8, 2],
                      [KnownJob("a", "FSDP", 4, 0.0, 1000.0)], [])
    obs, rows = encode(PartialDecision(view), ENCODING)
    assert len(rows) > 1 and obs["action_mask"][WAIT_INDEX] == 1


def test_best_row_ignores_masked_rows_and_takes_the_first_of_equals():
    mask = np.array([0, 1, 1, 1, 0], dtype=np.float32)
    assert best_row(np.array([9.0, 1.0, 3.0, 3.0, 9.0]), mask) == 2
    assert best_row(np.array([9.0, -np.inf, -np.inf, -np.inf, 9.0]), mask) == 0  # see take: counts as wait


_SCORE = st.one_of(
    st.floats(width=32, allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, float(np.finfo(np.float32).min)]),  # ties and the masked value
)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(_SCORE, st.sampled_from([0.0, 1.0, 0.5, -1.0])), min_size=1, max_size=16))
def test_best_row_is_argmax_over_the_unmasked_scores(rows):
    scores = np.array([s for s, _ in rows], dtype=np.float32)
    mask = np.array([m for _, m in rows], dtype=np.float32)
    assert best_row(scores, mask) == int(np.argmax(np.where(mask > 0, scores, -np.inf)))


@settings(max_examples=60, deadline=None)
@given(action=st.integers(-3, 12), hybrid=st.booleans())
def test_take_launches_a_row_or_the_safety_net_pick_and_frees_exactly_its_gpus(point, action, hybrid):
    partial, mask, rows = point
    step = take(partial, rows, mask, action, HybridRules() if hybrid else None)
    valid = 0 <= action < len(mask) and mask[action] > 0
    assert step.invalid == (not valid)
    if step.launched is None:
        assert step.partial is partial and not hybrid
        return
    assert step.safety_net == (not valid or action == WAIT_INDEX)
    if not step.safety_net:
        assert step.launched == rows[action]
    assert sum(partial.free) - sum(step.partial.free) == step.launched.job.gpus
    assert step.partial.launches[-1].job_id == step.launched.job.job_id


def test_learned_policies_are_stepped_policies_and_heuristics_are_not():
    learned = make_policy("rl-hybrid")
    assert isinstance(learned, SteppedPolicy) and isinstance(learned.scorer, BatchScorer)
    heuristic = make_policy("srsf+packed")
    assert isinstance(heuristic, Policy) and not isinstance(heuristic, SteppedPolicy)


# -- equivalence: training, evaluation and serving decide alike --------------------------------

SMALL = {"generated_fraction": 1.0, "generated_jobs": 30, "generated_nodes": [2, 4], "max_candidates": 10}
SHIPPED_ENCODING = {"max_candidates": 16, "anchor": ["bsrsf", "uncontended"], "offer_order": "bsrsf",
                    "extra_features": ["is_anchor", "neighbours_min_left_h", "neighbours_max_left_h", "next_finish_h",
                                       "belief_left_h", "history_jobs", "history_spread", "has_estimate"]}
"""The encoding the shipped networks were trained with (rllib_configs/rl_est_imitate.yaml)."""


def linear_scorer(seed: int):
    """A fixed random linear scorer: distinct, deterministic preferences without a network. It
    waits often (a bonus on ``is_wait``), so the safety net has work to do."""
    weights = np.random.default_rng(seed).normal(size=len(FEATURES))
    weights[JOB_FEATURES.index("is_wait")] = 0.5
    return lambda obs: obs["observations"] @ weights


def scorer_for(name: str):
    """``linearN``, or ``shipped``: the bundled checkpoint's network (its encoding is :data:`SHIPPED_ENCODING`)."""
    if name == "shipped":
        policy = make_policy("rl-hybrid")
        assert policy.encoding == DeepShareEnv(SMALL | SHIPPED_ENCODING).config.encoding
        return policy.scorer
    return linear_scorer(int(name.removeprefix("linear")))


def play(env: DeepShareEnv, seed: int, scorer, check) -> int:
    """Play one episode choosing the scorer's best row, calling ``check(n, view, decision)`` on
    every decision the env hands the simulator, before it is applied (a view is only valid
    until then); the number of decisions."""
    obs, _ = env.reset(seed=seed)
    sim = env._episode.sim
    apply, count = sim.apply, [0]

    def checked(decision):
        check(count[0], env._episode.partial.view, decision)
        count[0] += 1
        apply(decision)

    sim.apply = checked
    done = False
    while not done:
        obs, _, terminated, truncated, _ = env.step(best_row(scorer(obs), obs["action_mask"]))
        done = terminated or truncated
    return count[0]


@pytest.fixture(scope="module")
def engine():
    return PlacementEngine(EngineSettings(policy="srsf+packed"))


@pytest.mark.parametrize("hybrid", [False, True])
@pytest.mark.parametrize(("scorer_name", "seed"), [("linear0", 0), ("linear1", 1), ("linear2", 2), ("shipped", 3)])
def test_env_policy_and_engine_take_identical_decisions(engine, scorer_name, seed, hybrid):
    scorer = scorer_for(scorer_name)
    env = DeepShareEnv({**SMALL, "hybrid": hybrid, **(SHIPPED_ENCODING if scorer_name == "shipped" else {})})
    policy = LearnedPolicy("x", scorer, env.config.encoding, env.config.hybrid_rules)
    engine.policy = policy
    launches = []

    def check(n, view, decision):
        launches.extend(decision.launch)
        assert policy.decide(view) == (decision if decision.launch else WAIT)
        if n % 4 == 0:  # serving every fourth point keeps the test quick
            response = engine.place(PlacementRequest.model_validate_json(view_to_request(view).model_dump_json()))
            assert canonical(response_to_decision(response, view)) == canonical(decision)

    assert play(env, seed, scorer, check) > 10 and len(launches) > 10


def test_a_partial_keeps_only_a_link_to_its_parent_and_answers_as_a_fresh_one():
    """A launch costs O(1) on the partial (no copy of the free vector or of the launches), yet
    every partial of a chain answers ``launches``, ``free``, ``pending`` and ``count`` exactly
    as a partial built afresh from the same launches, also after the chain moved on."""
    jobs = [JobSpec(f"j{i}", "FSDP", 1 + i % 3, 0.0, duration_s=100.0) for i in range(6)]
    root = first_point(jobs)
    chain = [root]
    for job in root.view.queued[:4]:
        partial = chain[-1]
        partial.state()  # the shared state advances with the chain
        placement = Placement.of({chain.index(partial) % 2: job.gpus})
        chain.append(partial.with_launch(job, placement))
    for partial in (chain[-1], chain[1], chain[3], root):  # newest first, then older ones
        fresh = PartialDecision(partial.view, partial.launches)
        assert partial.count == len(partial.launches) == fresh.count
        assert partial.free == fresh.free
        assert [(j.job_id, p) for j, p in partial.pending()] == [(j.job_id, p) for j, p in fresh.pending()]
        assert sum(partial.view.free) - sum(partial.free) == sum(l.placement.total_gpus for l in partial.launches)
    assert [l.job_id for l in chain[-1].launches] == ["j0", "j1", "j2", "j3"]
    assert chain[-1].free == (8 - 1 - 3, 8 - 2 - 1)  # j0 and j2 on node 0, j1 and j3 on node 1
