"""Topology-aware preemption: which running jobs to stop so that a gang fits inside one domain.

A gang that requires one domain of a level (``required_level``) may find enough free GPUs in the
cluster but none in any one domain, or GPUs held only by jobs it outranks. Stopping the lowest
ranked jobs cluster-wide then frees GPUs scattered over domains that do not help it. The users
of Kueue, KAI and Volcano ask for preemption that frees a whole rack or NVLink domain instead;
:func:`plan` does that:

* for every domain of the gang's required level, the running jobs it outranks that hold GPUs
  there are the candidates (the order's priorities are respected: never a job ranked above it);
* victims are taken lowest-ranked first until the domain's free GPUs plus theirs there hold the
  gang, then any victim the others make unnecessary is dropped (largest first); with slices,
  "hold" counts only whole slices of the slice level (:func:`holds`): free GPUs that add up to
  the gang in pieces smaller than a slice hold none of it, so such a domain is planned for too,
  and victims are added until the slices are whole;
* the gang is placed inside that domain (its placement strategy on the domain's free GPUs and
  the victims' GPUs there, never elsewhere): every victim is then one it needs, since without
  any one of them the domain would not hold it;
* the cost of a plan, in GPU-seconds, is what its victims lose: all their GPUs (inside the
  domain or not) x the restore time a preempted job pays (the view's ``restore_s``: the
  simulator's ``preempt_overhead_s``, a placement request's ``restore_s``); a preempted job loses
  no attained service, it checkpoints when stopped; **plus the contention predicted after it**:
  the gang placed there, with the victims (and the jobs this decision stopped before) left out
  of the prediction (:func:`~deepshare.core.contention.base.leaving_out`) and the decision's earlier launches
  counted, loses :func:`~deepshare.policies.launch_cost.gpu_loss` GPUs' worth of throughput (its
  own slowdown x its GPUs, its neighbours' loss x a running job's mean GPUs) for as long as it runs, taken as its
  ``remaining_s`` (what the view lets a scheduler know of it, never the truth outside ``exact``);
* the domain with the cheapest plan wins (ties: fewer victims, then the lower domain index), and
  only if the gang then really fits there (its slices included): nothing is ever preempted for a
  gang that would not fit. With predictions free of contention every plan costs what it did
  before contention was counted, so the same plan wins.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from deepshare.core.contention.base import leaving_out
from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.core.fabric import Fabric
from deepshare.policies.fabric_place import _slice_capacity, candidate_domains, slice_of
from deepshare.policies.launch_cost import gpu_loss, mean_job_gpus
from deepshare.policies.place_types import Pending

@dataclass(frozen=True)
class Plan:
    domain: int
    """The domain of the gang's required level that the victims free."""
    victims: tuple[JobView, ...]
    cost: float
    """GPU-seconds the plan costs: the victims' GPUs x the view's ``restore_s``, plus :attr:`contention`."""
    placement: Placement
    """Where the gang goes once the victims are stopped."""
    contention: float = 0.0
    """GPU-seconds the gang and its neighbours are predicted to lose to contention there."""


