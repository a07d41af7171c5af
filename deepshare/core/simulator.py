"""Discrete-event cluster simulator.

Jobs arrive at their trace timestamps and wait in a queue. At every *decision point* the
policy gets a :class:`ClusterView` and answers a :class:`Decision`; a decision point is any
event time (arrival, completion, periodic round tick) at which at least one job is queued.
A running job progresses at ``isolated_throughput(placement) x ratio``, where the contention
model re-rates every job whose set of co-located jobs changed; it finishes at its exact time,
never at a round boundary. A preempted job restarts later after ``preempt_overhead_s`` of
restore time during which it holds its GPUs without progress; a migrated job pays
``migrate_overhead_s`` the same way. Infeasible decisions raise :class:`InfeasibleDecision`.

Batch use: ``Simulator(...).run(policy)``. Step use (the RL env): ``view = sim.advance()``
until it returns ``None``, calling ``sim.apply(decision)`` after each view.

Dynamic clusters (the simulated autoscaler, ``deepshare/core/autoscaling/``): pass a
:class:`ClusterControl`. The topology then holds every node that could ever exist; a node
that is not *up* has no free GPUs, so no policy can place there, and the policies' view shows
it with zero GPUs (``view.total_gpus`` and ``view.utilisation`` count up nodes only). The
control turns nodes up and down (:meth:`Simulator.set_node_up`, idle nodes only) and sets
timers (:meth:`Simulator.schedule`, TIMER events) that the event loop hands back to it; it
hears about every change (:meth:`ClusterControl.on_change`); the bookkeeping of nodes and
timers is :class:`~deepshare.core.nodepool.SimNodePool`'s. Timers left when the last job
finishes still run, so nodes can idle out after the trace. ``report()``'s ``gpu_util`` still divides by every
node of the topology; the autoscaling report replaces it by busy / billed GPU-hours. Without a
control nothing of this happens.
"""

from __future__ import annotations

import heapq
import logging
import math
import weakref
from dataclasses import dataclass, replace
from enum import Enum
from itertools import islice
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Protocol, Sequence

from deepshare.core.contention import ContentionModel
from deepshare.core.contention.base import predictor, RunningJob
from deepshare.core.events import EventKind, EventQueue
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.feasibility import check_decision
from deepshare.core.history import FinishedJob, JobHistory
from deepshare.core.information import ESTIMATE_FLOOR_S, EXACT, UNKNOWN_PRIOR_S, InformationModel, estimate_of
from deepshare.core.metrics import JobRecord, MetricsReport, ReportColumns, UtilTimeline, report_from_columns
from deepshare.core.nodepool import SimNodePool
from deepshare.core.pending import PendingJobs, QueueLog
from deepshare.core.topology import Topology
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Decision, JobSpec, Placement
from deepshare.core.view import DEFAULT_MOVE_S, DEFAULT_RESTORE_S, ClusterView, JobView, LazyJobs, PredictFn

if TYPE_CHECKING:  # the learner is imported only by runs that learn contention
    from deepshare.core.knowledge import SimulatedKnowledge
from deepshare.core.workloads import Catalog, check_sample_work, default_catalog


log = logging.getLogger(__name__)

_LEAST_WORK_S = 1e-9
"""Work given to a known job whose remaining time reads 0 in a view (a job spec needs some)."""


def _lazy_loads(read: Callable[[], dict[str, float]]) -> Mapping[str, float]:
    """``view.link_load`` read from the world on first use (learned contention only)."""
    from deepshare.core.knowledge import LazyLoads

    return LazyLoads(read)


def _next_round(now: float, round_s: float) -> float:
    """The first periodic round after ``now`` in a run whose rounds fall every ``round_s`` from 0.

    A run's rounds are sums (each the previous plus ``round_s``), so a round can fall an ulp off
    k x ``round_s``: a view taken at a round (within a relative 1e-9 of one) goes on from its own
    time, exactly as the run does, instead of scheduling that round again an ulp later."""
    k = round(now / round_s)
    if k >= 1 and abs(now - k * round_s) <= 1e-9 * now:
        return now + round_s
    return (math.floor(now / round_s) + 1) * round_s


class PolicyLike(Protocol):
    name: str

    def decide(self, view: ClusterView) -> Decision: ...


class ClusterControl(Protocol):
    """Adds and removes nodes during a run (the simulated autoscaler); see the module docstring."""

    def attach(self, sim: "Simulator") -> None:
        """Called once by the simulator's constructor: bring the initial nodes up, keep ``sim``."""

    def on_timer(self, token: int) -> None:
        """A timer set with :meth:`Simulator.schedule` is due (``sim.now`` is its time)."""

    def on_change(self) -> None:
        """Events at ``sim.now`` were processed or a decision applied: allocations may differ.

        A control may also define ``most_gpus() -> int``, the most GPUs its nodes can ever hold
        up at once (fewer than the topology's when a cap such as ``max_workers`` binds): a job
        asking more is rejected on arrival rather than left queued for ever; and
        ``refusals(specs) -> {trace position: reason}``, jobs of the trace its nodes can never
        hold for another reason (a topology request no domain can meet under its caps): they are
        rejected on arrival with that reason, unless the simulator already refuses them."""


class SimulationStalled(DeepShareError):
    """The policy keeps jobs queued on an idle cluster with nothing left to happen."""


@dataclass(frozen=True)
class SimConfig:
    """Simulation knobs; every field has a default and a one-line meaning."""

    round_s: float | None = None
    """Period of extra decision points (the original used 300 s); None = events only."""
    preempt_overhead_s: float = DEFAULT_RESTORE_S
    """Restore-from-checkpoint time a preempted job pays when it restarts (no progress); the
    views show it as :attr:`~deepshare.core.view.ClusterView.restore_s`, what preemptive policies
    cost a stop at."""
    migrate_overhead_s: float = DEFAULT_MOVE_S
    """Checkpoint + restore time a migrated job pays at its new placement (no progress); the views
    show it as :attr:`~deepshare.core.view.ClusterView.move_s`, what ``+migrate`` costs a move at."""
    start_overhead_s: float = 0.0
    """Start-up time of a job's first launch (no progress)."""

    def __post_init__(self) -> None:
        if self.round_s is not None and not 0 < self.round_s < math.inf:
            raise DeepShareError(f"round_s must be a positive, finite number of seconds, got {self.round_s}")
        for name in ("preempt_overhead_s", "migrate_overhead_s", "start_overhead_s"):
            if not 0 <= getattr(self, name) < math.inf:
                raise DeepShareError(f"{name} must be a finite number of seconds >= 0, got {getattr(self, name)}")


