"""``topo-aware`` and topology-aware preemption with predicted contention (issue 36).

The hand-checked fabric: 2 spines x 2 leaves x 3 nodes of 4 GPUs (leaves of 12 GPUs, 4:1
oversubscribed uplinks, 25 Gbit/s NICs: slow enough that ``--contention link`` sees a collective
crossing a leaf's uplink beside another one). A 16-GPU gang never fits one leaf, so inside a
spine it crosses both leaves' uplinks.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from fabric_cases import TINY_CLOS

from deepshare.core.contention import make_contention
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest, request_violation
from deepshare.core.feasibility import check_view_decision
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import Placement
from deepshare.core.view import Prediction
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy, policy_names
from deepshare.policies import preempt_plan
from deepshare.policies.fabric_place import make_topo_balanced, with_topology
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.placement import PLACEMENTS, consolidate
from deepshare.policies.registry import BACKFILL_PLACEMENTS
from deepshare.policies.topo_aware import K, candidates

SLOW_SPEC = """
name: two-leaves-per-spine
node_types:
  g: {gpus: 4, nic_gbps: 25}
levels:
  - {name: leaf, oversubscription: 4}
  - {name: spine}
nodes:
""" + "".join(f"  - {{type: g, count: 3, prefix: s{s}l{l}n, domains: {{leaf: l{l}, spine: s{s}}}}}\n"
              for s in range(2) for l in range(2))
SLOW = parse_topology(SLOW_SPEC)  # nodes 0-2: s0/l0, 3-5: s0/l1, 6-8: s1/l0, 9-11: s1/l1
CATALOG = default_catalog()
TOPO_AWARE = PLACEMENTS["topo-aware"][0]
TOPO_BESTFIT = PLACEMENTS["topo-bestfit"][0]


def spine_of(placement: Placement) -> set[str]:
    return {SLOW.fabric.domain_of(n, 1).name for n in placement.nodes}


def heavy(name: str = "heavy", nodes: tuple[int, int] = (0, 3), remaining_s: float = 600.0) -> KnownJob:
    """An 8-GPU FSDP job across the two leaves of spine s0: it crosses both leaves' uplinks."""
    return KnownJob(name, "FSDP", 8, 0.0, remaining_s, placement=Placement(((nodes[0], 4), (nodes[1], 4))),
                    last_run_s=100.0)


def test_topo_aware_keeps_a_gang_off_the_uplinks_a_heavy_communicator_crosses():
    gang = KnownJob("gang", "FSDP", 16, 0.0, 600.0, topology=TopologyRequest(required_level="spine"))
    free = [4] * 12
    free[0] = free[3] = 0  # the heavy job's nodes: spine s0 has 16 free GPUs, s1 24
    v = build_view(SLOW, CATALOG, make_contention("link"), 0.0, free, [gang], [heavy()])
    bestfit = TOPO_BESTFIT(v.queued[0], list(free), v, ())
    assert bestfit == Placement(((1, 4), (2, 4), (4, 4), (5, 4)))  # s0: the least free spine that holds it
    beside = v.predict(v.queued[0], bestfit, ())
    assert beside.ratio < 1.0 and beside.others_loss > 0.0  # both suffer on the shared 4:1 uplinks
    chosen = TOPO_AWARE(v.queued[0], list(free), v, ())
    assert chosen == Placement(((6, 4), (7, 4), (8, 4), (9, 4)))  # s1, fewest nodes: nothing crosses its uplinks
    assert v.predict(v.queued[0], chosen, ()).cost == 0.0
    assert TOPO_AWARE(v.queued[0], FreeIndex(free), v, ()) == chosen  # the indexed answer is the same
    calm = replace(v, predict=lambda job, placement, pending=(): Prediction(1.0))
    assert TOPO_AWARE(calm.queued[0], list(free), calm, ()) == bestfit  # no contention: BestFit's choice


def calm_view(free: list[int], *jobs: KnownJob, running: tuple[KnownJob, ...] = ()):
    v = build_view(TINY_CLOS, CATALOG, make_contention("profiled"), 0.0, free, list(jobs), list(running))
    return replace(v, predict=lambda job, placement, pending=(): Prediction(1.0))


LEVELS = ("nvlink", "leaf", "spine")
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
gpus = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 32])


