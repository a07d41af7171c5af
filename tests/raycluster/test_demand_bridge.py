"""The demand bridge's inputs (review finding): ``node_gpus=0`` appended empty bundles for ever
(the process hung and used up memory), and one job of 10**7 GPUs became 1.25 million bundles for
``request_resources``."""

from __future__ import annotations

import math
import signal

import pytest

from deepshare.raycluster.demand_bridge import DemandBridge, demand_bundles

CAP = 10_000  # more nodes than any Ray cluster holds


class Hung(Exception):
    pass


@pytest.fixture(autouse=True)
def no_hang():
    """A call that never returns (the old node_gpus=0 loop) fails after 10 s instead of hanging."""
    def hung(*_):
        raise Hung("demand_bundles did not return within 10 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("node_gpus", [0, -8, 0.0, math.nan, math.inf, True, "8", None])
def test_node_gpus_that_is_not_a_finite_number_above_zero_is_refused_naming_it(node_gpus):
    with pytest.raises(ValueError, match="^node_gpus: expected the GPUs of one node, a finite number > 0"):
        demand_bundles([("queued", 4)], node_gpus)
    with pytest.raises(ValueError, match="^node_gpus: "):
        DemandBridge(node_gpus, lambda bundles: None)


def test_a_huge_or_infinite_job_asks_for_a_bounded_number_of_bundles():
    assert len(demand_bundles([("queued", 10**7)], 8)) == CAP
    assert len(demand_bundles([("running", math.inf)], 8)) == CAP
    assert demand_bundles([("queued", 100), ("running", 3)], 8, max_per_job=2) == [{"GPU": 8.0}] * 2 + [{"GPU": 3.0}]
    pushed = []
    DemandBridge(8, pushed.append, max_per_job=3).update([("queued", 80)])
    assert pushed == [[{"GPU": 8.0}] * 3]


def test_ordinary_demand_is_unchanged():
    assert demand_bundles([("queued", 10), ("running", 2), ("done", 8)], 4) == [
        {"GPU": 4.0}, {"GPU": 4.0}, {"GPU": 2.0}, {"GPU": 2.0}]