class SimJobState(Enum):
    """Where a simulated job is (not the live scheduler's ``deepshare.runtime.journal.JobState``)."""

    PENDING = "pending"
    """Built at arrival, not yet queued or rejected."""
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    REJECTED = "rejected"
    """Asks for more GPUs than the cluster has, or a topology the cluster can never give: never runs."""


class _Placements(Mapping[str, Placement]):
    """Running jobs' placements, read through (no copy at every decision)."""

    def __init__(self, jobs: "dict[str, _Job]") -> None:
        self._jobs = jobs

    def __getitem__(self, job_id: str) -> Placement:
        placement = self._jobs[job_id].placement
        assert placement is not None
        return placement

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)


class _Sizes(Mapping[str, int]):
    """Queued jobs' GPU counts, read through."""

    def __init__(self, jobs: "dict[str, _Job]") -> None:
        self._jobs = jobs

    def __getitem__(self, job_id: str) -> int:
        return self._jobs[job_id].spec.gpus

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)


class _Requests:
    """The topology requests of the queued and running jobs that ask one, read through (for the
    feasibility check; ``get`` is all it asks)."""

    def __init__(self, *jobs: "dict[str, _Job]") -> None:
        self._jobs = jobs

    def get(self, job_id: str) -> TopologyRequest | None:
        for jobs in self._jobs:
            job = jobs.get(job_id)
            if job is not None:
                request = job.spec.topology
                return None if request is NO_TOPOLOGY or request.empty else request
        return None


class _Job:
    """Mutable per-job simulation state (private to the simulator)."""

    __slots__ = (
        "spec", "comm_class", "ref_thp", "work", "remaining", "state", "placement", "iso_rate",
        "ratio", "rate", "last_update", "stall_until", "version", "attained", "first_start",
        "finish", "preemptions", "migrations", "prod_time", "ratio_area", "queued_since",
        "run_start", "last_run_s", "needs_restore", "index", "estimate", "belief", "last_placement", "spans",
    )

    def __init__(self, spec: JobSpec, catalog: Catalog, index: int, information: InformationModel = EXACT,
                 error: float | None = 1.0) -> None:
        """``error``: the job's drawn estimate error (None: nothing is estimated, ``unknown``)."""
        self.spec = spec
        self.index = index
        self.comm_class = catalog.class_of(spec.model)
        self.ref_thp = catalog.reference_throughput(spec.model, spec.gpus)
        self.work = spec.total_samples if spec.total_samples is not None else spec.duration_s * self.ref_thp
        self.remaining = self.work
        self.estimate = None if error is None else estimate_of(spec, self.work / self.ref_thp, error)
        """The estimate of its isolated run time its views show (None: none is known)."""
        self.belief: float | None = (
            None if information.exact else UNKNOWN_PRIOR_S if self.estimate is None else self.estimate
        )
        """The run time its views' ``remaining_s`` counts down from; None: the true remaining work."""
        self.state = SimJobState.PENDING
        self.placement: Placement | None = None
        self.iso_rate = self.ratio = self.rate = 0.0
        self.last_update = self.stall_until = 0.0
        self.version = 0
        self.attained = 0.0
        self.first_start: float | None = None
        self.finish: float | None = None
        self.preemptions = self.migrations = 0
        self.prod_time = self.ratio_area = 0.0
        self.queued_since = spec.submit_time
        self.run_start = 0.0
        self.last_run_s = 0.0
        self.needs_restore = False
        self.last_placement: Placement | None = None
        """Where it runs or last ran (None: it never ran)."""
        self.spans: tuple[int, ...] = ()
        """How many domains of each fabric level ``last_placement`` spans (set by the simulator)."""

    def sync(self, t: float) -> None:
        """Account progress, service and contention exposure up to time ``t``."""
        start = self.last_update if self.last_update > self.stall_until else self.stall_until
        if t > start:
            productive = t - start
            self.remaining -= self.rate * productive
            self.prod_time += productive
            self.ratio_area += self.ratio * productive
        self.attained += self.spec.gpus * (t - self.last_update)
        self.last_update = t

    def record(self, rejected: bool, node_names: Sequence[str] = ()) -> JobRecord:
        spec = self.spec
        last = self.last_placement
        return JobRecord(
            job_id=spec.job_id,
            model=spec.model,
            gpus=spec.gpus,
            submit_s=spec.submit_time,
            first_start_s=self.first_start,
            finish_s=self.finish,
            gpu_time_s=self.attained,
            productive_s=self.prod_time,
            mean_ratio=(self.ratio_area / self.prod_time) if self.prod_time > 0 else 1.0,
            preemptions=self.preemptions,
            migrations=self.migrations,
            rejected=rejected,
            placement="" if last is None or not node_names else ";".join([node_names[n] for n in last.nodes]),
            domains=self.spans,
        )

    def make_view(self, now: float) -> JobView:
        # Positional, in JobView's field order (keywords cost about a third more per view; every
        # queued job gets one, and a policy that reads the running jobs gets one per running job).
        spec = self.spec
        running = self.state is SimJobState.RUNNING
        belief = self.belief
        if belief is None:  # exact: the truth
            remaining = self.remaining
            remaining = (remaining if remaining > 0.0 else 0.0) / self.ref_thp  # max(0.0, remaining)
        else:  # believed_remaining_s(estimate, ran), inlined
            remaining = belief - self.attained / spec.gpus
            if remaining < ESTIMATE_FLOOR_S:
                remaining = ESTIMATE_FLOOR_S
        return JobView(
            spec.job_id,
            spec.model,
            spec.gpus,
            spec.submit_time,
            remaining,
            self.attained,
            self.comm_class,
            self.preemptions,
            self.placement,
            self.ratio if running else 1.0,
            now - self.run_start if running else self.last_run_s,
            self.queued_since,
            self.estimate,
            spec.user,
            spec.group,
            spec.vc,
            spec.topology,
            spec.queue,
            spec.priority,
        )

    def finished(self) -> FinishedJob:
        """Its record in the history, as a scheduler would keep it."""
        spec = self.spec
        run_s = self.attained / spec.gpus
        return FinishedJob(spec.job_id, spec.model, spec.gpus, run_s if run_s > 1e-6 else 1e-6, self.finish or 0.0,
                           spec.user, spec.group, spec.vc, self.estimate)


