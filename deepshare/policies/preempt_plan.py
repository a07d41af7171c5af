"""Topology-aware preemption: which running jobs to stop so that a gang fits inside one domain.

A gang that requires one domain of a level (``required_level``) may find enough free GPUs in the
cluster but none in any one domain, or GPUs held only by jobs it outranks. Stopping the lowest
ranked jobs cluster-wide then frees GPUs scattered over domains that do not help it. The users
of Kueue, KAI and Volcano ask for preemption that frees a whole rack or NVLink domain instead;
:func:`plan` does that:

* for every domain of the gang's required level, the running jobs it outranks that hold GPUs
  there are the candidates (the order's priorities are respected: never a job ranked above it);
* victims are taken lowest-ranked first until the domain's free GPUs plus theirs there hold the
  gang, then any victim the others make unnecessary is dropped (largest first);
* the cost of a plan is the GPU-seconds its victims lose: all their GPUs (inside the domain or
  not) x the restore time a preempted job pays (``restore_s``, the simulator's
  ``preempt_overhead_s``); a preempted job loses no work, it checkpoints when stopped;
* the domain with the cheapest plan wins (ties: fewer victims, then the lower domain index), and
  only if the gang then really fits there (its slices included): nothing is ever preempted for a
  gang that would not fit.

Predicted contention after the preemption is not part of the cost yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.fabric_place import candidate_domains

RESTORE_S = 30.0
"""The restore time a preempted job pays, seconds (the simulator's default ``preempt_overhead_s``)."""


@dataclass(frozen=True)
class Plan:
    domain: int
    """The domain of the gang's required level that the victims free."""
    victims: tuple[JobView, ...]
    cost: float
    """GPU-seconds the victims lose (their GPUs x ``restore_s``)."""
    placement: Placement
    """Where the gang goes once the victims are stopped."""


def plan(gang: JobView, view: ClusterView, free: Sequence[int], candidates: Sequence[JobView],
         place: Callable[[list[int]], Placement | None], restore_s: float = RESTORE_S) -> Plan | None:
    """The cheapest way to free one domain of ``gang``'s required level for it (see the module
    doc), or None. ``candidates``: running jobs the gang outranks, lowest-ranked first; ``free``:
    the free GPUs now; ``place(free_after)``: the gang's placement on those free GPUs, or None."""
    request = gang.topology
    if request.required_level is None:
        return None
    fabric = view.topology.fabric
    level = fabric.level_index(request.required_level)
    best: Plan | None = None
    for domain_index in fabric.by_level[level]:
        domain = fabric.domains[domain_index]
        inside = set(domain.nodes)
        have = sum(free[n] for n in domain.nodes)
        if have >= gang.gpus:
            continue  # it fits there without preemption: not this module's question
        holders = [(job, sum(g for n, g in job.placement.alloc if n in inside))  # type: ignore[union-attr]
                   for job in candidates if job.placement is not None]
        holders = [(job, there) for job, there in holders if there > 0]
        if have + sum(there for _, there in holders) < gang.gpus:
            continue
        chosen: list[tuple[JobView, int]] = []
        for job, there in holders:  # lowest-ranked first
            if have >= gang.gpus:
                break
            chosen.append((job, there))
            have += there
        for job, there in sorted(chosen, key=lambda c: -c[0].gpus):  # drop what the others make unnecessary
            if have - there >= gang.gpus:
                chosen.remove((job, there))
                have -= there
        victims = tuple(job for job, _ in chosen)
        after = list(free)
        for job in victims:
            for node, gpus in job.placement.alloc:  # type: ignore[union-attr]
                after[node] += gpus
        if next(candidate_domains(fabric, after, gang.gpus, level, request), None) is None:
            continue
        placement = place(after)
        if placement is None:
            continue
        cost = sum(job.gpus for job in victims) * restore_s
        option = Plan(domain_index, victims, cost, placement)
        if best is None or (cost, len(victims), domain_index) < (best.cost, len(best.victims), best.domain):
            best = option
    return best
