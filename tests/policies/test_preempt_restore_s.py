"""Topology-aware preemption costs a stop at the run's restore time, the view's ``restore_s``:
the plan's victims cost GPUs x ``restore_s``, and the heuristics planned at 30 s whatever the
simulator's ``preempt_overhead_s`` or a placement request's ``restore_s`` said."""

from __future__ import annotations

import dataclasses
import math

import pytest

from restore_cases import EXPECTED, two_ways_view

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.feasibility import check_view_decision
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.view import DEFAULT_RESTORE_S
from deepshare.policies import make_policy

POLICIES = ["srsf+topo-aware+preempt", "srsf+consolidated+preempt", "srsf+topo-bestfit+preempt"]


def assert_plan(decision, view, restore_s: float) -> None:
    check_view_decision(decision, view)
    victim, alloc = EXPECTED[restore_s]
    assert decision.preempt == (victim,)
    assert [(launch.job_id, launch.placement.alloc) for launch in decision.launch] == [("gang", alloc)]


@pytest.mark.parametrize("restore_s", sorted(EXPECTED))
@pytest.mark.parametrize("policy", POLICIES)
def test_the_plan_costs_a_stop_at_the_views_restore_time(policy, restore_s):
    view = dataclasses.replace(two_ways_view(), restore_s=restore_s)
    assert_plan(make_policy(policy).decide(view), view, restore_s)


@pytest.mark.parametrize("restore_s", sorted(EXPECTED))
def test_the_simulators_preempt_overhead_reaches_the_plan(restore_s):
    """A simulation going on from the hand case under ``preempt_overhead_s`` shows it on its
    views, and the first decision plans at it."""
    sim = Simulator.from_view(two_ways_view(), make_contention("profiled"), SimConfig(preempt_overhead_s=restore_s))
    view = sim.advance()
    assert view is not None and view.restore_s == restore_s
    assert_plan(make_policy("srsf+topo-aware+preempt").decide(view), view, restore_s)


def test_a_copy_of_a_view_restores_at_its_restore_time():
    """``from_view`` without a config restores as the view says (the planner's rollouts)."""
    view = dataclasses.replace(two_ways_view(), restore_s=7.0)
    assert Simulator.from_view(view, make_contention("profiled")).config.preempt_overhead_s == 7.0


def test_the_default_is_the_simulators():
    assert two_ways_view().restore_s == DEFAULT_RESTORE_S == SimConfig().preempt_overhead_s == 30.0


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_a_view_refuses_a_restore_time_out_of_its_domain(bad):
    with pytest.raises(DeepShareError, match="restore_s"):
        dataclasses.replace(two_ways_view(), restore_s=bad)
