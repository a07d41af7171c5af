"""Contention-triggered migration: the ``+migrate`` variant of a policy.

The artifact's design moves jobs, not only places them: a running job that contention keeps
slow is checkpointed and restarted where it would run faster. :class:`Migrating` wraps any
policy: it takes the policy's decision as it is, then adds the moves of :class:`MigrationRule`,
using only the GPUs the decision leaves free (and the moving job's own).

A running job is moved when all of these hold (each a named constant below):

* *slow*: its view ratio (measured, or the learned model's under ``--contention-knowledge
  learned``) has stayed below :data:`MIGRATE_BELOW` of its isolated speed at every decision for
  :data:`MIGRATE_WINDOW_S`;
* *hysteresis*: its current run has lasted :data:`MIGRATE_WINDOW_S` (a moved job starts a new run,
  so no job migrates twice within its window, and a job just launched or moved is left alone);
* *a better place*: among the consolidated placement of its GPUs on the free GPUs plus its own
  and the placements that fit alike (:func:`~deepshare.policies.placement.fit_equivalents`),
  each honouring the job's topology request (a required level's domain, whole slices),
  predicted with itself (and the decision's preempted and earlier moved jobs) left out and the
  decision's launches pending, one runs it at least :data:`MIGRATE_MIN_GAIN` faster (isolated
  throughput of the new shape x predicted ratio) and costs the other jobs less than the job
  gains. *Faster* than it is predicted to run where it is under the same assumptions, not than
  its measured ratio: that one still counts the contention of the jobs the decision stops or
  moves, so a move judged against it could gain nothing over staying put;
* *it pays*: the time the faster rate saves on the job's remaining work (``remaining_s``, its
  estimate under the run's durations model), against that same predicted stay, is at least
  :data:`MIGRATE_PAYBACK` x the checkpoint-and-restore time a move costs: the view's
  :attr:`~deepshare.core.view.ClusterView.move_s` (the simulator's ``--migrate-overhead-s``, a
  placement request's ``move_s``), or :attr:`MigrationRule.cost_s` where a rule fixes one.

The slow-since times live in the wrapper (one per policy object, shared by the threads that
decide with it): a fresh object (a new run, a restarted service replica) starts each job's
window at the first decision it sees it slow, so it can only move a job later, never sooner.
They depend on the views alone (a decision on the same view twice gives the same moves): a moved
job keeps its slow-since time, and the run window is what keeps it from moving again too soon.
Decision points are what the run offers: the simulator decides when jobs are queued.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from deepshare.core.contention.base import leaving_out
from deepshare.core.fabric import request_violation
from deepshare.core.types import Decision, Migrate, Placement
from deepshare.core.view import DEFAULT_MOVE_S, ClusterView, JobView
from deepshare.policies.base import Policy
from deepshare.policies.placement import PLACEMENTS, consolidate, fit_equivalents

MIGRATE_BELOW = 0.8
"""A running job is slow below this fraction of its isolated speed."""
MIGRATE_WINDOW_S = 600.0
"""How long a job must have been slow, and its current run must have lasted, before it moves."""
MIGRATE_MIN_GAIN = 0.1
"""The new placement's predicted speed must beat the current one by this fraction."""
MIGRATE_COST_S = DEFAULT_MOVE_S
"""Seconds a move costs the job when the run says nothing else (checkpoint and restore: the
simulator's default migration overhead); a run's own is its views' ``move_s``."""
MIGRATE_PAYBACK = 2.0
"""The time a move saves must be at least this many times its cost (the prediction can be wrong)."""
MIGRATING_PLACEMENTS = ("contention-aware", "packed", "uncontended")
"""The placements a ``+migrate`` variant is registered for: those that decide on predicted
contention or wait for a shape (a job started fragmented after ``packed``'s wait is the first to
gain from a move)."""


