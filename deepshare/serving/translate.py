"""HTTP bodies <-> the core's views and decisions, both ways.

Server side: :func:`request_to_view` turns a :class:`PlacementRequest` into the same
:class:`ClusterView` the simulator produces (through :func:`deepshare.core.snapshot.build_view`)
and :func:`decision_to_response` answers one decision per pending job. Client side:
:func:`view_to_request` and :func:`response_to_decision` do the reverse, so a policy behind the
service can stand in for an in-process one. Node indices follow the request's node order.
"""

from __future__ import annotations

import hashlib

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deepshare.core.contention import ContentionModel
from deepshare.core.contention.base import leaving_out
from deepshare.core.fabric import NO_TOPOLOGY, Fabric, Level, TopologyRequest
from deepshare.core.feasibility import check_view_decision
from deepshare.core.names import escaped, has_control_character
from deepshare.core.history import FinishedJob, JobHistory
from deepshare.core.information import believed_remaining_s
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import Node, Topology, nvlink_domain_problem
from deepshare.core.errors import DeepShareError, InfeasibleDecision
from deepshare.core.types import Decision, Launch, Migrate, Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.core.workloads import Catalog
from deepshare.serving.schemas import (
    MAX_HISTORY,
    DecisionOut,
    FinishedIn,
    LevelIn,
    MigrationOut,
    NodeIn,
    PendingIn,
    PlacementRequest,
    PlacementResponse,
    RunningIn,
)

if TYPE_CHECKING:
    from deepshare.tenants import Tenants

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldError:
    loc: Loc
    msg: str


MAX_REPORTED_ERRORS = 100
"""The most field errors one answer lists; the rest are counted in a last entry. A body can hold
hundreds of thousands of bad fields, and an answer listing each was hundreds of times its size."""


def capped(errors: list[FieldError]) -> list[FieldError]:
    """The first :data:`MAX_REPORTED_ERRORS` of ``errors``, then one entry counting the others."""
    if len(errors) <= MAX_REPORTED_ERRORS:
        return errors
    return [*errors[:MAX_REPORTED_ERRORS], FieldError(("body",), more_errors(len(errors) - MAX_REPORTED_ERRORS))]


def more_errors(more: int) -> str:
    """The message of the entry that counts the errors past :data:`MAX_REPORTED_ERRORS`."""
    return f"and {more} more error{'s' if more > 1 else ''} not listed (fix these first)"


