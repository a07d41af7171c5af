"""The :class:`~deepshare.core.view.Predictor` contract: a wrapper is correct by construction.

A view's ``predict`` has abilities besides answering one question (a batch, isolated placements,
leaving a preemptive decision's victims out). They are methods with correct defaults, and a
wrapper derived from :class:`ForwardingPredictor` forwards each of them: one that overrides only
``__call__`` still batches and still leaves victims out (they were attributes forwarded by hand,
and a forgotten one silently over-predicted contention).
"""

from __future__ import annotations

from typing import Sequence

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.contention.base import RunningJob, isolated_of, leaving_out, predict_all, predictor
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import uniform
from deepshare.core.types import Placement
from deepshare.core.view import ForwardingPredictor, JobView, Prediction, Predictor, Question, as_predictor
from deepshare.core.workloads import default_catalog

CAT = default_catalog()
TOPO = uniform(4, 8)
RUNNING = [("MoE", Placement.of({0: 4, 1: 4})), ("Transformer-XL", Placement.of({1: 4, 2: 4})), ("DLRM", Placement.of({2: 4, 3: 4}))]


def view_of(job_id: str, model: str, where: Placement, running: bool = False) -> JobView:
    return JobView(job_id, model, where.total_gpus, 0.0, 1.0, 0.0, CAT.class_of(model), placement=where if running else None)


VICTIMS = [view_of("r0", *RUNNING[0], running=True)]
ASKS = [(view_of(f"q{i}", "FSDP", where), where) for i, where in enumerate(
    [Placement.of({0: 2, 1: 2}), Placement.of({0: 4}), Placement.of({1: 2, 3: 2}), Placement.of({0: 1, 2: 1, 3: 2})]
)]
PENDING = [(view_of("p0", "GraphSage", Placement.of({0: 2, 3: 2})), Placement.of({0: 2, 3: 2}))]


class Counting:
    """A contention state that counts its ``add`` calls (a batch adds the pending launches once)."""

    def __init__(self, state) -> None:  # type: ignore[no-untyped-def]
        self.state = state
        self.adds = 0

    def add(self, job: RunningJob) -> set[str]:
        self.adds += 1
        return self.state.add(job)

    def remove(self, job_id: str) -> set[str]:
        return self.state.remove(job_id)

    def ratio(self, job_id: str) -> float:
        return self.state.ratio(job_id)

    def predict(self, job: RunningJob) -> Prediction:
        return self.state.predict(job)


def state_of(name: str = "profiled", without: frozenset[int] = frozenset()):  # type: ignore[no-untyped-def]
    state = make_contention(name).new_state(TOPO, CAT)
    for i, (model, where) in enumerate(RUNNING):
        if i not in without:
            state.add(RunningJob(f"r{i}", model, where.total_gpus, where))
    return state


class Watching(ForwardingPredictor):
    """A wrapper that overrides ``__call__`` only: it records the single questions asked."""

    __slots__ = ("asked",)

    def __init__(self, inner: Predictor) -> None:
        super().__init__(inner)
        self.asked: list[str] = []

    def __call__(self, job: JobView, placement: Placement, pending: Sequence[Question] = ()) -> Prediction:
        self.asked.append(job.job_id)
        return self.inner(job, placement, pending)


def one_at_a_time(state, asks, pending) -> list[Prediction]:  # type: ignore[no-untyped-def]
    return [predictor(state)(job, where, pending) for job, where in asks]


@pytest.mark.parametrize("name", ["profiled", "link"])
def test_a_wrapper_overriding_only_call_still_batches(name):
    counting = Counting(state_of(name))
    wrapped = Watching(predictor(counting))
    expected = one_at_a_time(state_of(name), ASKS, PENDING)
    counting.adds = 0
    assert predict_all(wrapped, ASKS, PENDING) == expected
    assert counting.adds == len(PENDING)  # the inner batch: the pending launch added once, not per question
    assert wrapped.asked == []


@pytest.mark.parametrize("name", ["profiled", "link"])
def test_a_wrapper_overriding_only_call_leaves_victims_out(name):
    expected = one_at_a_time(state_of(name, without=frozenset({0})), ASKS, PENDING)
    live = state_of(name)
    wrapped = Watching(predictor(live))
    with leaving_out(wrapped, VICTIMS) as bare:
        assert isinstance(bare, Watching)  # the wrapper's behaviour stays on
        assert [bare(job, where, PENDING) for job, where in ASKS] == expected
        assert predict_all(bare, ASKS, PENDING) == expected
        assert bare.asked == [job.job_id for job, _ in ASKS]
    assert predict_all(wrapped, ASKS, PENDING) == one_at_a_time(state_of(name), ASKS, PENDING)  # put back


def test_a_wrapper_of_the_services_predictor_leaves_victims_out():
    running = [KnownJob(f"r{i}", m, w.total_gpus, 0.0, 1.0, placement=w) for i, (m, w) in enumerate(RUNNING)]
    view = build_view(TOPO, CAT, make_contention("profiled"), 10.0, [0, 0, 0, 0], [], running)
    wrapped = Watching(view.predict)
    with leaving_out(wrapped, VICTIMS) as bare:
        assert isinstance(bare, Watching) and bare.inner is not wrapped.inner  # a predictor of its own, wrapped alike
        assert predict_all(bare, ASKS, PENDING) == one_at_a_time(state_of(without=frozenset({0})), ASKS, PENDING)
        with leaving_out(bare, [view_of("r1", *RUNNING[1], running=True)]) as barer:  # nested: both gone
            assert predict_all(barer, ASKS, PENDING) == one_at_a_time(state_of(without=frozenset({0, 1})), ASKS, PENDING)
    assert predict_all(wrapped, ASKS, PENDING) == one_at_a_time(state_of(), ASKS, PENDING)


def test_a_wrapper_passes_isolated_placements_on():
    wrapped = Watching(predictor(state_of("profiled")))
    isolated = isolated_of(wrapped)
    assert isolated is not None
    assert isolated(Placement.of({0: 4})) and not isolated(Placement.of({0: 2, 1: 2}))


def test_the_defaults_are_correct_for_any_predictor():
    inner = predictor(state_of())

    class Bare(Predictor):
        __slots__ = ()

        def __call__(self, job: JobView, placement: Placement, pending: Sequence[Question] = ()) -> Prediction:
            return inner(job, placement, pending)

    bare = Bare()
    assert bare.many(ASKS, PENDING) == one_at_a_time(state_of(), ASKS, PENDING)
    assert isolated_of(bare) is None  # never isolated: a caller asks every placement
    with leaving_out(bare, VICTIMS) as same:
        assert same is bare  # cannot leave jobs out: over-predicts, never under
    plain = lambda job, placement, pending=(): inner(job, placement, pending)  # noqa: E731
    assert as_predictor(plain).many(ASKS, PENDING) == one_at_a_time(state_of(), ASKS, PENDING)
    assert as_predictor(inner) is inner


def test_a_predictor_without_call_is_refused_where_it_is_defined():
    with pytest.raises(TypeError, match="without defining __call__"):

        class Nothing(Predictor):  # noqa: F841
            pass

