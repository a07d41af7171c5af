"""The one feasibility check the simulator, the service and the live scheduler share."""

from __future__ import annotations

import pytest

from deepshare.core.feasibility import check_decision
from deepshare.core.errors import InfeasibleDecision
from deepshare.core.types import Decision, Launch, Migrate, Placement

P = Placement.of
NAMES = ["n0", "n1"]
FREE = [2, 4]
RUNNING = {"r": P({0: 4}), "s": P({1: 2, 0: 2})}
QUEUED = {"q": 4, "w": 2}


def check(decision: Decision) -> None:
    check_decision(decision, FREE, RUNNING, QUEUED, NAMES)


@pytest.mark.parametrize(
    "decision",
    [
        Decision(),
        Decision(launch=(Launch("q", P({1: 4})), Launch("w", P({0: 2})))),
        Decision(preempt=("r",), launch=(Launch("q", P({0: 4, 1: 0})), Launch("w", P({0: 2})))),
        Decision(migrate=(Migrate("r", P({1: 4})),), launch=(Launch("q", P({0: 4})),)),
    ],
)
def test_feasible_decisions_pass(decision):
    check(decision)


@pytest.mark.parametrize(
    "decision, message",
    [
        (Decision(launch=(Launch("q", P({0: 4})),)), "4 GPUs on n0 but only 2 free"),
        (Decision(launch=(Launch("q", P({1: 2})),)), "needs 4 GPUs, placement gives 2"),
        (Decision(launch=(Launch("x", P({1: 2})),)), "cannot launch 'x': it is not queued"),
        (Decision(launch=(Launch("r", P({1: 4})),)), "cannot launch 'r': it is not queued"),
        (Decision(preempt=("q",)), "cannot preempt 'q': it is not running"),
        (Decision(migrate=(Migrate("w", P({1: 2})),)), "cannot migrate 'w': it is not running"),
        (Decision(preempt=("r",), migrate=(Migrate("r", P({1: 4})),)), "'r' appears twice"),
        (Decision(launch=(Launch("w", P({1: 2})), Launch("w", P({1: 2})))), "'w' appears twice"),
        (Decision(launch=(Launch("w", Placement(((5, 2),))),)), "unknown node index 5"),
        (Decision(launch=(Launch("w", Placement(((1, 1), (1, 1)))),)), "lists a node more than once"),
        (Decision(launch=(Launch("w", Placement(((0, -1), (1, 3)))),)), "non-positive GPU count -1 on n0"),
        (Decision(migrate=(Migrate("r", P({1: 4})),), launch=(Launch("q", P({1: 4})),)), "4 GPUs on n1 but only 0 free"),
    ],
)
def test_infeasible_decisions_name_the_problem(decision, message):
    with pytest.raises(InfeasibleDecision, match=message):
        check(decision)