class RequestError(DeepShareError):
    """A request that is well-typed but inconsistent; each error names its field's path (at most
    :data:`MAX_REPORTED_ERRORS` of them, then a count of the others)."""

    kind = "value_error"
    """The ``type`` of its errors in an answer's ``detail``."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = capped(errors)
        super().__init__("; ".join(f"{'.'.join(map(str, e.loc))}: {e.msg}" for e in self.errors))


# -- server side -------------------------------------------------------------------------------
def request_to_view(
    request: PlacementRequest, catalog: Catalog, contention: ContentionModel, tenants: Tenants | None = None
) -> ClusterView:
    """The view a policy decides on; raises :class:`RequestError` naming every bad field (with
    ``tenants``, also every ``queue`` and ``priority`` the tenants file does not declare)."""
    index = {}
    errors: list[FieldError] = []
    for i, node in enumerate(request.nodes):
        if node.name in index:
            errors.append(FieldError(("body", "nodes", i, "name"), f"duplicate node name {node.name!r}"))
        index.setdefault(node.name, i)
        if node.free_gpus > node.gpus:
            errors.append(FieldError(("body", "nodes", i, "free_gpus"), f"{node.free_gpus} exceeds gpus ({node.gpus})"))
    seen = Counter(job.job_id for job in (*request.running, *request.pending))
    held = [0] * len(request.nodes)
    for kind, jobs in (("running", request.running), ("pending", request.pending)):
        for i, job in enumerate(jobs):
            if seen[job.job_id] > 1:
                errors.append(FieldError(("body", kind, i, "job_id"), f"duplicate job id {job.job_id!r}"))
    listed = False  # the node names go in the first unknown node's message only
    for i, job in enumerate(request.running):
        for name, gpus in job.placement.items():
            loc = ("body", "running", i, "placement", name)
            if name not in index:
                hint = "" if listed else f"; nodes are {_names(request.nodes)}"
                listed = True
                errors.append(FieldError(loc, f"unknown node {name!r}{hint}"))
            else:  # 1 to MAX_GPUS_PER_NODE each (the schema's): a node's sum stays a small number
                held[index[name]] += gpus
    for i, node in enumerate(request.nodes):
        if node.free_gpus <= node.gpus < held[i] + node.free_gpus:
            errors.append(
                FieldError(
                    ("body", "nodes", i, "free_gpus"),
                    f"running jobs hold {held[i]} GPUs on {node.name!r} and {node.free_gpus} are free: "
                    f"more than its {node.gpus}",
                )
            )
    for i, job in enumerate(request.running):
        if job.submitted_at > request.now:
            errors.append(FieldError(("body", "running", i, "submitted_at"), f"{job.submitted_at} is after now ({request.now})"))
    for i, job in enumerate(request.pending):
        if job.submitted_at is not None and job.submitted_at > request.now:
            errors.append(FieldError(("body", "pending", i, "submitted_at"), f"{job.submitted_at} is after now ({request.now})"))
        if job.queued_since is not None:  # a wait that is negative would delay packed's relaxation and dlas's ranks
            submitted = request.now if job.submitted_at is None else job.submitted_at
            if job.queued_since > request.now:
                errors.append(FieldError(("body", "pending", i, "queued_since"), f"{job.queued_since} is after now ({request.now})"))
            elif job.queued_since < submitted:
                errors.append(FieldError(("body", "pending", i, "queued_since"),
                                         f"{job.queued_since} is before the job was submitted ({submitted})"))
    for i, past in enumerate(request.history):
        if past.finished_at > request.now:
            errors.append(FieldError(("body", "history", i, "finished_at"), f"{past.finished_at} is after now ({request.now})"))
    errors += _information_errors(request)
    if tenants is not None:
        errors += _tenancy_errors(request, tenants)
    fabric_errors = _fabric_errors(request.nodes, request.levels)
    if request.levels and request.rack_uplink_gbps > 0:
        fabric_errors.append(FieldError(("body", "rack_uplink_gbps"), "only in a request without levels; with levels, "
                                        "give each level's uplink_gbps"))
    topology = None
    if not fabric_errors:
        try:
            topology = _topology(request.nodes, request.levels, request.rack_uplink_gbps)
        except DeepShareError as exc:  # the fabric's own rules across fields (ports per uplink)
            fabric_errors.append(FieldError(("body", "levels"), str(exc)))
        else:
            problem = nvlink_domain_problem(topology)  # a node without NVLink would talk to its domain for free
            if problem is not None:
                fabric_errors.append(FieldError(("body", "nodes"), problem))
                topology = None
    errors += fabric_errors
    requests: dict[tuple[str, int], TopologyRequest] = {}
    for kind, jobs in (("running", request.running), ("pending", request.pending)):
        for i, job in enumerate(jobs):
            if topology is not None and _asks_topology(job):  # a job's levels are checked against a sound fabric
                gpus = job.gpus if isinstance(job, PendingIn) else sum(job.placement.values())
                asked = _topology_of(job, gpus, topology.fabric, ("body", kind, i), errors)
                if asked is not None:
                    requests[kind, i] = asked
    if errors or topology is None:
        raise RequestError(errors)
    return build_view(
        topology,
        catalog,
        contention,
        request.now,
        [n.free_gpus for n in request.nodes],
        [_pending(job, request.now, request.durations, requests.get(("pending", i), NO_TOPOLOGY))
         for i, job in enumerate(request.pending)],
        [_running(job, index, request.durations, requests.get(("running", i), NO_TOPOLOGY))
         for i, job in enumerate(request.running)],
        future_events=request.future_events,
        durations=request.durations,
        history=JobHistory(_finished(job, i) for i, job in enumerate(request.history)),
        restore_s=request.restore_s,
        move_s=request.move_s,
    )


def _tenancy_errors(request: PlacementRequest, tenants: Tenants) -> list[FieldError]:
    """Every job's ``queue`` and ``priority`` that the tenants file does not declare. A job its
    queue can never hold is no error here: admission holds it, and it waits."""
    errors: list[FieldError] = []
    for kind, jobs in (("running", request.running), ("pending", request.pending)):
        for i, job in enumerate(jobs):
            queue = tenants.queue_of(job)  # type: ignore[arg-type] - it reads queue, user and vc
            if queue not in tenants.queues:
                said = (f"queue {queue!r} is" if job.queue is not None
                        else f"the job names no queue, and the default queue {queue!r} is")
                errors.append(FieldError(("body", kind, i, "queue"), f"{said} not declared in the service's tenants "
                                         f"file (declared: {_listed(tenants.queues)})"))
            if job.priority is not None and job.priority not in tenants.priority_classes:
                declared = _listed(tenants.priority_classes) if tenants.priority_classes else "none"
                errors.append(FieldError(("body", kind, i, "priority"), f"priority class {job.priority!r} is not "
                                         f"declared in the service's tenants file (declared: {declared})"))
    return errors


def _listed(names: object) -> str:
    ordered = sorted(names)  # type: ignore[call-overload]
    return ", ".join(ordered[:8]) + (f" and {len(ordered) - 8} more" if len(ordered) > 8 else "")


_TOPOLOGY_FIELDS = ("required_level", "preferred_level", "slice_size", "slice_level")


def _asks_topology(job: PendingIn | RunningIn) -> bool:
    return (job.required_level is not None or job.preferred_level is not None or job.slice_size is not None
            or job.slice_level is not None)


def _topology_of(job: PendingIn | RunningIn, gpus: int, fabric: Fabric, loc: Loc,
                 errors: list[FieldError]) -> TopologyRequest | None:
    """The job's topology request, checked against the request's ``fabric`` (its levels, or ``rack``)
    by the core's own rules (:meth:`TopologyRequest.problems_of`); None after adding a
    :class:`FieldError` naming each bad field to ``errors``."""
    found = TopologyRequest.problems_of(job.required_level, job.preferred_level, job.slice_size, job.slice_level,
                                        fabric=fabric, gpus=gpus)
    if found:
        errors += [FieldError((*loc, problem.field), problem.message) for problem in found]
        return None
    return TopologyRequest(job.required_level, job.preferred_level, job.slice_size, job.slice_level)


def _topology_fields(job: JobView) -> dict[str, str | int | None]:
    """A view's job's topology request as a request body's fields."""
    t = job.topology
    return {} if t.empty else {name: getattr(t, name) for name in _TOPOLOGY_FIELDS}


