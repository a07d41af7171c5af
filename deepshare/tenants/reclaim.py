"""Preemption for quotas: which running jobs to stop so that a held job gets its due.

Two reasons, Kueue's ``reclaimWithinCohort`` and ``withinClusterQueue``:

* **reclaim** — a job its queue's *nominal* quota covers is held (by quota, or because the GPUs
  are taken) while other queues of its cohort borrow: jobs of the borrowing queues are stopped,
  each only while its queue still borrows, so borrowed GPUs go back to their owner (a job is
  stopped whole, so the last stop may take its queue below its nominal quota, as in Kueue);
* **priority** — a job its queue's limits hold back while the same queue runs jobs of a lower
  priority class: those are stopped.

Victims are taken cheapest first: lowest priority class, then the GPU-seconds the stop costs
(GPUs x ``restore_s``, the restore time a preempted job pays, the view's
:attr:`~deepshare.core.view.ClusterView.restore_s`; it loses no work, it checkpoints when
stopped, as in :mod:`deepshare.policies.preempt_plan`), then least attained service, then
id. Once the job is admissible and ``fits(victims)`` places it, victims the others make
unnecessary are dropped (largest first). A plan always stops or withdraws something: a job that
``fits`` places with no victim is left to the wrapped policy, which may hold it on purpose (a
``+backfill`` reservation), and gets no plan. ``fits`` asks the wrapped policy itself where the job
would go with the victims gone (:class:`~deepshare.tenants.wrapper.Admitted`), so nothing is
ever preempted for a job that would then not fit by the placement's own rules.

The decision's own launches come first: a launch that borrows (reclaim) or is of a lower
priority class (priority) is withdrawn, and stays queued, before any running job is stopped;
and whether a running job's queue borrows is judged on the running jobs alone (less the
decision's stops), so a queue within its nominal quota is never reclaimed from because the
same decision launches a borrowing job of it. A strict queue's launches are withdrawn from its
last in the queue's order (lowest class, then youngest) and put back from its first, and one is
never put back while one before it stays withdrawn: a younger job of a strict queue never
launches ahead of an older one held (:func:`strict_in_place`).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import islice
from typing import Callable, Sequence

from deepshare.core.types import Launch
from deepshare.core.view import DEFAULT_RESTORE_S, JobView
from deepshare.tenants.admission import admission_key
from deepshare.tenants.quota import Ledger
from deepshare.tenants.spec import Queue, Tenants

Fits = Callable[[Sequence[JobView]], "Launch | None"]
"""``fits(victims)``: the job's launch once ``victims`` are stopped, or None where it would not go."""


@dataclass(frozen=True)
class Plan:
    victims: tuple[JobView, ...]
    """Running jobs to stop."""
    launch: Launch
    withdrawn: tuple[JobView, ...] = ()
    """The decision's own launches to withdraw (they stay queued)."""


def victim_key(tenants: Tenants, restore_s: float = DEFAULT_RESTORE_S):  # type: ignore[no-untyped-def]
    """Cheapest victim first (module doc)."""
    return lambda job: (tenants.priority_of(job), job.gpus * restore_s, job.attained_gpu_s, job.job_id)


def strict_in_place(jobs: Sequence[JobView], tenants: Tenants, *, last_first: bool) -> list[JobView]:
    """``jobs`` (in some order of preference) with each strict queue's jobs put, in the places
    they hold, in their queue's order (:func:`~deepshare.tenants.admission.admission_key`;
    ``last_first``: reversed), the other queues' jobs left where they are. Withdrawals taken in
    this order (``last_first``) leave every strict queue's launches a prefix of its order, and
    put back in it (not ``last_first``), its withdrawals a suffix."""
    key = admission_key(tenants)
    strict: dict[str, list[JobView]] = {}
    for job in jobs:
        if tenants.queues[name := tenants.queue_of(job)].strict:
            strict.setdefault(name, []).append(job)
    for members in strict.values():
        members.sort(key=key, reverse=not last_first)  # popped from the end
    return [strict[name].pop() if (name := tenants.queue_of(job)) in strict else job for job in jobs]


class Candidates:
    """Jobs a plan may take (running victims, or the decision's launches to withdraw) by queue and
    priority class, indexed once per decision: a plan's candidates are then found among its
    cohort's or queue's jobs alone. Scanning every running job for each waiting job cost 12 s a
    decision with 10,000 jobs held by quota beside 8,000 running."""

    def __init__(self, jobs: Sequence[JobView], tenants: Tenants) -> None:
        self._tenants = tenants
        self._by_queue: dict[str, list[JobView]] = {}
        for job in jobs:
            self._by_queue.setdefault(tenants.queue_of(job), []).append(job)
        self._priorities: dict[str, list[int]] = {}
        self._cohorts: dict[str, list[str]] = {}  # cohort -> its queues that hold jobs here
        for name, members in self._by_queue.items():
            members.sort(key=tenants.priority_of)  # stable: within a class, as given
            self._priorities[name] = [tenants.priority_of(job) for job in members]
            cohort = tenants.queues[name].cohort
            if cohort is not None:
                self._cohorts.setdefault(cohort, []).append(name)

    def reclaim(self, queue: Queue, usable: Callable[[JobView], bool],
                lends: Callable[[Queue], bool]) -> list[JobView]:
        """The ``usable`` jobs of the other queues of ``queue``'s cohort for which ``lends`` holds
        (the queue borrows)."""
        if queue.cohort is None:
            return []
        queues = self._tenants.queues
        return [job for name in self._cohorts.get(queue.cohort, ()) if name != queue.name and lends(queues[name])
                for job in self._by_queue[name] if usable(job)]

    def priority(self, job: JobView, queue: Queue, usable: Callable[[JobView], bool]) -> list[JobView]:
        """The ``usable`` jobs of ``queue`` of a lower priority class than ``job``."""
        members = self._by_queue.get(queue.name, [])
        below = bisect_left(self._priorities.get(queue.name, []), self._tenants.priority_of(job))
        return [other for other in islice(members, below) if usable(other)]