def plan(gang: JobView, view: ClusterView, free: Sequence[int], candidates: Sequence[JobView],
         place: Callable[[list[int], ClusterView], Placement | None],
         gone: Sequence[JobView] = (), pending: Pending = ()) -> Plan | None:
    """The cheapest way to free one domain of ``gang``'s required level for it (see the module
    doc), or None. ``candidates``: running jobs the gang outranks, lowest-ranked first; ``free``:
    the free GPUs now; ``place(free_after, view_after)``: the gang's placement on those free GPUs
    (the domain's: every other node's are 0; ``view_after`` predicts without the victims), or
    None; ``gone``: running jobs this decision stops already; ``pending``: its launches so far.
    A stop costs ``view.restore_s`` per victim GPU: the run's restore time, which the view carries."""
    request = gang.topology
    if request.required_level is None:
        return None
    fabric = view.topology.fabric
    level = fabric.level_index(request.required_level)
    best: Plan | None = None
    slices = slice_of(fabric, request)
    restore_s = view.restore_s
    for domain_index in fabric.by_level[level]:
        domain = fabric.domains[domain_index]
        inside = set(domain.nodes)
        after = [free[n] if n in inside else 0 for n in range(len(free))]  # the gang goes in this domain
        if holds(fabric, after, domain.nodes, slices) >= gang.gpus:
            continue  # it fits there without preemption: not this module's question
        holders = [(job, sum(g for n, g in job.placement.alloc if n in inside))  # type: ignore[union-attr]
                   for job in candidates if job.placement is not None]
        if sum(after) + sum(there for _, there in holders) < gang.gpus:
            continue
        holders = [job for job, there in holders if there > 0]
        chosen: list[JobView] = []
        for job in holders:  # lowest-ranked first, until the domain holds the gang (its slices whole)
            chosen.append(job)
            release_inside(job, inside, after)
            if holds(fabric, after, domain.nodes, slices) >= gang.gpus:
                break
        else:
            continue  # every job it outranks there stopped, it still would not fit
        for job in sorted(chosen, key=lambda j: -j.gpus):  # drop what the others make unnecessary
            take_inside(job, inside, after)
            if holds(fabric, after, domain.nodes, slices) >= gang.gpus:
                chosen.remove(job)
            else:
                release_inside(job, inside, after)
        victims = tuple(chosen)
        if next(candidate_domains(fabric, after, gang.gpus, level, request), None) is None:
            continue
        restore = sum(job.gpus for job in victims) * restore_s
        if best is not None and restore > best.cost:
            continue  # contention only adds: this plan cannot win
        with leaving_out(view.predict, [*gone, *victims]) as predict:
            view_after = replace(view, predict=predict)
            placement = place(after, view_after)
            if placement is None:
                continue
            contention = contention_s(gang, placement, view_after, pending)
        cost = restore + contention
        option = Plan(domain_index, victims, cost, placement, contention)
        if best is None or (cost, len(victims), domain_index) < (best.cost, len(best.victims), best.domain):
            best = option
    return best


def holds(fabric: Fabric, free: Sequence[int], nodes: Sequence[int], slices: tuple[int, int] | None) -> int:
    """The GPUs of a gang that ``free`` on ``nodes`` can hold: all of them, or with slices
    ``(size, level)`` only the whole slices each domain of the slice level holds (GPUs that
    add up to the gang without a whole slice hold none of it)."""
    if slices is None:
        return sum(free[n] for n in nodes)
    size, level = slices
    return sum(_slice_capacity(fabric, free, nodes, size, level).values()) * size


def take_inside(job: JobView, inside: set[int], free: list[int]) -> None:
    """Take back from ``free`` what :func:`release_inside` added."""
    for node, gpus in job.placement.alloc:  # type: ignore[union-attr]
        if node in inside:
            free[node] -= gpus


def release_inside(job: JobView, inside: set[int], free: list[int]) -> None:
    """Add ``job``'s GPUs on the nodes of ``inside`` to ``free`` (its GPUs elsewhere the gang cannot use)."""
    for node, gpus in job.placement.alloc:  # type: ignore[union-attr]
        if node in inside:
            free[node] += gpus


def contention_s(gang: JobView, placement: Placement, view: ClusterView, pending: Pending) -> float:
    """GPU-seconds of contention the gang at ``placement`` is predicted to cost (see the module
    doc), never below 0 (so a plan whose restore time alone exceeds the best's is skipped
    unpredicted); ``view`` predicts without the jobs the plan stops, whose own loss is not counted."""
    prediction = view.predict(gang, placement, pending)
    neighbour = mean_job_gpus(view, pending, gang.gpus) if prediction.others_loss else 0.0
    return max(gpu_loss(gang, prediction, neighbour), 0.0) * max(gang.remaining_s, 0.0)  # never negative: see plan