@dataclass(frozen=True)
class ResumePoint:
    """The state a :class:`Simulator` goes on from instead of an empty cluster at t = 0
    (``Simulator(..., resume=...)``; :meth:`Simulator.from_view` builds one from a policy's view).

    Restored, at ``now``: the clock; each running job on its placement, with the work its
    ``remaining_s`` says, its attained GPU-seconds and preemptions, and its current run started
    ``last_run_s`` ago (its first start too, which a view does not show); each queued job queued
    since its ``queued_since``, with its attained service, preemptions and last run, restoring
    from a checkpoint when it starts if it was preempted before; ``free`` GPUs per node: GPUs its
    running jobs do not account for are held by work the state does not show, and stay held; the
    next periodic round in the phase of a run that started at t = 0. A job submitted after
    ``now`` (by a clock that runs ahead) counts as submitted at ``now``.

    Not restored: finished jobs (the history given to the simulator carries those), a running
    job's restore still under way (it goes on at once), GPU time before ``now`` (approximated by
    the attained service), estimate errors (the resumed run is ``exact`` on ``remaining_s``)."""

    now: float
    running: tuple[JobView, ...]
    """Jobs running at ``now`` (``placement`` set)."""
    queued: tuple[JobView, ...]
    """Jobs queued at ``now``, in queue order."""
    free: tuple[int, ...]
    """Free GPUs per node of the topology at ``now``."""

    @classmethod
    def of_view(cls, view: ClusterView) -> "ResumePoint":
        """The state ``view`` shows (reading its running jobs brings their progress to ``view.now``)."""
        return cls(view.now, tuple(view.running), tuple(view.queued), tuple(view.free))

    @property
    def jobs(self) -> tuple[JobView, ...]:
        """Running jobs, then queued ones: the first trace positions of the resumed simulator."""
        return (*self.running, *self.queued)

    def specs(self) -> list[JobSpec]:
        """The jobs as trace entries (the work each has left as its duration)."""
        return [JobSpec(v.job_id, v.model, v.gpus, min(v.submit_time, self.now),
                        duration_s=max(v.remaining_s, _LEAST_WORK_S), user=v.user, group=v.group, vc=v.vc,
                        requested_s=v.estimate_s, topology=v.topology, queue=v.queue, priority=v.priority)
                for v in self.jobs]


