"""The indexed decision paths give exactly the decisions of the straightforward reference.

Reference: placements on plain lists (their scans), heuristics whose placement sees a plain
list, and the encoding's original per-step code (``tests/decide_reference.py``). Compared on
random small clusters and queues (hypothesis), in a simulation, and through the service's
engine. Behaviour only: nothing here measures speed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import decide_reference
from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology
from deepshare.core.traces import load
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import learned, make_policy
from deepshare.policies.encoding import EncodingConfig, PartialDecision, encode
from deepshare.policies.extra_features import EXTRA_FEATURES
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.heuristic import HeuristicPolicy
from deepshare.policies.learned import HybridRules, LearnedPolicy
from deepshare.policies.placement import (
    by_most_free, consolidated, even_split, fit_equivalents, spread,
)
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import MODELS
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import request_to_view

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
HEURISTICS = ("srsf+packed", "las+consolidated", "fifo+contention-aware", "dlas+spread", "srtf+packed", "las+packed+preempt")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

frees = st.lists(st.integers(0, 8), min_size=1, max_size=12)


def job(gpus: int):
    """A queued job of ``gpus`` GPUs (taken from a view: the view types move between modules)."""
    body = {"now": 0.0, "nodes": [{"name": "n0", "gpus": 8, "free_gpus": 8}], "running": [],
            "pending": [{"job_id": "j", "model": "FSDP", "gpus": 1}]}
    return dataclasses.replace(view_of(PlacementRequest.model_validate(body)).queued[0], gpus=gpus)


@FAST
@given(frees, st.integers(1, 20), st.lists(st.tuples(st.integers(0, 11), st.integers(1, 8)), max_size=6))
def test_placements_on_the_index_equal_the_scans(free, need, takes):
    index, lazy = FreeIndex(free), FreeIndex(free)
    assert index.nonzero() == sum(f > 0 for f in free)  # builds index's buckets; lazy's wait
    j = job(need)

    def same_answers() -> None:  # the index remembers answers until its free GPUs change
        assert consolidated(j, index) == consolidated(j, list(free))
        assert spread(j, index) == spread(j, list(free))
        base = consolidated(j, list(free))
        if base is not None:
            assert fit_equivalents(index, base) == fit_equivalents(list(free), base)

    same_answers()
    for node, gpus in takes:  # an index updated in place answers like a fresh one
        if node < len(free) and index[node] >= gpus:
            free[node] -= gpus
            index.take(Placement(((node, gpus),)))
            lazy[node] -= gpus
            same_answers()
    assert list(index) == list(lazy) == free and index.total == lazy.total == sum(free)
    assert list(lazy.ranked()) == list(index.ranked())
    assert list(index.ranked()) == by_most_free(free)
    assert consolidated(j, index) == consolidated(j, list(free))
    assert spread(j, index) == spread(j, list(free))
    for k in (2, 3, 4):
        assert even_split(j, index, k) == even_split(j, list(free), k)
    base = consolidated(j, list(free))
    if base is not None:
        assert fit_equivalents(index, base) == fit_equivalents(list(free), base)


@st.composite
def requests(draw):
    """A small cluster with some running jobs and a random queue (a service request body)."""
    n = draw(st.integers(1, 8))
    gpus = [draw(st.sampled_from((4, 8))) for _ in range(n)]
    running, free = [], list(gpus)
    for i in range(draw(st.integers(0, 6))):
        node = draw(st.integers(0, n - 1))
        if free[node]:
            g = draw(st.integers(1, free[node]))
            free[node] -= g
            where = {f"n{node}": g}
            other = draw(st.integers(0, n - 1))
            if other != node and free[other]:
                free[other] -= 1
                where[f"n{other}"] = 1
            running.append({"job_id": f"r{i}", "model": MODELS[i % 6], "placement": where, "attained_gpu_s": 50.0 * i})
    pending = [
        {"job_id": f"p{i}", "model": draw(st.sampled_from(MODELS)), "gpus": draw(st.sampled_from((1, 1, 2, 4, 8, 16))),
         "submitted_at": float(draw(st.integers(0, 5))), "remaining_s": float(draw(st.integers(1, 4)) * 100),
         "attained_gpu_s": float(draw(st.integers(0, 2)) * 1000.0)}
        for i in range(draw(st.integers(0, 25)))
    ]
    nodes = [{"name": f"n{i}", "gpus": gpus[i], "free_gpus": free[i]} for i in range(n)]
    body = {"now": 10.0, "nodes": nodes, "running": running, "pending": pending,
            "future_events": draw(st.booleans())}
    return PlacementRequest.model_validate(body)


def view_of(request):
    return request_to_view(request, default_catalog(), make_contention("profiled"))


def on_lists(place):
    """``place`` given a plain list: the placements' reference scans."""
    return lambda job, free, view, pending: place(job, list(free), view, pending)


def reference_heuristic(policy: HeuristicPolicy) -> HeuristicPolicy:
    return HeuristicPolicy(policy.name, policy.order, on_lists(policy.place), policy.preemptive, use_index=False)


@FAST
@given(requests(), st.sampled_from(HEURISTICS))
def test_heuristics_decide_as_the_reference(request, name):
    policy = make_policy(name)
    assert policy.decide(view_of(request)) == reference_heuristic(policy).decide(view_of(request))


def hashed_scorer(seed: int):
    """Deterministic scores that depend on the observation: picks vary, waits happen."""

    def score(obs):
        rows = obs["observations"]
        weights = np.random.default_rng(seed).normal(size=rows.shape[1])
        return rows @ weights

    return score


def reference_decide(policy, view):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(learned, "encode", decide_reference.encode)
        return policy.decide(view)


