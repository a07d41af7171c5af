"""Topology-aware preemption stops only what the gang takes: the gang goes inside the domain its
plan frees, so no victim's GPUs are left unused."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric_cases import TINY_CLOS, two_leaves_of_two

from deepshare.core.contention import make_contention
from deepshare.core.fabric import TopologyRequest
from deepshare.core.feasibility import check_view_decision
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy

TWO_LEAVES_OF_EIGHTS = two_leaves_of_two(8, "two-leaves-of-eights")
"""Two leaves (nodes 0, 1 | 2, 3) of two 8-GPU nodes."""
CATALOG = default_catalog()
POLICIES = ["srsf+topo-bestfit+preempt", "srsf+consolidated+preempt", "srsf+topo-balanced+preempt", "srsf+topo-aware+preempt"]


def running(name: str, alloc: tuple[tuple[int, int], ...], remaining_s: float) -> KnownJob:
    return KnownJob(name, "FSDP", sum(g for _, g in alloc), 0.0, remaining_s, placement=Placement(alloc), last_run_s=100.0)


def gang(gpus: int, level: str) -> KnownJob:
    return KnownJob("gang", "FSDP", gpus, 0.0, 500.0, topology=TopologyRequest(required_level=level))


def view_of(topology, jobs: list[KnownJob], queued: KnownJob):
    free = list(topology.capacity)
    for job in jobs:
        job.placement.take(free)
    return build_view(topology, CATALOG, make_contention("profiled"), 0.0, free, [queued], jobs)


def unneeded_victims(view, decision) -> list[str]:
    """The stopped jobs the gang's placement would still fit without stopping."""
    if not decision.preempt:
        return []
    (launch,) = [l for l in decision.launch if l.job_id == "gang"]
    by_id = {j.job_id: j for j in view.running}
    spare = []
    for victim in decision.preempt:
        free = list(view.free)
        for other in decision.preempt:
            if other != victim:
                by_id[other].placement.release(free)
        if launch.placement.fits(free):
            spare.append(victim)
    return spare


def test_the_gang_goes_where_one_stop_frees_room_and_the_unneeded_victim_runs_on():
    """Leaf l0 holds 7 free GPUs on node 0; r1 (4 on node 1) and r2 (4 on node 1, 4 on node 3)
    are outranked. Freeing l0 for a 12-GPU gang takes both. The balanced placement used to place
    the gang over the whole cluster after the plan, on leaf l1 (node 2's 8 and r2's 4 on node 3),
    so r1 was stopped for nothing; the plan then put it in l0, stopping both. Now the victim no
    launch needs keeps running: r1 runs on, and the gang goes to leaf l1, which stopping r2 alone
    frees (one stop instead of two)."""
    jobs = [running("r0", ((3, 4),), 1e5), running("r1", ((1, 4),), 1e5), running("r2", ((1, 4), (3, 4)), 1e4),
            running("r3", ((0, 1),), 1000.0)]
    v = view_of(TWO_LEAVES_OF_EIGHTS, jobs, gang(12, "leaf"))
    decision = make_policy("srsf+topo-balanced+preempt").decide(v)
    check_view_decision(decision, v)
    assert unneeded_victims(v, decision) == []
    assert decision.preempt == ("r2",)
    assert {n for n in decision.launch[0].placement.nodes} == {2, 3}  # leaf l1, which r2's stop frees


@st.composite
def cluster_states(draw):
    topology = draw(st.sampled_from([TWO_LEAVES_OF_EIGHTS, TINY_CLOS]))
    free = list(topology.capacity)
    jobs = []
    for k in range(draw(st.integers(1, 10))):
        nodes = [n for n in range(len(free)) if free[n] > 0]
        if not nodes:
            break
        alloc = []
        for node in draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=2, unique=True)):
            alloc.append((node, draw(st.integers(1, free[node]))))
        alloc.sort()
        placement = Placement(tuple(alloc))
        placement.take(free)
        jobs.append(running(f"r{k}", placement.alloc, draw(st.sampled_from([100.0, 1000.0, 1e4, 1e5]))))
    levels = [level.name for level in topology.fabric.levels]
    level = draw(st.sampled_from(levels))
    queued = gang(draw(st.sampled_from([4, 8, 12, 16])), level)
    if level != levels[0] and draw(st.booleans()):  # slices of 4 inside domains of the lowest level
        queued = replace(queued, topology=replace(queued.topology, slice_size=4, slice_level=levels[0]))
    return topology, jobs, queued


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=cluster_states(), policy=st.sampled_from(POLICIES))
def test_no_job_is_stopped_for_gpus_the_gang_does_not_take(state, policy):
    topology, jobs, queued = state
    v = view_of(topology, jobs, queued)
    decision = make_policy(policy).decide(v)
    check_view_decision(decision, v)
    assert unneeded_victims(v, decision) == []


def sliced_view(held_on_first: int):
    """TINY_CLOS: in every NVLink domain (nodes 2d, 2d+1) x{d} holds ``held_on_first`` GPUs of node
    2d and y{d} all of node 2d+1, all outranked by an 8-GPU gang in slices of 4 per NVLink domain
    inside one spine."""
    jobs = []
    for d in range(8):
        jobs.append(running(f"x{d}", ((2 * d, held_on_first),), 1e5))
        jobs.append(running(f"y{d}", ((2 * d + 1, 4),), 1e5))
    queued = KnownJob("gang", "FSDP", 8, 1.0, 10.0,
                      topology=TopologyRequest(required_level="spine", slice_size=4, slice_level="nvlink"))
    return view_of(TINY_CLOS, jobs, queued)


@pytest.mark.parametrize("held_on_first", [1, 3])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_sliced_gang_frees_whole_slices(policy, held_on_first):
    """Each spine has 12 free GPUs (x holds 1) or 4 (x holds 3), but no NVLink domain a whole
    slice of 4. The plan skipped a spine whose free GPUs added up to the gang, and chose victims by
    GPU count (one y: 4 GPUs in a domain of 5 free, one slice) then dropped the plan at the slice
    check: the gang, which outranks everything, waited. Stopping y's frees whole slices."""
    v = sliced_view(held_on_first)
    decision = make_policy(policy).decide(v)
    check_view_decision(decision, v)
    assert [launch.job_id for launch in decision.launch] == ["gang"]
    assert unneeded_victims(v, decision) == []
    assert len(decision.preempt) == 2