@settings(max_examples=150, deadline=None)
@given(free=st.lists(st.integers(0, 4), min_size=16, max_size=16), need=gpus, request=requests)
def test_without_contention_topo_aware_decides_as_topo_bestfit(free, need, request):
    if request.slice_size is not None and need % request.slice_size:
        return
    v = calm_view(free, KnownJob("j", "FSDP", need, 0.0, 600.0, topology=request))
    job = v.queued[0]
    expected = TOPO_BESTFIT(job, list(free), v, ())
    assert TOPO_AWARE(job, list(free), v, ()) == expected
    assert TOPO_AWARE(job, FreeIndex(free), v, ()) == expected


@settings(max_examples=150, deadline=None)
@given(free=st.lists(st.integers(0, 4), min_size=16, max_size=16), need=gpus, request=requests,
       neighbours=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 15), st.sampled_from(["FSDP", "MoE"])),
                           max_size=3))
def test_topo_aware_honours_every_request_under_link_contention(free, need, request, neighbours):
    """Required levels never span two domains, slices hold, a gang is all or nothing, never more
    than the free GPUs are taken, and the candidates stay within their bound."""
    if request.slice_size is not None and need % request.slice_size:
        return
    free = list(free)
    running = []
    for i, (a, b, model) in enumerate(neighbours):  # a GPU on each of two nodes, where free allows
        if a != b and free[a] and free[b]:
            free[a] -= 1
            free[b] -= 1
            running.append(KnownJob(f"r{i}", model, 2, 0.0, 600.0, placement=Placement.of({a: 1, b: 1}),
                                    last_run_s=10.0))
    v = build_view(TINY_CLOS, CATALOG, make_contention("link"), 0.0, free, [KnownJob("j", "FSDP", need, 0.0, 600.0,
                                                                                     topology=request)], running)
    job = v.queued[0]
    placed = TOPO_AWARE(job, list(free), v, ())
    bestfit = TOPO_BESTFIT(job, list(free), v, ())
    assert (placed is None) == (bestfit is None)  # it places a job exactly when BestFit does
    if placed is None:
        return
    assert placed.total_gpus == need
    assert all(g <= free[n] for n, g in placed.alloc)
    assert request_violation(request, placed.alloc, TINY_CLOS.fabric) is None
    assert TOPO_AWARE(job, FreeIndex(free), v, ()) == placed
    shapes = candidates(job, free, v, (), bestfit, consolidate, with_topology(make_topo_balanced(consolidate),
                                                                               consolidate))
    assert shapes[0] == bestfit and placed in shapes
    assert len(shapes) <= 2 + 2 * K * len(LEVELS) + 1
    for shape in shapes:
        assert shape.total_gpus == need and request_violation(request, shape.alloc, TINY_CLOS.fabric) is None


def test_topo_aware_combines_with_every_order_preempt_and_backfill():
    names = set(policy_names(heuristics_only=True))
    assert "topo-aware" in BACKFILL_PLACEMENTS
    for order in ("fifo", "srtf", "srsf", "las", "dlas", "gittins", "qssf", "bsrsf"):
        assert f"{order}+topo-aware" in names and f"{order}+topo-aware+backfill" in names
        assert (f"{order}+topo-aware+preempt" in names) == (order != "fifo")


# -- topology-aware preemption with predicted contention -----------------------------------------
def single(name: str, node: int, remaining_s: float) -> KnownJob:
    return KnownJob(name, "FSDP", 4, 0.0, remaining_s, placement=Placement(((node, 4),)), last_run_s=100.0)


def test_preemption_frees_the_domain_where_the_gang_is_not_beside_a_heavy_communicator():
    """Spine s0 holds the heavy job (which outranks the gang) across its two leaves; both spines
    cost four victims' restore time; s0 is the lower index, but there the gang would share the
    leaves' uplinks with the heavy job: the plan frees s1."""
    gang = KnownJob("gang", "FSDP", 16, 0.0, 600.0, topology=TopologyRequest(required_level="spine"))
    # Nodes 10 and 11 outrank the gang: s1 can free nodes 6-9 only. The lowest ranked jobs
    # cluster-wide (nodes 1, 4, 6, 9) free 8 GPUs in each spine: the plain preemption places nothing.
    remaining = {1: 6000.0, 2: 5000.0, 4: 6000.0, 5: 5000.0, 6: 6000.0, 7: 5000.0, 8: 5000.0, 9: 6000.0,
                 10: 10.0, 11: 10.0}
    running = [heavy(remaining_s=10.0), *(single(f"r{n}", n, left) for n, left in remaining.items())]
    for contention, victims, nodes in (
        ("link", ("r6", "r7", "r8", "r9"), {6, 7, 8, 9}),
        (None, ("r1", "r2", "r4", "r5"), {1, 2, 4, 5}),  # contention-free: the lower index, as before
    ):
        v = build_view(SLOW, CATALOG, make_contention("link"), 0.0, [0] * 12, [gang], running)
        if contention is None:
            v = replace(v, predict=lambda job, placement, pending=(): Prediction(1.0))
        decision = make_policy("srsf+topo-bestfit+preempt").decide(v)
        check_view_decision(decision, v)
        assert decision.preempt == victims
        assert [l.job_id for l in decision.launch] == ["gang"] and set(decision.launch[0].placement.nodes) == nodes


