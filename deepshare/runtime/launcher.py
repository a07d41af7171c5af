"""Start, watch, stop and find one run of a job on Ray: a placement group plus one worker per GPU.

A run is named after the job and its attempt, so the scheduler (or a restarted scheduler) can
find it again by name: the placement group ``ds-<job>-a<attempt>`` (detached, one bundle per
node of the placement, pinned to that node with a ``ray.io/node-id`` label selector, holding the
decided GPUs) and the detached worker actors ``ds-<job>-a<attempt>-r<rank>`` (``num_gpus=1``
from the bundle, ``num_cpus=0``). Ranks are numbered bundle by bundle, rank 0 on the first.

:class:`RayLauncher` bundles these functions as the control loop's
:class:`~deepshare.runtime.ports.Launcher`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

from deepshare.runtime.cluster import NODE_ID_LABEL, ClusterState, current_cluster
from deepshare.runtime.logs import rank_log_path
from deepshare.runtime.spec import LiveJobSpec, job_checkpoint_dir
from deepshare.runtime.worker import JobWorker, Report, StartOutcome, WorkerLaunch, WorkerStatus, python_argv

log = logging.getLogger(__name__)

NAMESPACE = "deepshare"


class LaunchError(Exception):
    """The run could not be started (GPUs not granted in time, a worker failed to start).

    ``counts``: whether the failure counts towards ``--max-launch-attempts``. GPUs not granted in
    time are a wait for capacity (the job is requeued without limit); anything else (a program
    that cannot be executed, a missing ``working_dir``, a worker that cannot be created) counts.
    """

    def __init__(self, message: str, counts: bool = True) -> None:
        super().__init__(message)
        self.counts = counts


class RunPhase(str, Enum):
    RUNNING = "running"
    FINISHED = "finished"  # every rank exited 0 and no stop was asked
    STOPPED = "stopped"  # a stop was asked and every rank has exited (or was killed)
    FAILED = "failed"  # a rank exited non-zero without being asked to stop
    LOST = "lost"  # a worker is gone: its node died or it was killed
    UNKNOWN = "unknown"  # the workers did not answer in time; ask again later


@dataclass(frozen=True, slots=True)
class RunStatus:
    phase: RunPhase
    report: Report | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    pg_timeout_s: float = 30.0
    """How long to wait for the placement group's GPUs before giving up (the job is requeued)."""
    rpc_timeout_s: float = 30.0
    log_dir: str | None = None
    """The scheduler's (absolute) state folder: ranks write ``logs/<job>/rank-<r>.log`` under it.
    None: each rank's log stays in its worker's temporary control folder (removed with it)."""


def pg_name(job_id: str, attempt: int) -> str:
    return f"ds-{job_id}-a{attempt}"


def actor_name(job_id: str, attempt: int, rank: int) -> str:
    return f"{pg_name(job_id, attempt)}-r{rank}"


def _remote_worker() -> Any:
    import ray

    return ray.remote(JobWorker)


def launch(job_id: str, attempt: int, spec: LiveJobSpec, alloc: Sequence[tuple[str, int]], cluster: ClusterState,
           settings: LaunchSettings, working_dir: str | None) -> None:
    """Create the run; on any failure remove what was created and raise :class:`LaunchError`."""
    import ray
    from ray.util import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundles = [{"GPU": float(g)} for _, g in alloc]
    selectors = [{NODE_ID_LABEL: cluster.node(name).node_id} for name, _ in alloc]
    try:
        pg = placement_group(bundles, strategy="PACK", name=pg_name(job_id, attempt), lifetime="detached",
                             bundle_label_selector=selectors)
        if not pg.wait(settings.pg_timeout_s):
            raise LaunchError(f"GPUs {list(alloc)} not granted within {settings.pg_timeout_s:g} s", counts=False)
        Worker = _remote_worker()
        actors, placed = [], []
        rank = 0
        for bundle, (_, gpus) in enumerate(alloc):
            for local in range(gpus):
                actors.append(Worker.options(
                    name=actor_name(job_id, attempt, rank), namespace=NAMESPACE, lifetime="detached",
                    num_gpus=1, num_cpus=0, max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=bundle),
                ).remote(job_id, attempt, rank))
                placed.append((rank, local, gpus))
                rank += 1
        master_addr, master_port = ray.get(actors[0].address.remote(), timeout=settings.rpc_timeout_s)
        argv = python_argv(spec.entrypoint, tuple(spec.args)) if spec.entrypoint else (*spec.command, *spec.args)
        starts = [
            actor.start.remote(WorkerLaunch(
                job_id=job_id, attempt=attempt, rank=r, world_size=spec.gpus, local_rank=local,
                local_world_size=gpus, master_addr=master_addr, master_port=master_port, argv=tuple(argv),
                checkpoint_dir=job_checkpoint_dir(spec, job_id), working_dir=working_dir, env=tuple(sorted(spec.env.items())),
                log_path=str(rank_log_path(settings.log_dir, job_id, r)) if settings.log_dir else None,
            ))
            for actor, (r, local, gpus) in zip(actors, placed)
        ]
        outcomes: list[StartOutcome] = ray.get(starts, timeout=settings.rpc_timeout_s)
        for (r, _, _), outcome in zip(placed, outcomes):
            if outcome.error is not None:
                tail = f"\n{outcome.log_tail}" if outcome.log_tail else ""
                raise LaunchError(f"rank {r} could not start: {outcome.error}{tail}")
    except LaunchError:
        teardown(job_id, attempt, spec.gpus)
        raise
    except Exception as exc:  # noqa: BLE001 - any Ray error here means "not launched"
        teardown(job_id, attempt, spec.gpus)
        raise LaunchError(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}") from exc


