"""A hand case where topology-aware preemption's choice turns on the restore time (the view's
``restore_s``): one leaf is cheaper in victims' GPUs, the other in contention after. Shared by
the policy, simulator and placement-service tests of it."""

from __future__ import annotations

from fabric_cases import two_leaves_of_two

from deepshare.core.contention import make_contention
from deepshare.core.fabric import TopologyRequest
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog

TOPOLOGY = two_leaves_of_two(8, "two-leaves-of-eights")
"""Two leaves (nodes 0, 1 | 2, 3) of two 8-GPU nodes."""


def running(name: str, alloc: tuple[tuple[int, int], ...], remaining_s: float) -> KnownJob:
    return KnownJob(name, "FSDP", sum(g for _, g in alloc), 0.0, remaining_s, placement=Placement(alloc), last_run_s=100.0)


def two_ways_view():
    """An 8-GPU gang that must run inside one leaf and outranks v1 and v2, not p1 and p2 (SRSF).
    Leaf l0 frees by stopping v1 (4 GPUs): the gang then has node 0 alone, no contention. Leaf l1
    frees by stopping v2 (2 GPUs): the gang then spans nodes 2 and 3 beside p2, about 26
    GPU-seconds of contention over its 5 s. So l1 costs 2 x restore_s + 26, l0 4 x restore_s:
    at 30 s l1 (v2) wins, at 0 s l0 (v1)."""
    jobs = [running("p1", ((1, 8),), 1.0), running("v1", ((0, 4),), 1e5),
            running("p2", ((2, 4), (3, 4)), 1.0), running("v2", ((2, 2),), 1e5)]
    free = list(TOPOLOGY.capacity)
    for job in jobs:
        job.placement.take(free)
    gang = KnownJob("gang", "FSDP", 8, 0.0, 5.0, topology=TopologyRequest(required_level="leaf"))
    return build_view(TOPOLOGY, default_catalog(), make_contention("profiled"), 0.0, free, [gang], jobs)


EXPECTED = {0.0: ("v1", ((0, 8),)), 30.0: ("v2", ((2, 4), (3, 4))), 600.0: ("v2", ((2, 4), (3, 4)))}
"""The victim and the gang's placement at each restore time."""
