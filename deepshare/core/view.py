"""What a policy sees at one decision point: a read-only :class:`ClusterView` of jobs and GPUs.

Everything here is frozen: a policy can read a view but never change the simulator (or the live
cluster) behind it; ``predict`` asks the contention model what-if questions without changing it.
"""

from __future__ import annotations

import copy
import math
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Protocol, Sequence

from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.history import JobHistory
from deepshare.core.types import Placement

if TYPE_CHECKING:  # pragma: no cover - import for annotations only
    from deepshare.core.topology import Topology
    from deepshare.core.workloads import Catalog


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
    ``queue`` and ``priority`` name its tenant queue and priority class as submitted (None: not
    said); what they resolve to is the view's ``tenancy``'s to say.
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
    queue: str | None = None
    priority: str | None = None

    @property
    def ran_s(self) -> float:
        """Seconds it has held its GPUs, over all its runs (what any cluster measures)."""
        return self.attained_gpu_s / self.gpus

    def seconds_at(self, catalog: "Catalog", nodes: int, ratio: float) -> float:
        """Seconds its remaining work takes on ``nodes`` nodes at contention ratio ``ratio``
        (infinite at speed 0): ``remaining_s`` is in seconds at the reference throughput, and a
        gang split over more nodes than its reference runs slower."""
        speed = catalog.throughput(self.model, self.gpus, nodes) * ratio
        if speed <= 0:
            return float("inf")
        return self.remaining_s * catalog.reference_throughput(self.model, self.gpus) / speed


DEFAULT_RESTORE_S = 30.0
"""Seconds a preempted job takes to restart from its checkpoint when the run says nothing else:
the simulator's default ``--preempt-overhead-s`` (:attr:`ClusterView.restore_s`)."""

DEFAULT_MOVE_S = 30.0
"""Seconds a migrated job takes to checkpoint and restart at its new GPUs when the run says
nothing else: the simulator's default ``--migrate-overhead-s`` (:attr:`ClusterView.move_s`)."""

DEFAULT_QUEUE = "default"
"""The queue of a job that names none, when no tenants file says otherwise."""


class Tenancy(Protocol):
    """Who a job belongs to and what its queue weighs: what fairness-aware orders read.

    :class:`deepshare.tenants.Tenants` (a tenants file) implements it; a view without one has
    :data:`NO_TENANCY`. A protocol here, so that the core stays free of the tenants package."""

    def queue_of(self, job: JobView) -> str:
        """The queue ``job`` counts against."""
        ...

    def weight_of(self, queue: str) -> float:
        """The queue's fair-share weight (positive)."""
        ...

    def priority_of(self, job: JobView) -> int:
        """The value of ``job``'s priority class (larger = more important)."""
        ...


@dataclass(frozen=True, slots=True)
class _NoTenancy:
    """No tenants file: a job's queue is its own ``queue`` or :data:`DEFAULT_QUEUE`, every queue
    weighs 1 and every job has priority 0."""

    def queue_of(self, job: JobView) -> str:
        return job.queue or DEFAULT_QUEUE

    def weight_of(self, queue: str) -> float:
        return 1.0

    def priority_of(self, job: JobView) -> int:
        return 0


NO_TENANCY: Tenancy = _NoTenancy()


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


Question = tuple[JobView, Placement]
"""One what-if question: launch this job at this placement."""