def reference_plan(gang, view, free, candidates_, place):
    """The plan as it was before contention counted: the cheapest restore time (at the view's
    ``restore_s``), then fewer victims, then the lower domain (the victims chosen as
    :func:`preempt_plan.plan` chooses them)."""
    fabric = view.topology.fabric
    level = fabric.level_index(gang.topology.required_level)
    best = None
    for d in fabric.by_level[level]:
        inside = set(fabric.domains[d].nodes)
        have = sum(free[n] for n in inside)
        if have >= gang.gpus:
            continue
        holders = [(j, sum(g for n, g in j.placement.alloc if n in inside)) for j in candidates_]
        holders = [(j, t) for j, t in holders if t > 0]
        chosen = []
        for j, t in holders:
            if have >= gang.gpus:
                break
            chosen.append((j, t))
            have += t
        if have < gang.gpus:
            continue
        for j, t in sorted(chosen, key=lambda c: -c[0].gpus):
            if have - t >= gang.gpus:
                chosen.remove((j, t))
                have -= t
        after = list(free)
        for j, _ in chosen:
            j.placement.release(after)
        placement = place(after, view)
        if placement is None:
            continue
        key = (sum(j.gpus for j, _ in chosen) * view.restore_s, len(chosen), d)
        if best is None or key < best[0]:
            best = (key, tuple(j.job_id for j, _ in chosen), placement)
    return best


@settings(max_examples=80, deadline=None)
@given(remaining=st.lists(st.sampled_from([10.0, 100.0, 1_000.0, 100_000.0]), min_size=12, max_size=12),
       gang_gpus=st.sampled_from([4, 8, 12, 16, 20]), level=st.sampled_from(["leaf", "spine"]),
       place_name=st.sampled_from(["topo-bestfit", "topo-aware", "consolidated", "topo-balanced"]),
       calm=st.booleans())
def test_the_plan_frees_enough_stops_only_its_victims_and_without_contention_is_as_before(
        remaining, gang_gpus, level, place_name, calm):
    gang = KnownJob("gang", "MoE", gang_gpus, 0.0, 600.0, topology=TopologyRequest(required_level=level))
    running = [single(f"r{n}", n, left) for n, left in enumerate(remaining)]
    v = build_view(SLOW, CATALOG, make_contention("link"), 0.0, [0] * 12, [gang], running)
    if calm:
        v = replace(v, predict=lambda job, placement, pending=(): Prediction(1.0))
    policy = make_policy(f"srsf+{place_name}+preempt")
    key = policy.order(v)
    queued = v.queued[0]
    outranked = sorted((j for j in v.running if key(j) > key(queued)), key=key, reverse=True)
    strategy = PLACEMENTS[place_name][0]

    def place(after, view_after):
        return strategy(queued, after, view_after, ())

    decision = policy.decide(v)
    check_view_decision(decision, v)  # a launched gang lies in one domain, on GPUs free once the named jobs stop
    by_id = {j.job_id: j for j in v.running}
    assert all(key(by_id[name]) > key(queued) for name in decision.preempt)
    found = preempt_plan.plan(queued, v, [0] * 12, outranked, place)
    if found is None:
        return
    assert sum(j.gpus for j in found.victims) >= gang_gpus and found.placement.total_gpus == gang_gpus
    assert all(key(j) > key(queued) for j in found.victims)
    after = [0] * 12
    for victim in found.victims:
        victim.placement.release(after)
    assert found.placement.fits(after)  # it needs no GPU but the named victims'
    assert {SLOW.fabric.node_domains[n][SLOW.fabric.level_index(level)] for n in found.placement.nodes} == {found.domain}
    if calm:
        expected = reference_plan(queued, v, [0] * 12, outranked, place)
        assert expected is not None and found.contention == 0.0
        assert (found.cost, tuple(j.job_id for j in found.victims), found.domain) == (
            expected[0][0], expected[1], expected[0][2])
