"""Tell Ray's autoscaler what the live scheduler's jobs need (``request_resources``).

The live scheduler creates a placement group only for a placement it has chosen on nodes that
exist, so a queued job that fits nowhere is invisible to Ray's autoscaler. The bridge turns
the jobs that are queued or running into resource bundles — each job's GPUs cut into chunks
of at most one node's GPUs — and hands the whole list to
``ray.autoscaler.sdk.request_resources`` whenever it changes. Ray then keeps the cluster big
enough to fit them all at once (within ``max_workers``); when jobs finish the request shrinks
and idle nodes are removed after the idle timeout. This is the live counterpart of the
simulator's ``demand`` autoscaler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

ACTIVE_STATES = ("queued", "running")


def demand_bundles(jobs: Iterable[tuple[str, int]], node_gpus: int) -> list[dict[str, float]]:
    """Bundles for ``(state, gpus)`` pairs: every queued or running job, node-sized chunks."""
    bundles: list[dict[str, float]] = []
    for state, gpus in jobs:
        if state not in ACTIVE_STATES:
            continue
        left = gpus
        while left > 0:
            take = min(left, node_gpus)
            bundles.append({"GPU": float(take)})
            left -= take
    return sorted(bundles, key=lambda b: -b["GPU"])


@dataclass
class DemandBridge:
    """Calls ``request`` (``request_resources(bundles=...)``) when the demand changes."""

    node_gpus: int
    request: Callable[[list[dict[str, float]]], None]
    last: list[dict[str, float]] | None = field(default=None, init=False)
    calls: int = field(default=0, init=False)

    def update(self, jobs: Sequence[tuple[str, int]]) -> bool:
        """Push the demand of ``jobs`` if it differs from the last push; True when pushed."""
        bundles = demand_bundles(jobs, self.node_gpus)
        if bundles == self.last:
            return False
        self.request(bundles)
        self.last = bundles
        self.calls += 1
        return True


def ray_request(bundles: list[dict[str, float]]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)
