"""Placement inside the fabric (issue 36): topology requests honoured by every registered
placement, topology BestFit, and the feasibility check that refuses a decision breaking a request.

The fabric: 2 spines x 2 leaves x 2 NVLink domains x 2 nodes of 4 GPUs (16 nodes, 64 GPUs).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric_cases import TINY_CLOS_SPEC

from deepshare.core.contention import make_contention
from deepshare.core.errors import InfeasibleDecision
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest, request_violation
from deepshare.core.feasibility import check_view_decision
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import Decision, Launch, Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.policies.placement import PLACEMENTS

SPEC = TINY_CLOS_SPEC
TOPO = parse_topology(SPEC)
FABRIC = TOPO.fabric
CATALOG = default_catalog()
LEVELS = ("nvlink", "leaf", "spine")


def view(free: list[int], *jobs: KnownJob):
    return build_view(TOPO, CATALOG, make_contention("profiled"), 0.0, free, list(jobs), [])


def job(gpus: int, request: TopologyRequest = NO_TOPOLOGY, name: str = "j") -> KnownJob:
    return KnownJob(name, "FSDP", gpus, 0.0, 600.0, topology=request)


def test_the_fabric_is_what_the_spec_says():
    assert [len(FABRIC.by_level[i]) for i in range(3)] == [8, 4, 2]
    assert FABRIC.domains[FABRIC.node_domains[0][1]].name == "s0/l0" and len(FABRIC.domains[FABRIC.node_domains[0][1]].nodes) == 4


def test_topo_bestfit_takes_the_least_free_domain_that_fits_lowest_level_first():
    free = [4] * 16
    free[0] = free[1] = 1  # NVLink domain s0/l0/n0 has 2 free
    free[2], free[3] = 3, 3  # s0/l0/n1 has 6 free: the least free NVLink domain holding 5
    v = view(free, job(5))
    placement = PLACEMENTS["topo-bestfit"][0](v.queued[0], free, v, ())
    assert placement == Placement(((2, 3), (3, 2)))
    big = view(free, job(20))  # no NVLink domain (8) nor leaf (16) holds 20; spine s0 (24 free) is the best fit
    placement = PLACEMENTS["topo-bestfit"][0](big.queued[0], free, big, ())
    assert {FABRIC.node_domains[n][2] for n in placement.nodes} == {FABRIC.node_domains[0][2]}  # not s1 (32 free)
    assert placement == Placement(((2, 3), (3, 1), (4, 4), (5, 4), (6, 4), (7, 4)))  # the fewest nodes inside it



@pytest.mark.parametrize("placement", ["consolidated", "topo-bestfit", "packed"])
def test_slices_go_to_the_least_free_slice_domain_first(placement):
    """NVLink domain n0 of leaf l0 (nodes 0, 1) has 7 free GPUs, n1 (nodes 2, 3) 4: each holds one
    slice of 4. The slice goes to the least free (n1, the hole it fills), as the module doc says,
    keeping n0's 7 together; slice domains were ordered by whole slices, then index, which took
    n0 and left two holes (n0's 3, n1's 4)."""
    free = [4, 3, 4, 0] + [0] * 12
    sliced = job(4, TopologyRequest(slice_size=4, slice_level="nvlink"))
    placed = PLACEMENTS[placement][0](sliced, list(free), view(free, sliced), ())
    assert placed == Placement(((2, 4),))


def test_a_required_level_waits_rather_than_span_two_domains():
    free = [2] * 16  # every leaf has 8 free GPUs
    v = view(free, job(10, TopologyRequest(required_level="leaf")))
    for name, (place, _) in PLACEMENTS.items():
        assert place(v.queued[0], free, v, ()) is None, name
    v = view(free, job(10, TopologyRequest(preferred_level="leaf")))
    assert PLACEMENTS["consolidated"][0](v.queued[0], free, v, ()).total_gpus == 10  # preferred: anywhere


def test_the_feasibility_check_refuses_a_launch_that_breaks_a_request():
    free = [4] * 16
    v = view(free, job(8, TopologyRequest(required_level="nvlink")))
    across = Placement(((0, 4), (2, 4)))  # nodes of two NVLink domains
    with pytest.raises(InfeasibleDecision, match="requires one nvlink domain and spans 2"):
        check_view_decision(Decision(launch=(Launch("j", across),)), v)
    check_view_decision(Decision(launch=(Launch("j", Placement(((0, 4), (1, 4)))),)), v)
    sliced = view(free, job(8, TopologyRequest(slice_size=4, slice_level="nvlink")))
    with pytest.raises(InfeasibleDecision, match="slices of 4 GPUs"):
        check_view_decision(Decision(launch=(Launch("j", Placement(((0, 2), (2, 2), (4, 4)))),)), sliced)


requests = st.one_of(
    st.just(NO_TOPOLOGY),
    st.sampled_from(LEVELS).map(lambda lv: TopologyRequest(required_level=lv)),
    st.sampled_from(LEVELS).map(lambda lv: TopologyRequest(preferred_level=lv)),
    st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from(LEVELS)).map(
        lambda t: TopologyRequest(slice_size=t[0], slice_level=t[1])),
    st.tuples(st.sampled_from(LEVELS), st.sampled_from([2, 4]), st.sampled_from(LEVELS)).filter(
        lambda t: LEVELS.index(t[2]) <= LEVELS.index(t[0])).map(
        lambda t: TopologyRequest(required_level=t[0], slice_size=t[1], slice_level=t[2])),
)


@settings(max_examples=150, deadline=None)
@given(free=st.lists(st.integers(0, 4), min_size=16, max_size=16), gpus=st.sampled_from([1, 2, 4, 8, 12, 16, 24, 32]),
       request=requests, placement=st.sampled_from(sorted(PLACEMENTS)))
def test_every_placement_honours_every_request(free, gpus, request, placement):
    """Required levels never span two domains, slices hold, a gang is all or nothing, and never
    more than the free GPUs are taken."""
    if request.slice_size is not None and gpus % request.slice_size:
        return
    v = view(free, job(gpus, request))
    placed = PLACEMENTS[placement][0](v.queued[0], list(free), v, ())
    if placed is None:
        return
    assert placed.total_gpus == gpus
    assert all(g <= free[n] for n, g in placed.alloc)
    assert request_violation(request, placed.alloc, FABRIC) is None


@settings(max_examples=40, deadline=None)
@given(free=st.lists(st.integers(0, 4), min_size=16, max_size=16),
       jobs=st.lists(st.tuples(st.sampled_from([2, 4, 8, 16]), requests), min_size=1, max_size=8),
       policy=st.sampled_from(["fifo+topo-bestfit", "srsf+consolidated", "las+packed", "srsf+contention-aware",
                               "fifo+spread", "srsf+uncontended+preempt", "rl-hybrid", "las+topo-aware",
                               "srsf+topo-aware+preempt", "fifo+topo-aware+backfill"]))
def test_every_policy_decides_feasibly_on_requests(free, jobs, policy):
    known = [job(g, r, f"j{i}") for i, (g, r) in enumerate(jobs) if r.slice_size is None or g % r.slice_size == 0]
    v = view(free, *known)
    check_view_decision(make_policy(policy).decide(v), v)


def test_topo_balanced_splits_evenly_across_the_fewest_child_domains():
    free = [4] * 16
    v = view(free, job(12))
    # Leaf s0/l0 (16 free) is the best fit; consolidated packs its NVLink domains 8:4, balanced 6:6.
    bestfit = PLACEMENTS["topo-bestfit"][0](v.queued[0], free, v, ())
    balanced = PLACEMENTS["topo-balanced"][0](v.queued[0], free, v, ())

    def per_domain(p):
        return sorted(sum(g for n, g in p.alloc if FABRIC.node_domains[n][0] == d) for d in FABRIC.spanned(p.nodes, 0))

    assert per_domain(bestfit) == [4, 8] and per_domain(balanced) == [6, 6]
    free[0] = 1  # NVLink domain s0/l0/n0 has 5 free, n1 8: water-filling gives 5:7
    v = view(free, job(12))
    assert PLACEMENTS["topo-balanced"][0](v.queued[0], free, v, ()) == Placement(((0, 1), (1, 4), (2, 4), (3, 3)))
    v = view(free, job(8))  # one NVLink domain holds it: no split
    assert PLACEMENTS["topo-balanced"][0](v.queued[0], free, v, ()).num_nodes == 2


# -- topology-aware preemption -------------------------------------------------------------------
def running(name: str, node: int, remaining_s: float) -> KnownJob:
    return KnownJob(name, "FSDP", 4, 0.0, remaining_s, placement=Placement(((node, 4),)), last_run_s=100.0)


def full_cluster(remaining: list[float], gang: KnownJob):
    jobs = [running(f"r{n}", n, remaining[n]) for n in range(16)]
    return build_view(TOPO, CATALOG, make_contention("profiled"), 0.0, [0] * 16, [gang], jobs)


def test_a_required_leaf_gang_frees_the_cheapest_leaf_it_outranks():
    gang = job(16, TopologyRequest(required_level="leaf"), "gang")  # 600 s x 16 GPUs of service left
    # Every running job holds a whole node; the cluster-wide lowest-ranked four sit on four leaves.
    remaining = [10_000.0 + 1000 * (n % 4 == 0) for n in range(16)]
    v = full_cluster(remaining, gang)
    decision = make_policy("srsf+topo-bestfit+preempt").decide(v)
    check_view_decision(decision, v)
    assert decision.preempt == ("r0", "r1", "r2", "r3")  # leaf s0/l0: the lowest domain of equal cost
    assert [l.job_id for l in decision.launch] == ["gang"] and set(decision.launch[0].placement.nodes) == {0, 1, 2, 3}
    remaining[1] = 10.0  # r1 outranks the gang: leaf s0/l0 may not be freed, s0/l1 is
    v = full_cluster(remaining, gang)
    decision = make_policy("srsf+consolidated+preempt").decide(v)
    check_view_decision(decision, v)
    assert decision.preempt == ("r4", "r5", "r6", "r7")
    assert make_policy("srsf+consolidated").decide(full_cluster(remaining, gang)).empty  # without +preempt: waits


@settings(max_examples=60, deadline=None)
@given(remaining=st.lists(st.sampled_from([10.0, 100.0, 1_000.0, 100_000.0]), min_size=16, max_size=16),
       gang_gpus=st.sampled_from([8, 12, 16]), level=st.sampled_from(["nvlink", "leaf", "spine"]),
       policy=st.sampled_from(["srsf+topo-bestfit+preempt", "srsf+consolidated+preempt", "las+topo-balanced+preempt",
                               "srsf+topo-aware+preempt"]))
def test_preemption_frees_what_the_gang_needs_and_stops_only_jobs_it_outranks(remaining, gang_gpus, level, policy):
    gang = job(gang_gpus, TopologyRequest(required_level=level), "gang")
    v = full_cluster(remaining, gang)
    decision = make_policy(policy).decide(v)
    check_view_decision(decision, v)  # the gang, if launched, lies in one domain and fits the freed GPUs
    if not decision.preempt:
        return
    assert [l.job_id for l in decision.launch] == ["gang"]  # nothing is stopped for a gang that does not start
    key = make_policy(policy).order(v)
    by_id = {j.job_id: j for j in v.running}
    assert all(key(by_id[name]) > key(v.queued[0]) for name in decision.preempt)
    freed = sum(by_id[name].gpus for name in decision.preempt)
    assert freed >= gang_gpus
