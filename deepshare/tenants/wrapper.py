"""The tenants wrapper: admission, then any policy, then preemption for quotas.

``Admitted(inner, tenants)`` is itself a policy (``decide(view) -> Decision``), so it runs
wherever a policy runs: the simulator, the placement service, the live scheduler. At each
decision it

1. admits queued jobs against the queues' quotas, counted from the view's running jobs
   (:func:`~deepshare.tenants.admission.admit`);
2. asks ``inner`` on the same view with only the admitted jobs queued and the tenants file as
   the view's ``tenancy`` (so fairness-aware orders can read queues and weights; every other
   order and placement works unchanged, knowing nothing of tenants);
3. when ``reclaim`` is on, for each job still waiting that its nominal quota covers while its
   cohort's other queues borrow, or that a lower-priority job of its own queue holds back,
   plans victims (:mod:`deepshare.tenants.reclaim`) and launches it where ``inner`` itself
   would place it once they are gone: ``inner`` is asked on a what-if view (victims and the
   decision's own preemptions gone, its launches' GPUs taken, only that job queued), and a plan
   is taken only if ``inner`` then launches the job without preempting anything else. A plan
   always stops or withdraws something: a job ``inner`` would launch there with no victim gets
   none, its waiting being ``inner``'s own choice (a ``+backfill`` reservation, say); nor does a
   job that a held job ahead of it holds back in a strict queue (``Admission.blocked``). The
   decision's own borrowing (reclaim) or lower-priority (priority) launches are withdrawn before
   any running job is stopped, and a running job's queue borrows by its running jobs alone.
   Jobs are taken in Kueue's order: those their nominal quota covers first (when the planning
   starts), then the others, each by priority class, then submission; and a plan that would
   raise its queue's borrowing while another queue's job of the cohort waits, within its
   nominal quota, that the cohort could then no longer admit is refused (Kueue reserves that
   job's quota in the cycle): a borrowing job's priority plan never takes the victims or the
   room a within-nominal job of its cohort is due.

The what-if views are ordinary views, so ``inner`` must decide on them as on any view it did not
expect (the built-in heuristics rebuild their per-thread queue index then). At most
:data:`MAX_PLANS` plans are made per decision, bounding the extra calls; a job that the free GPUs
and every eligible victim's together could not hold gets no plan and uses none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from deepshare.core.contention.base import leaving_out
from deepshare.core.types import Decision, Launch, Migrate, WAIT
from deepshare.core.view import ClusterView, JobView
from deepshare.tenants.admission import Admission, admission_key, admit
from deepshare.tenants.quota import Ledger
from deepshare.tenants.reclaim import Candidates, Plan, plan
from deepshare.tenants.spec import Queue, Tenants

MAX_PLANS = 8
"""Plans a decision makes for held jobs, at most (within-nominal jobs first, then the others, each
by highest priority, then oldest). A job asking more GPUs than the free ones and every eligible
victim's (and withdrawable launch's) together is skipped before planning and not counted:
otherwise a few such hopeless jobs ahead would use the budget up at every decision, and a job
behind them whose plan would succeed would never be tried."""


class PolicyLike(Protocol):
    """What the wrapper needs of the policy it wraps (:class:`deepshare.policies.base.Policy`)."""

    name: str

    def decide(self, view: ClusterView) -> Decision: ...


@dataclass(frozen=True)
class Admitted:
    """``inner`` behind the tenants file's admission and quota preemption (module doc)."""

    inner: PolicyLike
    tenants: Tenants
    reclaim: bool = True
    """Preempt for quotas (reclaim borrowed GPUs, priority within a queue); off: admission only.
    Victims are costed at the view's ``restore_s`` (the run's restore time of a preempted job)."""

    @property
    def name(self) -> str:
        return self.inner.name

    def decide(self, view: ClusterView) -> Decision:
        tenants = self.tenants
        admission = admit(view.queued, view.running, tenants)
        decision = WAIT
        if admission.admitted:
            decision = self._within_tenancy(
                view, admission, self.inner.decide(replace(view, queued=admission.admitted, tenancy=tenants)))
        if not self.reclaim or not admission.held and len(decision.launch) == len(admission.admitted):
            return decision
        return self._preempt_for_quotas(view, admission, decision)

    def _within_tenancy(self, view: ClusterView, admission: Admission, decision: Decision) -> Decision:
        """``inner``'s decision with only the preemptions the tenants' rules allow: a victim of a
        launched job's own queue whose priority is not above that job's (the order's own
        preemption, inside a queue), or, for a launch of its cohort that its queue's nominal quota
        covers, a victim whose queue still borrows once the victims inside queues and the
        reclaim victims before it are stopped (reclaim: a queue is never stopped below its
        nominal quota but by its last victim, its own stops counted whatever their order, and only
        a queue within its guarantee reclaims). ``inner`` sees every queue's running jobs and knows nothing of queues,
        so a ``+preempt`` order would otherwise stop another tenant's job inside its quota. When
        any victim is refused, the order's victims in other queues are all dropped (reclaim is then
        the planner's), and launches and moves that needed a dropped victim's GPUs are dropped (in
        decision order). A kept victim must then still free GPUs that a surviving launch it is
        stopped for needs (:meth:`_needed`): otherwise it is dropped too (a victim in another
        queue: all of them, as above), and so on until every kept victim is needed."""
        if not decision.preempt:
            return decision
        tenants = self.tenants
        running = {job.job_id: job for job in view.running}
        queued = {job.job_id: job for job in view.queued}
        by_queue: dict[str, int] = {}  # per queue launched into, its launches' highest priority
        launched: dict[str, int] = {}  # and their GPUs
        for launch in decision.launch:
            job = queued.get(launch.job_id)
            if job is not None:
                queue, priority = tenants.queue_of(job), tenants.priority_of(job)
                by_queue[queue] = max(priority, by_queue.get(queue, priority))
                launched[queue] = launched.get(queue, 0) + job.gpus
        within = {q for q in by_queue if admission.running.within_nominal(tenants.queues[q], launched[q])}
        reclaiming = {tenants.queues[q].pool_key for q in within}
        ledger = admission.running.copy()  # usage as the kept victims stop: inside queues, then reclaim in order

        def inside_queue(victim: JobView) -> bool:
            queue = tenants.queue_of(victim)
            return queue in by_queue and tenants.priority_of(victim) <= by_queue[queue]

        def reclaimed(victim: JobView) -> bool:
            queue = tenants.queues[tenants.queue_of(victim)]
            if queue.pool_key in reclaiming and ledger.borrowed(queue) > 0:
                ledger.remove(queue, victim.gpus)
                return True
            return False

        inside = {job_id for job_id in decision.preempt if inside_queue(running[job_id])}
        for job_id in inside:  # a queue whose own stops bring it within its quota no longer borrows
            ledger.remove(tenants.queues[tenants.queue_of(running[job_id])], running[job_id].gpus)
        kept = [job_id for job_id in decision.preempt if job_id in inside or reclaimed(running[job_id])]
        if len(kept) != len(decision.preempt):
            # A part of the order's stops across queues frees GPUs for launches that then do not
            # fit: those stops would be for nothing. Reclaim is left to the planner
            # (:meth:`_preempt_for_quotas`), which stops victims only for a job they let run.
            kept = [job_id for job_id in kept if job_id in inside]

        def stopped_for(victim: JobView) -> Callable[[JobView], bool]:
            """Whether a launched job is one ``victim`` may be stopped for: of its own queue and
            of a priority not below its (inside a queue); else of another queue of its cohort
            whose nominal quota covers its launches (reclaim)."""
            queue, priority = tenants.queue_of(victim), tenants.priority_of(victim)
            if victim.job_id in inside:
                return lambda job: tenants.queue_of(job) == queue and tenants.priority_of(job) >= priority
            cohort = tenants.queues[queue].cohort
            return lambda job: (tenants.queue_of(job) != queue and tenants.queue_of(job) in within
                                and cohort is not None and tenants.queues[tenants.queue_of(job)].cohort == cohort)

        while True:
            launches, moves = self._refit(view, running, decision, kept)
            unneeded = next((job_id for job_id in kept if not self._needed(
                view, running, queued, kept, job_id, launches, moves, stopped_for(running[job_id]))), None)
            if unneeded is None:
                break
            if unneeded in inside:
                kept.remove(unneeded)
            else:  # as for a refused victim in another queue: reclaim is the planner's
                kept = [job_id for job_id in kept if job_id in inside]
        if len(kept) == len(decision.preempt) and len(launches) == len(decision.launch) \
                and len(moves) == len(decision.migrate):
            return decision
        return Decision(launch=tuple(launches), preempt=tuple(kept), migrate=tuple(moves))

    @staticmethod
    def _refit(view: ClusterView, running: dict[str, JobView], decision: Decision,
               kept: Sequence[str]) -> tuple[list[Launch], list[Migrate]]:
        """The decision's moves and launches that fit, in decision order, once only ``kept`` stop."""
        free = list(view.free)
        for job_id in kept:
            running[job_id].placement.release(free)  # type: ignore[union-attr]
        moves = []
        for move in decision.migrate:
            old = running[move.job_id].placement
            old.release(free)  # type: ignore[union-attr]
            if move.placement.fits(free):
                move.placement.take(free)
                moves.append(move)
            else:
                old.take(free)  # type: ignore[union-attr]
        launches = []
        for launch in decision.launch:
            if launch.placement.fits(free):
                launch.placement.take(free)
                launches.append(launch)
        return launches, moves

    @staticmethod
    def _needed(view: ClusterView, running: dict[str, JobView], queued: dict[str, JobView], kept: Sequence[str],
                victim: str, launches: Sequence[Launch], moves: Sequence[Migrate],
                stopped_for: Callable[[JobView], bool]) -> bool:
        """Whether the launches ``victim`` may be stopped for need its GPUs: with every other kept
        victim stopped but not it, and the decision's other moves and launches placed first
        (those that still fit), they do not all fit. A victim whose GPUs would go only to
        launches of other queues (or of a lower priority), or to nothing, is not needed."""
        free = list(view.free)
        for job_id in kept:
            if job_id != victim:
                running[job_id].placement.release(free)  # type: ignore[union-attr]
        for move in moves:
            old = running[move.job_id].placement
            old.release(free)  # type: ignore[union-attr]
            if move.placement.fits(free):
                move.placement.take(free)
            else:
                old.take(free)  # type: ignore[union-attr]
        mine = [launch for launch in launches if stopped_for(queued[launch.job_id])]
        ids = {launch.job_id for launch in mine}
        for launch in launches:
            if launch.job_id not in ids and launch.placement.fits(free):
                launch.placement.take(free)
        for launch in mine:
            if not launch.placement.fits(free):
                return True
            launch.placement.take(free)
        return False

    def _preempt_for_quotas(self, view: ClusterView, admission: Admission, decision: Decision) -> Decision:
        """``decision`` and, for jobs still waiting (module doc, step 3), the victims and launches
        :func:`~deepshare.tenants.reclaim.plan` finds. The decision's own launches that borrow (for
        reclaim) or are of a lower priority (inside a queue) are withdrawn before any running job
        is stopped, and a running job is a reclaim victim only while its queue borrows counting
        its running jobs (less this decision's stops), never this decision's launches: those would
        make a queue within its nominal quota look like a borrower. A launch of a queue (or
        cohort) where this decision stops a job is never withdrawn: it may be what the stop is for.
        Jobs within their nominal quota are planned for first, and a plan that takes the room one
        of them is guaranteed is refused (module doc, step 3; :meth:`_takes_guaranteed_room`)."""
        tenants = self.tenants
        running = {job.job_id: job for job in view.running}
        queued = {job.job_id: job for job in view.queued}
        ledger = admission.running.copy()  # usage after the decision: for admitting the held job
        held = admission.running.copy()  # the running jobs' usage less the stops: who still borrows
        free = list(view.free)
        for job_id in decision.preempt:
            job = running[job_id]
            ledger.remove(tenants.queues[tenants.queue_of(job)], job.gpus)
            held.remove(tenants.queues[tenants.queue_of(job)], job.gpus)
            job.placement.release(free)  # type: ignore[union-attr]
        for move in decision.migrate:
            running[move.job_id].placement.release(free)  # type: ignore[union-attr]
            move.placement.take(free)
        for launch in decision.launch:
            job = queued[launch.job_id]
            ledger.add(tenants.queues[tenants.queue_of(job)], job.gpus)
            launch.placement.take(free)
        stopped = [running[job_id] for job_id in decision.preempt]
        busy = {*decision.preempt, *(m.job_id for m in decision.migrate)}
        launched = {launch.job_id: launch for launch in decision.launch}
        stopping = {tenants.queues[tenants.queue_of(running[job_id])].pool_key for job_id in decision.preempt}
        withdrawable = {job_id: queued[job_id] for job_id in launched
                        if tenants.queues[tenants.queue_of(queued[job_id])].pool_key not in stopping}
        withdrawn: set[str] = set()
        # Kueue's order of entries: jobs their nominal quota covers (reclaim) before those that
        # would borrow, each by priority class, then submission, so that a borrowing job's priority
        # plan never takes the room a within-nominal job of its cohort is about to reclaim
        order = admission_key(tenants)
        waiting = sorted((j for j in view.queued if j.job_id not in launched), key=lambda j: (
            not ledger.within_nominal(tenants.queues[tenants.queue_of(j)], j.gpus), *order(j)))
        extra_launch: list[Launch] = []
        extra_preempt: list[str] = []
        behind: dict[str, tuple] = {}  # per strict queue, the order key of its first job withdrawn here
        ahead: dict[str, tuple] = {}  # per strict queue, the order key of its last job planned for here
        tried = 0
        victims, withdrawals = Candidates(view.running, tenants), Candidates(list(withdrawable.values()), tenants)

        def idle(victim: JobView) -> bool:  # a running job not yet stopped or moved
            return victim.job_id not in busy

        def still_launching(launch: JobView) -> bool:
            """A launch not yet withdrawn, and never a strict queue's launch once a job after it in
            its queue was planned for."""
            queue = tenants.queue_of(launch)
            return launch.job_id not in withdrawn and not (queue in ahead and order(launch) < ahead[queue])

        for job in waiting:
            if tried >= MAX_PLANS:
                break
            if job.job_id in admission.blocked:  # a strict queue's job held behind an older one
                continue
            queue = tenants.queues[tenants.queue_of(job)]
            if queue.name in behind and order(job) > behind[queue.name]:
                continue  # behind a job of its strict queue this decision sent back to wait
            found = None
            if ledger.within_nominal(queue, job.gpus):
                pool = victims.reclaim(queue, idle, lambda owner: held.borrowed(owner) > 0)
                launches = withdrawals.reclaim(queue, still_launching, lambda owner: ledger.borrowed(owner) > 0)
                if (pool or launches) and _could_hold(job, free, pool, launches):
                    tried += 1
                    found = self._plan(view, job, queue, ledger, held, pool, launches, launched, free, stopped, True)
            if found is None and not ledger.admits(queue, job.gpus):
                pool = victims.priority(job, queue, idle)
                launches = withdrawals.priority(job, queue, still_launching)
                if (pool or launches) and tried < MAX_PLANS and _could_hold(job, free, pool, launches):
                    tried += 1
                    found = self._plan(view, job, queue, ledger, held, pool, launches, launched, free, stopped, False)
            if found is None or self._takes_guaranteed_room(
                    view, admission, job, queue, found, ledger,
                    lambda: {*launched, *(launch.job_id for launch in extra_launch)} - withdrawn):
                continue
            for victim in found.victims:
                ledger.remove(tenants.queues[tenants.queue_of(victim)], victim.gpus)
                held.remove(tenants.queues[tenants.queue_of(victim)], victim.gpus)
                victim.placement.release(free)  # type: ignore[union-attr]
                busy.add(victim.job_id)
                stopped.append(victim)
                extra_preempt.append(victim.job_id)
            for back in found.withdrawn:
                back_queue = tenants.queues[tenants.queue_of(back)]
                ledger.remove(back_queue, back.gpus)
                launched[back.job_id].placement.release(free)
                withdrawn.add(back.job_id)
                if back_queue.strict and (back_queue.name not in behind or order(back) < behind[back_queue.name]):
                    behind[back_queue.name] = order(back)
            ledger.add(queue, job.gpus)
            found.launch.placement.take(free)
            extra_launch.append(found.launch)
            if queue.strict and (queue.name not in ahead or order(job) > ahead[queue.name]):
                ahead[queue.name] = order(job)
        if not extra_launch:
            return decision
        kept = tuple(launch for launch in decision.launch if launch.job_id not in withdrawn)
        return Decision(launch=(*kept, *extra_launch), preempt=tuple(sorted({*decision.preempt, *extra_preempt})),
                        migrate=decision.migrate)

    def _takes_guaranteed_room(self, view: ClusterView, admission: Admission, job: JobView, queue: Queue,
                               found: Plan, ledger: Ledger, launching: Callable[[], set[str]]) -> bool:
        """Whether ``found`` (for ``job`` of ``queue``) raises its queue's borrowing while a job of
        another queue of its cohort still waits (not launching, not held back in a strict queue)
        that its nominal quota covers and that the cohort could then not admit: the room it is
        guaranteed would go to a borrower (Kueue reserves it for that job in the cycle). Only a
        priority plan of a borrowing job can: a reclaim plan's job is within its nominal quota."""
        tenants = self.tenants
        after = ledger.copy()
        for gone in (*found.victims, *found.withdrawn):
            after.remove(tenants.queues[tenants.queue_of(gone)], gone.gpus)
        after.add(queue, job.gpus)
        if queue.cohort is None or after.borrowed(queue) <= ledger.borrowed(queue):
            return False
        going = launching()  # the decision's launches so far
        for other in view.queued:
            owner = tenants.queues[tenants.queue_of(other)]
            if owner.cohort == queue.cohort and owner.name != queue.name and other.job_id not in going \
                    and other.job_id not in admission.blocked and after.within_nominal(owner, other.gpus) \
                    and not after.admits(owner, other.gpus):
                return True
        return False

    def _plan(self, view: ClusterView, job: JobView, queue: Queue, ledger: Ledger, held: Ledger,
              pool: Sequence[JobView], launches: Sequence[JobView], launched: dict[str, Launch], free: list[int],
              stopped: Sequence[JobView], borrowers_only: bool) -> Plan | None:
        """:func:`~deepshare.tenants.reclaim.plan` for ``job``: running victims from ``pool``, the
        decision's launches of ``launches`` withdrawn first (``launched``: the decision's launches
        by job id), each tried with :meth:`_what_if`."""
        def fits(chosen: Sequence[JobView]) -> Launch | None:
            return self._what_if(view, job, free, stopped, [v for v in chosen if v.job_id not in launched],
                                 [launched[v.job_id] for v in chosen if v.job_id in launched])

        return plan(job, queue, ledger, pool, sum(free), fits, borrowers_only=borrowers_only, restore_s=view.restore_s,
                    held=held, withdrawable=launches)

    def _what_if(self, view: ClusterView, job: JobView, free: Sequence[int], stopped: Sequence[JobView],
                 victims: Sequence[JobView], withdrawn: Sequence[Launch] = ()) -> Launch | None:
        """Where ``inner`` launches ``job`` once ``victims`` stop too and the decision's launches
        ``withdrawn`` are withdrawn; ``free``: the GPUs free after this decision so far
        (``stopped`` already released). None when it would not launch it, or would preempt or
        migrate anything for it."""
        after = list(free)
        for victim in victims:
            victim.placement.release(after)  # type: ignore[union-attr]
        for launch in withdrawn:
            launch.placement.release(after)
        gone = [*stopped, *victims]
        ids = {g.job_id for g in gone}
        with leaving_out(view.predict, gone) as predict:
            what_if = replace(view, free=tuple(after), queued=(job,), tenancy=self.tenants, predict=predict,
                              running=tuple(r for r in view.running if r.job_id not in ids))
            answer = self.inner.decide(what_if)
        if answer.preempt or answer.migrate:
            return None
        return next((launch for launch in answer.launch if launch.job_id == job.job_id), None)


