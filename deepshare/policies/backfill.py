"""Backfilling with a reservation (EASY, as Slurm's backfill scheduler does): a large gang waiting
at the head of the queue is not starved by a stream of small jobs.

The ``+backfill`` variants place queued jobs in their order, as the plain heuristics do, until
the first job that does not fit now (the *head*). The head gets a **reservation**: the earliest
time the running jobs' estimated completions free enough GPUs for it, and where (the placement
its strategy, topology request included, would then give it). Completions are estimated from
the view alone, never the truth: a running job ends ``remaining_s / ratio`` seconds from now
(its remaining work as the information model lets a scheduler know it, at its current contention
ratio). Every later job may start now only if it does not delay the reservation:

* it is estimated to finish by the reservation's time (its ``remaining_s``), or
* the head still fits at the reservation's time with the job's GPUs taken as well.

Only the head holds a reservation (EASY: aggressive backfilling, one reservation). A head the
running jobs' completions can never make room for (it needs GPUs no completion frees) gets no
reservation, and later jobs start as they would without backfilling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from deepshare.core.types import Launch, Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.place_types import PlaceFn


@dataclass(frozen=True)
class Reservation:
    job_id: str
    at: float
    """Seconds from now at which the head can start (by the running jobs' estimates)."""
    future_free: tuple[int, ...]
    """Free GPUs per node at that time, before the head takes its own."""


def reservation(head: JobView, view: ClusterView, free: Sequence[int], place: PlaceFn,
                running: Sequence[tuple[JobView, Placement, float]]) -> Reservation | None:
    """The head's reservation (see the module doc): ``free`` the GPUs free now, ``running`` the
    jobs holding GPUs with their placements and estimated seconds left, in any order."""
    future = list(free)
    for job, placement, left in sorted(running, key=lambda r: (r[2], r[0].job_id)):
        placement.release(future)
        if place(head, list(future), view, ()) is not None:
            return Reservation(head.job_id, left, tuple(future))
    return None


def estimated_left(job: JobView) -> float:
    """Seconds until a running job ends, by what the view knows: its remaining work at its ratio."""
    return job.remaining_s / job.ratio if job.ratio > 0 else float("inf")


def place_with_reservation(jobs: Sequence[JobView], free: list[int], view: ClusterView,
                           place: PlaceFn) -> tuple[Launch, ...]:
    """Place ``jobs`` (in order) on ``free`` (updated in place), the first that does not fit
    holding a reservation that every later launch must not delay (see the module doc)."""
    running = [(j, j.placement, estimated_left(j)) for j in view.running if j.placement is not None]
    launches: list[Launch] = []
    pending: list[tuple[JobView, Placement]] = []
    held: Reservation | None = None
    future: list[int] | None = None
    head = None
    for job in jobs:
        if job.gpus > sum(free):
            if head is None:
                head = job
                held = reservation(job, view, free, place, [*running, *((j, p, j.remaining_s) for j, p in pending)])
                future = None if held is None else list(held.future_free)
            continue
        placement = place(job, free, view, pending)
        if placement is None:
            if head is None:
                head = job
                held = reservation(job, view, free, place, [*running, *((j, p, j.remaining_s) for j, p in pending)])
                future = None if held is None else list(held.future_free)
            continue
        if held is not None and future is not None and head is not None and job.remaining_s > held.at:
            after = list(future)
            if not placement.fits(after):
                continue
            placement.take(after)
            if place(head, after, view, ()) is None:
                continue  # it would still hold GPUs the head needs at its reservation
            future = after
        placement.take(free)
        launches.append(Launch(job.job_id, placement))
        pending.append((job, placement))
    return tuple(launches)
