"""HTTP bodies <-> the core's views and decisions, both ways.

Server side: :func:`request_to_view` turns a :class:`PlacementRequest` into the same
:class:`ClusterView` the simulator produces (through :func:`deepshare.core.snapshot.build_view`)
and :func:`decision_to_response` answers one decision per pending job. Client side:
:func:`view_to_request` and :func:`response_to_decision` do the reverse, so a policy behind the
service can stand in for an in-process one. Node indices follow the request's node order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from deepshare.core.contention import ContentionModel
from deepshare.core.contention.base import leaving_out
from deepshare.core.feasibility import check_view_decision
from deepshare.core.history import FinishedJob, JobHistory
from deepshare.core.information import believed_remaining_s
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import Node, Topology
from deepshare.core.errors import DeepShareError, InfeasibleDecision
from deepshare.core.types import Decision, Launch, Migrate, Placement
from deepshare.core.view import ClusterView
from deepshare.core.workloads import Catalog
from deepshare.serving.schemas import (
    MAX_HISTORY,
    DecisionOut,
    FinishedIn,
    MigrationOut,
    NodeIn,
    PendingIn,
    PlacementRequest,
    PlacementResponse,
    RunningIn,
)

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldError:
    loc: Loc
    msg: str


class RequestError(DeepShareError):
    """A request that is well-typed but inconsistent; each error names its field's path."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{'.'.join(map(str, e.loc))}: {e.msg}" for e in errors))


# -- server side -------------------------------------------------------------------------------
def request_to_view(request: PlacementRequest, catalog: Catalog, contention: ContentionModel) -> ClusterView:
    """The view a policy decides on; raises :class:`RequestError` naming every bad field."""
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
    for i, job in enumerate(request.running):
        for name, gpus in job.placement.items():
            loc = ("body", "running", i, "placement", name)
            if name not in index:
                errors.append(FieldError(loc, f"unknown node {name!r}; nodes are {_names(request.nodes)}"))
            elif gpus <= 0:
                errors.append(FieldError(loc, f"GPUs must be positive, got {gpus}"))
            else:
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
    if errors:
        raise RequestError(errors)
    topology = request_topology(request.nodes)
    return build_view(
        topology,
        catalog,
        contention,
        request.now,
        [n.free_gpus for n in request.nodes],
        [_pending(job, request.now, request.durations) for job in request.pending],
        [_running(job, index, request.durations) for job in request.running],
        future_events=request.future_events,
        durations=request.durations,
        history=JobHistory(_finished(job, i) for i, job in enumerate(request.history)),
    )


def request_topology(nodes: list[NodeIn]) -> Topology:
    return Topology(
        "request",
        tuple(
            Node(
                index=i, name=n.name, gpus=n.gpus, rack=n.rack, node_type=f"{n.fabric}-{n.gpus}",
                gpu_model=n.gpu_model, fabric=n.fabric, pcie_switches=n.pcie_switches,
                intra_node_gbps=n.intra_node_gbps, nvlink_gbps=n.nvlink_gbps, nic_gbps=n.nic_gbps,
            )
            for i, n in enumerate(nodes)
        ),
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


def _pending(job: PendingIn, now: float, durations: str) -> KnownJob:
    submitted = now if job.submitted_at is None else job.submitted_at
    remaining, estimate = _belief(job, job.gpus, durations)
    return KnownJob(
        job.job_id, job.model, job.gpus, submitted, remaining, job.attained_gpu_s,
        job.preemptions, None, job.last_run_s, job.queued_since, estimate, job.user, job.group, job.vc,
    )


def _running(job: RunningIn, index: dict[str, int], durations: str) -> KnownJob:
    placement = Placement.of({index[name]: gpus for name, gpus in job.placement.items()})
    remaining, estimate = _belief(job, placement.total_gpus, durations)
    return KnownJob(
        job.job_id, job.model, placement.total_gpus, job.submitted_at, remaining,
        job.attained_gpu_s, job.preemptions, placement, job.running_for_s, None, estimate,
        job.user, job.group, job.vc,
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
def view_to_request(view: ClusterView) -> PlacementRequest:
    """The request that makes the service see ``view`` (ratios are recomputed server-side)."""
    names = [node.name for node in view.topology.nodes]
    return PlacementRequest(
        now=view.now,
        nodes=[
            NodeIn(
                name=n.name, gpus=n.gpus, free_gpus=view.free[n.index], fabric=n.fabric, rack=n.rack,
                gpu_model=n.gpu_model, pcie_switches=n.pcie_switches, intra_node_gbps=n.intra_node_gbps,
                nvlink_gbps=n.nvlink_gbps, nic_gbps=n.nic_gbps,
            )
            for n in view.topology.nodes
        ],
        running=[
            RunningIn(
                job_id=j.job_id, model=j.model, placement=_by_name(j.placement, names), submitted_at=j.submit_time,
                remaining_s=j.remaining_s, requested_s=j.estimate_s, attained_gpu_s=j.attained_gpu_s,
                preemptions=j.preemptions, running_for_s=j.last_run_s, user=j.user, group=j.group, vc=j.vc,
            )
            for j in view.running
            if j.placement is not None
        ],
        pending=[
            PendingIn(
                job_id=j.job_id, model=j.model, gpus=j.gpus, submitted_at=j.submit_time, remaining_s=j.remaining_s,
                requested_s=j.estimate_s, attained_gpu_s=j.attained_gpu_s, preemptions=j.preemptions,
                queued_since=j.queued_since, last_run_s=j.last_run_s, user=j.user, group=j.group, vc=j.vc,
            )
            for j in view.queued
        ],
        future_events=view.future_events,
        durations=view.durations,
        history=[  # past jobs given up front (--history) may finish after the run's clock; the time weighs in no policy
            FinishedIn(job_id=j.job_id, model=j.model, gpus=j.gpus, run_s=j.run_s, finished_at=min(j.finish_s, view.now),
                       user=j.user, group=j.group, vc=j.vc, requested_s=j.estimate_s)
            for j in list(view.history)[-MAX_HISTORY:]
        ],
    )


def response_to_decision(response: PlacementResponse, view: ClusterView) -> Decision:
    """The core decision a response stands for, checked against ``view``."""

    def placement(where: dict[str, int]) -> Placement:
        try:
            return Placement.of({view.topology.node_index(name): gpus for name, gpus in where.items()})
        except DeepShareError as exc:
            raise InfeasibleDecision(f"the service answered {exc}") from None

    decision = Decision(
        launch=tuple(
            Launch(d.job_id, placement(d.placement)) for d in response.decisions if d.action == "place" and d.placement
        ),
        preempt=tuple(response.preempt),
        migrate=tuple(Migrate(m.job_id, placement(m.placement)) for m in response.migrate),
    )
    check_view_decision(decision, view)
    return decision
