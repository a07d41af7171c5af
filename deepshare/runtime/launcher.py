"""Start, watch, stop and find one run of a job on Ray: a placement group plus one worker per GPU.

A run is named after the journal's instance id, the job and its attempt
(:class:`~deepshare.runtime.runnames.RunNames`), so the scheduler (or a restarted scheduler
with the same journal) can find it again by name and no other scheduler's run shares it: the
placement group ``ds-<instance>-<job>-a<attempt>`` (detached, one bundle per node of the
placement, pinned to that node with a ``ray.io/node-id`` label selector, holding the decided
GPUs) and the detached worker actors ``ds-<instance>-<job>-a<attempt>-r<rank>`` (``num_gpus=1``
from the bundle, ``num_cpus=0``). Ranks are numbered bundle by bundle, rank 0 on the first.

A job whose spec has a ``required_level`` that the cluster reads from a node label
(:class:`~deepshare.runtime.cluster.LabelLevels`) gets one more constraint, so that Ray itself
keeps the gang inside one domain of that level (:func:`placement_group_args`): with a Ray whose
``placement_group`` takes ``topology_strategy`` (2.60 and later),
``topology_strategy={LABEL_KEY: "STRICT_PACK", "ray.io/node-id": "PACK"}`` (instead of
``strategy``, which Ray forbids beside it); with an older Ray, ``LABEL_KEY: <domain>`` added to
every bundle's label selector. The per-node ``ray.io/node-id`` pinning stays either way. A
placement on a node without the label (a domain of its own, one node) gets no such constraint.

A gang is never half-started: the workers are created only once the whole placement group is
ready; a group not ready within ``pg_timeout_s`` is removed and the job requeued (a wait for
capacity, :class:`LaunchError` with ``counts=False``). A failed launch removes only what that
launch created (the handles it holds), never anything it finds by name.

:class:`RayLauncher` bundles these functions as the control loop's
:class:`~deepshare.runtime.ports.Launcher`.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

from deepshare.runtime.cluster import NO_LEVELS, NODE_ID_LABEL, ClusterState, LabelLevels, read_cluster
from deepshare.runtime.logs import rank_log_path
from deepshare.runtime.runnames import RunNames
from deepshare.runtime.spec import LiveJobSpec
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


def _remote_worker() -> Any:
    import ray

    return ray.remote(JobWorker)


@functools.lru_cache(maxsize=1)
def supports_topology_strategy() -> bool:
    """Whether the installed Ray's ``placement_group`` takes ``topology_strategy`` (Ray 2.60+)."""
    import inspect

    from ray.util import placement_group

    try:
        return "topology_strategy" in inspect.signature(placement_group).parameters
    except (TypeError, ValueError):  # pragma: no cover - a wrapper without a signature
        return False


def required_domain(spec: LiveJobSpec, alloc: Sequence[tuple[str, int]], cluster: ClusterState) -> tuple[str, str] | None:
    """``(label key, label value)`` of the one domain the gang must stay inside, or None when it
    needs no constraint: no ``required_level``, a level not read from a label, or a placement on a
    node without the label (a domain of its own: then the placement is that one node).
    :class:`LaunchError` when the placement's nodes carry different values (a decision that breaks
    the request; the loop's checks keep it from happening)."""
    level = spec.required_level
    key = cluster.levels.label(level) if level is not None else None
    if key is None:
        return None
    i = [lv.name for lv in cluster.levels.levels].index(level)
    values = [cluster.node(name).domain_labels[i] for name, _ in alloc]
    distinct = sorted({v for v in values if v is not None})
    if not values or len(distinct) != len(set(values)):  # a node without the label
        return None
    if len(distinct) != 1:
        raise LaunchError(f"placement {list(alloc)} spans {level} domains {', '.join(distinct)} ({key}); "
                          "the job requires one")
    return key, distinct[0]


def placement_group_args(job_id: str, attempt: int, spec: LiveJobSpec, alloc: Sequence[tuple[str, int]],
                         cluster: ClusterState, topology_strategy: bool, *, names: RunNames) -> dict[str, Any]:
    """The keyword arguments of ``ray.util.placement_group`` for this run (see the module doc):
    one bundle per node pinned by ``ray.io/node-id``, and for a required level either
    ``topology_strategy`` (when ``topology_strategy`` is True: the installed Ray takes it) or the
    domain's label in every bundle's selector. A pure function: tests call it without Ray."""
    selectors = [{NODE_ID_LABEL: cluster.node(name).node_id} for name, _ in alloc]
    args: dict[str, Any] = dict(bundles=[{"GPU": float(g)} for _, g in alloc], name=names.pg(job_id, attempt),
                                lifetime="detached", bundle_label_selector=selectors)
    domain = required_domain(spec, alloc, cluster)
    if domain is not None and topology_strategy:
        args["topology_strategy"] = {domain[0]: "STRICT_PACK", NODE_ID_LABEL: "PACK"}  # not with `strategy`
        return args
    if domain is not None:
        for selector in selectors:
            selector[domain[0]] = domain[1]
    args["strategy"] = "PACK"
    return args