class Simulator:
    def __init__(
        self,
        topology: Topology,
        jobs: Sequence[JobSpec],
        contention: ContentionModel,
        catalog: Catalog | None = None,
        config: SimConfig = SimConfig(),
        control: ClusterControl | None = None,
        *,
        keep_records: bool = True,
        on_record: Callable[[int, JobRecord], None] | None = None,
        information: InformationModel = EXACT,
        history: JobHistory | None = None,
        prior: ContentionModel | None = None,
        resume: ResumePoint | None = None,
    ) -> None:
        """``information``: what the policies' views carry of job lengths and of contention
        (:mod:`deepshare.core.information`; the library's default is ``exact``). ``history``:
        jobs that finished before the trace (copied; the run's finished jobs are added to the
        copy, which views show as ``history``). ``prior``: under ``learned`` contention, the
        model the scheduler starts from (default: :func:`~deepshare.core.contention.world.shipped_of`
        ``contention``); the views' predictions and running ratios then come from it as
        corrected by the run's reports (:mod:`deepshare.core.knowledge`), never from
        ``contention``, which only rates the jobs.

        ``resume``: go on from that state (:class:`ResumePoint`, which says what is restored)
        instead of an empty cluster at t = 0; its jobs take the first trace positions and
        ``jobs`` are those submitted after ``resume.now``.

        A job's state is dropped when it finishes or is rejected: its result goes into NumPy
        columns (what :meth:`report` needs), into a :class:`JobRecord` kept for the report's
        ``records`` unless ``keep_records`` is False (a million-job run keeps columns only), and
        to ``on_record(trace_position, record)`` when given (the streamed ``--jobs-csv``)."""
        self.topology = topology
        self._queue_log = QueueLog()
        self._pending: weakref.ref[PendingJobs] | None = None
        self._node_names = [node.name for node in topology.nodes]
        self.catalog = catalog or default_catalog()
        self.config = config
        self.information = information
        self.history = JobHistory() if history is None else history.copy()
        """Jobs that finished: the past ones given, then this run's, in completion order."""
        self.contention = contention
        self._state = contention.new_state(topology, self.catalog)
        if resume is not None:
            late = [spec.job_id for spec in jobs if not spec.submit_time > resume.now]
            if late:
                raise DeepShareError(f"future jobs must be submitted after the view's time {resume.now}: {late[:5]}")
        self._specs: tuple[JobSpec, ...] = tuple(jobs) if resume is None else (*resume.specs(), *jobs)
        seen: set[str] = set()
        for spec in self._specs:
            if spec.job_id in seen:
                raise DeepShareError(f"duplicate job id {spec.job_id!r}")
            seen.add(spec.job_id)
        del seen
        for model in dict.fromkeys(spec.model for spec in self._specs):
            self.catalog.resolve(model)  # unknown models are reported now, in trace order
        check_sample_work(self._specs, self.catalog)
        self._refused: dict[int, str] = _refused_requests(topology, self._specs)
        """Why a job's topology request can never be met here, by trace position (rejected on arrival)."""
        self.rejections: dict[str, str] = {}
        """Why each job rejected so far was (job id -> reason), in arrival order."""
        self._jobs: dict[str, _Job] = {}  # jobs that arrived and did not finish (state built at arrival)
        self._total_jobs = len(self._specs)
        factors = information.error_factors(self._total_jobs)
        self._errors: list[float] | list[None] = [None] * self._total_jobs if factors is None else factors.tolist()
        """Each job's drawn estimate error, by trace position (None: nothing is estimated)."""
        self._columns = ReportColumns(self._total_jobs)
        for i, spec in enumerate(self._specs):  # rows of jobs that have not arrived yet
            self._columns.submit[i] = spec.submit_time
            self._columns.gpus[i] = spec.gpus
        self._records: list[JobRecord | None] | None = [None] * self._total_jobs if keep_records else None
        self._on_record = on_record
        self._record_names = self._node_names if keep_records or on_record is not None else ()
        """Node names for the records' ``placement`` (none when no record is kept or streamed)."""
        self._free = list(topology.capacity)
        self._queue: dict[str, _Job] = {}
        self._queued_views: dict[str, JobView] = {}  # same keys and order as _queue
        self._running: dict[str, _Job] = {}
        self._events = EventQueue([spec.submit_time for spec in self._specs])
        self._live_events = self._total_jobs  # arrivals + valid completions still to come
        self._unfinished = self._total_jobs
        self.now = 0.0
        self._busy = 0
        self._busy_area = 0.0
        self._system_area = 0.0
        self._last_t = 0.0
        self._signal: list[tuple[float, float, int, float]] | None = None  # track_signal(): off unless asked
        self.util_timeline = UtilTimeline()
        """(time, allocated GPUs) at every change: the utilisation-over-time curve."""
        # Fabric and gang metrics (deepshare.core.metrics): the queued jobs' GPU counts as a
        # multiset (count per size, and a heap of the sizes with lazy deletion) for the smallest
        # one, the fragmentation integral, and per fabric level the GPU-seconds of finished runs
        # whose placement spanned more than one of its domains.
        fabric = topology.fabric
        self._level_names = tuple(level.name for level in fabric.levels)
        self._lowest_domain = [row[0] for row in fabric.node_domains]
        self._domain_row = {row[0]: row for row in fabric.node_domains}
        """A lowest-level domain's row of domains at every level (the same for all its nodes)."""
        self._one_domain = (1,) * len(self._level_names)
        self._cross_gpu_s = [0.0] * len(self._level_names)
        self._waiting: dict[int, int] = {}
        self._waiting_sizes: list[int] = []
        self._frag_area = 0.0
        self._total_gpus = topology.total_gpus
        self._held_elsewhere = 0
        """GPUs a resumed state's free counts showed as held by work it does not list (:class:`ResumePoint`)."""
        self.decisions = 0
        self.events_processed = 0
        self._awaiting_decision = False
        self._decide_now = False
        """A decision is due now, before any event (a resumed run's first)."""
        if config.round_s is not None and self._specs and resume is None:
            self._events.push(config.round_s, EventKind.ROUND)
        self.knowledge: SimulatedKnowledge | None = None
        """Under learned contention: the learned model, its reports and its error log."""
        self._link_loads = None
        if information.learns_contention:  # imported here: an exact run never loads the learner
            from deepshare.core.contention.world import shipped_of
            from deepshare.core.knowledge import SimulatedKnowledge, world_loads

            self.knowledge = SimulatedKnowledge(prior or shipped_of(contention), topology, self.catalog, information)
            self._link_loads = world_loads(self._state)
        self._predict: PredictFn = predictor(self._state if self.knowledge is None else self.knowledge.state)
        self._control = control
        self._nodes = SimNodePool(topology, self._free, self._events, control)
        if control is not None:
            control.attach(self)
        limit = getattr(control, "most_gpus", None)  # asked once its initial nodes are up
        self._most_gpus = self.topology.total_gpus if limit is None else limit()
        refusals = getattr(control, "refusals", None)
        if refusals is not None:
            for index, why in refusals(self._specs).items():
                self._refused.setdefault(index, why)  # the simulator's own reason first
        if resume is not None:
            self._restore(resume)

    def _restore(self, resume: ResumePoint) -> None:
        """Set up ``resume``'s jobs (trace positions ``0 .. len(resume.jobs) - 1``) as its state has them."""
        now, known = resume.now, resume.jobs
        if self.config.round_s is not None:  # the first round after now, in the original's phase
            self._events.push(_next_round(now, self.config.round_s), EventKind.ROUND)
        self._events.skip_arrivals(len(known))  # submitted by now: they sort first, and are set up here
        self._live_events -= len(known)
        self.now = self._last_t = now
        changed: set[str] = set()
        for index, v in enumerate(known):
            job = self._jobs[v.job_id] = _Job(self._specs[index], self.catalog, index)
            job.attained, job.preemptions = v.attained_gpu_s, v.preemptions
            if v.placement is not None:  # running
                changed |= self._start(job, v.placement, now, 0.0)
                job.first_start = job.run_start = now - v.last_run_s
                changed.add(v.job_id)
            else:
                job.needs_restore = v.preemptions > 0
                job.first_start = v.queued_since if v.preemptions else None
                job.last_run_s = v.last_run_s  # a preempted job's last run (dlas's starvation guard reads it)
                self._enqueue(job, v.queued_since)
        self._rerate(changed, now)
        for node, free in enumerate(resume.free):  # GPUs held by work the state does not show stay held
            if free > self._free[node]:
                raise DeepShareError(f"node {node}: the view has {free} GPUs free, its running jobs leave {self._free[node]}")
            self._held_elsewhere += self._free[node] - free
            self._free[node] = free
        self._decide_now = True  # the first advance() asks for the decision at now, as the view did

    @classmethod
    def from_view(
        cls, view: ClusterView, contention: ContentionModel, config: SimConfig | None = None,
        future: Sequence[JobSpec] = (),
    ) -> "Simulator":
        """A simulator that goes on from ``view``: its running jobs on their placements with the
        work they have left, its queued jobs queued since when they were, and ``future`` (jobs
        submitted after ``view.now``) arriving as usual. For what-if questions on the state a
        policy sees: a look-ahead applies a decision to a copy and simulates what follows. The
        copy runs ``exact`` on the view's ``remaining_s``: under ``estimated`` or ``unknown``
        that is the policy's belief, so the what-if simulates what the policy believes; it goes on
        from a copy of the view's history, and known jobs keep their estimates and features.

        Its first :meth:`advance` returns the decision point at ``view.now`` (when jobs are
        queued), so a what-if can try a decision there; periodic rounds keep the original's
        phase. JCTs in its report count from each job's own submit time; jobs that had finished
        are not in it. What a view does not show is not carried over: a running job still
        restoring from a checkpoint goes on at once, GPUs a live view shows as taken by work it
        does not list stay taken, and first starts and GPU time before
        ``view.now`` are approximate (the current run's start; the attained service). Remaining
        work comes through seconds, so event times may differ from the original's in the last
        bit: events that coincide exactly there may be decided one after the other here. Reading
        the view's running jobs (as this does) brings their progress to ``view.now`` in the
        original too, as a policy that reads them does: if the original's policy never reads
        them, its later event times can move in the last bit.

        ``config`` defaults to the simulator's with the view's ``restore_s`` and ``move_s`` as its
        ``preempt_overhead_s`` and ``migrate_overhead_s``: the copy restores a preempted or moved
        job as the view says this run does."""
        if config is None:
            config = SimConfig(preempt_overhead_s=view.restore_s, migrate_overhead_s=view.move_s)
        return cls(view.topology, future, contention, view.catalog, config, history=view.history,
                   resume=ResumePoint.of_view(view))

    # -- dynamic clusters (used by a ClusterControl) -----------------------------------------
    @property
    def free(self) -> tuple[int, ...]:
        """Free GPUs per node now (0 on nodes that are not up)."""
        return tuple(self._free)

    @property
    def up(self) -> tuple[bool, ...]:
        """Whether each node is up (always all True without a control)."""
        return self._nodes.up

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    @property
    def busy_gpus(self) -> int:
        return self._busy

    def job_ids(self) -> tuple[frozenset[str], frozenset[str]]:
        """The ids of the jobs queued and of those running now (a control's view of the demand)."""
        return frozenset(self._queue), frozenset(self._running)

    def set_node_up(self, node: int, up: bool) -> None:
        """Bring node ``node`` up (its GPUs become free) or take it down (it must be idle)."""
        self._nodes.set_up(node, up)

    def schedule(self, time: float, token: int, keeps_alive: bool = False) -> None:
        """Hand ``token`` to the control's ``on_timer`` at ``time`` (>= now). A timer that
        ``keeps_alive`` (a node being provisioned) counts as a future event: waiting for it
        never stalls the simulation."""
        self._nodes.schedule(time, token, keeps_alive, self.now)

    @property
    def _future_events(self) -> bool:
        """An arrival, valid completion or keep-alive timer is still to come."""
        return self._live_events > 0 or self._nodes.live_timers > 0

    def _drain_control(self) -> None:
        """After the last job: run the control's remaining timers (nodes idling out)."""
        assert self._control is not None
        while self._events:
            t, kind, _, token = self._events.pop()
            if kind is EventKind.TIMER:
                self.now = t
                self.events_processed += 1
                self._nodes.fire(token)
                self._control.on_change()

    # -- public API --------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._unfinished == 0

    @property
    def idle_forever(self) -> bool:
        """Nothing runs and no arrival or completion is to come: waiting now would stall."""
        return not self._running and not self._future_events

    def track_signal(self) -> None:
        """Record, from now on, every stretch of time accounted as ``(start, end, allocated GPUs,
        mean(1 - ratio) of the running jobs)`` (0 with none running), the values that held over
        it, for :meth:`take_signal`: what the RL env's ``original`` reward integrates
        (:mod:`deepshare.rl.env`). Off by default: the mean costs a pass over the running jobs."""
        self._signal = []

    def take_signal(self) -> list[tuple[float, float, int, float]]:
        """The stretches recorded since the last call (:meth:`track_signal`), oldest first."""
        taken, self._signal = self._signal or [], [] if self._signal is not None else None
        return taken

    @property
    def jobs_in_system_area(self) -> float:
        """Integral of (queued + running jobs) over time up to the last event: sum of JCTs so far."""
        return self._system_area

    def run(self, policy: PolicyLike, progress: Callable[[int, int], None] | None = None) -> MetricsReport:
        """Simulate to the end under ``policy`` and return the report."""
        total = self._total_jobs
        view = self.advance()
        while view is not None:
            decision = policy.decide(view)
            view = None  # dropped before apply(): the queue then changes without copying it
            self.apply(decision)
            if progress is not None:
                progress(total - self._unfinished, total)
            view = self.advance()
        if progress is not None:
            progress(total, total)
        return self.report(policy.name)

    def advance(self) -> ClusterView | None:
        """Process events up to the next decision point; its view, or None when all is done."""
        if self._awaiting_decision:
            raise DeepShareError("advance() called twice without apply()")
        if self._decide_now:
            self._decide_now = False
            if self._queue:
                self._awaiting_decision = True
                return self.view()
        while self._events:
            t = self._events.peek_time()
            assert t is not None
            if self._process_events_at(t) and self._queue:
                self._awaiting_decision = True
                return self.view()
            if self.done:
                break
        self._account_busy(self.now)
        if self._control is not None:
            self._drain_control()
        return None

    def apply(self, decision: Decision) -> None:
        """Validate and carry out ``decision`` at the current time (all or nothing)."""
        self._validate(decision)  # raises before anything changes (all or nothing)
        self._awaiting_decision = False
        self.decisions += 1
        t = self.now
        changed: set[str] = set()
        for job_id in decision.preempt:
            changed |= self._stop(self._running[job_id], t)
            job = self._jobs[job_id]
            job.preemptions += 1
            job.needs_restore = True
            self._enqueue(job, t)
        moves = [(job, m.placement, job.stall_until - t)  # the restore time still owed: a move never shortens it
                 for m in decision.migrate for job in (self._running[m.job_id],)]
        for job, _, _ in moves:
            changed |= self._stop(job, t)
        for job, placement, owed in moves:
            job.migrations += 1
            changed |= self._start(job, placement, t, max(self.config.migrate_overhead_s, owed))
        for launch in decision.launch:
            job = self._queue.pop(launch.job_id)
            gpus = job.spec.gpus
            waiting = self._waiting[gpus] - 1
            if waiting:
                self._waiting[gpus] = waiting
            else:  # its size stays in the heap until it is the smallest
                del self._waiting[gpus]
            self._release_pending()
            self._queue_log.remove(self._queued_views.pop(launch.job_id))
            overhead = self.config.preempt_overhead_s if job.needs_restore else self.config.start_overhead_s
            job.needs_restore = False
            if job.first_start is None:
                job.first_start = t
            changed |= self._start(job, launch.placement, t, overhead)
        self._rerate(changed, t)
        if self._control is not None:
            self._control.on_change()
        if self._queue and self.idle_forever:
            named = ", ".join(f"{job_id!r} ({job.spec.gpus} GPUs)" for job_id, job in islice(self._queue.items(), 5))
            more = f" and {len(self._queue) - 5} more" if len(self._queue) > 5 else ""
            raise SimulationStalled(
                f"at t={t:.1f}s the policy left {len(self._queue)} job(s) queued on an idle cluster "
                f"with no arrivals or completions to come: {named}{more}"
            )

    def view(self) -> ClusterView:
        t = self.now
        self._queue_log.trim()
        queued = self._queued_view()
        return ClusterView(
            now=t,
            topology=self._nodes.view_topology,
            catalog=self.catalog,
            free=tuple(self._free),
            queued=queued,  # type: ignore[arg-type]
            running=LazyJobs(lambda: self._running_views(t), lambda: self._running_count(t)),
            future_events=True,  # as a live cluster assumes: whether an arrival is to come is hidden
            predict=self._predict,
            durations=self.information.durations,
            history=self.history,
            restore_s=self.config.preempt_overhead_s,
            move_s=self.config.migrate_overhead_s,
            **({} if self._link_loads is None else {"link_load": _lazy_loads(self._link_loads)}),
        )

    def _queued_view(self) -> Sequence[JobView]:
        """The queue a view shows: a :class:`PendingJobs` read through the queue, no copy
        (:class:`~deepshare.core.reference.ReferenceSimulator` copies it, to test that this decides the same)."""
        self._release_pending()
        pending = PendingJobs(self._queued_views, self._queue_log)
        self._pending = weakref.ref(pending)
        return pending

    def _release_pending(self) -> None:
        """Before the queue changes: a view still held keeps the queue it showed (a copy)."""
        if self._pending is not None:
            pending = self._pending()
            if pending is not None:
                pending.freeze()
            self._pending = None

    def _running_views(self, t: float) -> tuple[JobView, ...]:
        if t != self.now:
            raise DeepShareError("a ClusterView's running jobs were read after the simulation moved on")
        views = []
        for job in self._running.values():
            job.sync(t)
            views.append(job.make_view(t))
        if self.knowledge is not None:  # what the learned model says, never the world's ratio
            ratio = self.knowledge.ratio
            views = [replace(view, ratio=ratio(view.job_id)) for view in views]
        return tuple(views)

    def _running_count(self, t: float) -> int:
        """How many jobs run, with their progress brought to ``t`` exactly as building their
        views does: accounting progress in more pieces rounds differently, so counting must
        leave the simulation on the same floating-point path as reading the views."""
        if t != self.now:
            raise DeepShareError("a ClusterView's running jobs were read after the simulation moved on")
        for job in self._running.values():
            job.sync(t)
        return len(self._running)

    def report(self, policy_name: str = "") -> MetricsReport:
        """The run's metrics so far (jobs not finished yet count as unfinished)."""
        cols, records = self._columns, self._records
        if self._unfinished:  # mid-run: the live jobs' rows, on copies
            cols = cols.copy()
            records = None if records is None else list(records)
            for job in self._jobs.values():
                record = job.record(False, self._node_names)
                cols.set(job.index, record)
                if records is not None:
                    records[job.index] = record
            if records is not None:  # jobs that have not arrived: their initial record
                for i, record in enumerate(records):
                    if record is None:
                        spec = self._specs[i]
                        records[i] = JobRecord(spec.job_id, spec.model, spec.gpus, spec.submit_time,
                                               None, None, 0.0, 0.0, 1.0, 0, 0, False)
        cross = list(self._cross_gpu_s)
        for job in self._running.values():  # runs going on: their GPU-seconds up to the last event
            self._add_cross(cross, job, self._last_t)
        return report_from_columns(
            cols,
            total_gpus=self.topology.total_gpus,
            busy_gpu_s=self._busy_area,
            policy=policy_name,
            decisions=self.decisions,
            events=self.events_processed,
            records=() if records is None else tuple(records),  # type: ignore[arg-type]
            fragmentation_gpu_s=self._frag_area,
            cross_domain_gpu_s=tuple(zip(self._level_names, cross)),
        )

    def _retire(self, job: _Job, rejected: bool) -> None:
        """A finished or rejected job: its result into the columns, its state dropped."""
        record = job.record(rejected, self._record_names)
        self._columns.set(job.index, record)
        if self._records is not None:
            self._records[job.index] = record
        if self._on_record is not None:
            self._on_record(job.index, record)
        del self._jobs[job.spec.job_id]

    # -- events ------------------------------------------------------------------------------
    def _process_events_at(self, t: float) -> bool:
        """Pop every event at time ``t``; True when one of them was live (not a stale completion).

        Under learned contention the reports due by ``t`` are taken at the first live event, at the
        rates that held until ``t`` (a stale completion changes none): a stale completion's time
        comes from a job's true remaining work, and taking reports there too split them into
        other batches, so other noise draws, and the learned model told that truth apart."""
        self._account_busy(t)
        self.now = t
        live = False
        while self._events and self._events.peek_time() == t:
            _, kind, job_id, version = self._events.pop()
            if kind is EventKind.COMPLETION:
                job = self._jobs.get(job_id)
                if job is None or job.state is not SimJobState.RUNNING or job.version != version:
                    continue  # superseded by a re-rate, preemption or migration
            if not live and self.knowledge is not None:
                self.knowledge.report_until(t, ((j.spec.job_id, j.spec.model, j.ratio, max(j.run_start, j.stall_until))
                                                for j in self._running.values()))
            live = True
            self.events_processed += 1
            if kind is EventKind.ARRIVAL:
                self._live_events -= 1
                spec = self._specs[version]  # an arrival carries the job's trace position
                job = self._jobs[spec.job_id] = _Job(spec, self.catalog, version, self.information, self._errors[version])
                self._arrive(job, t)
            elif kind is EventKind.COMPLETION:
                self._complete(self._jobs[job_id], t)  # _stop() retires this completion from _live_events
            elif kind is EventKind.TIMER:
                self._nodes.fire(version)  # a TIMER event carries the control's token
            elif self._unfinished and self.config.round_s is not None:
                self._events.push(self._next_tick(t, self.config.round_s), EventKind.ROUND)
        if self._control is not None:
            self._control.on_change()
        return live

    def _next_tick(self, t: float, round_s: float) -> float:
        """The round after the one at ``t``: ``t + round_s``, or, while nothing is queued or running,
        the first round of that grid at or after the next event (no round between can decide
        anything: a trace with a job at 1e11 s ticked 3e8 empty rounds, minutes of CPU)."""
        following = t + round_s
        if self._queue or self._running:
            return following
        upcoming = self._events.peek_time()
        if upcoming is None or upcoming <= following:
            return following
        return t + math.ceil((upcoming - t) / round_s) * round_s

    def _arrive(self, job: _Job, t: float) -> None:
        most = self._most_gpus
        if job.spec.gpus > most:
            why: str | None = f"it asks for {job.spec.gpus} GPUs and the cluster has {most}"
        else:
            why = self._refused.get(job.index) if self._refused else None
        if why is not None:
            self.rejections[job.spec.job_id] = why
            job.state = SimJobState.REJECTED
            self._unfinished -= 1
            self._retire(job, rejected=True)
            return
        self._enqueue(job, t)

    def _enqueue(self, job: _Job, t: float) -> None:
        job.state = SimJobState.QUEUED
        job.queued_since = t
        self._release_pending()
        self._queue[job.spec.job_id] = job
        gpus = job.spec.gpus
        waiting = self._waiting.get(gpus, 0)
        if not waiting:
            heapq.heappush(self._waiting_sizes, gpus)
        self._waiting[gpus] = waiting + 1
        view = self._queued_views[job.spec.job_id] = job.make_view(t)
        self._queue_log.add(view)

    def _complete(self, job: _Job, t: float) -> None:
        changed = self._stop(job, t)
        job.remaining = 0.0
        job.state = SimJobState.DONE
        job.finish = t
        self._unfinished -= 1
        self.history.add(job.finished())
        self._rerate(changed, t)
        self._retire(job, rejected=False)

    def _smallest_waiting(self) -> int:
        """The GPU count of the smallest queued job (the queue is not empty)."""
        sizes = self._waiting_sizes
        while sizes[0] not in self._waiting:
            heapq.heappop(sizes)
        return sizes[0]

    # -- placement bookkeeping ---------------------------------------------------------------
    def _start(self, job: _Job, placement: Placement, t: float, overhead: float) -> set[str]:
        placement.take(self._free)
        job.last_placement = placement
        nodes = placement.nodes
        if len(nodes) == 1:
            job.spans = self._one_domain
        else:  # domains nest: the lowest ones it spans decide every level's count
            lowest = self._lowest_domain
            spanned = {lowest[n] for n in nodes}
            if len(spanned) == 1:
                job.spans = self._one_domain
            else:
                rows = [self._domain_row[d] for d in spanned]
                job.spans = (len(spanned), *[len({row[level] for row in rows}) for level in range(1, len(rows[0]))])
        self._busy += job.spec.gpus
        self._record_busy(t)
        job.state = SimJobState.RUNNING
        job.placement = placement
        job.last_update = t
        job.run_start = t
        job.stall_until = t + overhead
        job.iso_rate = self.catalog.throughput(job.spec.model, job.spec.gpus, placement.num_nodes)
        job.rate = 0.0
        job.ratio = 0.0  # set by the re-rate that follows; forces a completion event
        self._running[job.spec.job_id] = job
        running = RunningJob(job.spec.job_id, job.spec.model, job.spec.gpus, placement)
        if self.knowledge is not None:
            self.knowledge.add(running)
        return self._state.add(running)

    def _stop(self, job: _Job, t: float) -> set[str]:
        job.sync(t)
        if job.spans is not self._one_domain:  # spans several domains of some level
            self._add_cross(self._cross_gpu_s, job, t)
        job.version += 1
        if job.rate > 0:
            self._live_events -= 1  # its pending completion is now stale
        job.rate = 0.0
        job.last_run_s = t - job.run_start
        assert job.placement is not None
        job.placement.release(self._free)
        self._busy -= job.spec.gpus
        self._record_busy(t)
        del self._running[job.spec.job_id]
        job.placement = None
        changed = self._state.remove(job.spec.job_id)
        if self.knowledge is not None:
            self.knowledge.remove(job.spec.job_id)
        changed.discard(job.spec.job_id)
        return changed

    def _rerate(self, job_ids: set[str], t: float) -> None:
        """Give every job whose ratio changed its new rate and completion time."""
        for job_id in sorted(job_ids):
            job = self._running.get(job_id)
            if job is None:
                continue
            job.sync(t)
            if job.rate > 0:
                self._live_events -= 1
            job.ratio = self._state.ratio(job_id)
            job.rate = job.iso_rate * job.ratio
            if self.knowledge is not None:
                self.knowledge.record(t, self._total_jobs - self._unfinished, job_id, job.spec.model, job.ratio)
            job.version += 1
            begin = job.stall_until if job.stall_until > t else t
            left = job.remaining
            if left < 0.0:  # accounting a run in pieces can overshoot its work by an ulp: it ends now, not before
                left = 0.0
            self._events.push(begin + left / job.rate, EventKind.COMPLETION, job_id, job.version)
            self._live_events += 1

    def _add_cross(self, cross: list[float], job: _Job, t: float) -> None:
        """Add the GPU-seconds of ``job``'s run up to ``t`` to ``cross`` at every level where its
        placement spans more than one domain."""
        held = job.spec.gpus * (t - job.run_start)
        for level, count in enumerate(job.spans):
            if count > 1:
                cross[level] += held

    def _account_busy(self, t: float) -> None:
        """Integrate allocated GPUs, jobs in the system and fragmentation (the smallest queued
        job's GPUs while they are free by count) over the time since the last event."""
        if t > self._last_t:
            dt = t - self._last_t
            if self._signal is not None:
                running = self._running
                # fsum: correctly rounded, the same bits on every CPU (a seeded episode's rewards stay put)
                contention = math.fsum(1.0 - j.ratio for j in running.values()) / len(running) if running else 0.0
                self._signal.append((self._last_t, t, self._busy, contention))
            self._busy_area += self._busy * dt
            self._system_area += (len(self._queue) + len(self._running)) * dt
            if self._queue:
                smallest = self._waiting_sizes[0]
                if smallest not in self._waiting:
                    smallest = self._smallest_waiting()
                free = self._total_gpus - self._busy - self._held_elsewhere
                if smallest <= free and (self._control is None or smallest <= sum(self._free)):
                    self._frag_area += smallest * dt
            self._last_t = t

    def _record_busy(self, t: float) -> None:
        self.util_timeline.record(t, self._busy)

    # -- validation --------------------------------------------------------------------------
    def _validate(self, decision: Decision) -> None:
        check_decision(
            decision, self._free, _Placements(self._running), _Sizes(self._queue), self._node_names,
            _Requests(self._queue, self._running), self.topology.fabric,
        )


