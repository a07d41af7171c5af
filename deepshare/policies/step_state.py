"""What one decision has chosen so far, kept in place so each step costs O(what it touches).

A learned policy builds a decision launch by launch; each step asks which queued jobs to offer
(the oldest, the least remaining GPU-time), what the anchor heuristic would launch next, the
free GPUs left and the launches pending. Recomputing those from the view at every step costs
O(queue log queue + nodes) per step, O(queue^2) for a decision that launches most of a long
queue. :class:`StepState` builds them once per decision (free GPUs as a
:class:`~deepshare.policies.free_index.FreeIndex`, queued jobs sorted per GPU demand for each
order asked for) and :meth:`advance` applies one launch: it moves the few nodes the launch
touches between free-count buckets and removes the job from each sorted list.

The answers are exactly the straightforward ones (a stable sort of the fitting, not yet
launched jobs, then the first few): within one GPU demand the lists keep that order, and across
demands the heads are merged by the same key, ties by queue position.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from itertools import islice
from typing import TYPE_CHECKING, Callable, Hashable, Iterator, Sequence

from deepshare.core.types import Launch, Placement
from deepshare.policies.free_index import FreeIndex

if TYPE_CHECKING:  # annotations only: the view types move between core modules
    from deepshare.core.view import ClusterView, JobView
    from deepshare.policies.placement import PlaceFn

Key = Callable[["JobView"], tuple]
Entry = tuple[tuple, int, "JobView"]  # (key, queue position, job): unique, sorts like a stable sort


class StepState:
    def __init__(self, view: ClusterView, free: Sequence[int], launches: Sequence[Launch]) -> None:
        self.view = view
        self.free = FreeIndex(free)
        queued = view.queued
        self._position = {job.job_id: i for i, job in enumerate(queued)}
        by_id = {job.job_id: job for job in queued} if launches else {}
        self.pending: list[tuple[JobView, Placement]] = [(by_id[l.job_id], l.placement) for l in launches]
        """The launches chosen, in order: one list that only grows (predictors rely on that)."""
        self.launched = {launch.job_id for launch in launches}
        self.waiting = len(queued) - len(self.launched)
        self.demand = sum(job.gpus for job in queued) - sum(job.gpus for job, _ in self.pending)
        """GPUs the queued jobs not launched yet ask for."""
        self._sorted: dict[Hashable, tuple[Key, dict[int, list[Entry]]]] = {}
        self.at: object = None
        """The partial decision this state stands for (kept by the encoding)."""

    def advance(self, job: JobView, placement: Placement) -> None:
        """Launch ``job`` at ``placement``."""
        self.free.take(placement)
        self.pending.append((job, placement))
        self.launched.add(job.job_id)
        self.waiting -= 1
        self.demand -= job.gpus
        position = self._position[job.job_id]
        for name, (key, by_gpus) in self._sorted.items():
            jobs = by_gpus[job.gpus]
            i = bisect_left(jobs, (key(job), position))
            assert jobs[i][2] is job
            del jobs[i]

    def _lists(self, name: Hashable, key: Key) -> dict[int, list[Entry]]:
        """The not-launched queued jobs per GPU demand, sorted by ``key`` (built on first use)."""
        known = self._sorted.get(name)
        if known is None:
            by_gpus: dict[int, list[Entry]] = {}
            for i, job in enumerate(self.view.queued):
                if job.job_id not in self.launched:
                    by_gpus.setdefault(job.gpus, []).append((key(job), i, job))
            for jobs in by_gpus.values():
                jobs.sort()  # (key, position) is unique: jobs themselves are never compared
            known = self._sorted[name] = (key, by_gpus)  # type: ignore[assignment]
        return known[1]  # type: ignore[index]

    def in_order(self, name: Hashable, key: Key) -> Iterator[JobView]:
        """Not-launched queued jobs that fit the free GPUs, by ``key`` (ties: queue order)."""
        total = self.free.total
        heads = [jobs for gpus, jobs in self._lists(name, key).items() if gpus <= total and jobs]
        merged = heapq.merge(*heads)
        return (entry[2] for entry in merged)

    def first(self, name: Hashable, key: Key, count: int) -> list[JobView]:
        return list(islice(self.in_order(name, key), count))

    def first_placed(self, name: Hashable, key: Key, place: PlaceFn) -> tuple[JobView, Placement] | None:
        """The first job in ``key`` order that ``place`` places now, skipping a GPU demand once
        one of its jobs failed (the anchor heuristic's next launch)."""
        total = self.free.total
        lists = {gpus: jobs for gpus, jobs in self._lists(name, key).items() if gpus <= total and jobs}
        while lists:
            gpus = min(lists, key=lambda g: (lists[g][0][0], lists[g][0][1]))
            job = lists[gpus][0][2]
            placement = place(job, self.free, self.view, self.pending)  # type: ignore[arg-type]
            if placement is not None:
                return job, placement
            del lists[gpus]
        return None
