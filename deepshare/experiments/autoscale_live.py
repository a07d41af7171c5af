"""The live local autoscaling experiment: the live scheduler on a fake autoscaling Ray cluster.

It starts a :class:`~deepshare.raycluster.fake_autoscaling.FakeAutoscalingCluster` from an
autoscaling spec (min nodes up), the live scheduler against it (in a thread of this process,
through :func:`deepshare.runtime.service.run_scheduler`, sharing this process's Ray connection),
and the :class:`~deepshare.raycluster.demand_bridge.DemandBridge`; submits a small trace of
example DDP jobs (``ddp_mlp.py``, gloo on CPU, fake GPUs; shipped in the package as
``deepshare/data/jobs/ddp_mlp.py``, a copy of ``examples/jobs/ddp_mlp.py``, and copied into the
work folder, so an installed package runs it without a checkout) at their offsets; and samples every ``poll_s`` the GPU nodes alive, the demand and the
jobs' states until every job has ended. Then it drops the demand and waits (bounded) for the
cluster to shrink back to its min nodes.

Measured: per job submit -> first start (queueing, including any scale-up) and JCT; per
scale-up, *latency* = from the moment the demand first exceeded the GPUs alive to the moment
enough GPUs were alive (Ray's autoscaler loop, the fake node's start and the node joining), taken
only when GPUs came up meanwhile; a shortage that ended as the demand fell, with no GPU added, is
counted apart (self-resolved), and so is one still open at the end (unresolved);
and the time from the last job's end to the cluster back at min nodes (idle timeout).
Everything started is stopped at the end, and only that.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable, Sequence

from deepshare.raycluster.demand_bridge import DemandBridge, ray_request
from deepshare.raycluster.fake_autoscaling import FakeAutoscalingCluster, check_node_types
from deepshare.core.atomic import write_bytes_atomic
from deepshare.core.files import resolved
from deepshare.core.autoscaling.spec import AutoscaleSpec, parse_autoscale_spec
from deepshare.core.errors import DeepShareError
from deepshare.runtime.private import check_not_shared, make_private_dirs

JOB_SCRIPT = "ddp_mlp.py"
"""The example job, package data under ``deepshare/data/jobs/`` (the same file as ``examples/jobs/ddp_mlp.py``)."""

MAX_LIVE_NODES = 16
"""Most nodes the live experiment may bring up: each fake node is a raylet and its workers on this
machine (the default spec uses 3; an autoscaling spec allows 10,000, which would start that many)."""

DEFAULT_SPEC = """
name: fake-autoscaling
idle_timeout_s: 15
node_types:
  gpu4: {gpus: 4, gpu_model: A10G, fabric: pcie, nic_gbps: 40, price_usd_per_hour: 5.672,
         min_nodes: 1, max_nodes: 3, provisioning_s: 0}
"""


@dataclass(frozen=True)
class LiveJob:
    """One job of the live trace: submitted ``at_s`` after the start."""

    name: str
    gpus: int
    at_s: float
    steps: int = 120
    model: str = "MobileNetV3"


DEFAULT_TRACE = (
    LiveJob("a", 4, 0.0), LiveJob("b", 4, 1.0), LiveJob("c", 2, 2.0), LiveJob("d", 2, 3.0),
)
"""4 + 4 + 2 + 2 GPUs on one 4-GPU node at first: two more nodes are needed."""


@dataclass(frozen=True)
class JobResult:
    job_id: str
    gpus: int
    state: str
    submit_s: float
    start_s: float | None
    finish_s: float | None
    node_names: tuple[str, ...]

    @property
    def queue_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.submit_s

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.submit_s


@dataclass(frozen=True)
class LiveReport:
    jobs: tuple[JobResult, ...]
    scale_up_latencies_s: tuple[float, ...]
    max_gpu_nodes: int
    scale_down_s: float | None
    """From the last job's end until the cluster was back at min nodes (None: not within the wait)."""
    timeline: tuple[tuple[float, int, int], ...]
    """(seconds since start, GPU nodes alive, GPUs demanded) at each change."""
    bridge_calls: int
    shortages_self_resolved: int = 0
    """Shortages that ended with no more GPUs alive than when they began (jobs ended): no latency."""
    shortages_unresolved: int = 0
    """A shortage still open at the last sample (0 or 1): no latency either."""

    def to_dict(self) -> dict[str, Any]:
        jcts = [j.jct_s for j in self.jobs if j.jct_s is not None]
        return {
            "jobs": [dict(asdict(j), queue_s=j.queue_s, jct_s=j.jct_s) for j in self.jobs],
            "finished": sum(j.state == "finished" for j in self.jobs),
            "avg_jct_s": sum(jcts) / len(jcts) if jcts else None,
            "scale_up_latencies_s": list(self.scale_up_latencies_s),
            "max_gpu_nodes": self.max_gpu_nodes,
            "scale_down_s": self.scale_down_s,
            "timeline": [list(p) for p in self.timeline],
            "bridge_calls": self.bridge_calls,
            "shortages_self_resolved": self.shortages_self_resolved,
            "shortages_unresolved": self.shortages_unresolved,
        }