def launch(job_id: str, attempt: int, spec: LiveJobSpec, alloc: Sequence[tuple[str, int]], cluster: ClusterState,
           settings: LaunchSettings, working_dir: str | None, *, names: RunNames) -> None:
    """Create the run; on any failure remove what this call created (by its handles: a name
    may be another run's) and raise :class:`LaunchError`."""
    import ray
    from ray.util import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg, actors = None, []
    try:
        args = placement_group_args(job_id, attempt, spec, alloc, cluster, supports_topology_strategy(), names=names)
        pg = placement_group(**args)
        if not pg.wait(settings.pg_timeout_s):  # removed by the clean-up below: never half-started
            domain = required_domain(spec, alloc, cluster)
            inside = f" inside {spec.required_level} domain {domain[1]}" if domain else ""
            raise LaunchError(f"GPUs {list(alloc)}{inside} not granted within {settings.pg_timeout_s:g} s",
                              counts=False)
        Worker = _remote_worker()
        placed = []
        rank = 0
        for bundle, (_, gpus) in enumerate(alloc):
            for local in range(gpus):
                actors.append(Worker.options(
                    name=names.actor(job_id, attempt, rank), namespace=NAMESPACE, lifetime="detached",
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
                checkpoint_dir=names.checkpoint_dir(spec, job_id), working_dir=working_dir, env=tuple(sorted(spec.env.items())),
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
        _remove(actors, pg)
        raise
    except Exception as exc:  # noqa: BLE001 - any Ray error here means "not launched"
        _remove(actors, _own_group(pg, exc, job_id, attempt, names))
        raise LaunchError(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}") from exc


def _own_group(pg: Any, exc: BaseException, job_id: str, attempt: int, names: RunNames) -> Any:
    """The placement group a failed launch made: its handle, or when ``placement_group()`` raised
    after Ray had registered the group (a timeout), the group of this run's own name; none when
    the error is that the name was taken (the group is then not this call's)."""
    if pg is not None or "already exists" in str(exc):
        return pg
    import ray

    try:
        return ray.util.get_placement_group(names.pg(job_id, attempt))
    except Exception:  # noqa: BLE001 - not registered (or Ray unreachable): nothing of ours to remove
        return None


def _actors(job_id: str, attempt: int, world: int, names: RunNames) -> list[Any | None]:
    import ray

    found: list[Any | None] = []
    for rank in range(world):
        try:
            found.append(ray.get_actor(names.actor(job_id, attempt, rank), namespace=NAMESPACE))
        except ValueError:
            found.append(None)
    return found


def poll(job_id: str, attempt: int, world: int, timeout_s: float = 10.0, *, names: RunNames) -> RunStatus:
    """What the run is doing now, from every worker's answer."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    actors = _actors(job_id, attempt, world, names)
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


def request_stop(job_id: str, attempt: int, world: int, *, names: RunNames) -> None:
    """Ask every rank to checkpoint and exit (fire and forget; poll to see them go)."""
    for actor in _actors(job_id, attempt, world, names):
        if actor is not None:
            actor.request_stop.remote()


def exists(job_id: str, attempt: int, world: int, *, names: RunNames) -> bool:
    """Whether the run's placement group and all its workers are still there (for re-attaching)."""
    import ray

    try:
        ray.util.get_placement_group(names.pg(job_id, attempt))
    except ValueError:
        return False
    return all(a is not None for a in _actors(job_id, attempt, world, names))


def teardown(job_id: str, attempt: int, world: int, *, names: RunNames) -> None:
    """Kill the workers (their ranks die with them) and remove the placement group, found by
    name; idempotent."""
    import ray

    try:
        pg = ray.util.get_placement_group(names.pg(job_id, attempt))
    except ValueError:
        pg = None
    _remove([actor for actor in _actors(job_id, attempt, world, names) if actor is not None], pg, strict=True)


def _remove(actors: Sequence[Any], pg: Any, strict: bool = False) -> None:
    """Kill ``actors`` (their ranks die with them) and remove placement group ``pg`` (None: none).

    Every rank is asked to terminate at once and given one shared wait, so a run's teardown
    takes one rank's grace rather than one per rank (a 4-rank job ignoring SIGTERM held the
    control loop 8 s). With ``strict`` (a teardown) a failure to remove the group is raised: the
    caller then keeps the run open and tries again, instead of ending a run whose group still
    holds its GPUs; a failed launch's clean-up (not strict) raises its own launch error instead."""
    import ray

    asked = []
    for actor in actors:
        try:
            asked.append(actor.terminate.remote())
        except Exception:  # noqa: BLE001 - dead: killing it below is all there is to do
            pass
    if asked:
        try:
            ray.wait(asked, num_returns=len(asked), timeout=5.0)  # dead or stuck: killing it kills the rank (PDEATHSIG)
        except Exception:  # noqa: BLE001
            pass
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001
            pass
    if pg is not None:
        try:
            ray.util.remove_placement_group(pg)
        except Exception:  # noqa: BLE001 - Ray down or the group gone: the launch's own error says what failed
            if strict:
                raise


class RayLauncher:
    """The :class:`~deepshare.runtime.ports.Launcher` on Ray: this module's functions, and the
    alive GPU nodes from ``ray.nodes()`` (:func:`~deepshare.runtime.cluster.read_cluster`, each node keeping its name),
    the fabric's levels read from the node labels ``levels`` names. A GPU node without a level's
    label is logged once (a warning: it is a domain of its own at that level). ``names``: the
    journal's run names (:attr:`~deepshare.runtime.journal.Journal.run_names`)."""

    def __init__(self, names: RunNames, levels: LabelLevels = NO_LEVELS) -> None:
        self.names = names
        self.levels = levels
        self._warned: set[tuple[str, str]] = set()
        self._node_names: dict[str, str] = {}
        """The name each alive node was given, by node id: kept while it lives (a node renamed
        when a namesake joined or left read as lost, its jobs torn down); seeded after a restart
        from the re-attached runs' placement groups (:meth:`remember`)."""
        self._naming = threading.Lock()  # the loop and the API's threads both read the cluster

    def cluster(self) -> ClusterState:
        import ray

        nodes = ray.nodes()  # outside the lock: a slow Ray holds no other reader
        with self._naming:
            state = read_cluster(nodes, levels=self.levels, known=self._node_names)
        for level, key, names in state.unlabelled():
            new = [n for n in names if (level, n) not in self._warned]
            if new:
                self._warned.update((level, n) for n in new)
                shown = ", ".join(new[:10]) + (f" and {len(new) - 10} more" if len(new) > 10 else "")
                log.warning("GPU node(s) %s have no label %s (--level %s=%s): each is a %s domain of its own, "
                            "which a gang requiring %s can use only alone", shown, key, level, key, level, level)
        return state

    def launch(self, job_id: str, attempt: int, spec: LiveJobSpec, alloc: Sequence[tuple[str, int]],
               cluster: ClusterState, settings: LaunchSettings, working_dir: str | None) -> None:
        launch(job_id, attempt, spec, alloc, cluster, settings, working_dir, names=self.names)

    def poll(self, job_id: str, attempt: int, world: int) -> RunStatus:
        return poll(job_id, attempt, world, names=self.names)

    def request_stop(self, job_id: str, attempt: int, world: int) -> None:
        request_stop(job_id, attempt, world, names=self.names)

    def exists(self, job_id: str, attempt: int, world: int) -> bool:
        return exists(job_id, attempt, world, names=self.names)

    def teardown(self, job_id: str, attempt: int, world: int) -> None:
        teardown(job_id, attempt, world, names=self.names)

    def remember(self, job_id: str, attempt: int, alloc: Sequence[tuple[str, int]]) -> None:
        """Give the nodes of a re-attached run the names its placement was journalled under:
        bundle ``i`` of its placement group was pinned to the node of ``alloc[i]``, and Ray's
        ``bundles_to_node_id`` says which node that is. Without it a restarted scheduler names
        nodes afresh: a node journalled plainly (``host``) whose namesake joined later reads as
        ``host-<8 hex>``, ``host`` is then no node, and its runs were torn down as "node lost".
        A group Ray cannot describe leaves the names as they are (logged)."""
        import ray

        try:
            table = ray.util.placement_group_table(ray.util.get_placement_group(self.names.pg(job_id, attempt)))
            ids = table.get("bundles_to_node_id") or {}
        except Exception as exc:  # noqa: BLE001 - Ray's error: the names stay as read (the run may read as lost)
            log.warning("run %d of job %s: its nodes' names could not be read from its placement group (%s)",
                        attempt, job_id, exc)
            return
        with self._naming:
            for bundle, (name, _) in enumerate(alloc):
                node_id = ids.get(bundle, ids.get(str(bundle)))
                if node_id:
                    self._node_names[str(node_id)] = name