def _spanned(placement: Placement, fabric: Fabric) -> dict[str, list[str]]:
    """Each level's name -> the names of the domains ``placement`` spans there, sorted."""
    return {
        level.name: sorted(fabric.domains[d].name for d in fabric.spanned(placement.nodes, i))
        for i, level in enumerate(fabric.levels)
    }


def request_topology(nodes: list[NodeIn], levels: list[LevelIn] | None = None, rack_uplink_gbps: float = 0.0) -> Topology:
    """The cluster the request's ``nodes`` (and fabric ``levels``, lowest first) describe: without
    levels one ``rack`` level of the nodes' racks (each rack's uplink ``rack_uplink_gbps``), with
    them each node's ``domains``; raises :class:`RequestError` naming each bad field of the fabric."""
    errors = _fabric_errors(nodes, levels)
    if errors:
        raise RequestError(errors)
    return _topology(nodes, levels, rack_uplink_gbps)


def _fabric_errors(nodes: list[NodeIn], levels: list[LevelIn] | None) -> list[FieldError]:
    """What is wrong with the request's fabric: the rules of a cluster spec's ``levels`` that span
    levels or fields, and every node's ``domains`` (one per level, and only with levels)."""
    errors: list[FieldError] = []
    if not levels:
        for i, node in enumerate(nodes):
            if node.domains is not None:
                errors.append(FieldError(("body", "nodes", i, "domains"),
                                         "the request has no levels; add levels (lowest first) or drop domains"))
        return errors
    first: dict[str, int] = {}
    for i, level in enumerate(levels):
        loc = ("body", "levels", i)
        if level.name in first:
            errors.append(FieldError((*loc, "name"), f"each level needs its own name; {level.name!r} is also "
                                     f"levels.{first[level.name]}'s"))
        first.setdefault(level.name, i)
        if level.nvlink and i:
            errors.append(FieldError((*loc, "nvlink"), "only the lowest level (levels.0) can be an NVLink domain"))
        if level.uplink_gbps > 0 and level.oversubscription > 0:
            errors.append(FieldError((*loc, "oversubscription"), "give uplink_gbps or oversubscription, not both"))
    names = list(first)
    wanted = set(names)
    for i, node in enumerate(nodes):
        given = node.domains
        if given is not None and given.keys() == wanted:
            continue
        loc = ("body", "nodes", i, "domains")
        if not given:
            errors.append(FieldError(loc, f"expected a domain for each level ({', '.join(names)}), got none"))
            continue
        for key in given:
            if key not in wanted:
                errors.append(FieldError((*loc, key), f"unknown level {key!r}; the request's levels are "
                                         f"{', '.join(names)}"))
        missing = [name for name in names if name not in given]
        if missing:
            errors.append(FieldError(loc, f"missing a domain for level {', '.join(map(repr, missing))} "
                                     f"(expected one for each of {', '.join(names)})"))
    return errors