def _could_hold(job: JobView, free: Sequence[int], victims: Sequence[JobView], launches: Sequence[JobView]) -> bool:
    """Whether the free GPUs and those of every possible victim and withdrawn launch could hold
    ``job``: a plan that fails this would stop and withdraw all of them and still give up."""
    return sum(free) + sum(v.gpus for v in victims) + sum(w.gpus for w in launches) >= job.gpus


def around_policy(policy: PolicyLike, wrap: Callable[[PolicyLike], PolicyLike]) -> PolicyLike:
    """``wrap(policy)``, or, for a policy that weighs candidates on copies of the cluster (the
    planner: an ``around_candidates`` method), that policy with ``wrap`` around each of its
    candidates: admission around the planner would hide the held jobs from it and leave its
    copies without admission; around its candidates, it sees every queued job, chooses among
    admitted decisions only and simulates admission in its copies."""
    around = getattr(policy, "around_candidates", None)
    return around(wrap) if callable(around) else wrap(policy)  # type: ignore[no-any-return]


def admitted(policy: PolicyLike, tenants: Tenants, **options: object) -> PolicyLike:
    """``policy`` behind ``tenants``' admission (:class:`Admitted`, placed by :func:`around_policy`).
    ``options``: the :class:`Admitted` fields (``reclaim``)."""
    return around_policy(policy, lambda inner: Admitted(inner, tenants, **options))  # type: ignore[arg-type]
