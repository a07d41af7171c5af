"""A preemptive heuristic stops a running job only for a launch ranked above it that takes its
GPUs: a queued job that cannot be placed (a gang whose level has no domain with room) counts
against no running job (docs/policies.md, ``+preempt``)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric_cases import TINY_CLOS, two_leaves_of_two

from deepshare.core.contention import make_contention
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.feasibility import check_view_decision
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy

CATALOG = default_catalog()
POLICIES = ["srsf+consolidated+preempt", "srsf+topo-bestfit+preempt", "srsf+topo-aware+preempt",
            "las+topo-aware+preempt", "srsf+contention-aware+preempt", "srsf+uncontended+preempt"]
FOURS = two_leaves_of_two(4)
"""Two leaves (nodes 0, 1 | 2, 3) of two 4-GPU nodes."""


def running(name: str, alloc: tuple[tuple[int, int], ...], remaining_s: float) -> KnownJob:
    return KnownJob(name, "FSDP", sum(g for _, g in alloc), 0.0, remaining_s, placement=Placement(alloc),
                    last_run_s=100.0)


def inversions(view, decision, key) -> list[str]:
    """The preempted jobs that no launch both outranks and overlaps (shares a node with)."""
    queued = {job.job_id: job for job in view.queued}
    by_id = {job.job_id: job for job in view.running}
    bad = []
    for victim_id in decision.preempt:
        victim = by_id[victim_id]
        if not any(key(queued[l.job_id]) < key(victim) and set(l.placement.nodes) & set(victim.placement.nodes)
                   for l in decision.launch):
            bad.append(victim_id)
    return bad


def test_an_unplaceable_gang_does_not_make_a_better_ranked_job_a_victim():
    """The 8-GPU gang needs a whole leaf and neither has one free; it ranks first. ``m`` (7 GPUs
    x 1000 s) outranks ``low`` (4 x 2000 s) under srsf, yet counting the gang against the GPUs
    made ``m`` a victim and ``low`` took its GPUs."""
    jobs = [running("h1", ((0, 1),), 50.0), running("h2", ((3, 1),), 50.0), running("m", ((1, 3), (2, 4)), 1000.0)]
    queued = [KnownJob("gang", "FSDP", 8, 1.0, 10.0, topology=TopologyRequest(required_level="leaf")),
              KnownJob("low", "FSDP", 4, 1.0, 2000.0)]
    v = build_view(FOURS, CATALOG, make_contention("profiled"), 5.0, [3, 1, 0, 3], queued, jobs)
    for name in ("srsf+consolidated+preempt", "srsf+topo-bestfit+preempt", "srsf+topo-aware+preempt"):
        policy = make_policy(name)
        decision = policy.decide(v)
        check_view_decision(decision, v)
        assert "m" not in decision.preempt, name
        assert inversions(v, decision, policy.order(v)) == []


@st.composite
def cluster_states(draw):
    """A busy cluster, a gang of a whole domain of its level ranked first (it seldom fits), and
    jobs after it that may rank above or below the running ones."""
    topology = draw(st.sampled_from([FOURS, TINY_CLOS]))
    levels = [level.name for level in topology.fabric.levels]
    free = list(topology.capacity)
    jobs = []
    for k in range(draw(st.integers(2, 12))):
        nodes = [n for n in range(len(free)) if free[n] > 0]
        if not nodes:
            break
        alloc = sorted((node, draw(st.integers(1, free[node])))
                       for node in draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=2, unique=True)))
        placement = Placement(tuple(alloc))
        placement.take(free)
        jobs.append(running(f"r{k}", placement.alloc, draw(st.sampled_from([100.0, 1000.0, 1e4]))))
    queued = [KnownJob("gang", "FSDP", 8, 1.0, 1.0, topology=TopologyRequest(required_level=levels[0]))]
    for k in range(draw(st.integers(1, 3))):
        level = draw(st.sampled_from([None, None, *levels]))
        request = NO_TOPOLOGY if level is None else TopologyRequest(required_level=level)
        queued.append(KnownJob(f"q{k}", draw(st.sampled_from(["FSDP", "DLRM", "MoE"])), draw(st.sampled_from([1, 2, 4, 8])),
                               1.0, draw(st.sampled_from([10.0, 1e4, 1e5])), topology=request))
    return build_view(topology, CATALOG, make_contention("profiled"), 5.0, free, queued, jobs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view=cluster_states(), name=st.sampled_from(POLICIES))
def test_every_preempted_job_is_outranked_by_a_launch_that_takes_its_gpus(view, name):
    policy = make_policy(name)
    decision = policy.decide(view)
    check_view_decision(decision, view)
    assert inversions(view, decision, policy.order(view)) == []
