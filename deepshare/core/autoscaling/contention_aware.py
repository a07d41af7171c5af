"""The contention-aware autoscaler: scale out rather than co-locate above ``max_slowdown``.

See :mod:`deepshare.core.autoscaling.autoscaler` for the rule. The guard walks the policy's
launches in order, predicting each against the running jobs and the launches kept before it.
"""

from __future__ import annotations

from deepshare.core.autoscaling.autoscaler import Autoscaler, free_after, slowdown
from deepshare.core.autoscaling.pool import PENDING
from deepshare.core.fabric import NO_TOPOLOGY, Fabric, TopologyRequest
from deepshare.core.types import Decision, Launch, Placement
from deepshare.core.view import ClusterView, JobView


class ContentionAwareAutoscaler(Autoscaler):
    name = "contention-aware"

    def guard(self, view: ClusterView, decision: Decision) -> tuple[Decision, list[JobView]]:
        if not decision.launch:
            return decision, []
        threshold = self.spec.max_slowdown
        pending = sum(self.slots.topology.capacity[n] for n in self.pool.nodes(PENDING))
        scalable = pending + self.requestable_gpus()  # GPUs not up yet that may still come
        queued = {j.job_id: j for j in view.queued}
        free = free_after(view, Decision(preempt=decision.preempt, migrate=decision.migrate))
        capacity = view.topology.capacity
        kept: list[Launch] = []
        pending: list[tuple[JobView, Placement]] = []
        vetoed: list[JobView] = []
        for launch in decision.launch:
            job, placement = queued[launch.job_id], launch.placement
            if not placement.fits(free):
                continue  # displaced by an earlier launch moved to idle nodes: stays queued
            if job.gpus <= scalable and slowdown(view, job, placement, pending) > threshold:
                alt = next((p for p in isolated_placements(job, free, capacity, view.topology.fabric)
                            if slowdown(view, job, p, pending) <= threshold), None)
                if alt is None:
                    vetoed.append(job)
                    continue
                placement = alt
            kept.append(Launch(job.job_id, placement))
            pending.append((job, placement))
            placement.take(free)
        if len(kept) == len(decision.launch) and all(a is b for a, b in zip(kept, decision.launch)):
            return decision, vetoed
        return Decision(launch=tuple(kept), preempt=decision.preempt, migrate=decision.migrate), vetoed


def isolated_placements(job: JobView, free: list[int], capacity: tuple[int, ...], fabric: Fabric) -> list[Placement]:
    """Where ``job`` may run on idle up nodes only, honouring its topology request: inside one
    domain of its required level (one candidate per domain that can hold it, in the fabric's
    order), else over the whole cluster; with slices, whole slices inside each domain of the
    slice level. Empty when the idle nodes are too few (the job is then held back and nodes
    requested for it): a placement spanning two racks broke a rack-required job and aborted the
    run."""
    request = job.topology
    idle = [n for n in range(len(free)) if capacity[n] > 0 and free[n] == capacity[n]]
    if request.required_level is not None:
        level = fabric.level_index(request.required_level)
        scopes = [[n for n in idle if fabric.node_domains[n][level] == d] for d in fabric.by_level[level]]
    else:
        scopes = [idle]
    found = []
    for nodes in scopes:
        placement = isolated_placement(job.gpus, free, nodes, request, fabric)
        if placement is not None:
            found.append(placement)
    return found


def isolated_placement(gpus: int, free: list[int], idle: list[int], request: TopologyRequest = NO_TOPOLOGY,
                       fabric: Fabric | None = None) -> Placement | None:
    """``gpus`` GPUs on the ``idle`` nodes only: the smallest that holds them all, else the
    nodes with the most GPUs first (with ``request``'s slices: whole slices inside each domain
    of its slice level, the domains with the most idle GPUs first). None when they are too few."""
    single = sorted((n for n in idle if free[n] >= gpus), key=lambda n: (free[n], n))
    if single:
        return Placement(((single[0], gpus),))
    groups: list[list[int]] = [idle]
    size = 1
    if request.slice_size is not None and request.slice_level is not None and fabric is not None:
        level, size = fabric.level_index(request.slice_level), request.slice_size
        by_domain: dict[int, list[int]] = {}
        for n in idle:
            by_domain.setdefault(fabric.node_domains[n][level], []).append(n)
        groups = sorted(by_domain.values(), key=lambda nodes: (-sum(free[n] for n in nodes), nodes[0]))
    counts: dict[int, int] = {}
    need = gpus
    for nodes in groups:
        share = min(need, sum(free[n] for n in nodes) // size * size)
        for n in sorted(nodes, key=lambda n: (-free[n], n)):
            if share == 0:
                break
            take = min(share, free[n])
            counts[n] = take
            share -= take
            need -= take
        if need == 0:
            return Placement.of(counts)
    return None