def _topology(nodes: list[NodeIn], levels: list[LevelIn] | None, rack_uplink_gbps: float = 0.0) -> Topology:
    """:func:`request_topology` of a fabric :func:`_fabric_errors` found nothing wrong with."""
    if not levels:
        return Topology("request", tuple(_node(i, n, n.rack) for i, n in enumerate(nodes)), float(rack_uplink_gbps))
    names = [level.name for level in levels]
    first = 1 if levels[0].nvlink and len(levels) > 1 else 0  # a node's rack: the switch it hangs off (as in a spec)
    built = []
    for i, n in enumerate(nodes):
        given: dict[str, str] = n.domains  # type: ignore[assignment]
        domains = tuple([given[name] for name in names])
        rack = n.rack if "rack" in n.model_fields_set else "/".join(reversed(domains[first:]))
        built.append(_node(i, n, rack, domains))
    return Topology(
        "request", tuple(built),
        levels=tuple(Level(lv.name, lv.nvlink, float(lv.uplink_gbps), float(lv.oversubscription), float(lv.port_gbps))
                     for lv in levels),
    )


def _node(i: int, n: NodeIn, rack: str, domains: tuple[str, ...] = ()) -> Node:
    return Node(
        index=i, name=n.name, gpus=n.gpus, rack=rack, node_type=f"{n.fabric}-{n.gpus}",
        gpu_model=n.gpu_model, fabric=n.fabric, pcie_switches=n.pcie_switches,
        intra_node_gbps=n.intra_node_gbps, nvlink_gbps=n.nvlink_gbps, nic_gbps=n.nic_gbps, domains=domains,
    )