def topology_refusal(request: TopologyRequest, topology: Topology, gpus: int,
                     _most: dict[TopologyRequest, int] | None = None) -> str | None:
    """Why a job of ``gpus`` GPUs asking ``request`` can never run on ``topology`` even when
    every GPU is free, or None when it can: a level the fabric lacks, GPUs that are not a multiple
    of the slice size, a slice level above the required one (:meth:`TopologyRequest.check`), no
    domain of the required level holding that many GPUs, or too few whole slices (each inside
    one domain of the slice level) in the cluster or in any one required domain. A preferred
    level never refuses a job: it is a preference. (``_most``: a cache of :func:`_most_gpus`.)"""
    if request is NO_TOPOLOGY or request.empty:
        return None
    try:
        request.check(topology.fabric, gpus, "its topology request")
    except DeepShareError as exc:
        return str(exc)
    if request.required_level is None and request.slice_size is None:
        return None  # a preference only
    most = _most.get(request) if _most is not None else None
    if most is None:
        most = _most_gpus(request, topology)
        if _most is not None:
            _most[request] = most
    if most >= gpus:
        return None
    if request.slice_size is not None:
        where = f"one {request.required_level} domain" if request.required_level is not None else "the cluster"
        return (f"its topology request: {gpus} GPUs in slices of {request.slice_size}, each inside one "
                f"{request.slice_level} domain, and {where} holds at most {most} GPUs so")
    return f"its topology request: {gpus} GPUs inside one {request.required_level} domain, and the largest has {most}"


