"""An in-memory :class:`~deepshare.runtime.ports.Launcher` for driving the ControlLoop without Ray.

It models what the loop relies on from Ray, and nothing more:

- the cluster is a list of named GPU nodes (built with the same :func:`read_cluster` as Ray's node
  list), which a test can shrink (:meth:`FakeLauncher.remove_node`);
- a launched run holds its GPUs until it is torn down (like a placement group), whatever its
  phase; a launch that would take more GPUs than a node has left is refused the way Ray refuses
  it (``LaunchError(counts=False)``, GPUs not granted) and recorded in ``oversubscribed``;
- a test scripts a run's life: :meth:`finish`, :meth:`fail`, :meth:`lose`, :meth:`report`, and
  launch failures (:meth:`fail_launches`); a stop request ends the run STOPPED at once unless
  the test said the job ignores stops;
- every call is recorded (``launches``, ``stop_requests``, ``teardowns``) so a test can assert
  exactly what reached the cluster.

Thread-safe, because the loop launches a tick's runs from a thread pool.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Sequence

from deepshare.runtime.cluster import NAME_LABEL, ClusterState, read_cluster
from deepshare.runtime.launcher import LaunchError, LaunchSettings, RunPhase, RunStatus
from deepshare.runtime.spec import LiveJobSpec
from deepshare.runtime.worker import Report

RunKey = tuple[str, int]
"""``(job_id, attempt)``."""


@dataclass
class FakeRun:
    job_id: str
    attempt: int
    alloc: tuple[tuple[str, int], ...]
    phase: RunPhase = RunPhase.RUNNING
    report: Report | None = None
    detail: str = ""
    stop_requested: bool = False


@dataclass
class FakeLauncher:
    """``nodes``: ``{node name: GPUs}``."""

    nodes: dict[str, int]
    runs: dict[RunKey, FakeRun] = field(default_factory=dict)
    """Runs on the cluster now (launched and not torn down), finished or not."""
    launches: list[tuple[str, int, tuple[tuple[str, int], ...]]] = field(default_factory=list)
    """Every launch call, failed ones included: ``(job_id, attempt, alloc)``."""
    stop_requests: list[RunKey] = field(default_factory=list)
    teardowns: list[RunKey] = field(default_factory=list)
    remembered: list[tuple[str, int, tuple[tuple[str, int], ...]]] = field(default_factory=list)
    """Every ``remember`` call (a recovery re-attaching a run): ``(job_id, attempt, alloc)``."""
    oversubscribed: list[RunKey] = field(default_factory=list)
    """Launches refused because a node had fewer free GPUs than asked (a loop bug if ever non-empty)."""
    ignore_stop: set[str] = field(default_factory=set)
    """Jobs whose runs keep running after a stop request (they never checkpoint in time)."""
    on_launch: Callable[[str, int], None] | None = None
    """Called at the start of every launch (job_id, attempt): a test's hook to act mid-launch."""
    _launch_errors: dict[str, list[LaunchError]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the Launcher protocol -------------------------------------------------------------------
    def cluster(self) -> ClusterState:
        with self._lock:
            ray_nodes = [{"Alive": True, "NodeID": f"id-{name}", "NodeManagerAddress": "127.0.0.1",
                          "Resources": {"GPU": float(g)}, "Labels": {NAME_LABEL: name}}
                         for name, g in self.nodes.items()]
        return read_cluster(ray_nodes, "fake")

    def launch(self, job_id: str, attempt: int, spec: LiveJobSpec, alloc: Sequence[tuple[str, int]],
               cluster: ClusterState, settings: LaunchSettings, working_dir: str | None) -> None:
        if self.on_launch is not None:
            self.on_launch(job_id, attempt)
        alloc = tuple(alloc)
        with self._lock:
            self.launches.append((job_id, attempt, alloc))
            assert sum(g for _, g in alloc) == spec.gpus, (job_id, alloc, spec.gpus)
            errors = self._launch_errors.get(job_id)
            if errors:
                raise errors.pop(0)
            used = self._used()
            for name, g in alloc:
                if name not in self.nodes or used.get(name, 0) + g > self.nodes[name]:
                    self.oversubscribed.append((job_id, attempt))
                    raise LaunchError(f"GPUs {list(alloc)} not granted", counts=False)
            self.runs[(job_id, attempt)] = FakeRun(job_id, attempt, alloc)

    def poll(self, job_id: str, attempt: int, world: int) -> RunStatus:
        with self._lock:
            run = self.runs.get((job_id, attempt))
            if run is None:
                return RunStatus(RunPhase.LOST, detail="a worker actor is gone")
            return RunStatus(run.phase, run.report, run.detail)

    def request_stop(self, job_id: str, attempt: int, world: int) -> None:
        with self._lock:
            self.stop_requests.append((job_id, attempt))
            run = self.runs.get((job_id, attempt))
            if run is not None and run.phase is RunPhase.RUNNING:
                run.stop_requested = True
                if job_id not in self.ignore_stop:
                    run.phase = RunPhase.STOPPED

    def exists(self, job_id: str, attempt: int, world: int) -> bool:
        with self._lock:
            return (job_id, attempt) in self.runs

    def teardown(self, job_id: str, attempt: int, world: int) -> None:
        with self._lock:
            self.teardowns.append((job_id, attempt))
            self.runs.pop((job_id, attempt), None)

    def remember(self, job_id: str, attempt: int, alloc: Sequence[tuple[str, int]]) -> None:
        with self._lock:
            self.remembered.append((job_id, attempt, tuple(alloc)))

    # -- what a test does to the cluster -----------------------------------------------------------
    def fail_launches(self, job_id: str, *errors: LaunchError) -> None:
        """The job's next launches raise these errors, in order."""
        with self._lock:
            self._launch_errors.setdefault(job_id, []).extend(errors)

    def _current(self, job_id: str) -> FakeRun:
        found = [r for r in self.runs.values() if r.job_id == job_id]
        assert len(found) == 1, f"{job_id}: {len(found)} runs on the cluster"
        return found[0]

    def finish(self, job_id: str) -> None:
        """Every rank of the job's run exited 0."""
        with self._lock:
            self._current(job_id).phase = RunPhase.FINISHED

    def fail(self, job_id: str, detail: str) -> None:
        """A rank exited non-zero."""
        with self._lock:
            run = self._current(job_id)
            run.phase, run.detail = RunPhase.FAILED, detail

    def lose(self, job_id: str) -> None:
        """A worker died (its placement group is still there)."""
        with self._lock:
            run = self._current(job_id)
            run.phase, run.detail = RunPhase.LOST, "a worker died (RayActorError)"

    def vanish(self, job_id: str) -> None:
        """The run is gone from the cluster altogether (as after a cluster restart)."""
        with self._lock:
            run = self._current(job_id)
            del self.runs[(run.job_id, run.attempt)]

    def report(self, job_id: str, samples: float, step: int, throughput: float) -> None:
        with self._lock:
            self._current(job_id).report = Report(samples=samples, throughput=throughput, step=step, time=0.0)

    def remove_node(self, name: str) -> None:
        with self._lock:
            del self.nodes[name]

    # -- what a test reads ---------------------------------------------------------------------
    def _used(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for run in self.runs.values():
            for name, g in run.alloc:
                used[name] = used.get(name, 0) + g
        return used

    def used(self) -> dict[str, int]:
        """GPUs held per node by the runs on the cluster."""
        with self._lock:
            return self._used()

    def live(self) -> set[RunKey]:
        with self._lock:
            return set(self.runs)
