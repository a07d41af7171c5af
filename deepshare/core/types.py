"""Immutable value types of the scheduling problem: jobs, placements and decisions.

A trace is a list of :class:`JobSpec`; a policy answers with a :class:`Decision` (launches,
preemptions, migrations, each naming a :class:`Placement`) that the simulator or the live
scheduler validates. What a policy reads is in :mod:`deepshare.core.view`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from deepshare.core.errors import DeepShareError


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
        if self.requested_s is not None and not 0 < self.requested_s < float("inf"):
            raise DeepShareError(
                f"job {self.job_id!r}: requested_s must be a positive number of seconds, got {self.requested_s}"
            )
        for name in ("user", "group", "vc") if (self.user, self.group, self.vc) != (None, None, None) else ():
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise DeepShareError(f"job {self.job_id!r}: {name} must be a non-empty string or absent, got {value!r}")


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
