"""A decision's state carried from step to step answers what a state built afresh answers.

A learned decision keeps one :class:`~deepshare.policies.step_state.StepState` for all its steps
and reuses across them what depends on the decision alone (the orders' key functions, each
job's order key as it was read, each offered job's shape numbers for the placement
generators); :class:`~deepshare.policies.encoding.PartialDecision` built from the same launches
rebuilds all of it. On random clusters (a fabric, jobs that require a domain, several models
and sizes) and random scorers, every step's observation and rows must be the same both ways,
and so the decision.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.workloads import default_catalog
from deepshare.policies.encoding import EncodingConfig, PartialDecision, encode
from deepshare.policies.extra_features import EXTRA_FEATURES, FABRIC_FEATURES
from deepshare.policies.learned import HybridRules, best_row, take
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import request_to_view

MODELS = ("MoE", "FSDP", "MobileNetV3", "VGG19")
CATALOG = default_catalog()
CONTENTION = make_contention("profiled")
CONFIGS = (
    EncodingConfig(),
    EncodingConfig(max_candidates=6, jobs_considered=3, offer_order="bsrsf", anchor=("bsrsf", "uncontended"),
                   extra_features=EXTRA_FEATURES + FABRIC_FEATURES),
)


def request(nodes: int, busy: list[int], jobs: list[tuple[int, int, bool, int]]) -> dict:
    """``nodes`` 8-GPU NVLink nodes in NVLink pairs and leaves of four, ``busy[i]`` GPUs of node i in
    use by a running job, and the queued ``jobs`` as (GPUs, model, requires a leaf, remaining)."""
    levels = (("nvlink", 2), ("leaf", 4))
    return {
        "now": 10000.0,
        "levels": [{"name": name, "nvlink": name == "nvlink"} for name, _ in levels],
        "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 8 - busy[i], "fabric": "nvlink", "nvlink_gbps": 7200,
                   "domains": {name: f"{name}{i // size}" for name, size in levels}} for i in range(nodes)],
        "running": [{"job_id": f"r{i}", "model": MODELS[i % len(MODELS)], "placement": {f"n{i}": busy[i]}}
                    for i in range(nodes) if busy[i]],
        "pending": [{"job_id": f"p{i}", "model": MODELS[model], "gpus": gpus, "submitted_at": float(i % 7),
                     "remaining_s": 100.0 * remaining, **({"required_level": "leaf"} if leaf else {})}
                    for i, (gpus, model, leaf, remaining) in enumerate(jobs)],
    }


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.integers(2, 8),
    busy=st.lists(st.integers(0, 8), min_size=8, max_size=8),
    jobs=st.lists(st.tuples(st.sampled_from((1, 2, 4, 8)), st.integers(0, 3), st.booleans(), st.integers(1, 50)),
                  min_size=1, max_size=30),
    config=st.sampled_from(CONFIGS),
    hybrid=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_each_step_encodes_as_a_fresh_state_would(nodes, busy, jobs, config, hybrid, seed):
    view = request_to_view(PlacementRequest.model_validate(request(nodes, busy[:nodes], jobs)), CATALOG, CONTENTION)
    rules = HybridRules() if hybrid else None
    rng = np.random.default_rng(seed)
    partial = PartialDecision(view)
    for _ in range(len(jobs) + 1):
        obs, rows = encode(partial, config)
        fresh_obs, fresh_rows = encode(PartialDecision(view, partial.launches), config)
        assert rows == fresh_rows
        np.testing.assert_array_equal(obs["observations"], fresh_obs["observations"])
        np.testing.assert_array_equal(obs["action_mask"], fresh_obs["action_mask"])
        if len(rows) == 1:
            break
        scores = rng.normal(size=len(obs["action_mask"])).astype(np.float32)
        step = take(partial, rows, obs["action_mask"], best_row(scores, obs["action_mask"]), rules)
        if step.launched is None:
            break
        partial = step.partial


@settings(max_examples=60, deadline=None)
@given(
    free=st.lists(st.integers(0, 8), min_size=1, max_size=12),
    changes=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 8)), max_size=20),
    ask_first=st.booleans(),
)
def test_free_index_keeps_its_count_of_nodes_with_free_gpus(free, changes, ask_first):
    from deepshare.policies.free_index import FreeIndex

    index = FreeIndex(free)
    if ask_first:
        index.nonzero()  # counted now, then kept by each change
    for node, value in changes:
        index.set(node % len(free), value)
        assert index.nonzero() == sum(1 for f in index if f > 0)
        assert index.copy().nonzero() == index.nonzero()