def _actors(job_id: str, attempt: int, world: int) -> list[Any | None]:
    import ray

    found: list[Any | None] = []
    for rank in range(world):
        try:
            found.append(ray.get_actor(actor_name(job_id, attempt, rank), namespace=NAMESPACE))
        except ValueError:
            found.append(None)
    return found


def poll(job_id: str, attempt: int, world: int, timeout_s: float = 10.0) -> RunStatus:
    """What the run is doing now, from every worker's answer."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    actors = _actors(job_id, attempt, world)
    if any(a is None for a in actors):
        return RunStatus(RunPhase.LOST, detail="a worker actor is gone")
    try:
        statuses: list[WorkerStatus] = ray.get([a.poll.remote() for a in actors], timeout=timeout_s)
    except GetTimeoutError:
        return RunStatus(RunPhase.UNKNOWN, detail="workers did not answer")
    except RayActorError as exc:
        return RunStatus(RunPhase.LOST, detail=f"a worker died ({type(exc).__name__})")
    report = statuses[0].report
    if not all(s.started for s in statuses):
        return RunStatus(RunPhase.LOST, detail="a worker never started its rank")
    failed = [s for s in statuses if s.exit_code not in (None, 0)]
    stop = any(s.stop_requested for s in statuses)
    if failed and not stop:
        first = failed[0]
        return RunStatus(RunPhase.FAILED, report, f"rank {first.rank} exited with status {first.exit_code}:\n{first.log_tail}")
    if any(s.running for s in statuses):
        return RunStatus(RunPhase.RUNNING, report)
    return RunStatus(RunPhase.STOPPED if stop else RunPhase.FINISHED, report)


def request_stop(job_id: str, attempt: int, world: int) -> None:
    """Ask every rank to checkpoint and exit (fire and forget; poll to see them go)."""
    for actor in _actors(job_id, attempt, world):
        if actor is not None:
            actor.request_stop.remote()


def exists(job_id: str, attempt: int, world: int) -> bool:
    """Whether the run's placement group and all its workers are still there (for re-attaching)."""
    import ray

    try:
        ray.util.get_placement_group(pg_name(job_id, attempt))
    except ValueError:
        return False
    return all(a is not None for a in _actors(job_id, attempt, world))


def teardown(job_id: str, attempt: int, world: int) -> None:
    """Kill the workers (their ranks die with them) and remove the placement group; idempotent."""
    import ray

    for actor in _actors(job_id, attempt, world):
        if actor is None:
            continue
        try:
            ray.get(actor.terminate.remote(), timeout=5.0)
        except Exception:  # noqa: BLE001 - dead or stuck: killing it kills the rank (PDEATHSIG)
            pass
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
    try:
        ray.util.remove_placement_group(ray.util.get_placement_group(pg_name(job_id, attempt)))
    except ValueError:
        pass


class RayLauncher:
    """The :class:`~deepshare.runtime.ports.Launcher` on Ray: this module's functions, and the
    alive GPU nodes from ``ray.nodes()`` (:func:`~deepshare.runtime.cluster.current_cluster`)."""

    def cluster(self) -> ClusterState:
        return current_cluster()

    def launch(self, job_id: str, attempt: int, spec: LiveJobSpec, alloc: Sequence[tuple[str, int]],
               cluster: ClusterState, settings: LaunchSettings, working_dir: str | None) -> None:
        launch(job_id, attempt, spec, alloc, cluster, settings, working_dir)

    def poll(self, job_id: str, attempt: int, world: int) -> RunStatus:
        return poll(job_id, attempt, world)

    def request_stop(self, job_id: str, attempt: int, world: int) -> None:
        request_stop(job_id, attempt, world)

    def exists(self, job_id: str, attempt: int, world: int) -> bool:
        return exists(job_id, attempt, world)

    def teardown(self, job_id: str, attempt: int, world: int) -> None:
        teardown(job_id, attempt, world)
