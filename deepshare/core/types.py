"""Immutable value types of the scheduling problem: jobs, placements and decisions.

A trace is a list of :class:`JobSpec`; a policy answers with a :class:`Decision` (launches,
preemptions, migrations, each naming a :class:`Placement`) that the simulator or the live
scheduler validates. What a policy reads is in :mod:`deepshare.core.view`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Mapping, NoReturn

from deepshare.core.bounds import MAX_DURATION_S, MAX_JOB_GPUS, MAX_SAMPLES, MAX_TIMESTAMP_S, MIN_SAMPLES, finite_in, gpus_ok
from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job as a trace describes it.

    Work is given either as ``total_samples`` (the artifact's unit: samples to train) or as
    ``duration_s`` (isolated run time at the model's reference placement, the unit of most
    public traces); the simulator converts durations to samples through the workload catalog.
    That work is the simulator's truth: what a policy may learn of it is the run's information
    model's to say (:mod:`deepshare.core.information`).

    The optional features are what real traces carry and a live scheduler knows when a job is
    submitted: ``user``, ``vc`` (virtual cluster or team), ``group`` (a recurring job's tag: same
    script, parameters and data) and ``requested_s`` (the user's time limit or estimate of the
    isolated run time, seconds). None when the trace does not say.

    ``topology``: where the job must or should run in the cluster's fabric
    (:class:`~deepshare.core.fabric.TopologyRequest`: a required or preferred level, slices kept
    inside a level's domains); :data:`~deepshare.core.fabric.NO_TOPOLOGY` when it asks nothing.
    Level names are checked against a cluster only when one is known (the simulator refuses a
    job whose request the cluster can never meet).

    ``queue`` and ``priority``: the tenant queue the job is submitted to and its priority class,
    by name (:mod:`deepshare.tenants`, ``docs/tenants.md``); None when the trace does not say
    (the tenants file's default queue and priority then apply). Without a tenants file nothing
    reads them.
    """

    job_id: str
    model: str
    gpus: int
    submit_time: float = 0.0
    total_samples: float | None = None
    duration_s: float | None = None
    user: str | None = None
    group: str | None = None
    vc: str | None = None
    requested_s: float | None = None
    topology: TopologyRequest = NO_TOPOLOGY
    queue: str | None = None
    priority: str | None = None

    def __post_init__(self) -> None:
        """Refuse a job outside the documented domain (:mod:`deepshare.core.bounds`).

        The readers refuse such values earlier, naming the file's line and column; this is the
        library's last line, so that the simulator, the beliefs and the reports never meet a
        NaN, an infinity or an integer too large for their arrays.
        """
        if isinstance(self.gpus, Integral) and not isinstance(self.gpus, (bool, int)):
            object.__setattr__(self, "gpus", int(self.gpus))  # a NumPy integer
        if not gpus_ok(self.gpus):
            self._refuse("gpus", f"an integer from 1 to {MAX_JOB_GPUS:,}", self.gpus)
        if not _real_in(self.submit_time, 0.0, MAX_TIMESTAMP_S):
            self._refuse("submit_time", f"seconds from 0 to {MAX_TIMESTAMP_S:g}", self.submit_time)
        if (self.total_samples is None) == (self.duration_s is None):
            raise DeepShareError(
                f"job {self.job_id!r}: exactly one of total_samples and duration_s must be given"
            )
        if self.duration_s is not None and not _real_in(self.duration_s, 0.0, MAX_DURATION_S, low_open=True):
            self._refuse("duration_s", _SECONDS, self.duration_s)
        if self.total_samples is not None and not _real_in(self.total_samples, MIN_SAMPLES, MAX_SAMPLES):
            self._refuse("total_samples", f"a number from {MIN_SAMPLES:g} to {MAX_SAMPLES:g}", self.total_samples)
        if self.requested_s is not None and not _real_in(self.requested_s, 0.0, MAX_DURATION_S, low_open=True):
            self._refuse("requested_s", _SECONDS, self.requested_s)
        for name in ("user", "group", "vc") if (self.user, self.group, self.vc) != (None, None, None) else ():
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise DeepShareError(f"job {self.job_id!r}: {name} must be a non-empty string or absent, got {value!r}")
        for name in ("queue", "priority") if (self.queue, self.priority) != (None, None) else ():
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise DeepShareError(f"job {self.job_id!r}: {name} must be a non-empty string or absent, got {value!r}")
        if self.topology is not NO_TOPOLOGY and not isinstance(self.topology, TopologyRequest):
            raise DeepShareError(f"job {self.job_id!r}: topology must be a TopologyRequest, got {type(self.topology).__name__}")

    def _refuse(self, name: str, expected: str, got: object) -> NoReturn:
        shown = repr(got)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise DeepShareError(f"job {self.job_id!r}: field {name!r}: expected {expected}, got {shown}")


_SECONDS = f"a positive number of seconds up to {MAX_DURATION_S:,.0f} (a year)"


def _real_in(value: object, low: float, high: float, *, low_open: bool = False) -> bool:
    """:func:`~deepshare.core.bounds.finite_in`, also for NumPy scalars (``np.float32``, ``np.int64``)."""
    if isinstance(value, Real) and not isinstance(value, (bool, int, float)):
        value = float(value)
    return finite_in(value, low, high, low_open=low_open)


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