@dataclass
class _Sampler:
    """Tracks GPU nodes alive and demand over time and measures scale-up latencies: a shortage
    (demand above the GPUs alive) that ends with more GPUs alive than when it began is a scale-up,
    and its duration a latency; one that ends as the demand falls, no GPU added, is not (jobs
    ended: nothing scaled) and is counted in ``self_resolved``."""

    t0: float
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    short_since: float | None = None
    short_gpus: int = 0
    """GPUs alive when the open shortage began."""
    self_resolved: int = 0

    def sample(self, now: float, gpu_nodes: int, alive_gpus: int, demand_gpus: int) -> None:
        point = (round(now - self.t0, 3), gpu_nodes, demand_gpus)
        if not self.timeline or self.timeline[-1][1:] != point[1:]:
            self.timeline.append(point)
        if demand_gpus > alive_gpus and self.short_since is None:
            self.short_since, self.short_gpus = now, alive_gpus
        elif demand_gpus <= alive_gpus and self.short_since is not None:
            if alive_gpus > self.short_gpus:
                self.latencies.append(now - self.short_since)
            else:
                self.self_resolved += 1
            self.short_since = None

    @property
    def unresolved(self) -> int:
        """1 while a shortage is open (at the end: one no scale-up or fall in demand ended)."""
        return int(self.short_since is not None)


def _gpu_nodes() -> tuple[int, int]:
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) > 0]
    return len(alive), int(sum(n["Resources"]["GPU"] for n in alive))