def _names(nodes: list[NodeIn]) -> str:
    names = [n.name for n in nodes]
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def _information_errors(request: PlacementRequest) -> list[FieldError]:
    """What the request's ``durations`` rules out: an ``exact`` job without its remaining time,
    an ``unknown`` one with an estimate."""
    errors: list[FieldError] = []
    if request.durations == "estimated":  # anything goes
        return errors
    for kind, jobs in (("running", request.running), ("pending", request.pending)):
        for i, job in enumerate(jobs):
            if request.durations == "exact" and job.remaining_s is None:
                errors.append(FieldError(("body", kind, i, "remaining_s"), "required when durations is 'exact'"))
            if request.durations == "unknown" and job.requested_s is not None:
                errors.append(FieldError(("body", kind, i, "requested_s"),
                                         "must be absent when durations is 'unknown' (nothing is estimated)"))
    return errors


def _belief(job: PendingIn | RunningIn, gpus: int, durations: str) -> tuple[float, float | None]:
    """The job's ``remaining_s`` and ``estimate_s`` as its view carries them. Remaining: the
    client's own, else what the simulator's ``estimated`` views count down (``requested_s``, or the
    flat prior, minus the time run). Estimate of the whole run: ``requested_s``, else what the
    client's ``remaining_s`` implies (it plus the time run), else none; none under ``unknown``."""
    remaining, requested, ran = job.remaining_s, job.requested_s, job.attained_gpu_s / gpus
    if remaining is None:
        remaining, estimate = believed_remaining_s(requested, ran), requested
    elif requested is not None:
        estimate = requested
    else:
        implied = remaining + ran
        estimate = implied if implied >= 1.0 else 1.0  # a job about to end: an estimate must be positive
    return remaining, (None if durations == "unknown" else estimate)


def _pending(job: PendingIn, now: float, durations: str, topology: TopologyRequest = NO_TOPOLOGY) -> KnownJob:
    submitted = now if job.submitted_at is None else job.submitted_at
    remaining, estimate = _belief(job, job.gpus, durations)
    return KnownJob(
        job.job_id, job.model, job.gpus, submitted, remaining, job.attained_gpu_s,
        job.preemptions, None, job.last_run_s, job.queued_since, estimate, job.user, job.group, job.vc, topology,
        job.queue, job.priority,
    )


def _running(job: RunningIn, index: dict[str, int], durations: str, topology: TopologyRequest = NO_TOPOLOGY) -> KnownJob:
    placement = Placement.of({index[name]: gpus for name, gpus in job.placement.items()})
    remaining, estimate = _belief(job, placement.total_gpus, durations)
    return KnownJob(
        job.job_id, job.model, placement.total_gpus, job.submitted_at, remaining,
        job.attained_gpu_s, job.preemptions, placement, job.running_for_s, None, estimate,
        job.user, job.group, job.vc, topology, job.queue, job.priority,
    )


def _finished(job: FinishedIn, i: int) -> FinishedJob:
    return FinishedJob(job.job_id or f"history-{i}", job.model or "unknown", job.gpus, job.run_s, job.finished_at,
                       job.user, job.group, job.vc, job.requested_s)


