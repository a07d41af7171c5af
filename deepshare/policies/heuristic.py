"""Order-then-place heuristics: the baselines every learned policy is measured against.

Non-preemptive: queued jobs in order, each placed if it fits now (later jobs may backfill
around one that does not; once a job of some GPU demand fails to place, later jobs of that
demand are skipped in the same decision: free GPUs only shrink, so for placements that depend
only on the free GPUs they would fail too; for ``packed`` the best-ranked job of a demand is
the one that waits for its shape, and for ``uncontended`` the one that waits on contention,
holding back the demand's jobs of other models too: trying those costs average JCT,
``bench/uncontended_skip.py``). Preemptive: running and queued jobs in one order; the jobs that fit
the cluster's GPU count in that order should run, running ones outside that set are preempted
and the set's queued ones placed. A preemption whose job could resume on exactly its old GPUs
after the launches is cancelled, so fragmentation never costs a pointless checkpoint (under a
placement that waits on contention, ``uncontended``, only when no launch then runs below its
ratio: the launches were placed with the job stopped); so is one
whose old GPUs only launches of jobs it outranks hold (those are placed again elsewhere, a gang
among them possibly by a domain plan of its own), so a running job is not stopped to give its
GPUs to launches ranked below it; nor is one of a gang's domain plan (the plan stops jobs ranked
below the gang; one whose old GPUs, once the gang is placed, only launches it outranks hold keeps
them, and those launches are placed again, if the gang's placement still stands beside it).
Last, a victim whose GPUs no launch needs (the launches on them fit elsewhere) keeps running.
Preempt-or-fill (``+preempt+fill``): the preemptive decision when it preempts anything, else the
non-preemptive one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from threading import get_ident
from typing import Any, Callable

from deepshare.core.contention.base import leaving_out
from deepshare.core.simulator import topology_refusal
from deepshare.core.types import Decision, Launch, Placement, WAIT
from deepshare.core.view import ClusterView, JobView
from deepshare.policies import preempt_plan
from deepshare.policies.backfill import place_with_reservation
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.order import OrderFactory, is_static
from deepshare.policies.place_types import waits_below
from deepshare.policies.placement import PlaceFn, demand
from deepshare.policies.queue_index import QueueIndex


@dataclass(frozen=True)
class HeuristicPolicy:
    name: str
    order: OrderFactory
    place: PlaceFn
    preemptive: bool = False
    use_index: bool = True
    """Keep the queue ordered across decisions when the order allows (same answers, faster)."""
    backfill: bool = False
    """Non-preemptive only: the first job that does not fit holds a reservation that later
    launches must not delay (:mod:`deepshare.policies.backfill`)."""
    fill: bool = False
    """Preemptive only: when the preemptive decision preempts nothing, the non-preemptive greedy
    decides instead, so a queued job outside the order's top set launches when it fits (the
    preemptive rule alone leaves GPUs idle that fragmentation or a gang's level kept from the
    top set). The decision-level mux that the fabric imitation's hybrid turned out to be."""
    _indexes: dict[int, QueueIndex] | None = field(default=None, init=False, repr=False, compare=False)
    """The queue index of each thread that decides with this object, by thread id: one policy
    object serves the placement service's decision threads at once, and an index follows one
    sequence of views (two threads syncing one index corrupted each other's decisions)."""

    def __post_init__(self) -> None:
        if self.use_index and not self.preemptive and not self.backfill and is_static(self.order):
            object.__setattr__(self, "_indexes", {})

    @property
    def _index(self) -> QueueIndex | None:
        """This thread's queue index (made on its first decision), or None when not indexed."""
        indexes = self._indexes
        if indexes is None:
            return None
        thread = get_ident()
        index = indexes.get(thread)
        if index is None:
            index = indexes.setdefault(thread, QueueIndex(self.order(None)))
        return index

    def decide(self, view: ClusterView) -> Decision:
        index = self._index
        if index is not None:
            return self._decide_indexed(view, index)
        key = self.order(view)
        if self.backfill and not self.preemptive:
            ordered = sorted(view.queued, key=key)
            launches = place_with_reservation(ordered, list(view.free), view, self.place) if ordered else ()
            return Decision(launch=launches) if launches else WAIT
        if not self.preemptive:
            return self._decide_greedy(view, key)
        decision = self._decide_preemptive(view, key)
        return self._decide_greedy(view, key) if self.fill and not decision.preempt else decision

    def _decide_greedy(self, view: ClusterView, key: Any) -> Decision:
        """Queued jobs in order, each placed if it fits now (the non-preemptive rule)."""
        free_total = sum(view.free)
        candidates = [job for job in view.queued if job.gpus <= free_total]
        if not candidates:
            return WAIT
        candidates.sort(key=key)
        launches = self._place_in_order(candidates, list(view.free), view)
        return Decision(launch=launches) if launches else WAIT

    def _decide_preemptive(self, view: ClusterView, key: Any) -> Decision:
        """The jobs that fit the cluster's GPUs in order should run: the others running are
        preempted. A job whose topology request no domain of the cluster can ever hold is passed
        over (a placement request may hold one; the simulator rejects such jobs on arrival):
        counted, it took the GPUs of every job below it, and an idle cluster launched nothing."""
        budget = view.total_gpus
        wanted: set[str] = set()
        most: dict[Any, int] = {}  # topology_refusal's cache, for this decision
        for job in sorted((*view.running, *view.queued), key=key):
            if job.gpus <= budget and (job.topology.empty or job.placement is not None
                                       or topology_refusal(job.topology, view.topology, job.gpus, most) is None):
                wanted.add(job.job_id)
                budget -= job.gpus
        victims = [j for j in sorted(view.running, key=key, reverse=True) if j.job_id not in wanted]
        free = list(view.free)
        for job in victims:
            job.placement.release(free)  # type: ignore[union-attr]
        chosen = sorted((j for j in view.queued if j.job_id in wanted), key=key)
        # The launches are placed and predicted with the victims gone (they take the victims'
        # GPUs); a victim kept below because its old GPUs stayed free is not counted meanwhile.
        with leaving_out(view.predict, victims) as predict:
            after = replace(view, predict=predict) if victims else view
            launches = self._place_in_order(chosen, free, after)  # takes the launches' GPUs from free
        held = _LaunchesByNode(launches, lambda: {j.job_id: key(j) for j in chosen}, key)
        min_ratio = waits_below(self.place)
        by_id = {job.job_id: job for job in chosen}
        kept = self._resumed(view, victims, launches, list(free), held, by_id, None)
        if min_ratio is not None and len(kept[1]) < len(victims) and not self._kept_at_speed(
                view, launches, kept[2], by_id, kept[1], min_ratio):
            # some launch would run below the ratio beside the victims kept: decide victim by victim
            held.gone.clear()  # as new: no launch has given way yet
            kept = self._resumed(view, victims, launches, list(free), held, by_id, min_ratio)
        free, preempt, undone = kept
        if undone:
            launches = tuple(launch for launch in launches if launch.job_id not in undone)
        extra = self._free_domains(view, key, chosen, launches, preempt, free, undone, held)
        launches = tuple(launch for launch in launches if launch.job_id not in undone) + extra  # a plan's victim's too
        if undone:  # jobs that gave way to a victim they rank below: placed again where GPUs are free,
            # after the gangs' domain plans (which they must not take a domain from: a gang ranked
            # below such a job may so launch while it waits) and beside every launch of the
            # decision, predicted without the jobs it stops; a gang among them was placed or
            # planned with the others just above
            by_id = {job.job_id: job for job in chosen}
            stopping = set(preempt)
            stopped = [job for job in view.running if job.job_id in stopping]
            placed = {launch.job_id for launch in launches}  # a gang among them may have a domain plan now
            again = [job for job in chosen if job.job_id in undone and job.job_id not in placed]  # in rank order
            pending = [(by_id[launch.job_id], launch.placement) for launch in launches]
            with leaving_out(view.predict, stopped) as predict:
                launches += self._place_in_order(again, free, replace(view, predict=predict) if stopped else view,
                                                 pending)
        if preempt and launches:
            launches = self._spare_unneeded(view, key, launches, preempt)
        if not launches:
            return WAIT
        return Decision(launch=launches, preempt=tuple(sorted(preempt)))

    def _spare_unneeded(self, view: ClusterView, key: Any, launches: tuple[Launch, ...],
                        preempt: list[str]) -> tuple[Launch, ...]:
        """The launches once every victim that no launch needs keeps running (``preempt`` loses
        it): best-ranked victims first, a victim keeps its GPUs when the launches on them can all
        be placed again elsewhere (where GPUs are free, beside the decision's other launches,
        predicted without the jobs still stopped). The launches take the victims' GPUs by the
        placement's own rule (best fit takes a single freed GPU before an idle node), so without
        this a job pushed out of the budget by a gang that cannot be placed, or one a later gang's
        plan makes room for, would stop for a launch that has room elsewhere.
        Under a placement that waits on contention (``uncontended``: :func:`waits_below`) a victim
        also stays stopped when, with it running, one of the decision's launches is predicted below
        that placement's ratio: it is stopped for speed.
        Launches are indexed by node: a victim whose nodes' launches cannot make room for it costs
        only those launches; one that can is placed again beside all of them."""
        running = {job.job_id: job for job in view.running}
        queued = {job.job_id: job for job in view.queued}
        min_ratio = waits_below(self.place)
        free = list(view.free)
        for job_id in preempt:
            running[job_id].placement.release(free)  # type: ignore[union-attr]
        current = {launch.job_id: launch for launch in launches}  # in decision order
        on_node: dict[int, set[str]] = {}  # node -> the launches on it
        for launch in launches:
            launch.placement.take(free)
            for node in launch.placement.nodes:
                on_node.setdefault(node, set()).add(launch.job_id)
        idle = sum(free)  # GPUs the decision leaves free: a victim kept needs as many
        for victim in sorted((running[job_id] for job_id in preempt), key=key):
            placement = victim.placement
            assert placement is not None
            if idle < victim.gpus:  # its launches placed elsewhere would need the GPUs it keeps
                continue
            moved_ids = set().union(*(on_node.get(node, ()) for node in placement.nodes))
            moved = [current[job_id] for job_id in sorted(moved_ids, key=lambda j: key(queued[j]))]
            for launch in moved:
                launch.placement.release(free)
            if not placement.fits(free):
                for launch in moved:
                    launch.placement.take(free)
                continue
            trial = list(free)
            placement.take(trial)
            kept = [launch for job_id, launch in current.items() if job_id not in moved_ids]
            still = [running[job_id] for job_id in preempt if job_id != victim.job_id]
            with leaving_out(view.predict, still) as predict:
                placed = self._place_in_order([queued[launch.job_id] for launch in moved], trial,
                                              replace(view, predict=predict) if still else view,
                                              [(queued[launch.job_id], launch.placement) for launch in kept])
                spared = len(placed) == len(moved) and (min_ratio is None or self._all_above_ratio(
                    predict, [(queued[launch.job_id], launch.placement) for launch in (*kept, *placed)], min_ratio))
            if not spared:
                for launch in moved:
                    launch.placement.take(free)
                continue
            free = trial
            idle -= victim.gpus
            preempt.remove(victim.job_id)
            for launch in moved:
                del current[launch.job_id]
                for node in launch.placement.nodes:
                    on_node[node].discard(launch.job_id)
            for launch in placed:
                current[launch.job_id] = launch
                for node in launch.placement.nodes:
                    on_node.setdefault(node, set()).add(launch.job_id)
        return tuple(current.values())

    def _resumed(self, view: ClusterView, victims: list[JobView], launches: tuple[Launch, ...], free: list[int],
                 held: "_LaunchesByNode", by_id: dict[str, JobView],
                 min_ratio: float | None) -> tuple[list[int], list[str], set[str]]:
        """``(free, preempt, undone)`` once each victim whose old GPUs are free after the launches
        (or that launches it outranks give back: ``undone``) resumes there instead of stopping,
        best-ranked first. With ``min_ratio`` a victim also stays stopped when running it would put
        a launch below that ratio (:meth:`_kept_at_speed`). The caller checks the victims kept all
        at once first, which is one check for the common decision where no launch meets one."""
        preempt: list[str] = []
        undone: set[str] = set()
        for at, job in enumerate(reversed(victims)):  # best-ranked victims reclaim their old GPUs first
            gave_way: list[str] = []
            if not job.placement.fits(free):  # type: ignore[union-attr]
                gave_way = held.give_way(job, free)  # type: ignore[assignment]
                if gave_way is None:
                    preempt.append(job.job_id)
                    continue
            if min_ratio is not None and not self._kept_at_speed(
                    view, launches, undone.union(gave_way), by_id, [*preempt, *victims[:len(victims) - 1 - at]],
                    min_ratio):
                held.take_back(gave_way, free)  # it stays stopped: the launches keep its GPUs
                preempt.append(job.job_id)
                continue
            undone.update(gave_way)
            job.placement.take(free)  # type: ignore[union-attr]
        return free, preempt, undone

    def _kept_at_speed(self, view: ClusterView, launches: tuple[Launch, ...], undone: set[str],
                       by_id: dict[str, JobView], stopped: list[Any], min_ratio: float) -> bool:
        """Whether a victim may keep running under a placement that waits on contention: every
        launch still made (``undone`` aside) is predicted at or above ``min_ratio`` beside the
        launches before it, with only ``stopped`` (jobs or ids) gone. Otherwise it is stopped for
        speed, as ``uncontended`` placed those launches without it."""
        running = {job.job_id: job for job in view.running}
        gone = [running[j] if isinstance(j, str) else j for j in stopped]
        with leaving_out(view.predict, gone) as predict:
            return self._all_above_ratio(predict, [(by_id[launch.job_id], launch.placement) for launch in launches
                                                   if launch.job_id not in undone], min_ratio)

    @staticmethod
    def _all_above_ratio(predict: Any, launched: list[tuple[JobView, Placement]], min_ratio: float) -> bool:
        """Whether every launch of ``launched``, predicted with those before it pending, runs at
        or above ``min_ratio`` (the placement's own: :func:`waits_below`)."""
        pending: list[tuple[JobView, Placement]] = []
        for job, placement in launched:
            if predict(job, placement, pending).ratio < min_ratio:
                return False
            pending.append((job, placement))
        return True

    def _free_domains(self, view: ClusterView, key: Any, chosen: list[JobView], launches: tuple[Launch, ...],
                      preempt: list[str], free: list[int], undone: set[str],
                      held: "_LaunchesByNode") -> tuple[Launch, ...]:
        """Topology-aware preemption (:mod:`deepshare.policies.preempt_plan`): each chosen gang
        with a required level that was not placed frees one domain of that level from jobs it
        outranks, at the least cost (each stop at the view's ``restore_s``), when it then fits.
        ``preempt`` and ``free`` are updated.

        A plan's victim whose old GPUs, once the gang is placed, only first-pass launches it
        outranks hold keeps them (``held.give_way``: those launches are undone, added to
        ``undone``, and placed again by the caller): the plan stops jobs ranked below the gang, but
        a job ranked above such a launch is not stopped for it. Such victims are kept only if the
        gang's placement still stands with them running (the placement strategy, asked once
        again on exactly those GPUs, gives them; otherwise every victim stops, as planned): the
        plan predicted the gang with every victim gone, and ``uncontended`` must not launch it
        below its ratio beside one that stays.

        While ``undone`` is not empty, each gang is first placed as things are, and planned only
        when that fails: launches that gave way left GPUs free, and a gang among them (or one that
        failed before) may fit a domain with no stop, which a plan never considers (it only frees
        domains the gang does not fit)."""
        placed = {launch.job_id for launch in launches}
        gangs = [j for j in chosen if j.job_id not in placed and j.topology.required_level is not None]
        if not gangs:
            return ()
        stopped = set(preempt)
        extra: list[Launch] = []
        by_id = {j.job_id: j for j in chosen}
        for gang in gangs:
            rank = key(gang)
            candidates = sorted((j for j in view.running if j.job_id not in stopped and key(j) > rank),
                                key=key, reverse=True)

            gone = [j for j in view.running if j.job_id in stopped]  # the plan predicts without them
            launched = [(by_id[launch.job_id], launch.placement)  # the first pass's that stand, and the plans'
                        for launch in (*(kept for kept in launches if kept.job_id not in undone), *extra)]
            if undone:
                with leaving_out(view.predict, gone) as predict:
                    placement = self.place(gang, free, replace(view, predict=predict) if gone else view, launched)
                if placement is not None:
                    placement.take(free)
                    extra.append(Launch(gang.job_id, placement))
                    continue

            def place(after: list[int], view_after: ClusterView, gang: JobView = gang,
                      launched: list[tuple[JobView, Placement]] = launched) -> Placement | None:
                return self.place(gang, after, view_after, launched)

            found = preempt_plan.plan(gang, view, free, candidates, place, gone=gone, pending=launched)
            if found is None:
                continue
            for victim in found.victims:
                victim.placement.release(free)  # type: ignore[union-attr]
            found.placement.take(free)  # placed on exactly these free GPUs when planned
            extra.append(Launch(gang.job_id, found.placement))
            kept: list[tuple[JobView, list[str]]] = []  # (victim, the launches that gave way to it)
            for victim in sorted(found.victims, key=key):  # best-ranked victims reclaim their old GPUs first
                gave_way: list[str] | None = []
                if not victim.placement.fits(free):  # type: ignore[union-attr]
                    gave_way = held.give_way(victim, free)
                if gave_way is not None:
                    victim.placement.take(free)  # type: ignore[union-attr]
                    kept.append((victim, gave_way))
            stays = {victim.job_id for victim, _ in kept}
            left = {job_id for _, gave in kept for job_id in gave}
            if kept and not self._stands(gang, found.placement, view,
                                         [*gone, *(v for v in found.victims if v.job_id not in stays)],
                                         [(j, p) for j, p in launched if j.job_id not in left]):
                for victim, gave in reversed(kept):  # all stop, as planned
                    victim.placement.release(free)  # type: ignore[union-attr]
                    held.take_back(gave, free)
                stays, left = set(), set()
            undone.update(left)
            for victim in found.victims:
                if victim.job_id not in stays:
                    stopped.add(victim.job_id)
                    preempt.append(victim.job_id)
        return tuple(extra)

    def _stands(self, gang: JobView, placement: Placement, view: ClusterView, stopped: list[JobView],
                launched: list[tuple[JobView, Placement]]) -> bool:
        """Whether the placement strategy, asked again on exactly ``placement``'s GPUs with only
        ``stopped`` left out of the prediction and ``launched`` pending, still places ``gang``
        there."""
        only = [0] * len(view.free)
        placement.release(only)
        with leaving_out(view.predict, stopped) as predict:
            again = self.place(gang, only, replace(view, predict=predict) if stopped else view, launched)
        return again is not None and again.alloc == placement.alloc

    def _decide_indexed(self, view: ClusterView, index: QueueIndex) -> Decision:
        """The non-preemptive greedy of :meth:`decide`, walking the index instead of a sort.

        Free GPUs only shrink within a decision, so once a demand fails to place, every later
        job of that demand would fail too: skipping the demand gives the same launches.
        """
        index.sync(view)
        free = FreeIndex(view.free)  # placements answer from its index; launches update it in place
        total = free.total
        launches: list[Launch] = []
        pending: list[tuple[JobView, Placement]] = []
        failed: set = set()
        while (job := index.best_fitting(total, failed)) is not None:
            placement = self.place(job, free, view, pending)
            if placement is None:
                failed.add(demand(job))
                continue
            index.take(job)
            free.take(placement)
            total -= job.gpus
            launches.append(Launch(job.job_id, placement))
            pending.append((job, placement))
        return Decision(launch=tuple(launches)) if launches else WAIT

    def _place_in_order(self, jobs: list[JobView], free: list[int], view: ClusterView,
                        pending: list[tuple[JobView, Placement]] | None = None) -> tuple[Launch, ...]:
        """Place ``jobs`` greedily in order; ``free`` (a list) is updated in place as before.
        ``pending``: launches the decision already makes (placements and predictions see them)."""
        launches: list[Launch] = []
        pending = [] if pending is None else list(pending)
        index = FreeIndex(free)
        total = index.total
        failed: set = set()  # as in _decide_indexed: a demand that failed is skipped
        for job in jobs:
            if job.gpus > total or demand(job) in failed:
                continue
            placement = self.place(job, index, view, pending)
            if placement is None:
                failed.add(demand(job))
                continue
            index.take(placement)
            placement.take(free)
            total -= job.gpus
            launches.append(Launch(job.job_id, placement))
            pending.append((job, placement))
        return tuple(launches)