def _wait(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DeepShareError(f"live experiment: timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


def install_job_script(folder: Path) -> Path:
    """Copy the packaged example job into ``folder`` (created), the jobs' ``working_dir``; its path.
    The jobs then name it ``ddp_mlp:main``: the worker puts ``working_dir`` on ``PYTHONPATH``."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / JOB_SCRIPT
    write_bytes_atomic(target, files("deepshare.data").joinpath("jobs", JOB_SCRIPT).read_bytes(), "job script")  # never through a planted link
    return target


class _SchedulerThread:
    """The live scheduler (:func:`~deepshare.runtime.service.run_scheduler`) in a thread of this
    process, without signal handlers (``handle_signals=False``): :meth:`close` stops it."""

    def __init__(self, config: Any, policy: Any, log: Callable[[str], None]) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(config, policy, log), name="deepshare-live-scheduler",
                                       daemon=True)
        self.thread.start()

    def _run(self, config: Any, policy: Any, log: Callable[[str], None]) -> None:
        from deepshare.runtime.service import run_scheduler

        try:
            run_scheduler(config, policy, announce=log, stop=self.stop, handle_signals=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the waiting experiment
            self.error = exc

    def alive(self) -> bool:
        return self.thread.is_alive()

    def close(self, timeout_s: float = 30.0) -> None:
        self.stop.set()
        self.thread.join(timeout_s)


def run_live_experiment(
    workdir: str | Path,
    spec: AutoscaleSpec | None = None,
    trace: Sequence[LiveJob] = DEFAULT_TRACE,
    policy: str = "las+consolidated",
    poll_s: float = 0.25,
    timeout_s: float = 240.0,
    scale_down_wait_s: float = 60.0,
    log: Callable[[str], None] = lambda _: None,
) -> LiveReport:
    """Run the experiment in ``workdir`` (Ray temp files, journal, checkpoints, logs, the job script)."""
    import ray

    from deepshare.policies import make_policy
    from deepshare.runtime.httpclient import SchedulerClient
    from deepshare.runtime.loop import LoopConfig
    from deepshare.runtime.service import ServiceConfig
    from deepshare.runtime.spec import spec_from_json
    from deepshare.runtime.token import client_token

    if ray.is_initialized():
        raise DeepShareError("the live experiment connects to its own cluster: call ray.shutdown() first")
    spec = spec or parse_autoscale_spec(DEFAULT_SPEC, "default live spec")
    if len(spec.node_types) != 1:
        raise DeepShareError("the live experiment supports one node type (the bridge cuts jobs into its node size)")
    ((type_name, node_type),) = spec.node_types.items()
    if node_type.max_nodes > MAX_LIVE_NODES:
        raise DeepShareError(f"node_types.{type_name}.max_nodes: {node_type.max_nodes}: the live experiment runs every "
                             f"node as Ray processes on this machine; expected at most {MAX_LIVE_NODES}")
    check_node_types(spec)  # a label Ray would refuse at node start: before any folder is made
    scheduling = make_policy(policy)  # a bad name fails before Ray starts
    work = resolved(workdir)
    for folder in (work, work / "jobs", work / "ray"):  # a regular file in the way is one line, not a traceback
        try:
            make_private_dirs(folder)  # another user must not replace the job script or the autoscaling config
        except OSError as exc:
            raise DeepShareError(f"--workdir {workdir}: cannot make the folder {str(folder)!r} "
                                 f"({exc.strerror or exc})") from None
        if not folder.is_dir():
            raise DeepShareError(f"--workdir {workdir}: cannot make the folder {str(folder)!r} (something that is not "
                                 "a folder is in the way)")
        check_not_shared(folder, "--workdir", "the job script or the autoscaling config Ray loads its provider from",
                         "choose a folder of your own")
    jobs_dir = install_job_script(work / "jobs").parent
    cluster = FakeAutoscalingCluster(spec, work / "ray")
    scheduler: _SchedulerThread | None = None
    try:
        log("starting the fake autoscaling cluster")
        address = cluster.start()
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        _wait("the min nodes", lambda: _gpu_nodes()[0] >= node_type.min_nodes, 120)
        state = work / "scheduler"
        environ = dict(os.environ)  # before the scheduler takes $DEEPSHARE_SCHEDULER_TOKEN out of it
        config = ServiceConfig(state_dir=str(state), address=address, port=0, loop=LoopConfig(interval_s=0.3))
        scheduler = _SchedulerThread(config, scheduling, log)  # joins this process's Ray connection
        info = state / "scheduler.json"
        _wait("the scheduler", lambda: info.exists() or not scheduler.alive(), 90)
        if not scheduler.alive():
            raise DeepShareError(f"the scheduler stopped: {scheduler.error or 'no error'}") from scheduler.error
        client = SchedulerClient(json.loads(info.read_text())["url"], client_token(None, state, environ))
        bridge = DemandBridge(node_type.gpus, ray_request)
        t0 = time.time()
        sampler = _Sampler(t0)
        pending = sorted(trace, key=lambda j: j.at_s)
        ids: dict[str, str] = {}
        log(f"submitting {len(pending)} jobs")
        while True:
            now = time.time()
            while pending and now - t0 >= pending[0].at_s:
                j = pending.pop(0)
                body = {"name": j.name, "gpus": j.gpus, "model": j.model, "entrypoint": "ddp_mlp:main",
                        "args": ["--steps", str(j.steps), "--batch", "32", "--step-sleep", "0.02"],
                        "checkpoint_dir": str(work / "ckpt"), "working_dir": str(jobs_dir)}
                ids[client.submit(spec_from_json(body)).id] = j.name
            jobs = client.jobs(limit=100_000)
            bridge.update([(x.state, x.gpus) for x in jobs])
            nodes, gpus = _gpu_nodes()
            demand = sum(x.gpus for x in jobs if x.state in ("queued", "running"))
            sampler.sample(time.time(), nodes, gpus, demand)
            if not pending and jobs and all(x.state not in ("queued", "running") for x in jobs):
                break
            if now - t0 > timeout_s:
                raise DeepShareError(f"live experiment: jobs not done after {timeout_s:g} s; see {work}")
            time.sleep(poll_s)
        last_end = max(x.finish_time or 0.0 for x in jobs)
        results = []
        for x in jobs:
            detail = client.job(x.id)
            start = min((r.started for r in detail.runs), default=None)
            names = tuple(sorted({p.node for r in detail.runs for p in r.placement}))
            results.append(JobResult(x.id, x.gpus, x.state, x.submit_time - t0, None if start is None else start - t0,
                                     None if x.finish_time is None else x.finish_time - t0, names))
        bridge.update([])
        scale_down = None
        deadline = time.time() + scale_down_wait_s
        while time.time() < deadline:
            nodes, gpus = _gpu_nodes()
            sampler.sample(time.time(), nodes, gpus, 0)
            if nodes <= node_type.min_nodes:
                scale_down = time.time() - last_end
                break
            time.sleep(poll_s)
        return LiveReport(tuple(results), tuple(sampler.latencies), max(p[1] for p in sampler.timeline), scale_down,
                          tuple(sampler.timeline), bridge.calls, sampler.self_resolved, sampler.unresolved)
    finally:
        if scheduler is not None:
            scheduler.close()  # before Ray goes: the loop and the API stop, the journal is closed
        ray.shutdown()
        cluster.shutdown()