def decision_to_response(
    decision: Decision, view: ClusterView, policy: str, version: str
) -> PlacementResponse:
    """One answer per queued job, in queue order; raises :class:`InfeasibleDecision` (a policy
    bug, never the caller's fault) rather than answer something the cluster cannot do."""
    check_view_decision(decision, view)
    names = [node.name for node in view.topology.nodes]
    launched = {launch.job_id: launch.placement for launch in decision.launch}
    slowdown: dict[str, float] = {}
    """Each launch's predicted slowdown: contended / isolated run time = 1 / its throughput ratio."""
    pending = []
    by_id = {job.job_id: job for job in view.queued}
    preempted = set(decision.preempt)
    with leaving_out(view.predict, [job for job in view.running if job.job_id in preempted]) as predict:
        for launch in decision.launch:
            job = by_id[launch.job_id]
            ratio = predict(job, launch.placement, pending).ratio
            slowdown[job.job_id] = 1.0 / ratio
            pending.append((job, launch.placement))
    decisions = []
    for job in view.queued:
        where = launched.get(job.job_id)
        if where is None:
            decisions.append(DecisionOut(job_id=job.job_id, action="wait"))
        else:
            decisions.append(
                DecisionOut(
                    job_id=job.job_id, action="place", placement=_by_name(where, names),
                    predicted_slowdown=slowdown[job.job_id],
                    domains=None if job.topology.empty else _spanned(where, view.topology.fabric),
                )
            )
    return PlacementResponse(
        decisions=decisions,
        preempt=list(decision.preempt),
        migrate=[MigrationOut(job_id=m.job_id, placement=_by_name(m.placement, names)) for m in decision.migrate],
        policy=policy,
        policy_version=version,
    )


def _by_name(placement: Placement, names: list[str]) -> dict[str, int]:
    return {names[node]: gpus for node, gpus in placement.alloc}


# -- client side -------------------------------------------------------------------------------
def printable(name: str | None, limit: int = 256) -> str | None:
    """``name`` with each control character written as ``\\xNN`` or ``\\uNNNN`` (the service refuses them in
    names: :data:`~deepshare.core.names.NO_CONTROL_CHARACTERS`). Equal names stay equal, so
    what a policy groups by them is kept (backslashes are left as they are: a queue's name must
    still match the tenants file's); an escaped name longer than ``limit`` (the field's most) is
    cut, and ends in ``~`` and a digest of the whole name; a live journal written before the scheduler refused
    them at submission may hold such names, and one of them refused every decision."""
    if name is None or not has_control_character(name):
        return name
    parts = [escaped(ch) for ch in name]
    if sum(map(len, parts)) <= limit:
        return "".join(parts)
    # longer than the service takes once escaped: cut between escapes, and keep names apart by a
    # digest of the whole
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    room, kept = limit - len(digest) - 1, []
    for part in parts:
        room -= len(part)
        if room < 0:
            break
        kept.append(part)
    return "".join(kept) + "~" + digest


def view_to_request(view: ClusterView) -> PlacementRequest:
    """The request that makes the service see ``view`` (ratios are recomputed server-side). Job
    and tenant names go through :func:`printable`; job ids do not (decisions come back by id, and
    the live scheduler makes its own)."""
    names = [node.name for node in view.topology.nodes]
    levels = view.topology.levels
    level_names = [level.name for level in levels]
    return PlacementRequest(
        now=view.now,
        nodes=[
            NodeIn(
                name=n.name, gpus=n.gpus, free_gpus=view.free[n.index], fabric=n.fabric, rack=n.rack,
                gpu_model=printable(n.gpu_model, 128), pcie_switches=n.pcie_switches, intra_node_gbps=n.intra_node_gbps,
                nvlink_gbps=n.nvlink_gbps, nic_gbps=n.nic_gbps,
                domains=dict(zip(level_names, n.domains)) if levels else None,
            )
            for n in view.topology.nodes
        ],
        levels=[
            LevelIn(name=lv.name, nvlink=bool(lv.nvlink), uplink_gbps=float(lv.uplink_gbps),
                    oversubscription=float(lv.oversubscription), port_gbps=float(lv.port_gbps))
            for lv in levels
        ] or None,
        rack_uplink_gbps=0.0 if levels else float(view.topology.rack_uplink_gbps),
        running=[
            RunningIn(
                job_id=j.job_id, model=printable(j.model, 128), placement=_by_name(j.placement, names),
                submitted_at=j.submit_time, remaining_s=j.remaining_s, requested_s=j.estimate_s,
                attained_gpu_s=j.attained_gpu_s, preemptions=j.preemptions, running_for_s=j.last_run_s,
                **_job_names(j), **_topology_fields(j),
            )
            for j in view.running
            if j.placement is not None
        ],
        pending=[
            PendingIn(
                job_id=j.job_id, model=printable(j.model, 128), gpus=j.gpus, submitted_at=j.submit_time,
                remaining_s=j.remaining_s, requested_s=j.estimate_s, attained_gpu_s=j.attained_gpu_s,
                preemptions=j.preemptions, queued_since=j.queued_since, last_run_s=j.last_run_s,
                **_job_names(j), **_topology_fields(j),
            )
            for j in view.queued
        ],
        future_events=view.future_events,
        durations=view.durations,
        restore_s=view.restore_s,
        move_s=view.move_s,
        history=[  # past jobs given up front (--history) may finish after the run's clock; the time weighs in no policy
            FinishedIn(job_id=printable(j.job_id), model=printable(j.model, 128), gpus=j.gpus, run_s=j.run_s,
                       finished_at=min(j.finish_s, view.now), user=printable(j.user), group=printable(j.group),
                       vc=printable(j.vc), requested_s=j.estimate_s)
            for j in list(view.history)[-MAX_HISTORY:]
        ],
    )


