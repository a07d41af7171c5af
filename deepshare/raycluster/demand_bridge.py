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

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

ACTIVE_STATES = ("queued", "running")
MAX_BUNDLES_PER_JOB = 10_000
"""Node-sized bundles asked for one job at most: more nodes than any Ray cluster holds, so a job
of 10**7 GPUs (or an infinite count) asks for a cluster's worth instead of millions of bundles."""


def check_node_gpus(node_gpus: object) -> float:
    """``node_gpus`` if it is a finite number > 0, else a ``ValueError`` naming it (0 made
    :func:`demand_bundles` append empty bundles for ever)."""
    if isinstance(node_gpus, bool) or not isinstance(node_gpus, (int, float)) or not 0 < node_gpus < math.inf:
        raise ValueError(f"node_gpus: expected the GPUs of one node, a finite number > 0, got {node_gpus!r}")
    return node_gpus


def demand_bundles(jobs: Iterable[tuple[str, int]], node_gpus: int,
                   max_per_job: int = MAX_BUNDLES_PER_JOB) -> list[dict[str, float]]:
    """Bundles for ``(state, gpus)`` pairs: every queued or running job, node-sized chunks, at
    most ``max_per_job`` per job."""
    check_node_gpus(node_gpus)
    bundles: list[dict[str, float]] = []
    for state, gpus in jobs:
        if state not in ACTIVE_STATES:
            continue
        left = gpus
        for _ in range(max_per_job):
            if not left > 0:
                break
            take = min(left, node_gpus)
            bundles.append({"GPU": float(take)})
            left -= take
    return sorted(bundles, key=lambda b: -b["GPU"])


@dataclass
class DemandBridge:
    """Calls ``request`` (``request_resources(bundles=...)``) when the demand changes; a job asks
    for ``max_per_job`` node-sized bundles at most (pass the cluster's ``max_workers`` where known)."""

    node_gpus: int
    request: Callable[[list[dict[str, float]]], None]
    max_per_job: int = MAX_BUNDLES_PER_JOB
    last: list[dict[str, float]] | None = field(default=None, init=False)
    calls: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        check_node_gpus(self.node_gpus)

    def update(self, jobs: Sequence[tuple[str, int]]) -> bool:
        """Push the demand of ``jobs`` if it differs from the last push; True when pushed."""
        bundles = demand_bundles(jobs, self.node_gpus, self.max_per_job)
        if bundles == self.last:
            return False
        self.request(bundles)
        self.last = bundles
        self.calls += 1
        return True


def ray_request(bundles: list[dict[str, float]]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)
