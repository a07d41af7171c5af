"""The HTTP API's response bodies (pydantic), built from journal records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pydantic import BaseModel, ConfigDict

from deepshare.runtime.journal import JobRecord, RunRecord, Transition


class NodeGpus(BaseModel):
    node: str
    gpus: int


class RunOut(BaseModel):
    attempt: int
    placement: list[NodeGpus]
    started: float
    ended: Optional[float]
    end_reason: Optional[str]
    start_step: Optional[int]
    measured_throughput: Optional[float]
    """Samples/s the job reported (rank 0's ``report(throughput=...)``), latest of the run."""
    predicted_throughput: Optional[float]
    """The simulator's samples/s for the job's model at this placement: catalog x contention ratio."""


class TransitionOut(BaseModel):
    from_state: Optional[str]
    to_state: str
    at: float
    reason: str
    attempt: int


class JobOut(BaseModel):
    id: str
    name: str
    state: str
    gpus: int
    model: str
    placement: Optional[list[NodeGpus]]
    attempt: int
    preemptions: int
    submit_time: float
    finish_time: Optional[float]
    samples: Optional[float]
    step: Optional[int]
    measured_throughput: Optional[float]
    predicted_throughput: Optional[float]
    cancel_requested: bool
    error: Optional[str]
    queue: Optional[str] = None
    """Its tenant queue (its own, else the tenants file's rule, else ``default``)."""
    priority: Optional[str] = None
    """Its priority class (its own, else the tenants file's default; None: none)."""
    borrowed_gpus: Optional[int] = None
    """Running under a tenants file: how many of its GPUs are above its queue's nominal quota
    (0: within quota); None otherwise."""


class JobDetailOut(JobOut):
    checkpoint_dir: str
    runs: list[RunOut]
    transitions: list[TransitionOut]


class LogOut(BaseModel):
    """A piece of one rank's log: ``text`` is bytes ``offset`` to ``next_offset`` of ``size``."""

    job_id: str
    rank: int
    offset: int
    next_offset: int
    size: int
    text: str
    tail: int | None = None
    """The lines asked for with ``tail`` (None for a chunk asked by ``offset``): a scheduler older
    than ``tail`` ignores it and answers the log from its start, which a client must not print as
    its last lines."""


class QueueOut(BaseModel):
    """One row of ``GET /v1/queues``: a queue's usage now against its quota (the server writes
    each :class:`~deepshare.runtime.tenancy.QueueUsage` through it; the client checks answers with it)."""

    model_config = ConfigDict(strict=True)  # what the CLI formats must be what it says it is

    queue: str
    gpus_in_use: int
    nominal_gpus: Optional[int] = None
    """None without a tenants file."""
    borrowed_gpus: int
    pending_jobs: int
    pending_gpus: int


class ContentionFitOut(BaseModel):
    """One model's fit in ``GET /v1/contention``."""

    model_config = ConfigDict(strict=True)  # what the CLI formats must be what it says it is

    scale: float
    exponent: float
    observations: float
    contended: float


class ContentionOut(BaseModel):
    """``GET /v1/contention``: the learned contention model's latest version (version 0, no
    models, before the first fit)."""

    model_config = ConfigDict(strict=True)  # what the CLI formats must be what it says it is

    version: int = 0
    prior: Optional[str] = None
    fitted_at: Optional[float] = None
    runs: int = 0
    mae_learned: Optional[float] = None
    mae_prior: Optional[float] = None
    refit_s: float = 0.0
    models: dict[str, ContentionFitOut] = {}


class ErrorOut(BaseModel):
    error: str


def _alloc(alloc: tuple[tuple[str, int], ...] | None) -> list[NodeGpus] | None:
    return None if alloc is None else [NodeGpus(node=n, gpus=g) for n, g in alloc]


@dataclass(frozen=True, slots=True)
class Tenancy:
    """What the answers say of a job's tenancy: its queue, its priority class and its borrowed GPUs."""

    queue: str | None = None
    priority: str | None = None
    borrowed_gpus: int | None = None


NO_TENANCY = Tenancy()


def job_out(job: JobRecord, tenancy: Tenancy = NO_TENANCY) -> JobOut:
    return JobOut(
        id=job.job_id, name=job.spec.name, state=job.state.value, gpus=job.spec.gpus, model=job.spec.model,
        placement=_alloc(job.placement), attempt=job.attempt, preemptions=job.preemptions,
        submit_time=job.submit_time, finish_time=job.finish_time, samples=job.samples, step=job.step,
        measured_throughput=job.throughput, predicted_throughput=job.predicted_throughput,
        cancel_requested=job.cancel_requested, error=job.error,
        queue=tenancy.queue if tenancy.queue is not None else job.spec.queue,
        priority=tenancy.priority if tenancy.priority is not None else job.spec.priority,
        borrowed_gpus=tenancy.borrowed_gpus,
    )


def job_detail(job: JobRecord, runs: list[RunRecord], transitions: list[Transition],
               tenancy: Tenancy = NO_TENANCY, *, checkpoint_dir: str) -> JobDetailOut:
    """A job's detail; ``checkpoint_dir``: its checkpoint folder, which its journal's instance
    names (:meth:`~deepshare.runtime.runnames.RunNames.checkpoint_dir`)."""
    return JobDetailOut(
        **job_out(job, tenancy).model_dump(), checkpoint_dir=checkpoint_dir,
        runs=[RunOut(attempt=r.attempt, placement=_alloc(r.placement) or [], started=r.started, ended=r.ended,
                     end_reason=r.end_reason, start_step=r.start_step, measured_throughput=r.measured_throughput,
                     predicted_throughput=r.predicted_throughput) for r in runs],
        transitions=[TransitionOut(from_state=t.from_state.value if t.from_state else None, to_state=t.to_state.value,
                                   at=t.at, reason=t.reason, attempt=t.attempt) for t in transitions],
    )
