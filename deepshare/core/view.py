"""What a policy sees at one decision point: a read-only :class:`ClusterView` of jobs and GPUs.

Everything here is frozen: a policy can read a view but never change the simulator (or the live
cluster) behind it; ``predict`` asks the contention model what-if questions without changing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.history import JobHistory
from deepshare.core.types import Placement

if TYPE_CHECKING:  # pragma: no cover - import for annotations only
    from deepshare.core.topology import Topology
    from deepshare.core.workloads import Catalog

PredictFn = Callable[["JobView", "Placement", Sequence[tuple["JobView", "Placement"]]], "Prediction"]
"""``predict(job, placement, pending)``: what launching ``job`` at ``placement`` would do, given
that the ``pending`` launches (chosen earlier in the same decision) happen first."""


@dataclass(frozen=True, slots=True)
class JobView:
    """A queued or running job as a policy sees it at one decision point.

    ``remaining_s`` is the remaining work in seconds at the job's reference (ideal) throughput
    *as the run's information model lets a scheduler know it* (:mod:`deepshare.core.information`):
    the truth under ``exact``, a belief from the job's estimate under ``estimated``, a flat prior
    under ``unknown`` (``ClusterView.durations`` says which); SRTF and SRSF order by it.
    ``attained_gpu_s`` is GPU-seconds held so far (LAS's key). ``estimate_s`` is the job's
    estimate of its whole isolated run time (None under ``unknown``); ``user``, ``group`` and
    ``vc`` are its features when the trace or the client gives them; ``topology`` is where it
    must or should run (:class:`~deepshare.core.fabric.TopologyRequest`, ``NO_TOPOLOGY``: anywhere).
    """

    job_id: str
    model: str
    gpus: int
    submit_time: float
    remaining_s: float
    attained_gpu_s: float
    comm_class: str
    preemptions: int = 0
    placement: Placement | None = None
    ratio: float = 1.0
    last_run_s: float = 0.0
    queued_since: float = 0.0
    estimate_s: float | None = None
    user: str | None = None
    group: str | None = None
    vc: str | None = None
    topology: TopologyRequest = NO_TOPOLOGY

    @property
    def ran_s(self) -> float:
        """Seconds it has held its GPUs, over all its runs (what any cluster measures)."""
        return self.attained_gpu_s / self.gpus


@dataclass(frozen=True, slots=True)
class Prediction:
    """A contention model's what-if answer for launching one job at one placement."""

    ratio: float
    """The candidate's own throughput ratio (1.0 = no slowdown)."""
    others: Mapping[str, float] = field(default_factory=dict)
    """New ratio of every running job whose ratio would change."""
    others_loss: float = 0.0
    """Sum over running jobs of (ratio now - ratio after): throughput the launch takes from them."""

    @property
    def cost(self) -> float:
        """Throughput lost in units of whole jobs: the candidate's own loss plus the others'."""
        return (1.0 - self.ratio) + self.others_loss


class LazyJobs(Sequence[JobView]):
    """A read-only sequence of job views built on first use (most policies never look).

    ``count``, when given, answers ``len()`` without building the views (a learned policy's
    encoding counts the running jobs at every step; building hundreds of views for a count was
    most of a large simulation's time)."""

    __slots__ = ("_build", "_items", "_count", "_counted")

    def __init__(self, build: Callable[[], tuple[JobView, ...]], count: Callable[[], int] | None = None) -> None:
        self._build: Callable[[], tuple[JobView, ...]] | None = build
        self._items: tuple[JobView, ...] = ()
        self._count = count
        self._counted: int | None = None  # count()'s answer: asked at every step of a decision

    def _get(self) -> tuple[JobView, ...]:
        if self._build is not None:
            self._items, self._build = self._build(), None
        return self._items

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._get()[index]

    def __len__(self) -> int:
        if self._build is not None and self._count is not None:
            if self._counted is None:
                self._counted = self._count()
            return self._counted
        return len(self._get())

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._get())

    def __repr__(self) -> str:
        return f"LazyJobs({self._get()!r})"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Read-only snapshot of the cluster at one decision point: what every policy decides on.

    ``predict(job, placement, pending=())`` asks the contention model the policy knows what
    launching ``job`` at ``placement`` would do, without changing anything (the simulation's own
    model under ``--contention-knowledge exact``, the learned one under ``learned``: then the
    running jobs' ``ratio`` comes from it too); ``catalog`` gives isolated throughputs.
    ``queued`` is in arrival order, ``running`` in start order.
    """

    now: float
    topology: "Topology"
    catalog: "Catalog"
    free: tuple[int, ...]
    queued: Sequence[JobView]
    """A tuple, or the simulator's :class:`~deepshare.core.pending.PendingJobs` (read through its
    queue, never copied per decision; it also answers which jobs came and went since a view)."""
    running: Sequence[JobView]
    """A tuple, or a :class:`LazyJobs` the simulator fills only when a policy reads it."""
    predict: PredictFn
    future_events: bool = True
    """Whether an arrival or completion is still to come (a simulator knows; a live cluster
    assumes so). With nothing running and none to come, waiting would idle the cluster forever."""
    link_load: Mapping[str, float] = field(default_factory=dict)
    """Measured or simulated utilisation (0..1) by link name, e.g. ``node0/nic``, ``node0/pcie``,
    ``node0/gpu3/nvlink``; empty when nothing measures links (node agents fill it live; the
    simulator fills it from a ``link`` world's state under learned contention knowledge)."""
    durations: str = "exact"
    """The run's information model (:data:`~deepshare.core.information.DURATIONS`): what the
    jobs' ``remaining_s`` is (the truth only under ``exact``)."""
    history: JobHistory = field(default_factory=JobHistory)
    """Jobs that finished before now (:mod:`deepshare.core.history`); the simulator's grows as
    the run goes on, so a policy reads it at its decision, never later."""

    @property
    def total_free(self) -> int:
        return sum(self.free)

    @property
    def total_gpus(self) -> int:
        return self.topology.total_gpus

    @property
    def utilisation(self) -> float:
        return 1.0 - self.total_free / self.total_gpus
