"""Simulated autoscalers: the demand-based one (Ray's behaviour) and the contention-aware one.

Both are :class:`~deepshare.core.simulator.ClusterControl` objects driving a
:class:`~deepshare.core.autoscaling.pool.NodePool`, and both see every decision of the policy
through :class:`AutoscaledPolicy` (``review(view, decision)``), where they may ask for nodes.

* **demand** — Ray's autoscaler reduced to GPUs: after the policy decided, every queued job
  it did not launch is *unmet demand*. Demand is packed, job by job, first onto the GPUs left
  free, then onto nodes already being provisioned (each GPU counted for one job only: booting
  GPUs are tallied per rack, and nodes requested for an earlier job add their GPUs beyond its
  need); what is left is covered by new nodes of the type that
  covers it with the fewest missing GPUs, then the least waste, then the fewest nodes, then
  the lowest price per GPU (a job that requires one rack counts that rack's GPUs alone, and the
  rack that can come closest, among those that can ever hold it, gets the nodes it lacks). A node is *idle* while it runs nothing and no job is queued
  (queued demand keeps nodes, as Ray keeps nodes that pending demand needs), or while it runs
  nothing and ``max_workers`` keeps the demand from its nodes and its removal lets another type
  be requested for that demand (it then makes room; a node of the type the demand would request
  again stays, and no node goes for room again at an instant that requested a removed type
  again: removing it only to request it again thrashed, and cycled for ever at one instant when
  the timeouts were 0; nor, until the jobs queued or running change, a node of a type removed
  for room and requested again at once: with 0 s timeouts that repeated at every boot); a node idle
  for ``idle_timeout_s`` is removed unless its type would drop below ``min_nodes`` up or a job
  is queued at that instant. Nodes take ``provisioning_s`` from the request until they are ready.
* **contention-aware** — the same scaling, plus a guard on the policy's launches: a launch
  whose predicted slowdown (1 / ratio, for the job and for every running job whose ratio it
  changes) exceeds ``max_slowdown`` is moved to idle nodes if that brings it under the
  threshold (idle nodes inside one domain of a required level, whole slices inside each slice
  domain: the job's topology request holds), else held back and nodes are requested for it: the cluster scales out rather
  than co-locating. Co-location above the threshold is allowed only when the cluster *cannot
  still scale* for the job: its GPUs exceed the GPUs not yet up (being provisioned, or still
  requestable as far as ``max_nodes`` and ``max_workers`` allow: :meth:`Autoscaler.requestable_gpus`).

A job that requires one rack asking more GPUs than any rack can hold up at once (under
``max_nodes``, ``max_workers`` and the other racks' ``min_nodes``; for ``fixed``, the rack's
nodes) is rejected on arrival (:meth:`Autoscaler.refusals`).

Preemptions and migrations of the policy's decision pass unchanged; predictions are made
against the running jobs as they are (preempted ones still count as neighbours).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING, Sequence

from deepshare.core.autoscaling.pool import PENDING, UP, NodePool
from deepshare.core.autoscaling.spec import AutoscaleSpec, Slots, most_gpus
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Decision, Placement
from deepshare.core.view import ClusterView, JobView

if TYPE_CHECKING:  # pragma: no cover
    from deepshare.core.simulator import PolicyLike, Simulator
    from deepshare.core.types import JobSpec


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    time_s: float
    kind: str
    """``request`` (billing starts), ``ready`` (the node takes jobs) or ``terminate``."""
    node: str
    node_type: str


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    """The cluster after the events at ``time_s`` (one point per change)."""

    time_s: float
    up_nodes: int
    pending_nodes: int
    up_gpus: int
    busy_gpus: int
    queued_jobs: int


class Autoscaler:
    """The demand-based autoscaler (see the module docstring); subclasses add a launch guard."""

    name = "demand"

    def __init__(self, spec: AutoscaleSpec, slots: Slots) -> None:
        self.spec = spec
        self.slots = slots
        self.pool = NodePool(spec, slots)
        self.events: list[ScaleEvent] = []
        self.timeline: list[TimelinePoint] = []
        self.scale_ups = 0
        self.scale_downs = 0
        self._sim: "Simulator | None" = None
        self._tokens = count()
        self._timers: dict[int, tuple[str, int, int]] = {}
        self._idle_since: dict[int, float] = {}
        self._generation = [0] * len(slots.type_of)
        self._shortfall: tuple[int, tuple[str, ...] | None] | None = None
        """The first request of the last review that ``max_workers`` cut short: the GPUs it still
        lacked and the types it might use (None: any). While it stands, an empty node whose
        removal lets a *different* type be requested for it idles out although jobs are queued
        (:meth:`_makes_room`)."""
        self._room_made: tuple[float, set[str]] = (-math.inf, set())
        """The instant of the last removals made for room, and their types."""
        self._room_frozen_at = -math.inf
        """An instant at which a type removed for room was requested again: no more removals for
        room then (the clock does not move between them when timeouts and boots are 0)."""
        self._thrashed: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        """Node types removed for room and requested again at once, with the demand then
        (:meth:`_demand`): until the demand changes, no node of such a type goes for room."""
        types = spec.node_types
        self._rack_of = tuple(types[name].rack for name in slots.type_of)
        """Each slot's rack (its type's)."""
        self._rack_nodes: dict[str, list[int]] = {}
        """Rack -> its slots, racks in the order the types name them."""
        for node, rack in enumerate(self._rack_of):
            self._rack_nodes.setdefault(rack, []).append(node)

    # -- ClusterControl ------------------------------------------------------------------------
    def attach(self, sim: "Simulator") -> None:
        if sim.topology is not self.slots.topology:
            raise DeepShareError("the simulator must run on the autoscaler's slot topology")
        self._sim = sim
        for node_type, t in self.spec.node_types.items():
            for _ in range(t.min_nodes):  # the cluster as launched: min nodes up from t = 0
                inst = self.pool.request(node_type, 0.0)
                inst.ready_s = 0.0
                self.pool.mark_ready(inst.node)
                sim.set_node_up(inst.node, True)
        self.on_change()

    def rack_gpus(self) -> dict[str, int]:
        """The most GPUs each rack can hold up at once (:func:`most_gpus` of the rack)."""
        return {rack: most_gpus(self.spec, rack) for rack in self._rack_nodes}

    def refusals(self, specs: Sequence["JobSpec"]) -> dict[int, str]:
        """The trace positions of ``specs`` to reject on arrival (the simulator's control hook):
        jobs that require one rack holding more GPUs than any rack can have up at once
        (:meth:`rack_gpus`; slices of the rack level rounded down). The simulator's own check
        counts every slot of the rack, as if ``max_workers`` and the other racks' ``min_nodes``
        did not bind: such a job was admitted and the run stalled. A job over :meth:`most_gpus`
        is left to that check, and the simulator keeps its own reason for a job it refuses."""
        fabric, most = self.slots.topology.fabric, self.most_gpus()
        reach = self.rack_gpus()
        level = next((i for i, lv in enumerate(fabric.levels) if lv.name == "rack"), None)
        found: dict[int, str] = {}
        for index, job in enumerate(specs):
            request = job.topology
            if (request.required_level is None or job.gpus > most
                    or level is None or fabric.level_index(request.required_level) != level):
                continue
            size = request.slice_size if request.slice_level == request.required_level and request.slice_size else 1
            best = max(gpus // size * size for gpus in reach.values())
            if job.gpus > best:
                cap = "" if self.spec.max_workers is None else f", max_workers {self.spec.max_workers}"
                found[index] = (f"its topology request: {job.gpus} GPUs inside one {request.required_level} "
                                f"domain, and at most {best} can be up in one at once (max_nodes{cap}, min_nodes)")
        return found

    def on_timer(self, token: int) -> None:
        sim = self._require_sim()
        kind, node, generation = self._timers.pop(token)
        if kind == "ready":
            self.pool.mark_ready(node)
            sim.set_node_up(node, True)
            self._log("ready", node)
            return
        if (
            self.pool.state[node] == UP
            and node in self._idle_since
            and self._generation[node] == generation
            # a job queued at this very instant keeps it, unless its removal makes room for that demand
            and (sim.queue_length == 0 or self._makes_room(self.slots.type_of[node]))
            and self._removable(node)
        ):
            if sim.queue_length > 0:
                at, types = self._room_made
                self._room_made = (sim.now, {*types, self.slots.type_of[node]} if at == sim.now else {self.slots.type_of[node]})
                # one removal answers the shortfall: with it gone the request picks another type (that
                # is what _makes_room checked), and the review after this instant says whether the
                # demand still lacks GPUs. The stale shortfall let every idle node of the type go at
                # one instant (their timers end together), and the request for the demand, from
                # fewer nodes, picked the removed type again: it was then kept for good, the job unrun
                self._shortfall = None
            sim.set_node_up(node, False)
            self.pool.terminate(node, sim.now)
            del self._idle_since[node]
            self.scale_downs += 1
            self._log("terminate", node)

    def _removable(self, node: int) -> bool:
        """Whether an up node idle for the timeout may go: not below its type's min_nodes up (a
        node still provisioning does not stand in for it)."""
        node_type = self.slots.type_of[node]
        return self.pool.count(node_type, (UP,)) > self.spec.node_types[node_type].min_nodes

    def _makes_room(self, node_type: str) -> bool:
        """Whether removing an empty node of ``node_type`` while jobs are queued makes room for
        them: ``max_workers`` cut a request short (:attr:`_shortfall`) and, with that node gone
        (its free GPUs no longer counted for the demand, its worker slot and ``max_nodes`` place
        free), the request would pick another type. A node of the type it would pick again stays:
        removing it only to request it again thrashed (and hung when timeouts and boots were 0).
        Nor does a node go for another type of no more GPUs when its own GPUs count for the demand:
        the swap would cover no more of the shortfall, at a boot's delay and cost."""
        if self._shortfall is None or self._room_frozen_at == self._require_sim().now:
            return False
        if node_type in self._thrashed and self._thrashed[node_type] == self._demand():
            return False  # removed for room and requested again: with 0 s timeouts, every boot, forever
        need, types = self._shortfall
        counted = types is None or node_type in types
        if counted:
            need += self.spec.node_types[node_type].gpus
        best = self._best(need, types, freed=node_type)
        if best is None or best == node_type:
            return False
        return not counted or self.spec.node_types[best].gpus > self.spec.node_types[node_type].gpus

    def most_gpus(self) -> int:
        return most_gpus(self.spec)

    def requestable_gpus(self) -> int:
        """GPUs of the nodes that may still be requested now, the largest types first, as far as
        ``max_nodes`` and ``max_workers`` allow."""
        left = None if self.spec.max_workers is None else self.spec.max_workers - self.pool.count_current()
        total = 0
        for name, t in sorted(self.spec.node_types.items(), key=lambda item: -item[1].gpus):
            more = t.max_nodes - self.pool.count(name)
            if left is not None:
                more = min(more, left)
                left -= more
            total += more * t.gpus
        return total

    def on_change(self) -> None:
        sim = self._require_sim()
        free, capacity, now = sim.free, self.slots.topology.capacity, sim.now
        waiting = sim.queue_length > 0
        room: dict[str, bool] = {}  # node type -> whether removing an empty node of it makes room
        for node in self.pool.nodes(UP):
            idle = free[node] == capacity[node]
            if idle and waiting:  # queued demand keeps the node unless its removal makes room for it
                node_type = self.slots.type_of[node]
                if node_type not in room:
                    room[node_type] = self._makes_room(node_type)
                idle = room[node_type]
            if idle and node not in self._idle_since:
                self._idle_since[node] = now
                self._generation[node] += 1
                self._timer(now + self.spec.idle_timeout_s, "idle", node, keeps_alive=waiting)  # its end makes room
            elif not idle and node in self._idle_since:
                del self._idle_since[node]
                self._generation[node] += 1
        up = self.pool.nodes(UP)
        point = TimelinePoint(
            now, len(up), len(self.pool.nodes(PENDING)), sum(capacity[n] for n in up), sim.busy_gpus, sim.queue_length
        )
        if self.timeline and self.timeline[-1].time_s == now:
            self.timeline[-1] = point
        elif not self.timeline or _state(self.timeline[-1]) != _state(point):
            self.timeline.append(point)

    # -- the policy side -----------------------------------------------------------------------
    def review(self, view: ClusterView, decision: Decision) -> Decision:
        """The decision to apply (after the guard) and node requests for the unmet demand."""
        decision, vetoed = self.guard(view, decision)
        self._scale_for(view, decision, vetoed)
        return decision

    def guard(self, view: ClusterView, decision: Decision) -> tuple[Decision, list[JobView]]:
        """Hook for launch guards: the decision to apply and the jobs held back for new nodes."""
        return decision, []

    # -- scaling -------------------------------------------------------------------------------
    def _scale_for(self, view: ClusterView, decision: Decision, vetoed: Sequence[JobView]) -> None:
        """Request nodes for the unmet demand, job by job in queue order (held-back jobs first).
        Each job takes the free GPUs left (a held-back job none: it must not share the GPUs it was
        kept from; a job that requires one rack only its rack's), then the spare GPUs of booting
        nodes (kept per rack: nodes requested for an earlier job count with their GPUs beyond its
        need), then new nodes are requested for the rest."""
        free = free_after(view, decision)
        capacity, rack_of = self.slots.topology.capacity, self._rack_of
        spare = dict.fromkeys(self._rack_nodes, 0)  # booting GPUs no job has counted yet, per rack
        for node in self.pool.nodes(PENDING):
            spare[rack_of[node]] += capacity[node]
        launched = {launch.job_id for launch in decision.launch}
        held = {j.job_id for j in vetoed}
        preempted = set(decision.preempt)
        unmet = [*vetoed, *(j for j in view.queued if j.job_id not in launched and j.job_id not in held)]
        unmet += [j for j in view.running if j.job_id in preempted] if preempted else []
        self._shortfall = None
        everywhere = range(len(free))
        for job in unmet:
            usable = None if job.job_id in held else free
            if job.topology.required_level is not None:  # the GPUs must be in one rack: count that rack's alone
                self._scale_in_one_rack(job, usable, spare)
                continue
            need = job.gpus - (0 if usable is None else _take(usable, everywhere, job.gpus))
            need -= _take(spare, list(spare), need)
            if need > 0:
                for node in self._request(need):
                    spare[rack_of[node]] += capacity[node]
                _take(spare, list(spare), need)  # a node's GPUs beyond the need stay spare

    def _scale_in_one_rack(self, job: JobView, free: list[int] | None, spare: dict[str, int]) -> None:
        """Nodes for a job that requires one domain of the slots' one level (a rack): when no rack
        holds its GPUs free (``free``; None: none count, the job was held back) or booting and
        not yet counted (``spare``), the rack that can come closest (those and still requestable
        GPUs) gets the nodes it lacks. The job's share of the rack's free, then booting GPUs is
        taken from ``free`` and ``spare``, so a later job does not count them again."""
        types = self.spec.node_types
        held = {r: spare[r] + (0 if free is None else sum(free[n] for n in nodes)) for r, nodes in self._rack_nodes.items()}
        if max(held.values()) >= job.gpus:
            rack = max(held, key=lambda r: held[r])
        else:
            reach = {r: held[r] + sum(self.pool.room(n) * t.gpus for n, t in types.items() if t.rack == r) for r in held}
            # a rack that can hold the job now, else one that ever can: with max_workers spent, the rack
            # that could take more now may never hold it, and the job waited forever while no node
            # went to make room for the rack that can
            ever = self.rack_gpus()  # what each rack can hold up at once, max_workers and min_nodes counted
            rack = max(reach, key=lambda r: (reach[r] >= job.gpus, ever[r] >= job.gpus, reach[r]))
            capacity = self.slots.topology.capacity
            for node in self._request(job.gpus - held[rack], [n for n, t in types.items() if t.rack == rack]):
                spare[rack] += capacity[node]
        left = job.gpus - (0 if free is None else _take(free, self._rack_nodes[rack], job.gpus))
        _take(spare, [rack], left)

    def _worker_capped(self) -> bool:
        """Whether ``max_workers``, not the types' ``max_nodes``, keeps more nodes from being requested."""
        cap = self.spec.max_workers
        return cap is not None and self.pool.count_current() >= cap and any(
            self.pool.count(name) < t.max_nodes for name, t in self.spec.node_types.items())

    def _room(self, node_type: str, freed: str | None = None) -> int:
        """How many more nodes of ``node_type`` may be requested (:meth:`NodePool.room`), or
        would be once an up node of type ``freed`` is removed."""
        room = self.spec.node_types[node_type].max_nodes - self.pool.count(node_type) + (node_type == freed)
        cap = self.spec.max_workers
        if cap is not None:
            room = min(room, cap - self.pool.count_current() + (freed is not None))
        return room

    def _best(self, need: int, types: Sequence[str] | None, freed: str | None = None) -> str | None:
        """The type a request for ``need`` GPUs picks among ``types`` (None: any) with room (with
        an up node of type ``freed`` gone, for :meth:`_makes_room`): the fewest GPUs missing,
        then the least waste, the fewest nodes, the lowest price per GPU, the name. None when no
        type has room."""
        options = [t for t in (self.spec.node_types if types is None else types) if self._room(t, freed) > 0]
        if not options:
            return None

        def key(name: str) -> tuple[float, ...]:
            t = self.spec.node_types[name]
            n = min(math.ceil(need / t.gpus), self._room(name, freed))
            covered = n * t.gpus
            return (max(0, need - covered), max(0, covered - need), n, t.price_usd_per_hour / t.gpus)

        return min(options, key=lambda name: (*key(name), name))

    def _request(self, need: int, types: Sequence[str] | None = None) -> list[int]:
        """Request nodes for ``need`` GPUs (as far as max_nodes allow), of ``types`` (default:
        any); the nodes requested. The first request of a review that falls short because
        ``max_workers`` is reached is kept as :attr:`_shortfall`."""
        sim = self._require_sim()
        requested, wanted, nodes = 0, need, []
        while need > 0:
            best = self._best(need, types)
            if best is None:
                break
            at, removed = self._room_made
            if at == sim.now and best in removed:  # a node removed for room at this instant comes back
                self._room_frozen_at = sim.now
                self._thrashed[best] = self._demand()
            gpus = self.spec.node_types[best].gpus
            for _ in range(min(math.ceil(need / gpus), self.pool.room(best))):
                inst = self.pool.request(best, sim.now)
                self.scale_ups += 1
                self._log("request", inst.node)
                self._timer(inst.ready_s, "ready", inst.node, keeps_alive=True)
                nodes.append(inst.node)
                need -= gpus
                requested += gpus
        if self._shortfall is None and requested < wanted and self._worker_capped():
            self._shortfall = (wanted - requested, None if types is None else tuple(types))
        return nodes

    # -- helpers -------------------------------------------------------------------------------
    def _demand(self) -> tuple[frozenset[str], frozenset[str]]:
        """What the demand is now, as far as removing a node for room goes: the jobs queued and
        those running, by id (counts came back to equal values after real progress, and blocked
        a swap the new queue needed)."""
        return self._require_sim().job_ids()

    def _timer(self, time: float, kind: str, node: int, keeps_alive: bool) -> None:
        token = next(self._tokens)
        self._timers[token] = (kind, node, self._generation[node])
        self._require_sim().schedule(time, token, keeps_alive=keeps_alive)

    def _log(self, kind: str, node: int) -> None:
        sim = self._require_sim()
        self.events.append(ScaleEvent(sim.now, kind, self.slots.topology.nodes[node].name, self.slots.type_of[node]))
        self.on_change()

    def _require_sim(self) -> "Simulator":
        if self._sim is None:
            raise DeepShareError("the autoscaler is not attached to a simulator")
        return self._sim