def _most_gpus(request: TopologyRequest, topology: Topology) -> int:
    """The most GPUs a job asking ``request`` (its levels known to exist) could ever hold on
    ``topology``: in one domain of its required level (else the whole cluster), counting only
    whole slices inside each domain of its slice level when it asks for slices."""
    fabric, capacity = topology.fabric, topology.capacity
    if request.required_level is not None:
        level = fabric.level_index(request.required_level)
        scopes: list[Sequence[int]] = [fabric.domains[d].nodes for d in fabric.by_level[level]]
    else:
        scopes = [range(len(capacity))]
    if request.slice_size is None or request.slice_level is None:
        return max(sum(capacity[n] for n in nodes) for nodes in scopes)
    size, slice_level = request.slice_size, fabric.level_index(request.slice_level)
    best = 0
    for nodes in scopes:
        held: dict[int, int] = {}
        for n in nodes:
            d = fabric.node_domains[n][slice_level]
            held[d] = held.get(d, 0) + capacity[n]
        best = max(best, sum(g // size * size for g in held.values()))
    return best


def _refused_requests(topology: Topology, specs: Sequence[JobSpec]) -> dict[int, str]:
    """Trace position -> why the job's topology request can never be met on ``topology``
    (:func:`topology_refusal`); logged once, since a mistyped level name rejects every job that names it."""
    refused: dict[int, str] = {}
    most: dict[TopologyRequest, int] = {}
    for i, spec in enumerate(specs):
        if spec.topology is not NO_TOPOLOGY and spec.gpus <= topology.total_gpus:
            why = topology_refusal(spec.topology, topology, spec.gpus, most)
            if why is not None:
                refused[i] = why
    if refused:
        first = next(iter(refused))
        log.warning("%d job(s) ask for a topology cluster %r can never give and will be rejected; "
                    "the first, job %r: %s", len(refused), topology.name, specs[first].job_id, refused[first])
    return refused