class Predictor:
    """A view's ``predict``: contention what-if answers that change nothing.

    ``predict(job, placement, pending=())`` is what launching ``job`` at ``placement`` would do,
    given that the ``pending`` launches (chosen earlier in the same decision) happen first. Its
    other abilities are methods whose defaults are correct for every predictor; a predictor
    overrides them to be faster or more exact:

    - ``many(questions, pending)``: the answers to several questions on one set of pending
      launches (default: one at a time; a contention state adds the pending launches once);
    - ``isolated(placement)``: True only where a job neither suffers nor causes contention
      whatever runs, so its prediction is exactly ``Prediction(1.0)`` and need not be asked
      (default: False, never skip);
    - ``leaving_out(gone)``: a context giving a predictor that answers as if the running jobs
      ``gone`` had stopped (a preemptive decision's victims), ``self`` unchanged afterwards
      (default: ``self``, which still counts them: contention is over-predicted, never under).

    A wrapper derives from :class:`ForwardingPredictor`, which forwards every ability to the
    predictor it wraps, so one it forgets to override is still correct.
    A subclass that does not define ``__call__`` is a :class:`TypeError` where it is defined.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__call__ is Predictor.__call__:
            raise TypeError(f"{cls.__qualname__} derives from Predictor without defining __call__")

    def __call__(self, job: JobView, placement: Placement, pending: Sequence[Question] = ()) -> Prediction:
        raise NotImplementedError

    def many(self, questions: Sequence[Question], pending: Sequence[Question] = ()) -> list[Prediction]:
        """``[self(job, placement, pending) for job, placement in questions]``."""
        return [self(job, placement, pending) for job, placement in questions]

    def isolated(self, placement: Placement) -> bool:
        """Whether a job at ``placement`` is predicted exactly ``Prediction(1.0)`` whatever runs."""
        return False

    def leaving_out(self, gone: Sequence[JobView]) -> AbstractContextManager[Predictor]:
        """A predictor without the running jobs ``gone``, for the block (default: ``self``)."""
        return nullcontext(self)


class ForwardingPredictor(Predictor):
    """A predictor around another, ``inner``: every ability is forwarded to it.

    A subclass overrides what it changes and inherits the rest: one that checks a deadline
    overrides ``__call__`` and ``many``; its ``isolated`` is still the inner one's, and its
    ``leaving_out`` wraps the inner predictor's own (``around``), so the victims are left out
    *and* the wrapper's behaviour stays on. ``many`` goes to the inner batch, not through the
    subclass's ``__call__``: a wrapper that changes answers (not only watches questions)
    overrides ``many`` as well. A plain function as ``inner`` is asked one question at a time.
    """

    __slots__ = ("inner",)

    def __init__(self, inner: Predictor | Callable[..., Prediction]) -> None:
        self.inner: Predictor = as_predictor(inner)

    def __call__(self, job: JobView, placement: Placement, pending: Sequence[Question] = ()) -> Prediction:
        return self.inner(job, placement, pending)

    def many(self, questions: Sequence[Question], pending: Sequence[Question] = ()) -> list[Prediction]:
        return self.inner.many(questions, pending)

    def isolated(self, placement: Placement) -> bool:
        return self.inner.isolated(placement)

    @contextmanager
    def leaving_out(self, gone: Sequence[JobView]) -> Iterator[Predictor]:
        with self.inner.leaving_out(gone) as bare:
            yield self if bare is self.inner else self.around(bare)

    def around(self, inner: Predictor) -> ForwardingPredictor:
        """This wrapper around ``inner`` instead (default: a shallow copy with ``inner`` replaced)."""
        twin = copy.copy(self)
        twin.inner = inner
        return twin


class _FunctionPredictor(Predictor):
    """A plain ``predict(job, placement, pending)`` function as a :class:`Predictor`."""

    __slots__ = ("function",)

    def __init__(self, function: Callable[..., Prediction]) -> None:
        self.function = function

    def __call__(self, job: JobView, placement: Placement, pending: Sequence[Question] = ()) -> Prediction:
        return self.function(job, placement, pending)


def as_predictor(predict: Predictor | Callable[..., Prediction]) -> Predictor:
    """``predict`` itself when it is a :class:`Predictor`; a plain function with the defaults."""
    return predict if isinstance(predict, Predictor) else _FunctionPredictor(predict)


PredictFn = Predictor
"""The type of :attr:`ClusterView.predict` (the name before :class:`Predictor` existed)."""


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
    predict: Predictor
    future_events: bool = True
    """Whether an arrival or completion is still to come, as far as the scheduler knows: a live
    cluster assumes so, and so do the simulator's views (which arrivals remain is a hidden truth;
    the simulator itself refuses a wait that would stall it, ``Simulator.idle_forever``). False
    only where a caller says so (a replayed, finished trace sent to the placement service). No
    shipped policy reads it."""
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
    tenancy: Tenancy = NO_TENANCY
    """Queues, weights and priorities (:class:`Tenancy`); the admission wrapper
    (:class:`deepshare.tenants.admission.Admitted`) sets its tenants file here for the policy it wraps."""
    restore_s: float = DEFAULT_RESTORE_S
    """Seconds a job preempted now will take to restart from its checkpoint (finite, >= 0): what a
    preemptive policy costs a stop at (topology-aware preemption's plans, the tenants' quota
    preemption). Configuration of the run, not a hidden truth: the simulator's
    ``preempt_overhead_s``, a placement request's ``restore_s``, the live scheduler's default."""
    move_s: float = DEFAULT_MOVE_S
    """Seconds a job migrated now will take to checkpoint and restart at its new GPUs (finite,
    >= 0): what ``+migrate`` costs a move at. Configuration of the run, as :attr:`restore_s`: the
    simulator's ``migrate_overhead_s``, a placement request's ``move_s``, the live scheduler's default."""

    def __post_init__(self) -> None:
        for name in ("restore_s", "move_s"):
            value = getattr(self, name)
            if not 0 <= value < math.inf:  # NaN fails both
                raise DeepShareError(f"{name} must be a finite number of seconds >= 0, got {value}")

    @property
    def total_free(self) -> int:
        return sum(self.free)

    @property
    def total_gpus(self) -> int:
        return self.topology.total_gpus

    @property
    def utilisation(self) -> float:
        return 1.0 - self.total_free / self.total_gpus