def _state(p: TimelinePoint) -> tuple[int, ...]:
    return (p.up_nodes, p.pending_nodes, p.up_gpus, p.busy_gpus, p.queued_jobs)


def _take(held: "list[int] | dict[str, int]", where: Sequence, need: int) -> int:
    """Take up to ``need`` GPUs from ``held`` at the keys ``where``, in order; the GPUs taken."""
    taken = 0
    for key in where:
        if taken >= need:
            break
        take = min(held[key], need - taken)
        held[key] -= take
        taken += take
    return taken


def free_after(view: ClusterView, decision: Decision) -> list[int]:
    """Free GPUs per node once ``decision`` is applied."""
    free = list(view.free)
    gone = set(decision.preempt) | {m.job_id for m in decision.migrate}
    if gone:
        for job in view.running:
            if job.job_id in gone and job.placement is not None:
                job.placement.release(free)
    for change in (*decision.migrate, *decision.launch):
        change.placement.take(free)
    return free


@dataclass
class AutoscaledPolicy:
    """A policy whose every decision the autoscaler reviews (and may trim) before it applies."""

    inner: "PolicyLike"
    autoscaler: Autoscaler
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.inner.name

    def decide(self, view: ClusterView) -> Decision:
        return self.autoscaler.review(view, self.inner.decide(view))


def slowdown(view: ClusterView, job: JobView, placement: Placement, pending: Sequence[tuple[JobView, Placement]]) -> float:
    """Predicted slowdown of launching ``job`` at ``placement``: the worst 1 / ratio among the
    job and the running jobs whose ratio the launch changes."""
    pred = view.predict(job, placement, pending)
    ratios = [pred.ratio, *pred.others.values()]
    return max(math.inf if r <= 0 else 1.0 / r for r in ratios)
