"""The fabric encoding columns (:data:`deepshare.policies.extra_features.FABRIC_FEATURES`, issue 36):
hand-checked values on the tiny Clos fabric (a launch inside one leaf, split over two leaves,
over two spines; BestFit's domain; the largest free blocks), a flat cluster, the incremental
answers against a from-scratch reference over a decision's steps, and learned policies that
read them deciding a short simulation end to end.

The fabric (tests/fabric_cases.py): 2 spines x 2 leaves x 2 NVLink domains x 2 nodes of 4 GPUs;
nodes 0-1 are NVLink domain s0/l0/n0, 2-3 s0/l0/n1, 0-3 leaf s0/l0, 0-7 spine s0, and so on.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabric_cases import TINY_CLOS

from deepshare.core.contention import make_contention
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies.encoding import FEATURES, Candidate, EncodingConfig, PartialDecision, encode
from deepshare.policies.extra_features import EXTRA_FEATURES, FABRIC_FEATURES, extra_columns

CATALOG = default_catalog()
FABRIC = TINY_CLOS.fabric
LAUNCH = FABRIC_FEATURES[:8]
FREE = ("fabric_free_l0", "fabric_free_l1", "fabric_free_l2", "fabric_free_top")


def view(topology, free, *jobs):
    return build_view(topology, CATALOG, make_contention("profiled"), 0.0, free, list(jobs), [])


def job(gpus: int, request: TopologyRequest = NO_TOPOLOGY, name: str = "j") -> KnownJob:
    return KnownJob(name, "FSDP", gpus, 0.0, 600.0, topology=request)


def columns(partial: PartialDecision, rows: list[Candidate]) -> list[dict[str, float]]:
    """The fabric columns of ``rows`` (any placements, hand-made) on ``partial``, by name."""
    got = extra_columns(partial.state(), rows, False, FABRIC_FEATURES)
    return [dict(zip(FABRIC_FEATURES, values)) for values in got]


def blocks(l0: int, l1: int, l2: int, top: int) -> dict[str, float]:
    return dict(zip(FREE, (math.log2(1 + b) / 4 for b in (l0, l1, l2, top))))


# Spine s0 (nodes 0-7) is free; in spine s1, NVLink domain s1/l0/n0 (nodes 8-9) is busy, s1/l0/n1
# (nodes 10-11) free, and leaf s1/l1 (nodes 12-15) has 2 free GPUs per node. Free: 48 GPUs.
CLOS_FREE = [4] * 8 + [0, 0, 4, 4] + [2] * 4
INSIDE_LEAF = Placement(((0, 4), (1, 4), (2, 4), (3, 4)))  # leaf s0/l0, two NVLink domains 8:8
TWO_LEAVES = Placement(((0, 4), (1, 4), (4, 4), (5, 4)))  # leaves s0/l0 and s0/l1, 8:8
TWELVE_FOUR = Placement(((0, 4), (1, 4), (2, 4), (4, 4)))  # 12:4 over two leaves, 3 NVLink domains
TWO_SPINES = Placement(((0, 4), (1, 4), (10, 4), (11, 4)))  # spines s0 and s1, 8:8


def test_a_launch_inside_one_leaf_against_one_split_over_two_leaves_and_over_two_spines():
    v = view(TINY_CLOS, CLOS_FREE, job(16, TopologyRequest(preferred_level="leaf")))
    j = v.queued[0]
    rows = [Candidate(None, None)] + [Candidate(j, p) for p in (INSIDE_LEAF, TWO_LEAVES, TWELVE_FOUR, TWO_SPINES)]
    wait, leaf, leaves, twelve, spines = columns(PartialDecision(v), rows)
    # BestFit for 16 GPUs: no NVLink domain holds 16 (8 at most); the least free leaf holding 16 has 16
    bestfit = 0.0
    free_blocks = blocks(8, 16, 32, 32)
    assert wait == {**dict.fromkeys(LAUNCH, 0.0), **free_blocks}
    assert leaf == {
        "fabric_span_low": 0.25,  # log2(2 NVLink domains) / 4
        "fabric_span_top": 0.0,
        "fabric_crossed": 1 / 3,  # the NVLink level, the lowest of 3
        "fabric_cross_traffic": (1.0 + 0.0 + 0.0) / 3,  # 2(2-1)/2 at the NVLink level only
        "fabric_outside_share": 0.5,  # 8 of 16 outside the largest NVLink domain
        "fabric_domain_slack": 0.0,  # leaf s0/l0 has exactly 16 free
        "fabric_bestfit_slack": bestfit,
        "fabric_request": 1.0,  # preferred leaf: inside one
        **free_blocks,
    }
    assert leaves == {
        **leaf,
        "fabric_crossed": 2 / 3,
        "fabric_cross_traffic": (1.0 + 1.0 + 0.0) / 3,
        "fabric_domain_slack": math.log2(32 / 16) / 4,  # the smallest domain holding it: spine s0, 32 free
        "fabric_request": -1.0,  # the preference missed
    }
    assert twelve == {
        **leaves,
        "fabric_span_low": math.log2(3) / 4,
        "fabric_cross_traffic": (2 * 2 / 3 + 1.0 + 0.0) / 3,  # 3 NVLink domains: 2(3-1)/3
    }
    assert spines == {
        **leaves,
        "fabric_span_top": 0.25,
        "fabric_crossed": 1.0,
        "fabric_cross_traffic": 1.0,
        "fabric_domain_slack": math.log2(48 / 16) / 4,  # spans the top level: the cluster's 48 free
    }


def test_bestfit_is_the_least_free_domain_at_the_lowest_level_that_holds_the_demand():
    v = view(TINY_CLOS, CLOS_FREE, job(4, name="small"), job(8, name="mid"), job(20, name="big"), job(40, name="huge"))
    small, mid, big, huge = v.queued
    rows = [Candidate(small, Placement(((0, 4),))), Candidate(mid, Placement(((2, 4), (3, 4)))),
            Candidate(big, Placement(((0, 4), (1, 4), (2, 4), (3, 4), (4, 4)))),
            Candidate(huge, Placement(tuple((n, 4) for n in range(8)) + ((10, 4), (11, 4))))]
    got = [row["fabric_bestfit_slack"] for row in columns(PartialDecision(v), rows)]
    # 4 GPUs: NVLink domains of s1/l1 have 4 free (4/4); 8: an NVLink domain of 8 (8/8);
    # 20: no leaf holds 20 (16 at most), spine s1 has 16, s0 32 (32/20); 40: no domain, the cluster's 48
    assert got == [0.0, 0.0, math.log2(32 / 20) / 4, math.log2(48 / 40) / 4]
    # a required level met: +1 (and a job that asks for a level the launch spans: -1)
    req = view(TINY_CLOS, CLOS_FREE, job(8, TopologyRequest(required_level="nvlink")))
    inside, across = columns(PartialDecision(req), [Candidate(req.queued[0], Placement(((0, 4), (1, 4)))),
                                                    Candidate(req.queued[0], Placement(((1, 4), (2, 4))))])
    assert (inside["fabric_request"], across["fabric_request"]) == (1.0, -1.0)
    assert (inside["fabric_domain_slack"], inside["fabric_outside_share"], inside["fabric_crossed"]) == (0.0, 0.0, 0.0)


def test_the_columns_follow_the_launches_chosen_in_a_decision():
    v = view(TINY_CLOS, CLOS_FREE, job(16, name="a"), job(8, name="b"))
    a, b = v.queued
    partial = PartialDecision(v)
    columns(partial, [Candidate(None, None)])  # the decision's fabric data is built before the launch
    after = partial.with_launch(a, INSIDE_LEAF)  # leaf s0/l0 is full now
    wait, split = columns(after, [Candidate(None, None), Candidate(b, Placement(((4, 4), (12, 2), (13, 2))))])
    # the largest blocks: NVLink 8 (s0/l1/n*, s1/l0/n1), leaf 16 (s0/l1), spines 16 and 16
    assert {k: wait[k] for k in FREE} == blocks(8, 16, 16, 16)
    assert split["fabric_domain_slack"] == math.log2(32 / 8) / 4  # the cluster: 48 - 16 free
    assert split["fabric_bestfit_slack"] == 0.0  # an NVLink domain with 8 free


def test_a_flat_cluster_shows_no_crossing_and_the_whole_cluster_as_its_one_domain():
    flat = parse_topology("""