@dataclass(frozen=True)
class MigrationRule:
    """When and where a running job moves (see the module doc); every knob has the default above."""

    below: float = MIGRATE_BELOW
    window_s: float = MIGRATE_WINDOW_S
    min_gain: float = MIGRATE_MIN_GAIN
    cost_s: float | None = None
    """Seconds a move costs; None: the view's ``move_s`` (the run's migration overhead)."""
    payback: float = MIGRATE_PAYBACK

    def __post_init__(self) -> None:
        cost_bad = self.cost_s is not None and not self.cost_s >= 0
        if not 0 < self.below <= 1 or self.window_s < 0 or self.min_gain < 0 or cost_bad or self.payback < 0:
            raise ValueError(f"invalid migration rule {self}")

    def saving_s(self, view: ClusterView, job: JobView, new: Placement, new_ratio: float,
                 stay_ratio: float | None = None) -> float:
        """Seconds the job's remaining work takes less at ``new`` (at ``new_ratio``) than where it
        runs now (at ``stay_ratio``, by default its view ratio), the move's cost not counted;
        <= 0 when it is no faster."""
        assert job.placement is not None
        old = job.seconds_at(view.catalog, job.placement.num_nodes, job.ratio if stay_ratio is None else stay_ratio)
        after = job.seconds_at(view.catalog, new.num_nodes, new_ratio)
        return old - after if after < old < float("inf") else 0.0

    def worth_it(self, view: ClusterView, job: JobView, new: Placement, new_ratio: float, others_loss: float,
                 stay_ratio: float | None = None) -> float:
        """The saving of moving ``job`` to ``new`` when every condition on the target holds, else 0;
        ``stay_ratio``: its ratio if it stays (by default its view ratio)."""
        catalog = view.catalog
        assert job.placement is not None
        stay = job.ratio if stay_ratio is None else stay_ratio
        old_iso = catalog.throughput(job.model, job.gpus, job.placement.num_nodes)
        old_speed = old_iso * stay
        new_speed = catalog.throughput(job.model, job.gpus, new.num_nodes) * new_ratio
        if new_speed < old_speed * (1.0 + self.min_gain):
            return 0.0
        if others_loss >= (new_speed - old_speed) / old_iso:  # the others lose more than it gains
            return 0.0
        saving = self.saving_s(view, job, new, new_ratio, stay)
        cost = view.move_s if self.cost_s is None else self.cost_s
        return saving if saving >= self.payback * cost else 0.0

    def moves(self, view: ClusterView, decision: Decision, slow_since: dict[str, float]) -> tuple[Migrate, ...]:
        """The moves to add to ``decision`` (none of its own jobs moved), updating ``slow_since``."""
        now = view.now
        running = list(view.running)
        ids = {job.job_id for job in running}
        for job_id in [j for j in slow_since if j not in ids]:
            del slow_since[job_id]
        for job in running:
            if job.ratio < self.below:
                slow_since.setdefault(job.job_id, now)
            else:
                slow_since.pop(job.job_id, None)
        busy = set(decision.preempt) | {m.job_id for m in decision.migrate} | {l.job_id for l in decision.launch}
        candidates = sorted(
            (job for job in running if job.job_id not in busy and job.job_id in slow_since
             and now - slow_since[job.job_id] >= self.window_s and job.last_run_s >= self.window_s),
            key=lambda job: (job.ratio, job.job_id),
        )
        if not candidates:
            return ()
        by_id = {job.job_id: job for job in (*running, *view.queued)}
        free = _free_after(view, decision, by_id)
        pending = [(by_id[l.job_id], l.placement) for l in decision.launch]
        stopped = [by_id[j] for j in decision.preempt]
        chosen: list[Migrate] = []
        for job in candidates:
            assert job.placement is not None
            mine = list(free)
            job.placement.release(mine)
            best: tuple[float, Placement] | None = None
            options = _targets(view, job, mine, pending)
            if not options:
                continue
            moved = [by_id[m.job_id] for m in chosen]
            with leaving_out(view.predict, [*stopped, *moved, job]) as predict:
                # Staying is judged as the targets are: without the stopped and moved jobs (its
                # measured ratio still counts them) and with the launches pending.
                stay = predict(job, job.placement, pending).ratio
                for option in options:
                    prediction = predict(job, option, pending)
                    saving = self.worth_it(view, job, option, prediction.ratio, prediction.others_loss, stay)
                    if saving > 0 and (best is None or saving > best[0]):
                        best = (saving, option)
            if best is None:
                continue
            target = best[1]
            job.placement.release(free)
            target.take(free)
            pending.append((job, target))
            chosen.append(Migrate(job.job_id, target))
        return tuple(chosen)


def _targets(view: ClusterView, job: JobView, free: list[int], pending: list) -> list[Placement]:
    """Where ``job`` could move on ``free`` (its own GPUs included): the consolidated placement
    and those that fit alike, other than where it runs, each honouring its topology request (a
    required level's domain, whole slices), as every placement must: the request's
    consolidated placement is the base, and the alike ones that break the request are left out."""
    request = job.topology
    base = consolidate(job.gpus, free) if request.empty else PLACEMENTS["consolidated"][0](job, free, view, pending)
    if base is None:
        return []
    options = [p for p in fit_equivalents(free, base) if p != job.placement]
    if not request.empty:
        fabric = view.topology.fabric
        options = [p for p in options if request_violation(request, p.alloc, fabric) is None]
    return options


def _free_after(view: ClusterView, decision: Decision, jobs: dict[str, JobView]) -> list[int]:
    """The free GPUs per node once ``decision`` is carried out."""
    free = list(view.free)
    for job_id in decision.preempt:
        jobs[job_id].placement.release(free)  # type: ignore[union-attr]
    for move in decision.migrate:
        jobs[move.job_id].placement.release(free)  # type: ignore[union-attr]
    for move in decision.migrate:
        move.placement.take(free)
    for launch in decision.launch:
        launch.placement.take(free)
    return free


@dataclass(frozen=True)
class Migrating:
    """``base``'s decision plus the moves of ``rule`` (the ``+migrate`` variant of a policy)."""

    name: str
    base: Policy
    rule: MigrationRule = MigrationRule()
    _slow_since: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def decide(self, view: ClusterView) -> Decision:
        decision = self.base.decide(view)
        with self._lock:
            moves = self.rule.moves(view, decision, self._slow_since)
        return replace(decision, migrate=(*decision.migrate, *moves)) if moves else decision


def migrating(name: str, base: Policy, rule: MigrationRule = MigrationRule()) -> Migrating:
    """``base`` with contention-triggered migration, named ``name``."""
    return Migrating(name, base, rule)
