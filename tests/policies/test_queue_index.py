"""The heuristics' queue index gives exactly the decisions of a full re-sort, only faster."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.policies.heuristic import HeuristicPolicy

STATIC_ORDER_POLICIES = [
    f"{order}+{place}"
    for order in ("fifo", "srtf", "srsf", "las")
    for place in ("consolidated", "spread", "contention-aware", "packed")
]
MODELS = default_catalog().models


def indexed_and_sorted(name: str) -> tuple[HeuristicPolicy, HeuristicPolicy]:
    policy = make_policy(name)
    assert isinstance(policy, HeuristicPolicy) and policy._index is not None
    return policy, replace(policy, use_index=False)


def run(policy, jobs, nodes, gpus_per_node):
    sim = Simulator(uniform(nodes, gpus_per_node), jobs, make_contention("profiled"))
    decisions = []
    while (view := sim.advance()) is not None:
        decision = policy.decide(view)
        decisions.append(decision)
        sim.apply(decision)
    return decisions, sim.report(policy.name)


jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(MODELS),
        st.sampled_from([1, 2, 3, 4, 8, 16]),
        st.floats(min_value=0, max_value=20_000, allow_nan=False),
        st.floats(min_value=60, max_value=20_000, allow_nan=False),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(
    jobs=jobs_strategy,
    name=st.sampled_from(STATIC_ORDER_POLICIES),
    nodes=st.integers(1, 4),
    gpus_per_node=st.sampled_from([2, 4, 8]),
)
def test_index_makes_the_same_decisions_as_a_full_sort(jobs, name, nodes, gpus_per_node):
    specs = [JobSpec(f"j{i}", m, g, submit, duration_s=d) for i, (m, g, submit, d) in enumerate(jobs)]
    fast, slow = indexed_and_sorted(name)
    fast_decisions, fast_report = run(fast, specs, nodes, gpus_per_node)
    slow_decisions, slow_report = run(slow, specs, nodes, gpus_per_node)
    assert fast_decisions == slow_decisions
    assert fast_report.to_dict() == slow_report.to_dict()


def test_a_decision_that_is_not_applied_does_not_corrupt_the_index():
    specs = [JobSpec(f"j{i}", "FSDP", 4, 0.0, duration_s=100.0 * (i + 1)) for i in range(6)]
    fast, slow = indexed_and_sorted("las+consolidated")
    sim = Simulator(uniform(2, 4), specs, make_contention("profiled"))
    view = sim.advance()
    first = fast.decide(view)
    again = fast.decide(view)  # the caller ignored the first answer and asks again
    assert first == again == slow.decide(view)
    assert len(first.launch) == 2


def test_one_policy_object_used_on_two_simulations_answers_each_correctly():
    specs = [JobSpec(f"j{i}", "MoE", 2, 10.0 * i, duration_s=500.0) for i in range(8)]
    fast, slow = indexed_and_sorted("srtf+spread")
    sim_a = Simulator(uniform(2, 4), specs, make_contention("profiled"))
    sim_b = Simulator(uniform(1, 2), specs, make_contention("profiled"))
    while True:
        views = [sim.advance() for sim in (sim_a, sim_b)]
        if all(v is None for v in views):
            break
        for sim, view in zip((sim_a, sim_b), views):
            if view is not None:
                decision = fast.decide(view)
                assert decision == slow.decide(view)
                sim.apply(decision)
    assert sim_a.report().finished == sim_b.report().finished == 8