LEARNED = [
    lambda: make_policy("rl-hybrid"),
    lambda: LearnedPolicy("rl-hybrid", hashed_scorer(1), EncodingConfig(), HybridRules()),
    lambda: LearnedPolicy("rl-base", hashed_scorer(2), EncodingConfig(jobs_considered=3, max_candidates=6)),
    lambda: LearnedPolicy("rl-base", hashed_scorer(3), EncodingConfig(anchor=("las", "consolidated"))),
    lambda: LearnedPolicy("rl-hybrid", hashed_scorer(4), EncodingConfig(anchor=("dlas", "contention-aware")),
                          HybridRules(min_ratio=0.0)),
    lambda: make_policy("rl-base"),  # the shipped network reads the extra columns
    lambda: LearnedPolicy("rl-base", hashed_scorer(5), EncodingConfig(anchor=("srsf", "uncontended"), extra_features=EXTRA_FEATURES)),
]


@FAST
@given(requests(), st.integers(0, len(LEARNED) - 1))
def test_learned_policies_decide_as_the_reference(request, which):
    policy = LEARNED[which]()
    assert policy.decide(view_of(request)) == reference_decide(policy, view_of(request))


CONFIGS = [
    EncodingConfig(),
    EncodingConfig(max_candidates=2),  # wait and the anchor's launch fill every choice
    EncodingConfig(max_candidates=2, anchor=None),
    EncodingConfig(max_candidates=3, jobs_considered=1, generators=("spread", "consolidated")),
    EncodingConfig(extra_features=EXTRA_FEATURES),
    EncodingConfig(anchor=("srsf", "uncontended"), extra_features=("is_anchor", "next_finish_h")),
    EncodingConfig(anchor=None, extra_features=("is_anchor", "neighbours_max_left_h")),
]


@FAST
@given(requests(), st.sampled_from(CONFIGS))
def test_encoding_rows_and_features_match_the_reference_at_every_step(request, config):
    partial = PartialDecision(view_of(request))
    fresh = PartialDecision(view_of(request))
    for step in range(6):
        rows = decide_reference.assert_encodes_as_reference(partial, fresh, config)
        if len(rows) == 1:
            break
        pick = rows[1 + step % (len(rows) - 1)]
        partial = partial.with_launch(pick.job, pick.placement)
        fresh = fresh.with_launch(pick.job, pick.placement)


def test_an_older_partial_asked_again_gets_its_own_rows():
    body = {"now": 0.0, "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 8} for i in range(3)], "running": [],
            "pending": [{"job_id": f"p{i}", "model": "FSDP", "gpus": 1 + i % 4, "remaining_s": 100.0 * i} for i in range(8)]}
    view = view_of(PlacementRequest.model_validate(body))
    config = EncodingConfig()
    root = PartialDecision(view)
    _, rows = encode(root, config)
    a = root.with_launch(rows[1].job, rows[1].placement)
    b = root.with_launch(rows[2].job, rows[2].placement)
    for partial in (a, b, a, root):  # branches share the state: each is rebuilt or advanced correctly
        assert encode(partial, config)[1] == decide_reference.encode(PartialDecision(partial.view, partial.launches), config)[1]


@pytest.mark.parametrize("name", ["srsf+packed", "las+contention-aware", "rl-hybrid"])
def test_a_simulation_runs_as_with_the_reference(monkeypatch, name):
    def run(policy):
        sim = Simulator(load_topology("testbed"), load(TRACE).jobs[:60], make_contention("profiled"))
        return sim.run(policy)

    fast = run(make_policy(name))
    with monkeypatch.context() as m:
        m.setattr(learned, "encode", decide_reference.encode)
        policy = make_policy(name)
        ref = run(reference_heuristic(policy) if isinstance(policy, HeuristicPolicy) else policy)
    assert fast.records == ref.records and fast.avg_jct_s == ref.avg_jct_s and fast.decisions == ref.decisions


def test_the_engine_answers_as_with_the_reference(monkeypatch):
    from deepshare.serving.samples import large_request

    request = PlacementRequest.model_validate(large_request(32, 80))
    engine = PlacementEngine(EngineSettings(policy="rl-hybrid"))
    fast = engine.place(request)
    with monkeypatch.context() as m:
        m.setattr(learned, "encode", decide_reference.encode)
        ref = engine.place(request)
    assert fast == ref
    assert sum(d.action == "place" for d in fast.decisions) > 0


def test_the_scale_request_is_a_valid_request_of_the_asked_size():
    from deepshare.serving.samples import scale_request

    body = scale_request(nodes=8, pending=10, sizes=(1, 2))
    view = view_of(PlacementRequest.model_validate(body))
    assert len(view.topology.nodes) == 8 and len(view.queued) == 10 and len(view.running) == 2
    assert [j.gpus for j in view.queued] == [1, 2] * 5 and view.free == (4, 8, 8, 8, 4, 8, 8, 8)


@FAST
@given(requests(), st.sampled_from([("srsf", "packed"), ("las", "consolidated"), ("dlas", "contention-aware")]),
       st.integers(0, 4))
def test_anchor_launch_on_the_state_equals_anchor_pick(request, anchor, launches):
    from deepshare.policies.anchor import anchor_pick
    from deepshare.policies.encoding import anchor_launch

    partial = PartialDecision(view_of(request))
    for _ in range(launches + 1):
        launched = {launch.job_id for launch in partial.launches}
        expected = anchor_pick(partial.view, partial.free, launched, partial.pending(), anchor)
        assert anchor_launch(partial, anchor) == expected
        if expected is None:
            break
        partial = partial.with_launch(*expected)
