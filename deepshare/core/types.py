"""Immutable value types shared by the simulator, the policies, the RL env and the services.

Everything a policy sees is frozen: a policy can read a :class:`ClusterView` but never change
the simulator behind it; it answers with a :class:`Decision` that the simulator validates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover - import for annotations only
    from deepshare.core.topology import Topology
    from deepshare.core.workloads import Catalog

PredictFn = Callable[["JobView", "Placement", Sequence[tuple["JobView", "Placement"]]], "Prediction"]
"""``predict(job, placement, pending)``: what launching ``job`` at ``placement`` would do, given
that the ``pending`` launches (chosen earlier in the same decision) happen first."""


class DeepShareError(Exception):
    """Base class of every error caused by a user's input (trace, config, flag, request)."""


class RuntimeFailure(Exception):
    """Something outside the user's input failed (a Ray that does not start or cannot be joined):
    the CLI prints it as one line and exits 1, where input errors exit 2."""

    @classmethod
    def could_not(cls, what: str, exc: BaseException) -> "RuntimeFailure":
        """``could not WHAT (ErrorType: first line of its message)``: one line, whatever ``exc`` says."""
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return cls(f"could not {what} ({type(exc).__name__}{': ' + first if first else ''})")


class InfeasibleDecision(DeepShareError):
    """A policy asked for something the cluster cannot do (too many GPUs, unknown node or job)."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job as a trace describes it.

    Work is given either as ``total_samples`` (the artifact's unit: samples to train) or as
    ``duration_s`` (isolated run time at the model's reference placement, the unit of most
    public traces); the simulator converts durations to samples through the workload catalog.
    """

    job_id: str
    model: str
    gpus: int
    submit_time: float = 0.0
    total_samples: float | None = None
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.gpus <= 0:
            raise DeepShareError(f"job {self.job_id!r}: gpus must be a positive integer, got {self.gpus}")
        if self.submit_time < 0:
            raise DeepShareError(f"job {self.job_id!r}: submit_time must be >= 0, got {self.submit_time}")
        if (self.total_samples is None) == (self.duration_s is None):
            raise DeepShareError(
                f"job {self.job_id!r}: exactly one of total_samples and duration_s must be given"
            )
        work = self.total_samples if self.total_samples is not None else self.duration_s
        if not work > 0:  # also catches NaN
            raise DeepShareError(f"job {self.job_id!r}: work must be positive, got {work}")


@dataclass(frozen=True, slots=True)
class Placement:
    """GPUs a job holds, as ``((node_index, gpu_count), ...)`` sorted by node index."""

    alloc: tuple[tuple[int, int], ...]
    nodes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """The node indices, derived from ``alloc`` once (contention models read it at every event)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(n for n, _ in self.alloc))

    @staticmethod
    def of(counts: Mapping[int, int]) -> "Placement":
        """Build from ``{node_index: gpus}``; zero entries are dropped."""
        return Placement(tuple(sorted((n, g) for n, g in counts.items() if g)))

    @property
    def num_nodes(self) -> int:
        return len(self.alloc)

    @property
    def total_gpus(self) -> int:
        return sum(g for _, g in self.alloc)

    def fits(self, free: list[int] | tuple[int, ...] | Mapping[int, int]) -> bool:
        """Whether every node has the GPUs this placement asks for in ``free`` (GPUs per node)."""
        return all(free[node] >= gpus for node, gpus in self.alloc)

    def take(self, free: list[int] | dict[int, int]) -> None:
        """Subtract this placement's GPUs from ``free`` (GPUs per node), in place.

        No check: callers validate first (the simulator's ``check_decision``, :meth:`fits`), and
        an unchecked what-if (``free_after`` on a decision not yet validated) may go negative.
        """
        for node, gpus in self.alloc:
            free[node] -= gpus

    def release(self, free: list[int] | dict[int, int]) -> None:
        """Give this placement's GPUs back to ``free`` (GPUs per node), in place: undoes :meth:`take`."""
        for node, gpus in self.alloc:
            free[node] += gpus


@dataclass(frozen=True, slots=True)
class Launch:
    job_id: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class Migrate:
    job_id: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy wants done now. Applied in order: preempt, migrate, launch."""

    launch: tuple[Launch, ...] = ()
    preempt: tuple[str, ...] = ()
    migrate: tuple[Migrate, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.launch or self.preempt or self.migrate)


WAIT = Decision()


@dataclass(frozen=True, slots=True)
class JobView:
    """A queued or running job as a policy sees it at one decision point.

    ``remaining_s`` is the remaining work in seconds at the job's reference (ideal) throughput,
    the quantity SRTF orders by; ``attained_gpu_s`` is GPU-seconds held so far (LAS's key).
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
    """A read-only sequence of job views built on first use (most policies never look)."""

    __slots__ = ("_build", "_items")

    def __init__(self, build: Callable[[], tuple[JobView, ...]]) -> None:
        self._build: Callable[[], tuple[JobView, ...]] | None = build
        self._items: tuple[JobView, ...] = ()

    def _get(self) -> tuple[JobView, ...]:
        if self._build is not None:
            self._items, self._build = self._build(), None
        return self._items

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._get()[index]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._get())

    def __repr__(self) -> str:
        return f"LazyJobs({self._get()!r})"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Read-only snapshot of the cluster at one decision point: what every policy decides on.

    ``predict(job, placement, pending=())`` asks the simulation's contention model what
    launching ``job`` at ``placement`` would do, without changing anything; ``catalog`` gives
    isolated throughputs. ``queued`` is in arrival order, ``running`` in start order.
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
    ``node0/gpu3/nvlink``; empty when nothing measures links (node agents fill it live)."""

    @property
    def total_free(self) -> int:
        return sum(self.free)

    @property
    def total_gpus(self) -> int:
        return self.topology.total_gpus

    @property
    def utilisation(self) -> float:
        return 1.0 - self.total_free / self.total_gpus