name: flat
node_types:
  g: {gpus: 8}
nodes:
  - {type: g, count: 2}
""")
    assert [level.name for level in flat.fabric.levels] == ["rack"] and len(flat.fabric.domains) == 1
    v = view(flat, [8, 6], job(4), job(8, name="k"))
    j, k = v.queued
    wait, one, two = columns(PartialDecision(v), [Candidate(None, None), Candidate(j, Placement(((0, 2), (1, 2)))),
                                                  Candidate(k, Placement(((0, 8),)))])
    free_blocks = blocks(14, 14, 14, 14)  # one level: every slot shows the one rack
    assert wait == {**dict.fromkeys(LAUNCH, 0.0), **free_blocks}
    assert one == {**dict.fromkeys(LAUNCH, 0.0), "fabric_domain_slack": math.log2(14 / 4) / 4,
                   "fabric_bestfit_slack": math.log2(14 / 4) / 4, **free_blocks}
    assert two["fabric_domain_slack"] == two["fabric_bestfit_slack"] == math.log2(14 / 8) / 4


def reference(v, free: list[int], row: Candidate) -> list[float]:
    """The fabric columns of ``row`` from scratch: the fabric's spans, domain sums over the nodes."""
    fabric = v.topology.fabric
    levels = len(fabric.levels)
    sums = [0] * len(fabric.domains)
    for node, f in enumerate(free):
        for d in fabric.node_domains[node]:
            sums[d] += f
    top = [max(sums[d] for d in fabric.by_level[min(i, levels - 1)]) for i in (0, 1, 2, levels - 1)]
    glob = [math.log2(1 + b) / 4 for b in top]
    if row.placement is None:
        return [0.0] * 8 + glob
    job, nodes = row.job, row.placement.nodes
    spans = [len(fabric.spanned(nodes, level)) for level in range(levels)]
    held: dict[int, int] = {}
    for node, gpus in row.placement.alloc:
        held[fabric.node_domains[node][0]] = held.get(fabric.node_domains[node][0], 0) + gpus
    one = [level for level in range(levels) if spans[level] == 1]
    enclosing = sums[fabric.spanned(nodes, one[0])[0]] if one else sum(free)
    fits = [(level, sums[d]) for level in range(levels) for d in fabric.by_level[level] if sums[d] >= job.gpus]
    best = min(fits)[1] if fits else sum(free)
    asked = job.topology.required_level or job.topology.preferred_level
    return [
        math.log2(spans[0]) / 4, math.log2(spans[-1]) / 4, sum(m > 1 for m in spans) / levels,
        sum(2 * (m - 1) / m for m in spans) / levels, 1 - max(held.values()) / job.gpus,
        math.log2(enclosing / job.gpus) / 4, math.log2(best / job.gpus) / 4,
        0.0 if asked is None else (1.0 if spans[fabric.level_index(asked)] == 1 else -1.0),
    ] + glob


