"""What every contention model is: a factory of per-simulation states that rate running jobs.

A :class:`ContentionModel` is a factory of per-simulation :class:`ContentionState` objects.
The state tracks the running jobs and answers each job's *throughput ratio* (its throughput
divided by its isolated throughput, in (0, 1]). ``add`` and ``remove`` return the ids whose
ratio changed so the simulator only re-rates those; ``predict`` answers what-if questions for
placement policies without changing anything (:func:`predictor` makes a view's ``predict``, a
:class:`~deepshare.core.view.Predictor`).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

from deepshare.core.topology import Topology
from deepshare.core.types import Placement
from deepshare.core.view import JobView, Prediction, Predictor
from deepshare.core.workloads import Catalog

PlainPredict = Callable[..., "Prediction"]
"""A bare ``predict(job, placement, pending)`` function (tests' stand-ins): no batch, no isolated
placements, cannot leave jobs out; :func:`~deepshare.core.view.as_predictor` makes it a Predictor."""


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
        """What ``add(job)`` would do, without doing it. For a job already tracked, its own ratio
        is predicted without its current record; what its leaving frees for others is not a
        defined part of ``others`` (a model may or may not count it): a caller asking about a
        move takes the job out first (:meth:`Predictor.leaving_out`)."""

    # Optional: ``isolated(placement) -> bool``, True when a job there neither suffers nor causes
    # contention whatever runs (its prediction is exactly ``Prediction(1.0)``), read once by
    # :func:`state_isolated`; a predictor answers it as ``Predictor.isolated`` so a placement
    # strategy can skip predicting such placements.


class ContentionModel(Protocol):
    name: str

    def new_state(self, topology: Topology, catalog: Catalog) -> ContentionState:
        """A fresh, empty state for one simulation (or one served request)."""


def state_isolated(state: ContentionState) -> Callable[[Placement], bool] | None:
    """The state's optional ``isolated(placement)``, or None when its model has none."""
    return getattr(state, "isolated", None)


class StatePredictor(Predictor):
    """The ``ClusterView.predict`` of a contention state: what-if answers that leave it unchanged.

    Each question adds the pending launches, predicts and removes them again; ``many`` adds them
    once for several questions (see :func:`predict_all`); ``leaving_out`` takes running jobs out
    of the state for a block and puts them back after."""

    __slots__ = ("state", "_isolated")

    def __init__(self, state: ContentionState) -> None:
        self.state = state
        self._isolated = state_isolated(state)

    def __call__(self, job: JobView, placement: Placement, pending: Sequence[tuple[JobView, Placement]] = ()) -> Prediction:
        state = self.state
        for other, where in pending:
            state.add(RunningJob(other.job_id, other.model, other.gpus, where))
        try:
            return state.predict(RunningJob(job.job_id, job.model, job.gpus, placement))
        finally:
            for other, _ in reversed(pending):
                state.remove(other.job_id)

    def many(self, questions: Sequence[tuple[JobView, Placement]], pending: Sequence[tuple[JobView, Placement]] = ()) -> list[Prediction]:
        # Pending launches are added to the state for the questions only; add and remove are
        # exact inverses (tests/core/test_predict_batch.py), so the state (and every ratio) is as
        # it was afterwards, and each answer is the one ``predict`` alone would give.
        if not questions:
            return []
        state = self.state
        for other, where in pending:
            state.add(RunningJob(other.job_id, other.model, other.gpus, where))
        try:
            return [state.predict(RunningJob(job.job_id, job.model, job.gpus, placement)) for job, placement in questions]
        finally:
            for other, _ in reversed(pending):
                state.remove(other.job_id)

    def isolated(self, placement: Placement) -> bool:
        isolated = self._isolated
        return isolated is not None and isolated(placement)

    @contextmanager
    def leaving_out(self, gone: Sequence[JobView]) -> Iterator[Predictor]:
        """This predictor with the running jobs ``gone`` out of the state until the block ends,
        then put back: removing and re-adding running jobs leaves every ratio as it was, bit for
        bit (``tests/core/test_predict_batch.py``), so the simulation goes on from the same state."""
        stopped = []
        for job in gone:
            if job.placement is None:
                raise ValueError(f"job {job.job_id!r} is not running: only running jobs can be left out")
            stopped.append(RunningJob(job.job_id, job.model, job.gpus, job.placement))
        for job in stopped:
            self.state.remove(job.job_id)
        try:
            yield self
        finally:
            for job in reversed(stopped):
                self.state.add(job)


def predictor(state: ContentionState) -> StatePredictor:
    """The ``ClusterView.predict`` of a contention state (:class:`StatePredictor`)."""
    return StatePredictor(state)


@contextmanager
def leaving_out(predict: Predictor | PlainPredict, gone: Sequence[JobView]) -> Iterator[Predictor | PlainPredict]:
    """A predictor that answers as if the running jobs ``gone`` had stopped, for the block: a
    preemptive decision's launches take its victims' GPUs, so the victims' contention must not
    count against them. Ask only it inside the block (the view's own ``predict`` may answer
    without them meanwhile). ``predict`` itself when nothing is gone or ``predict`` is a plain
    function (contention is then over-predicted); otherwise :meth:`Predictor.leaving_out`."""
    if not gone or not isinstance(predict, Predictor):
        yield predict
        return
    with predict.leaving_out(gone) as bare:
        yield bare


def isolated_of(predict: Predictor | PlainPredict) -> Callable[[Placement], bool] | None:
    """``predict.isolated``, or None when it never calls a placement isolated (a plain function,
    or a predictor that keeps the default), so a caller can skip asking."""
    if not isinstance(predict, Predictor) or type(predict).isolated is Predictor.isolated:
        return None
    return predict.isolated


def predict_all(
    predict: Predictor | PlainPredict, questions: Sequence[tuple[JobView, Placement]], pending: Sequence[tuple[JobView, Placement]] = ()
) -> list[Prediction]:
    """``[predict(job, placement, pending) for job, placement in questions]``: ``predict.many``,
    which a contention state answers in one batch; a plain function is asked one by one."""
    if isinstance(predict, Predictor):
        return predict.many(questions, pending)
    return [predict(job, placement, pending) for job, placement in questions]
