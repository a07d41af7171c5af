"""``packed`` waits for the fewest nodes a job can ever use, counted in the domains it may use.

A job that requires a level is placed inside one domain of that level (or below); on a fabric
whose domains differ, the cluster's fewest nodes may exist in no such domain. ``packed`` (and
``uncontended``, built on it) then refused every domain until its 600 s relaxation, on an idle
cluster too: the simulator stopped with SimulationStalled (found in review).
"""

from __future__ import annotations

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.fabric import TopologyRequest
from deepshare.core.simulator import Simulator
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.policies.placement import least_nodes, min_nodes

LEAF = TopologyRequest(required_level="leaf")


def fabric(big_leaf_gpus: tuple[int, ...]):
    """Leaf l0: nodes of ``big_leaf_gpus`` GPUs; leaf l1: four 2-GPU nodes; one spine."""
    types = {f"n{g}": {"gpus": g, "nic_gbps": 400} for g in {*big_leaf_gpus, 2}}
    lines = ["name: uneven", "node_types:"]
    lines += [f"  {name}: {{gpus: {t['gpus']}, nic_gbps: 400}}" for name, t in sorted(types.items())]
    lines += ["levels:", "  - {name: leaf}", "  - {name: spine}", "nodes:"]
    lines += [f"  - {{type: n{g}, count: 1, prefix: a{i}-, domains: {{leaf: l0, spine: s0}}}}"
              for i, g in enumerate(big_leaf_gpus)]
    lines += ["  - {type: n2, count: 4, prefix: b, domains: {leaf: l1, spine: s0}}"]
    return parse_topology("\n".join(lines) + "\n")


@pytest.mark.parametrize("name", ["fifo+packed", "srsf+uncontended", "srsf+packed+preempt", "srsf+packed+migrate",
                                  "bsrsf+uncontended+preempt"])
def test_a_gang_whose_only_domain_is_made_of_small_nodes_starts_on_an_idle_cluster(name):
    topology = fabric((6,))  # the cluster's fewest for 8 GPUs is 2 nodes; the only leaf holding 8 needs 4
    assert min_nodes(8, topology.capacity) == 2
    job = JobSpec("gang", "GraphSage", 8, submit_time=0.0, duration_s=100.0, topology=LEAF)
    report = Simulator(topology, [job], make_contention("none"), catalog=default_catalog()).run(make_policy(name))
    assert report.records[0].first_start_s == 0.0


def view_at(topology, now: float, free: list[int], request: TopologyRequest = LEAF):
    queued = [KnownJob("gang", "GraphSage", 8, 0.0, 100.0, estimate_s=100.0, topology=request)]
    return build_view(topology, default_catalog(), make_contention("none"), now, free, queued, [], durations="exact")


def test_least_nodes_counts_the_domains_the_request_allows():
    topology = fabric((6,))
    view = view_at(topology, 0.0, list(topology.capacity))
    gang = view.queued[0]
    assert least_nodes(gang, view, in_domain=True) == 4  # inside a leaf: the leaves that hold 8 GPUs
    assert least_nodes(gang, view) == 2  # on the whole cluster (a preferred level's fallback): the cluster's
    plain = KnownJob("plain", "GraphSage", 8, 0.0, 100.0)
    plain_view = build_view(topology, default_catalog(), make_contention("none"), 0.0, list(topology.capacity),
                            [plain], [], durations="exact")
    assert least_nodes(plain_view.queued[0], plain_view) == 2  # no request: the whole cluster's fewest
    wide = fabric((4, 4))  # l0 holds 8 GPUs on 2 nodes too
    wide_view = view_at(wide, 0.0, list(wide.capacity))
    assert least_nodes(wide_view.queued[0], wide_view, in_domain=True) == 2


def test_a_preferred_level_keeps_the_job_in_a_leaf_that_has_room():
    """Second read: with only a preferred level, packed measured in-leaf placements against the
    cluster's fewest (2 nodes) and took the cross-leaf fallback ((0, 6), (1, 2)) on an idle cluster."""
    topology = fabric((6,))
    view = view_at(topology, 0.0, list(topology.capacity), TopologyRequest(preferred_level="leaf"))
    (launch,) = make_policy("fifo+packed").decide(view).launch
    assert launch.placement.alloc == ((1, 2), (2, 2), (3, 2), (4, 2))  # inside l1, as consolidated places it
    busy_l1 = [6, 2, 2, 2, 0]  # no leaf has room: the fallback over the cluster, on its fewest nodes
    (launch,) = make_policy("fifo+packed").decide(view_at(topology, 0.0, busy_l1,
                                                          TopologyRequest(preferred_level="leaf"))).launch
    assert launch.placement.alloc == ((0, 6), (1, 2))


def test_packed_still_waits_for_a_domain_that_offers_the_fewest_nodes():
    """l0 (two 4-GPU nodes) holds the gang on 2 nodes but is busy; l1 would take 4 nodes: packed
    waits for l0 until its relaxation, as it waits for a whole node on a flat cluster."""
    topology = fabric((4, 4))
    policy = make_policy("fifo+packed")
    busy_l0 = [0, 4, 2, 2, 2, 2]  # 4 of l0's 8 GPUs are taken
    assert not policy.decide(view_at(topology, 0.0, busy_l0)).launch
    assert not policy.decide(view_at(topology, 599.0, busy_l0)).launch
    (launch,) = policy.decide(view_at(topology, 600.0, busy_l0)).launch
    assert launch.placement.alloc == ((2, 2), (3, 2), (4, 2), (5, 2))
    (launch,) = policy.decide(view_at(topology, 0.0, list(topology.capacity))).launch  # idle: l0, 2 nodes
    assert launch.placement.alloc == ((0, 4), (1, 4))