@pytest.mark.parametrize("topology, free", [(TINY_CLOS, CLOS_FREE), (TINY_CLOS, [4] * 16)])
def test_every_step_of_a_decision_matches_the_reference(topology, free):
    jobs = [job(g, r, f"j{i}") for i, (g, r) in enumerate([
        (16, TopologyRequest(required_level="leaf")), (8, TopologyRequest(preferred_level="nvlink")), (4, NO_TOPOLOGY),
        (12, TopologyRequest(preferred_level="leaf")), (2, NO_TOPOLOGY), (6, TopologyRequest(required_level="spine")),
    ])]
    v = view(topology, free, *jobs)
    config = EncodingConfig(max_candidates=12, jobs_considered=6, anchor=None, extra_features=FABRIC_FEATURES)
    partial, now = PartialDecision(v), list(free)
    for step in range(5):
        obs, rows = encode(partial, config)
        want = np.float32([reference(v, now, row) for row in rows])
        np.testing.assert_array_equal(obs["observations"][:len(rows), len(FEATURES):], want)
        if len(rows) == 1:
            break
        pick = rows[1 + (2 * step) % (len(rows) - 1)]
        pick.placement.take(now)
        partial = partial.with_launch(pick.job, pick.placement)
    assert step >= 2


def test_the_fabric_columns_come_after_the_others_and_change_nothing_before_them():
    v = view(TINY_CLOS, CLOS_FREE, job(16), job(8, name="b"))
    plain = EncodingConfig(max_candidates=8, jobs_considered=2)
    both = EncodingConfig(max_candidates=8, jobs_considered=2, extra_features=EXTRA_FEATURES[:4] + FABRIC_FEATURES[3:6])
    timed = EncodingConfig(max_candidates=8, jobs_considered=2, extra_features=EXTRA_FEATURES[:4])
    fabric = EncodingConfig(max_candidates=8, jobs_considered=2, extra_features=FABRIC_FEATURES)
    (p, rows), (b, rows_b), (t, _), (f, _) = (encode(PartialDecision(v), c) for c in (plain, both, timed, fabric))
    assert rows == rows_b and both.features == FEATURES + EXTRA_FEATURES[:4] + FABRIC_FEATURES[3:6]
    n = len(FEATURES)
    np.testing.assert_array_equal(b["observations"][:, :n], p["observations"])
    np.testing.assert_array_equal(b["observations"][:, n:n + 4], t["observations"][:, n:])
    np.testing.assert_array_equal(b["observations"][:, n + 4:], f["observations"][:, n + 3:n + 6])
    with pytest.raises(ValueError, match="in this order"):
        EncodingConfig(extra_features=("fabric_span_low", "is_anchor"))
    with pytest.raises(ValueError, match=r"unknown extra features \['fabric_spans'\]"):
        EncodingConfig(extra_features=("fabric_spans",))


