"""Long learned decisions are the straightforward reference's, launch for launch.

What the encoder keeps across the steps of one decision (each job's constant columns, each
(job, placement)'s record, a settled contention-aware answer shared by the jobs of every model)
pays only on decisions of many launches, which the small random requests of
``test_decide_scale.py`` rarely reach. Here whole decisions of hundreds of launches, on a flat
cluster and on a fabric with jobs that require or prefer a domain, with mixed 1/2/4/8-GPU jobs,
with and without the optional columns, for rl-base, rl-hybrid and rl-hybrid-preempt (the shipped
networks) and for scorers that wait and pick other rows now and then, must equal the decisions
taken with the reference encoding (``decide_reference.encode``: every step from scratch).
Behaviour only.
"""

from __future__ import annotations

import numpy as np
import pytest

import decide_reference
from deepshare.core.contention import make_contention
from deepshare.core.workloads import default_catalog
from deepshare.policies import learned, make_policy
from deepshare.policies.encoding import EncodingConfig, PartialDecision
from deepshare.policies.extra_features import EXTRA_FEATURES
from deepshare.policies.learned import HybridRules, LearnedPolicy
from deepshare.serving.samples import scale_request
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import request_to_view

LEVELS = (("leaf", 4), ("spine", 16))


def fabric(body: dict, every: int = 5) -> dict:
    """``body``'s nodes in leaves of four and spines of sixteen; every ``every``-th job requires a
    leaf, the one after it prefers a spine."""
    out = dict(body)
    out["levels"] = [{"name": name} for name, _ in LEVELS]
    out["nodes"] = [{**node, "domains": {name: f"{name}{i // size}" for name, size in LEVELS}}
                    for i, node in enumerate(body["nodes"])]
    out["pending"] = [{**job, "required_level": "leaf"} if i % every == 0 else
                      {**job, "preferred_level": "spine"} if i % every == 1 else job
                      for i, job in enumerate(body["pending"])]
    return out


REQUESTS = {
    "flat 1-GPU": lambda: scale_request(24, 150),
    "flat mixed": lambda: scale_request(32, 160, (1, 2, 4, 8)),
    "fabric mixed": lambda: fabric(scale_request(32, 140, (1, 2, 4, 8))),
}


def view_of(name: str, contention: str = "profiled"):
    return request_to_view(PlacementRequest.model_validate(REQUESTS[name]()), default_catalog(),
                           make_contention(contention))


def reference_decide(policy, view):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(learned, "encode", decide_reference.encode)
        return policy.decide(view)


def wandering_scorer(seed: int):
    """Scores that depend on the observation and now and then prefer another row or wait."""

    def score(obs):
        rows = obs["observations"]
        weights = np.random.default_rng(seed).normal(size=rows.shape[1])
        return rows @ weights + 0.5 * np.sin(np.arange(rows.shape[0]) * float(rows.sum()))

    return score


POLICIES = {
    "rl-base": lambda: make_policy("rl-base"),
    "rl-hybrid": lambda: make_policy("rl-hybrid"),
    "rl-hybrid-preempt": lambda: make_policy("rl-hybrid-preempt"),
    "wandering, extras": lambda: LearnedPolicy("rl-base", wandering_scorer(1), EncodingConfig(
        anchor=("bsrsf", "uncontended"), offer_order="bsrsf", extra_features=EXTRA_FEATURES)),
    "wandering hybrid, no extras": lambda: LearnedPolicy("rl-hybrid", wandering_scorer(2), EncodingConfig(),
                                                         HybridRules(min_ratio=0.5)),
}


@pytest.mark.parametrize("request_name", sorted(REQUESTS))
@pytest.mark.parametrize("policy_name", sorted(POLICIES))
def test_a_long_decision_equals_the_reference(request_name, policy_name):
    policy = POLICIES[policy_name]()
    fast = policy.decide(view_of(request_name))
    assert fast == reference_decide(POLICIES[policy_name](), view_of(request_name))
    if policy_name.startswith("rl-"):
        assert len(fast.launch) >= 50  # long enough for the kept rows and records to be reused


@pytest.mark.parametrize("request_name", ["flat 1-GPU", "flat mixed"])
@pytest.mark.parametrize("contention", ["profiled", "link"])
def test_every_step_of_a_long_decision_encodes_as_the_reference(contention, request_name):
    """Observations and rows, bit for bit, at every step until the cluster is full (the link
    model calls no placement isolated: every row's prediction is asked)."""
    config = EncodingConfig(anchor=("bsrsf", "uncontended"), offer_order="bsrsf", extra_features=EXTRA_FEATURES)
    view = view_of(request_name, contention)
    partial, fresh = PartialDecision(view), PartialDecision(view)
    for step in range(300):
        rows = decide_reference.assert_encodes_as_reference(partial, fresh, config)
        if len(rows) == 1:
            break
        pick = rows[1 + (step * 7) % (len(rows) - 1)] if step % 3 else rows[1]
        partial = partial.with_launch(pick.job, pick.placement)
        fresh = fresh.with_launch(pick.job, pick.placement)
    assert step >= 80
