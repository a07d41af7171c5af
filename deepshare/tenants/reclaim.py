"""Preemption for quotas: which running jobs to stop so that a held job gets its due.

Two reasons, Kueue's ``reclaimWithinCohort`` and ``withinClusterQueue``:

* **reclaim** — a job its queue's *nominal* quota covers is held (by quota, or because the GPUs
  are taken) while other queues of its cohort borrow: jobs of the borrowing queues are stopped,
  each only while its queue still borrows, so borrowed GPUs go back to their owner and nobody
  is pushed below what it was lent;
* **priority** — a job its queue's limits hold back while the same queue runs jobs of a lower
  priority class: those are stopped.

Victims are taken cheapest first: lowest priority class, then the GPU-seconds the stop costs
(GPUs x ``restore_s``, the restore time a preempted job pays; it loses no work, it checkpoints
when stopped, as in :mod:`deepshare.policies.preempt_plan`), then least attained service, then
id. Once the job is admissible and ``fits(victims)`` places it, victims the others make
unnecessary are dropped (largest first). ``fits`` asks the wrapped policy itself where the job
would go with the victims gone (:class:`~deepshare.tenants.wrapper.Admitted`), so nothing is
ever preempted for a job that would then not fit by the placement's own rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from deepshare.core.types import Launch
from deepshare.core.view import JobView
from deepshare.tenants.quota import Ledger
from deepshare.tenants.spec import Queue, Tenants

RESTORE_S = 30.0
"""The restore time a preempted job pays, seconds (the simulator's default ``preempt_overhead_s``)."""

Fits = Callable[[Sequence[JobView]], "Launch | None"]
"""``fits(victims)``: the job's launch once ``victims`` are stopped, or None where it would not go."""


@dataclass(frozen=True)
class Plan:
    victims: tuple[JobView, ...]
    launch: Launch


def victim_key(tenants: Tenants, restore_s: float = RESTORE_S):  # type: ignore[no-untyped-def]
    """Cheapest victim first (module doc)."""
    return lambda job: (tenants.priority_of(job), job.gpus * restore_s, job.attained_gpu_s, job.job_id)


def reclaim_candidates(job: JobView, queue: Queue, running: Sequence[JobView], tenants: Tenants) -> list[JobView]:
    """Running jobs of the other queues of ``queue``'s cohort (whether they borrow is checked as
    victims are taken)."""
    if queue.cohort is None:
        return []
    return [r for r in running if (other := tenants.queues[tenants.queue_of(r)]).cohort == queue.cohort
            and other.name != queue.name]


def priority_candidates(job: JobView, queue: Queue, running: Sequence[JobView], tenants: Tenants) -> list[JobView]:
    """Running jobs of ``queue`` of a lower priority class than ``job``."""
    mine = tenants.priority_of(job)
    return [r for r in running if tenants.queue_of(r) == queue.name and tenants.priority_of(r) < mine]


def plan(job: JobView, queue: Queue, ledger: Ledger, candidates: Sequence[JobView], free_gpus: int, fits: Fits,
         *, borrowers_only: bool, restore_s: float = RESTORE_S) -> Plan | None:
    """The victims among ``candidates`` whose stop admits ``job`` to ``queue`` and lets it be
    placed, or None (module doc). ``ledger``: usage now (not changed); ``free_gpus``: GPUs free
    now; ``borrowers_only``: a victim is taken only while its queue holds more than its nominal."""
    tenants = ledger.tenants
    ledger = ledger.copy()
    pool = sorted(candidates, key=victim_key(tenants, restore_s))
    chosen: list[JobView] = []
    freed = 0
    launch: Launch | None = None
    while True:
        if free_gpus + freed >= job.gpus and ledger.admits(queue, job.gpus):
            launch = fits(chosen)
            if launch is not None:
                break
        victim = None
        for i, other in enumerate(pool):
            owner = tenants.queues[tenants.queue_of(other)]
            if not borrowers_only or ledger.borrowed(owner) > 0:
                victim = pool.pop(i)
                break
        if victim is None:
            return None
        chosen.append(victim)
        freed += victim.gpus
        ledger.remove(tenants.queues[tenants.queue_of(victim)], victim.gpus)
    for victim in sorted(chosen, key=lambda v: (-v.gpus, v.job_id)):  # drop what the others make unnecessary
        owner = tenants.queues[tenants.queue_of(victim)]
        ledger.add(owner, victim.gpus)
        rest = [v for v in chosen if v is not victim]
        if free_gpus + freed - victim.gpus >= job.gpus and ledger.admits(queue, job.gpus) \
                and (trial := fits(rest)) is not None:
            chosen, launch, freed = rest, trial, freed - victim.gpus
        else:
            ledger.remove(owner, victim.gpus)
    return Plan(tuple(chosen), launch)