class _LaunchesByNode:
    """A decision's first-pass launches indexed by node, with each launched job's rank, so that
    each victim finds the launches on its GPUs in what those touch, not in every launch (a
    decision stopping thousands of jobs asked every launch for every victim: quadratic). Built
    when a victim first asks (most decisions never do)."""

    def __init__(self, launches: tuple[Launch, ...], ranks: Callable[[], dict[str, Any]], key: Any) -> None:
        self.launches, self._ranks, self.key = launches, ranks, key
        self.ranks: dict[str, Any] = {}
        self.on_node: dict[int, list[Launch]] | None = None
        self.by_id: dict[str, Launch] | None = None
        self.gone: set[str] = set()

    def _index(self) -> dict[int, list[Launch]]:
        if self.on_node is None:
            self.ranks = self._ranks()
            self.on_node = {}
            for launch in self.launches:
                for node in launch.placement.nodes:
                    self.on_node.setdefault(node, []).append(launch)
        return self.on_node

    def take_back(self, job_ids: list[str], free: list[int]) -> None:
        """Undo :meth:`give_way`'s answer ``job_ids``: their launches hold their GPUs again."""
        if not job_ids:
            return
        if self.by_id is None:
            self.by_id = {launch.job_id: launch for launch in self.launches}
        for job_id in job_ids:
            self.by_id[job_id].placement.take(free)
        self.gone.difference_update(job_ids)

    def give_way(self, victim: JobView, free: list[int]) -> list[str] | None:
        """The jobs of the launches ``victim`` outranks that hold GPUs it lacks, lowest-ranked
        first, as few as give it back its old GPUs (``free`` updated: their GPUs released); None,
        and ``free`` untouched, when even all of them would not.

        A victim kept out by such launches alone is not preempted: the GPU budget counts queued
        jobs that could not be placed (a gang waiting for a domain, a shape ``packed`` waits
        for), so a running job can fall outside it while a queued job it outranks takes its GPUs:
        a preemption in the wrong direction."""
        on_node = self._index()
        rank = self.key(victim)
        alloc = victim.placement.alloc  # type: ignore[union-attr]
        short = [node for node, gpus in alloc if free[node] < gpus]
        ranks, gone = self.ranks, self.gone
        seen: set[str] = set()
        below = []
        for node in short:
            for launch in on_node.get(node, ()):
                job_id = launch.job_id
                if job_id not in seen and job_id not in gone and ranks[job_id] > rank:
                    seen.add(job_id)
                    below.append(launch)
        if not below:
            return None
        below.sort(key=lambda launch: ranks[launch.job_id], reverse=True)
        trial: dict[int, int] = {}  # the nodes released so far: free GPUs after
        taken = []
        for launch in below:
            for node, gpus in launch.placement.alloc:
                trial[node] = trial.get(node, free[node]) + gpus
            taken.append(launch.job_id)
            if all(trial.get(node, free[node]) >= gpus for node, gpus in alloc):
                for node, count in trial.items():
                    free[node] = count
                gone.update(taken)
                return taken
        return None
