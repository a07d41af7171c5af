"""The contention-aware autoscaler: scale out rather than co-locate above ``max_slowdown``.

See :mod:`deepshare.core.autoscaling.autoscaler` for the rule. The guard walks the policy's
launches in order, predicting each against the running jobs and the launches kept before it.
"""

from __future__ import annotations

from deepshare.core.autoscaling.autoscaler import Autoscaler, free_after, slowdown
from deepshare.core.autoscaling.pool import PENDING
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
                alt = isolated_placement(job.gpus, free, capacity)
                if alt is None or slowdown(view, job, alt, pending) > threshold:
                    vetoed.append(job)
                    continue
                placement = alt
            kept.append(Launch(job.job_id, placement))
            pending.append((job, placement))
            placement.take(free)
        if len(kept) == len(decision.launch) and all(a is b for a, b in zip(kept, decision.launch)):
            return decision, vetoed
        return Decision(launch=tuple(kept), preempt=decision.preempt, migrate=decision.migrate), vetoed


def isolated_placement(gpus: int, free: list[int], capacity: tuple[int, ...]) -> Placement | None:
    """``gpus`` GPUs on idle up nodes only: the smallest idle node that holds them all, else
    the idle nodes with the most GPUs first. None when the idle nodes are too few."""
    idle = [n for n in range(len(free)) if capacity[n] > 0 and free[n] == capacity[n]]
    single = sorted((n for n in idle if free[n] >= gpus), key=lambda n: (free[n], n))
    if single:
        return Placement(((single[0], gpus),))
    counts: dict[int, int] = {}
    need = gpus
    for n in sorted(idle, key=lambda n: (-free[n], n)):
        take = min(need, free[n])
        counts[n] = take
        need -= take
        if need == 0:
            return Placement.of(counts)
    return None
