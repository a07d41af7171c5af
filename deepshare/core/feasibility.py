"""Whether a decision can be carried out: the one check the simulator, the placement service
and the live scheduler all apply before acting (an infeasible decision is refused, never fixed).

Applied in the order a decision is carried out: preemptions and migrations release their GPUs,
then migrations and launches take theirs. Every job appears at most once; preempted and
migrated jobs must be running, launched ones queued; a placement gives the job exactly its GPUs,
names each node once, only known nodes, and never more GPUs than are free there, and honours
the job's topology request (:func:`~deepshare.core.fabric.request_violation`: a required level
inside one domain, slices inside their domains).
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from deepshare.core.errors import InfeasibleDecision
from deepshare.core.fabric import Fabric, TopologyRequest, request_violation
from deepshare.core.types import Decision, Placement
from deepshare.core.view import ClusterView


class Requests(Protocol):
    """Jobs' topology requests by id (a dict will do): ``get`` gives None for a job that asks nothing."""

    def get(self, job_id: str) -> TopologyRequest | None: ...


def check_decision(
    decision: Decision,
    free: Sequence[int],
    running: Mapping[str, Placement],
    queued: Mapping[str, int],
    node_names: Sequence[str],
    requests: Requests | None = None,
    fabric: Fabric | None = None,
) -> None:
    """Raise :class:`InfeasibleDecision` unless ``decision`` fits.

    ``running`` maps running jobs to their placements, ``queued`` queued jobs to their GPU
    counts; ``free`` is by node index; ``requests`` the jobs' topology requests (those that ask
    anything), checked against ``fabric``.
    """
    left = list(free)
    seen: set[str] = set()

    def once(job_id: str) -> None:
        if job_id in seen:
            raise InfeasibleDecision(f"job {job_id!r} appears twice in one decision")
        seen.add(job_id)

    def release(job_id: str, verb: str) -> None:
        once(job_id)
        placement = running.get(job_id)
        if placement is None:
            raise InfeasibleDecision(f"cannot {verb} {job_id!r}: it is not running")
        placement.release(left)

    def take(job_id: str, gpus: int, placement: Placement) -> None:
        if placement.total_gpus != gpus:
            raise InfeasibleDecision(f"job {job_id!r} needs {gpus} GPUs, placement gives {placement.total_gpus}")
        if len(set(placement.nodes)) != len(placement.nodes):
            raise InfeasibleDecision(f"job {job_id!r}: placement lists a node more than once: {placement.alloc}")
        for node, count in placement.alloc:
            if not 0 <= node < len(left):
                raise InfeasibleDecision(f"job {job_id!r}: unknown node index {node}")
            if count <= 0:
                raise InfeasibleDecision(f"job {job_id!r}: non-positive GPU count {count} on {node_names[node]}")
            if count > left[node]:
                raise InfeasibleDecision(
                    f"job {job_id!r}: {count} GPUs on {node_names[node]} but only {left[node]} free"
                )
            left[node] -= count
        request = requests.get(job_id) if requests else None
        if request is not None and fabric is not None:
            why = request_violation(request, placement.alloc, fabric)
            if why is not None:
                raise InfeasibleDecision(f"job {job_id!r}: {why}")

    for job_id in decision.preempt:
        release(job_id, "preempt")
    for move in decision.migrate:
        release(move.job_id, "migrate")
    for move in decision.migrate:
        take(move.job_id, running[move.job_id].total_gpus, move.placement)
    for launch in decision.launch:
        once(launch.job_id)
        gpus = queued.get(launch.job_id)
        if gpus is None:
            raise InfeasibleDecision(f"cannot launch {launch.job_id!r}: it is not queued")
        take(launch.job_id, gpus, launch.placement)


def check_view_decision(decision: Decision, view: ClusterView) -> None:
    """:func:`check_decision` against the view the decision was made on."""
    check_decision(
        decision,
        view.free,
        {job.job_id: job.placement for job in view.running if job.placement is not None},
        {job.job_id: job.gpus for job in view.queued},
        [node.name for node in view.topology.nodes],
        {job.job_id: job.topology for job in (*view.queued, *view.running) if not job.topology.empty},
        view.topology.fabric,
    )
