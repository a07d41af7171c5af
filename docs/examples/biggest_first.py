"""Biggest job first, on the nodes with the most free GPUs: a complete DeepShare policy."""

from __future__ import annotations

from deepshare.core.types import Decision, Launch, Placement, WAIT
from deepshare.core.view import ClusterView


class BiggestFirst:
    """Largest GPU demand first (oldest first among equals), each job on the fewest, emptiest nodes."""

    name = "biggest-first"

    def decide(self, view: ClusterView) -> Decision:
        free = list(view.free)  # free GPUs per node index; updated as this decision places jobs
        launches = []
        for job in sorted(view.queued, key=lambda j: (-j.gpus, j.submit_time, j.job_id)):
            if job.gpus > sum(free):
                continue  # does not fit now; a smaller job behind it may
            take: dict[int, int] = {}
            need = job.gpus
            for node in sorted(range(len(free)), key=lambda n: (-free[n], n)):
                if need == 0:
                    break
                take[node] = min(free[node], need)
                need -= take[node]
            for node, gpus in take.items():
                free[node] -= gpus
            launches.append(Launch(job.job_id, Placement.of(take)))
        return Decision(launch=tuple(launches)) if launches else WAIT