def plan(job: JobView, queue: Queue, ledger: Ledger, candidates: Sequence[JobView], free_gpus: int, fits: Fits,
         *, borrowers_only: bool, restore_s: float = DEFAULT_RESTORE_S, held: Ledger | None = None,
         withdrawable: Sequence[JobView] = ()) -> Plan | None:
    """The victims among ``candidates`` whose stop admits ``job`` to ``queue`` and lets it be
    placed, or None (module doc). ``ledger``: usage after the decision so far (not changed);
    ``free_gpus``: GPUs free after it; ``borrowers_only``: a victim is taken only while its queue
    borrows. ``held``: the running jobs' usage less the decision's stops (default ``ledger``):
    whether a running victim's queue still borrows is judged on it, so that the decision's own
    launches never make a queue within its nominal quota look like a borrower. ``withdrawable``:
    the decision's own launches that may be withdrawn instead of stopping a running job (queued
    jobs, placed by the decision): they are taken first (a borrowing one while its queue borrows
    counting the decision's launches), running victims only when they do not suffice. In the
    plan, :attr:`Plan.withdrawn` holds those withdrawn; ``fits`` is given both kinds.

    A plan reclaims something: a job that ``fits`` places with nothing chosen gets no plan (None).
    It lacks neither quota nor GPUs its placement would take, so its waiting is the wrapped
    policy's decision, which may hold it on purpose (a ``+backfill`` reservation for an older
    job, a learned policy's or the planner's wait); the what-if view, with that job alone queued,
    would launch it regardless and override that wait, with or without victims. Victims are
    chosen only for a job the policy cannot place as things are (quota, GPUs, fragmentation)."""
    tenants = ledger.tenants
    ledger = ledger.copy()
    held = ledger.copy() if held is None else held.copy()
    key = victim_key(tenants, restore_s)
    launches = {w.job_id for w in withdrawable}
    pool = [*strict_in_place(sorted(withdrawable, key=key), tenants, last_first=True),
            *sorted((c for c in candidates if c.job_id not in launches), key=key)]
    queue_order = admission_key(tenants)
    chosen: list[JobView] = []
    freed = 0
    launch: Launch | None = None

    def take(victim: JobView, sign: int) -> None:
        owner = tenants.queues[tenants.queue_of(victim)]
        ledger.add(owner, sign * victim.gpus)
        if victim.job_id not in launches:
            held.add(owner, sign * victim.gpus)

    while True:
        if free_gpus + freed >= job.gpus and ledger.admits(queue, job.gpus):
            launch = fits(chosen)
            if launch is not None:
                if not chosen:  # it goes as things are: waiting is the wrapped policy's choice
                    return None
                break
        victim = None
        for i, other in enumerate(pool):
            owner = tenants.queues[tenants.queue_of(other)]
            if not borrowers_only or (ledger if other.job_id in launches else held).borrowed(owner) > 0:
                victim = pool.pop(i)
                break
        if victim is None:
            return None
        chosen.append(victim)
        freed += victim.gpus
        take(victim, -1)
    # drop what the others make unnecessary: running victims first (largest first), then withdrawals
    # (largest first; a strict queue's from its first in its order, and none while one before it
    # stays withdrawn)
    order = sorted(chosen, key=lambda v: (v.job_id in launches, -v.gpus, v.job_id))
    stops = [v for v in order if v.job_id not in launches]
    for victim in [*stops, *strict_in_place(order[len(stops):], tenants, last_first=False)]:
        if victim.job_id in launches and (owner := tenants.queues[tenants.queue_of(victim)]).strict and any(
                v.job_id in launches and tenants.queue_of(v) == owner.name and queue_order(v) < queue_order(victim)
                for v in chosen):
            continue
        take(victim, 1)
        rest = [v for v in chosen if v is not victim]
        if rest and free_gpus + freed - victim.gpus >= job.gpus and ledger.admits(queue, job.gpus) \
                and (trial := fits(rest)) is not None:
            chosen, launch, freed = rest, trial, freed - victim.gpus
        else:
            take(victim, -1)
    return Plan(tuple(v for v in chosen if v.job_id not in launches), launch,
                tuple(v for v in chosen if v.job_id in launches))