def least_crossing(obs):
    """A scorer that reads the fabric columns: launch the row crossing the least, then the tightest fit."""
    rows = obs["observations"]
    cross = rows[:, len(FEATURES) + FABRIC_FEATURES.index("fabric_cross_traffic")]
    slack = rows[:, len(FEATURES) + FABRIC_FEATURES.index("fabric_domain_slack")]
    scores = 10.0 - cross - 0.1 * slack
    scores[0] = -1.0  # never wait by choice
    return scores


@pytest.mark.parametrize("name", ["rl-base", "rl-hybrid"])
def test_a_learned_policy_with_the_fabric_columns_runs_a_simulation_on_a_fabric(name):
    from deepshare.core.simulator import Simulator
    from deepshare.core.traces.generator import generate
    from deepshare.policies.learned import HybridRules, LearnedPolicy

    trace = generate(30, rate_per_s=1 / 300, demand={4: 2.0, 8: 2.0, 16: 1.0}, median_duration_s=1800.0, seed=5,
                     required_level="leaf", required_share=0.3, preferred_level="nvlink", preferred_share=0.3)
    config = EncodingConfig(extra_features=EXTRA_FEATURES[:4] + FABRIC_FEATURES)
    policy = LearnedPolicy(name, least_crossing, config, HybridRules() if name == "rl-hybrid" else None)
    sim = Simulator(TINY_CLOS, trace.jobs, make_contention("link"))
    report = sim.run(policy)
    assert report.finished == 30 and not sim.rejections


def test_a_policy_file_with_the_fabric_columns_loads_and_decides(tmp_path):
    from policy_files import write_policy_file

    from deepshare.policies import make_policy

    config = EncodingConfig(max_candidates=8, jobs_considered=2, extra_features=FABRIC_FEATURES)
    policy = make_policy(f"rl-base={write_policy_file(tmp_path / 'f.pt', {}, config)}")
    assert policy.encoding.extra_features == FABRIC_FEATURES
    decision = policy.decide(view(TINY_CLOS, CLOS_FREE, job(16), job(8, name="b")))
    assert {launch.job_id for launch in decision.launch} <= {"j", "b"}


def test_an_env_with_the_fabric_columns_observes_them_on_its_flat_clusters():
    from deepshare.rl.env import DeepShareEnv

    config = {"generated_fraction": 1.0, "generated_jobs": 20, "generated_nodes": [2], "max_candidates": 8,
              "extra_features": list(FABRIC_FEATURES)}
    env = DeepShareEnv(config)
    assert env.observation_space["observations"].shape == (8, len(FEATURES) + len(FABRIC_FEATURES))
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    launch_columns = obs["observations"][:, len(FEATURES):len(FEATURES) + 5]  # spans, crossing, traffic, outside
    assert not launch_columns.any()  # one rack: nothing crosses a domain
