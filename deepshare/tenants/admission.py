"""Admission: which queued jobs the wrapped policy may see, given the queues' quotas.

:func:`admit` is one pure function of the view's queued and running jobs and the tenants file,
so the simulator, the placement service and the live scheduler (all of which hand a policy a
:class:`~deepshare.core.view.ClusterView`) admit alike. Usage is counted from the view's running
jobs at every decision; nothing is remembered between decisions.

Order of admission (Kueue's, GPUs only):

1. jobs that fit within their queue's nominal quota, highest priority class first, then by
   submission (best effort: a job that does not fit is passed over, smaller ones behind it may
   still go);
2. then jobs that borrow, one at a time from the queue with the least weighted usage
   (usage / weight; ties by name), within its borrowing limit and its cohort's unused quota.

A queue with ``queueing: strict`` (Kueue's StrictFIFO) is taken in its own order instead: once
one of its jobs is held (it fits neither step), no job after it in the queue's order (priority
class, then submission: so none of a higher class) is admitted in that decision; they are held
too, and listed in :attr:`Admission.blocked`. A job of a strict queue that needs to borrow
holds the queue's later jobs back until step 2 has taken it (or held it). Best effort (the
default) lets a stream of small jobs starve a large one of the same queue indefinitely; strict
lets the large one hold the queue's smaller ones back, GPUs idling, until its quota frees.

Every admitted job's GPUs are reserved as it is admitted, so whichever subset the wrapped policy
launches, no queue passes its limits: the wrapped order and placement need not know of quotas.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

from deepshare.core.view import JobView
from deepshare.tenants.quota import Ledger
from deepshare.tenants.spec import Tenants


@dataclass(frozen=True)
class Admission:
    admitted: tuple[JobView, ...]
    """Queued jobs the wrapped policy may launch, in the view's order."""
    held: tuple[JobView, ...]
    """Queued jobs their quotas hold back, in admission order."""
    running: Ledger
    """Usage of the running jobs alone (before any admission)."""
    blocked: frozenset[str] = frozenset()
    """Ids of the held jobs that a held job ahead of them in a strict queue holds back (they may
    fit): nothing is planned for them in this decision either."""


def admission_key(tenants: Tenants):  # type: ignore[no-untyped-def]
    """Sort key of queued jobs within admission: higher priority first, then submission."""
    return lambda job: (-tenants.priority_of(job), job.submit_time, job.job_id)


def admit(queued: Sequence[JobView], running: Sequence[JobView], tenants: Tenants) -> Admission:
    """The admitted and held jobs of ``queued`` (module doc)."""
    base = Ledger.of(tenants, running)
    ledger = base.copy()
    order = sorted(queued, key=admission_key(tenants))
    admitted: set[str] = set()
    borrowers: dict[str, list[JobView]] = {}
    stopped: set[str] = set()  # strict queues a held job stops for this decision
    waiting: set[str] = set()  # strict queues whose later jobs wait for a borrower's turn (step 2)
    blocked: set[str] = set()
    for job in order:
        queue = tenants.queue(tenants.queue_of(job), job)
        if queue.name in stopped:
            blocked.add(job.job_id)
        elif queue.name in waiting:
            borrowers[queue.name].append(job)
        elif ledger.within_nominal(queue, job.gpus) and ledger.admits(queue, job.gpus):
            ledger.add(queue, job.gpus)
            admitted.add(job.job_id)
        elif queue.cohort is not None and not ledger.within_nominal(queue, job.gpus):
            borrowers.setdefault(queue.name, []).append(job)
            if queue.strict:
                waiting.add(queue.name)
        elif queue.strict:
            stopped.add(queue.name)
    heap = [(ledger.usage[name] / tenants.queues[name].weight, name, 0) for name in borrowers]
    heapq.heapify(heap)
    while heap:
        _, name, i = heapq.heappop(heap)
        jobs, queue = borrowers[name], tenants.queues[name]
        job = jobs[i]
        if ledger.admits(queue, job.gpus):
            ledger.add(queue, job.gpus)
            admitted.add(job.job_id)
        elif queue.strict:
            blocked.update(j.job_id for j in jobs[i + 1:])
            continue
        if i + 1 < len(jobs):
            heapq.heappush(heap, (ledger.usage[name] / queue.weight, name, i + 1))
    return Admission(
        tuple(job for job in queued if job.job_id in admitted),
        tuple(job for job in order if job.job_id not in admitted),
        base,
        frozenset(blocked),
    )
