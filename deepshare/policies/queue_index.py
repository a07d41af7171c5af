"""Queued jobs kept in order across decision points, so a decision costs O(sizes), not O(queue).

A heuristic that re-sorts the whole queue at every decision point costs O(queue) per decision,
and a trace with thousands of jobs waiting (a burst, or every job at t = 0) turns that into
quadratic time. For orders whose key of a *queued* job never changes while it waits (FIFO,
SRTF, LAS), this index keeps one sorted list per GPU demand and only inserts new arrivals.

It follows one simulation: at each view it checks, by object identity and at C speed, that the
queue is exactly what the previous decision left (same simulation, old jobs in the same order,
launched jobs gone, new ones appended) and rebuilds itself from scratch otherwise, so a caller
that does not apply a decision, or reuses the policy elsewhere, still gets correct answers.
When the view's queue is the simulator's :class:`~deepshare.core.pending.PendingJobs`, the
index asks it for the jobs added and removed since its last view instead (O(changes), not
O(queue)): launches the index took but that did not happen go back in, removals it did not take
come out, so the index still matches the queue exactly.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Callable, Hashable, Iterator

from deepshare.core.view import ClusterView, JobView
from deepshare.policies.placement import demand, demand_gpus

Key = Callable[[JobView], tuple]


class QueueIndex:
    def __init__(self, key: Key) -> None:
        self._key = key
        self._owner: object = None
        self._expected: dict[str, JobView] = {}  # the queue the last decision left, in order
        self._by_gpus: dict[Hashable, list[tuple[tuple, JobView]]] = {}  # by demand (GPUs, with any topology request)
        self._taken: dict[str, JobView] = {}  # taken since the last sync: launches expected
        self._position: int | None = None  # the queue-log position of the last PendingJobs view

    def sync(self, view: ClusterView) -> None:
        """Bring the index up to date with ``view.queued``."""
        queued = view.queued
        changes = getattr(queued, "changes", None)
        if changes is not None and view.predict is self._owner and self._position is not None:
            delta = changes(self._position)
            if delta is not None:
                self._apply(delta)
                self._position = queued.position  # type: ignore[attr-defined]
                return
        self._position = getattr(queued, "position", None)
        self._taken = {}
        known = len(self._expected)
        if (
            view.predict is not self._owner
            or len(queued) < known
            or list(queued[:known]) != list(self._expected.values())  # identity first: C speed
        ):
            self._owner = view.predict
            self._by_gpus = {}
            self._expected = {}
            known = 0
        for job in queued[known:]:
            self._insert(job)

    def _apply(self, delta: list[tuple[bool, JobView]]) -> None:
        """Replay the queue's changes since the last sync (see the module docstring)."""
        taken = self._taken
        for added, job in delta:
            if added:
                self._insert(job)
            elif taken.pop(job.job_id, None) is None:
                jobs = self._by_gpus[demand(job)]
                i = bisect_left(jobs, (self._key(job),))
                assert jobs[i][1] is job
                del jobs[i]
                del self._expected[job.job_id]
        for job in taken.values():  # taken but not launched: the decision was not applied
            self._insert(job)
        self._taken = {}

    def _insert(self, job: JobView) -> None:
        insort(self._by_gpus.setdefault(demand(job), []), (self._key(job), job))
        self._expected[job.job_id] = job

    def best_fitting(self, free_gpus: int, skip: set) -> JobView | None:
        """The first job in order whose demand (:func:`~deepshare.policies.placement.demand`) asks
        at most ``free_gpus`` GPUs and is not in ``skip``."""
        best: tuple[tuple, JobView] | None = None
        for key, jobs in self._by_gpus.items():
            if jobs and demand_gpus(key) <= free_gpus and key not in skip and (best is None or jobs[0][0] < best[0]):
                best = jobs[0]
        return None if best is None else best[1]

    def take(self, job: JobView) -> None:
        """Remove ``job`` (the head of its demand's list), expecting the decision to launch it."""
        head = self._by_gpus[demand(job)].pop(0)
        assert head[1] is job
        del self._expected[job.job_id]
        self._taken[job.job_id] = job

    def __iter__(self) -> Iterator[JobView]:  # pragma: no cover - debugging aid
        return iter(sorted((k, j) for jobs in self._by_gpus.values() for k, j in jobs))