def _job_names(job) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    """A running or queued job's user, group, vc, queue and priority, :func:`printable`."""
    return {field: printable(getattr(job, field)) for field in ("user", "group", "vc", "queue", "priority")}


class UnexpectedAnswer(DeepShareError):
    """An answer that breaks the API's contract (not one decision per pending job, in request
    order; a ``place`` without a placement): no decision can be read from it. The client says
    it as an unexpected answer, as it does an answer of the wrong shape."""


def _contract_errors(response: PlacementResponse, view: ClusterView) -> str | None:
    """The first way ``response`` breaks the contract :func:`decision_to_response` keeps for the
    request :func:`view_to_request` made of ``view``, or None."""
    asked = [job.job_id for job in view.queued]
    answered = [d.job_id for d in response.decisions]
    if answered != asked:
        first = next((i for i, (a, b) in enumerate(zip(answered, asked)) if a != b), min(len(asked), len(answered)))
        said = repr(answered[first])[:80] if first < len(answered) else "nothing"
        wanted = repr(asked[first])[:80] if first < len(asked) else "no more decisions"
        return (f"decisions.{first}: {said} where the request's pending jobs need {wanted} (one decision per "
                f"pending job, in request order: {len(asked)} asked, {len(answered)} answered)")
    for i, d in enumerate(response.decisions):
        if d.action == "place" and not d.placement:
            return f"decisions.{i}.placement: a 'place' of {d.job_id!r} without a placement"
        if d.action == "wait" and d.placement:
            return f"decisions.{i}.placement: a 'wait' of {d.job_id!r} with a placement"
    return None


def response_to_decision(response: PlacementResponse, view: ClusterView) -> Decision:
    """The core decision a response stands for, checked against ``view``: :class:`UnexpectedAnswer`
    when it breaks the API's contract (a partial or made-up answer is no decision to act on),
    :class:`InfeasibleDecision` when it asks what the cluster cannot do."""
    problem = _contract_errors(response, view)
    if problem is not None:
        raise UnexpectedAnswer(problem)

    def placement(where: dict[str, int]) -> Placement:
        try:
            return Placement.of({view.topology.node_index(name): gpus for name, gpus in where.items()})
        except DeepShareError as exc:
            raise InfeasibleDecision(f"the service answered {exc}") from None

    decision = Decision(
        launch=tuple(
            Launch(d.job_id, placement(d.placement)) for d in response.decisions if d.action == "place" and d.placement
        ),  # every place has a placement (checked above); the test only narrows the type
        preempt=tuple(response.preempt),
        migrate=tuple(Migrate(m.job_id, placement(m.placement)) for m in response.migrate),
    )
    check_view_decision(decision, view)
    return decision
