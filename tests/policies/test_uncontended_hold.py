"""``uncontended``'s hold: a job that waits on predicted contention holds back the later jobs of
its GPU demand in that decision, whatever their model, on every path that applies the rule (the
heuristic's index and its sorted path, the anchor of the learned policies).
Trying the others instead costs average JCT (``bench/uncontended_skip.py``); this pins the rule.

The case: on 3 nodes of 4 GPUs a DLRM job holds node 0 and half of node 1. Queued: x
(Transformer-XL, 6 GPUs, ranked first) would run at 0.77x beside it, so ``uncontended`` refuses
it; y (GraphSage, 6 GPUs) would run unslowed there, and alone it is placed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.contention.base import RunningJob, predictor
from deepshare.core.topology import uniform
from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.policies.anchor import anchor_pick
from deepshare.policies.encoding import PartialDecision, anchor_launch
from deepshare.policies.placement import PLACEMENTS

CATALOG = default_catalog()
TOPOLOGY = uniform(3, 4)
HELD = Placement.of({0: 4, 1: 2})


def view_of(*queued: JobView) -> ClusterView:
    state = make_contention("profiled").new_state(TOPOLOGY, CATALOG)
    state.add(RunningJob("r", "DLRM", 6, HELD))
    running = JobView("r", "DLRM", 6, 0.0, 990.0, 60.0, "heavy", placement=HELD)
    return ClusterView(10.0, TOPOLOGY, CATALOG, (0, 2, 4), queued, (running,), predictor(state))


X = JobView("x", "Transformer-XL", 6, 10.0, 500.0, 0.0, "heavy", queued_since=10.0)
Y = JobView("y", "GraphSage", 6, 10.0, 600.0, 0.0, "heavy", queued_since=10.0)


def test_the_placement_refuses_x_for_contention_and_places_y() -> None:
    view = view_of(X, Y)
    place = PLACEMENTS["uncontended"][0]
    assert place(X, list(view.free), view, ()) is None
    assert place(Y, list(view.free), view, ()) == Placement.of({1: 2, 2: 4})
    assert make_policy("srsf+uncontended").decide(view_of(Y)).launch  # alone, y launches


@pytest.mark.parametrize("name", ["fifo+uncontended", "srsf+uncontended", "bsrsf+uncontended",
                                  "srsf+uncontended+migrate"])
def test_x_waiting_holds_back_y_in_the_decision(name: str) -> None:
    policy = make_policy(name)
    assert not policy.decide(view_of(X, Y)).launch
    if hasattr(policy, "use_index"):
        assert not replace(policy, use_index=False).decide(view_of(X, Y)).launch  # the sorted path alike


def test_the_learned_policies_anchor_holds_the_same() -> None:
    view = view_of(X, Y)
    assert anchor_pick(view, view.free, set(), (), ("srsf", "uncontended")) is None
    assert anchor_launch(PartialDecision(view), ("srsf", "uncontended")) is None
