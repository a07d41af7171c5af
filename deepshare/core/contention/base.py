"""What every contention model is: a factory of per-simulation states that rate running jobs.

A :class:`ContentionModel` is a factory of per-simulation :class:`ContentionState` objects.
The state tracks the running jobs and answers each job's *throughput ratio* (its throughput
divided by its isolated throughput, in (0, 1]). ``add`` and ``remove`` return the ids whose
ratio changed so the simulator only re-rates those; ``predict`` answers what-if questions for
placement policies without changing anything (:func:`predictor` makes a view's ``predict``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

from deepshare.core.topology import Topology
from deepshare.core.types import Placement
from deepshare.core.view import JobView, PredictFn, Prediction
from deepshare.core.workloads import Catalog


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: str
    model: str
    gpus: int
    placement: Placement


class ContentionState(Protocol):
    def add(self, job: RunningJob) -> set[str]:
        """Start tracking ``job``; return the ids whose ratio changed (``job``'s own included)."""

    def remove(self, job_id: str) -> set[str]:
        """Stop tracking ``job_id``; return the ids of remaining jobs whose ratio changed."""

    def ratio(self, job_id: str) -> float:
        """Current throughput ratio of a tracked job, in (0, 1]."""

    def predict(self, job: RunningJob) -> Prediction:
        """What ``add(job)`` would do, without doing it."""

    # Optional: ``isolated(placement) -> bool``, True when a job there neither suffers nor causes
    # contention whatever runs (its prediction is exactly ``Prediction(1.0)``). Predictors pass
    # it on (:func:`isolated_of`) so a placement strategy can skip predicting such placements.


class ContentionModel(Protocol):
    name: str

    def new_state(self, topology: Topology, catalog: Catalog) -> ContentionState:
        """A fresh, empty state for one simulation (or one served request)."""


def predictor(state: ContentionState) -> PredictFn:
    """The ``ClusterView.predict`` of a contention state: what-if answers that leave it unchanged.

    The function also carries ``many(questions, pending)``, the same answers for several
    questions on one set of pending launches, which adds those launches once instead of once
    per question (see :func:`predict_all`)."""

    def predict(job: JobView, placement: Placement, pending: Sequence[tuple[JobView, Placement]] = ()) -> Prediction:
        for other, where in pending:
            state.add(RunningJob(other.job_id, other.model, other.gpus, where))
        try:
            return state.predict(RunningJob(job.job_id, job.model, job.gpus, placement))
        finally:
            for other, _ in reversed(pending):
                state.remove(other.job_id)

    def many(questions: Sequence[tuple[JobView, Placement]], pending: Sequence[tuple[JobView, Placement]] = ()) -> list[Prediction]:
        # Pending launches are added to the state for the questions only; add and remove are
        # exact inverses (tests/core/test_predict_batch.py), so the state (and every ratio) is as
        # it was afterwards, and each answer is the one ``predict`` alone would give.
        if not questions:
            return []
        for other, where in pending:
            state.add(RunningJob(other.job_id, other.model, other.gpus, where))
        try:
            return [state.predict(RunningJob(job.job_id, job.model, job.gpus, placement)) for job, placement in questions]
        finally:
            for other, _ in reversed(pending):
                state.remove(other.job_id)

    predict.many = many  # type: ignore[attr-defined]
    predict.isolated = getattr(state, "isolated", None)  # type: ignore[attr-defined]
    predict.leaving_out = lambda gone: _leaving_out(state, predict, gone)  # type: ignore[attr-defined]
    return predict


@contextmanager
def _leaving_out(state: ContentionState, predict: PredictFn, gone: Sequence[JobView]) -> Iterator[PredictFn]:
    """``predict`` with the running jobs ``gone`` out of ``state`` until the block ends, then put
    back: removing and re-adding running jobs leaves every ratio as it was, bit for bit
    (``tests/core/test_predict_batch.py``), so the simulation goes on from the same state."""
    stopped = [RunningJob(job.job_id, job.model, job.gpus, job.placement) for job in gone]  # type: ignore[arg-type]
    for job in stopped:
        state.remove(job.job_id)
    try:
        yield predict
    finally:
        for job in reversed(stopped):
            state.add(job)


@contextmanager
def leaving_out(predict: PredictFn, gone: Sequence[JobView]) -> Iterator[PredictFn]:
    """A predictor that answers as if the running jobs ``gone`` had stopped, for the block: a
    preemptive decision's launches take its victims' GPUs, so the victims' contention must not
    count against them. Ask only it inside the block (the view's own ``predict`` may answer
    without them meanwhile). ``predict`` itself when nothing is gone or the predictor cannot
    leave jobs out (no ``leaving_out``: contention is then over-predicted, as before 2026-12-01)."""
    make = getattr(predict, "leaving_out", None)
    if not gone or make is None:
        yield predict
        return
    with make(gone) as bare:
        yield bare


def isolated_of(predict: PredictFn) -> Callable[[Placement], bool] | None:
    """The contention state's ``isolated(placement)`` behind a view's ``predict``, if it has one."""
    return getattr(predict, "isolated", None)


def predict_all(
    predict: PredictFn, questions: Sequence[tuple[JobView, Placement]], pending: Sequence[tuple[JobView, Placement]] = ()
) -> list[Prediction]:
    """``[predict(job, placement, pending) for job, placement in questions]``, in one batch when
    ``predict`` offers one (:func:`predictor`'s ``many``); any other predict is asked one by one."""
    many = getattr(predict, "many", None)
    if many is not None:
        return many(questions, pending)
    return [predict(job, placement, pending) for job, placement in questions]
