"""What one decision has chosen so far, kept in place so each step costs O(what it touches).

A learned policy builds a decision launch by launch; each step asks which queued jobs to offer
(the oldest, the least remaining GPU-time), what the anchor heuristic would launch next, the
free GPUs left and the launches pending. Recomputing those from the view at every step costs
O(queue log queue + nodes) per step, O(queue^2) for a decision that launches most of a long
queue. :class:`StepState` builds them once per decision (free GPUs as a
:class:`~deepshare.policies.free_index.FreeIndex`, queued jobs sorted per GPU demand for each
order asked for) and :meth:`advance` applies one launch: it moves the few nodes the launch
touches between free-count buckets and removes the job from each sorted list.

Most decisions read only the first few jobs of each order (in the RL env most launch one job),
so each GPU demand's list is sorted only as far as it is read (:class:`_Lazy`: a sorted prefix
popped from a heap of the rest), O(queue + read log queue) per order instead of a full sort.

The answers are exactly the straightforward ones (a stable sort of the fitting, not yet
launched jobs, then the first few): within one GPU demand the lists keep that order, and across
demands the heads are merged by the same key, ties by queue position.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import Counter
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Hashable, Iterator, Sequence

from deepshare.core.types import Launch, Placement
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.placement import demand, demand_gpus

if TYPE_CHECKING:  # annotations only: the view types move between core modules
    from deepshare.core.view import ClusterView, JobView
    from deepshare.policies.placement import PlaceFn

Key = Callable[["JobView"], tuple]
_GPUS = attrgetter("gpus")
Entry = tuple[tuple, int, "JobView"]  # (key, queue position, job): unique, sorts like a stable sort


class _Lazy:
    """One GPU demand's not-launched jobs in entry order, sorted only as far as read.

    ``done`` is the sorted prefix read so far (launches removed from it), ``read`` its entries
    by job id; ``rest`` a heap of the other entries, every one of them after all of ``done``. An
    entry launched while still in the heap is dropped when it is popped (``launched`` is the
    state's set, which only grows), so only a launch in ``done`` needs removing.

    Once :data:`_SORT_AFTER` entries have been popped, the decision reads deep into the order
    (a long decision reads all of it): ``rest`` is then sorted once, largest first, and read by
    ``list.pop()`` from its end. The entries come out in the same order (``(key, position)`` is
    unique: a strict total order), and a decision of 10,000 launches stops paying a heap pop
    (comparisons of nested key tuples, about 2 us each on 10,000 entries) at every read."""

    __slots__ = ("done", "rest", "launched", "read", "pops")

    def __init__(self, entries: list[Entry], launched: set[str]) -> None:
        heapq.heapify(entries)
        self.rest = entries
        self.done: list[Entry] = []
        self.read: dict[str, Entry] = {}
        self.launched = launched
        self.pops = 0
        """Entries popped from the heap; -1 once ``rest`` is a sorted stack (largest first)."""

    def at(self, i: int) -> Entry | None:
        """The ``i``-th not-launched entry, None past the end."""
        done, rest, launched = self.done, self.rest, self.launched
        while len(done) <= i:
            if not rest:
                return None
            if self.pops < 0:
                entry = rest.pop()
            else:
                entry = heapq.heappop(rest)
                self.pops += 1
                if self.pops >= _SORT_AFTER:
                    rest.sort(reverse=True)
                    self.pops = -1
            job_id = entry[2].job_id
            if job_id not in launched:
                done.append(entry)
                self.read[job_id] = entry
        return done[i]

    def __iter__(self) -> Iterator[Entry]:
        i = 0
        while (entry := self.at(i)) is not None:
            yield entry
            i += 1

    def remove(self, job: JobView) -> None:
        """Forget a launched job (in the heap it is dropped when popped): found by the entry it
        was read as, so its order key is not computed again."""
        entry = self.read.pop(job.job_id, None)
        if entry is not None:
            done = self.done
            i = bisect_left(done, entry[:2])
            if i < len(done) and done[i][2] is job:
                del done[i]


_SORT_AFTER = 64
"""Heap pops after which a :class:`_Lazy` sorts the rest of its entries (a decision that has read
this many goes on reading: sorting the rest once costs less than popping it entry by entry)."""


class StepState:
    def __init__(self, view: ClusterView, free: Sequence[int], launches: Sequence[Launch]) -> None:
        self.view = view
        self.free = FreeIndex(free)
        queued = view.queued
        self._keys: dict[str, Key] = {}  # the order key functions asked for (:meth:`order_key`)
        by_id = {job.job_id: job for job in queued} if launches else {}
        self.pending: list[tuple[JobView, Placement]] = [(by_id[l.job_id], l.placement) for l in launches]
        """The launches chosen, in order: one list that only grows (predictors rely on that)."""
        self.launched = {launch.job_id for launch in launches}
        self.waiting = len(queued) - len(self.launched)
        self.demand = sum(map(_GPUS, queued)) - sum(job.gpus for job, _ in self.pending)
        """GPUs the queued jobs not launched yet ask for."""
        self._counts: Counter[int] | None = None  # not-launched queued jobs per GPU demand, when asked
        self._sorted: dict[Hashable, dict[Hashable, _Lazy]] = {}
        """Per order, its not-launched jobs per demand."""
        self._groups: dict[int, list[tuple[int, JobView]]] | None = None
        self.job_features: dict[str, tuple] = {}
        """Per queued job, the encoder's features that depend on the job alone (the view is fixed)."""
        self.shapes: dict[Hashable, tuple[dict, dict]] = {}
        """Per set of placement generators, the encoder's numbers for their shape keys, and each
        offered job's (:func:`deepshare.policies.encoding._shape_numbers`)."""
        self.extras: object = None
        """The optional encoding columns' per-decision data (:mod:`deepshare.policies.extra_features`)."""
        self.at: object = None
        """The partial decision this state stands for (kept by the encoding)."""

    def advance(self, job: JobView, placement: Placement) -> None:
        """Launch ``job`` at ``placement``."""
        self.free.take(placement)
        self.pending.append((job, placement))
        self.launched.add(job.job_id)
        self.waiting -= 1
        self.demand -= job.gpus
        if self._counts is not None:
            self._counts[job.gpus] -= 1
        if self._sorted:
            gpus = demand(job)
            for by_gpus in self._sorted.values():
                by_gpus[gpus].remove(job)

    def launch_may_fit(self) -> bool:
        """Whether some queued job not launched yet asks for no more GPUs than are free (without
        it, no placement can place anything and the choice is wait alone)."""
        counts = self._counts
        if counts is None:
            counts = self._counts = Counter(map(_GPUS, self.view.queued))
            for job, _ in self.pending:
                counts[job.gpus] -= 1
        free = self.free.total
        return any(count > 0 and gpus <= free for gpus, count in counts.items())

    def _lists(self, name: Hashable, key: Key) -> dict[Hashable, _Lazy]:
        """The not-launched queued jobs per demand (:func:`~deepshare.policies.placement.demand`:
        GPUs, with any topology request), ordered by ``key`` (built on first use)."""
        known = self._sorted.get(name)
        if known is None:
            groups = self._groups
            if groups is None:  # (position, job) per GPU demand, shared by every order
                groups = self._groups = {}
                launched = self.launched
                for i, job in enumerate(self.view.queued):
                    if job.job_id not in launched:
                        groups.setdefault(demand(job), []).append((i, job))
            # (key, position) is unique: jobs themselves are never compared
            by_gpus = {gpus: _Lazy([(key(job), i, job) for i, job in jobs], self.launched) for gpus, jobs in groups.items()}
            known = self._sorted[name] = by_gpus
        return known

    def order_key(self, name: str, make: Callable[["ClusterView"], Key]) -> Key:
        """``make(view)``, the key function of the registry order ``name``, built once per
        decision (a step asks for two orders' keys; building one can cost a lookup of beliefs)."""
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = make(self.view)
        return key

    def in_order(self, name: Hashable, key: Key) -> Iterator[JobView]:
        """Not-launched queued jobs that fit the free GPUs, by ``key`` (ties: queue order)."""
        total = self.free.total
        return _merged([jobs for d, jobs in self._lists(name, key).items() if demand_gpus(d) <= total])

    def head(self, name: Hashable, key: Key, n: int, skip: set[str] | frozenset[str] = frozenset()) -> list[JobView]:
        """The first ``n`` jobs of :meth:`in_order` whose ids are not in ``skip`` (a step reads
        a few jobs of two orders: a plain loop over the one GPU demand most queues have costs
        a fraction of the generators)."""
        if n <= 0:
            return []
        total = self.free.total
        # demand_gpus(d), inline
        lists = [jobs for d, jobs in self._lists(name, key).items() if (d if type(d) is int else d[0]) <= total]
        found: list[JobView] = []
        if len(lists) == 1:
            only = lists[0]
            done, at = only.done, only.at
            i = 0
            # the entries read already straight from ``done`` (what ``at`` answers for them)
            while (entry := done[i] if i < len(done) else at(i)) is not None:
                i += 1
                job = entry[2]
                if job.job_id not in skip:
                    found.append(job)
                    if len(found) == n:
                        break
            return found
        for job in _merged(lists):
            if job.job_id not in skip:
                found.append(job)
                if len(found) == n:
                    break
        return found

    def first_placed(self, name: Hashable, key: Key, place: PlaceFn) -> tuple[JobView, Placement] | None:
        """The first job in ``key`` order that ``place`` places now, skipping a GPU demand once
        one of its jobs failed (the anchor heuristic's next launch)."""
        total = self.free.total
        heads = {}
        for d, jobs in self._lists(name, key).items():
            if (d if type(d) is int else d[0]) <= total and (head := jobs.at(0)) is not None:  # demand_gpus(d), inline
                heads[d] = head
        while heads:
            gpus = next(iter(heads)) if len(heads) == 1 else min(heads, key=lambda g: (heads[g][0], heads[g][1]))
            job = heads[gpus][2]
            placement = place(job, self.free, self.view, self.pending)  # type: ignore[arg-type]
            if placement is not None:
                return job, placement
            del heads[gpus]
        return None


def _merged(lists: list[_Lazy]) -> Iterator[JobView]:
    """The jobs of ``lists`` (each sorted) in one sorted sequence: ``heapq.merge`` for the few
    lists a queue has (one per GPU demand), read by index, without its per-call set-up (a
    step reads the first few jobs of each order, so the set-up was most of the cost)."""
    if len(lists) == 1:
        only = lists[0]
        i = 0
        while (entry := only.at(i)) is not None:
            yield entry[2]
            i += 1
        return
    cursors = [0] * len(lists)
    heads = [jobs.at(0) for jobs in lists]
    while True:
        best = -1
        for i, head in enumerate(heads):  # (key, position) is unique: the first minimum is the minimum
            if head is not None and (best < 0 or head < heads[best]):  # type: ignore[operator]
                best = i
        if best < 0:
            return
        yield heads[best][2]  # type: ignore[index]
        cursors[best] += 1
        heads[best] = lists[best].at(cursors[best])
