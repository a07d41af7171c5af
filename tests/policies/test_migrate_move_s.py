"""``+migrate`` costs a move at the run's migration overhead, the view's ``move_s``: the
simulator's ``--migrate-overhead-s``, a placement request's ``move_s``, 30 s by default. The rule
costed every move at 30 s whatever the run said, so a run whose moves cost 300 s still moved jobs
whose saving paid back only 30 s.

The hand case is ``test_migrate``'s: moving ``a`` saves 0.6656 x its remaining seconds, and a move
is made when that is at least twice its cost."""

from __future__ import annotations

import dataclasses
import math

import pytest
from restore_cases import two_ways_view
from test_migrate import Waits, view_at

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.types import Migrate, Placement, WAIT
from deepshare.core.view import DEFAULT_MOVE_S
from deepshare.policies.migrate import MIGRATE_WINDOW_S, Migrating, MigrationRule


def moves_at(move_s: float, remaining_s: float, rule: MigrationRule = MigrationRule()):
    """The moves of a ``+migrate`` policy on the hand case, a window after ``a`` became slow."""
    policy = Migrating("waits+migrate", Waits(), rule)
    policy.decide(dataclasses.replace(view_at(1000.0, remaining_s), move_s=move_s))
    return policy.decide(dataclasses.replace(view_at(1000.0 + MIGRATE_WINDOW_S, remaining_s), move_s=move_s)).migrate


@pytest.mark.parametrize("move_s, remaining_s, moves", [
    (30.0, 100.0, True),   # 66.56 s saved >= 2 x 30 s
    (34.0, 100.0, False),  # 66.56 s < 2 x 34 s
    (300.0, 1000.0, True),  # 665.6 s >= 2 x 300 s
    (340.0, 1000.0, False),  # 665.6 s < 2 x 340 s
    (0.0, 80.0, True),     # at 30 s, 53 s saved did not pay; a free move does
])
def test_a_move_is_made_when_its_saving_pays_for_the_views_move_time(move_s, remaining_s, moves):
    found = moves_at(move_s, remaining_s)
    assert found == ((Migrate("a", Placement(((2, 8),))),) if moves else ())


def test_a_rule_with_its_own_cost_ignores_the_views():
    assert moves_at(0.0, 80.0, MigrationRule(cost_s=30.0)) == ()
    assert moves_at(300.0, 100.0, MigrationRule(cost_s=30.0)) == (Migrate("a", Placement(((2, 8),))),)


def test_the_default_is_the_simulators():
    assert view_at(0.0, 1.0).move_s == DEFAULT_MOVE_S == SimConfig().migrate_overhead_s == 30.0


def test_the_simulators_migrate_overhead_reaches_its_views():
    sim = Simulator.from_view(two_ways_view(), make_contention("profiled"), SimConfig(migrate_overhead_s=45.0))
    view = sim.advance()
    assert view is not None and view.move_s == 45.0


def test_a_copy_of_a_view_moves_at_its_move_time():
    """``from_view`` without a config costs a move as the view says (the planner's rollouts)."""
    view = dataclasses.replace(two_ways_view(), move_s=7.0, restore_s=9.0)
    config = Simulator.from_view(view, make_contention("profiled")).config
    assert (config.migrate_overhead_s, config.preempt_overhead_s) == (7.0, 9.0)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_a_view_refuses_a_move_time_out_of_its_domain(bad):
    with pytest.raises(DeepShareError, match="move_s"):
        dataclasses.replace(two_ways_view(), move_s=bad)


@pytest.mark.parametrize("bad", [-1.0, math.nan])
def test_a_rule_refuses_a_negative_or_nan_cost(bad):
    with pytest.raises(ValueError, match="invalid migration rule"):
        MigrationRule(cost_s=bad)


def test_a_policy_that_never_migrates_reads_nothing_of_it():
    assert Waits().decide(dataclasses.replace(view_at(1000.0, 100.0), move_s=0.0)) == WAIT
