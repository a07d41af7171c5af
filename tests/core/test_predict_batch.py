"""A batched what-if (``predictor(state).many``) answers exactly what one question at a time does.

:func:`deepshare.core.contention.base.predictor` adds a decision's pending launches to the
contention state, predicts and removes them again; ``many`` adds them once for several
questions. That is only the same when add and remove are exact inverses: here, for every
contention model, the answers and the state's ratios afterwards are compared bit for bit with
the one-question-at-a-time sequence the encoder used before.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.contention.base import RunningJob, leaving_out, predict_all, predictor
from deepshare.core.snapshot import KnownJob, _private_predictor, build_view
from deepshare.core.topology import uniform
from deepshare.core.types import Placement
from deepshare.core.view import JobView
from deepshare.core.workloads import default_catalog

CAT = default_catalog()
TOPO = uniform(6, 8)
MODELS = ("MobileNetV3", "GraphSage", "FSDP", "Transformer-XL", "DLRM", "MoE")

placements = st.dictionaries(st.integers(0, 5), st.integers(1, 4), min_size=1, max_size=3).map(Placement.of)
jobs = st.tuples(st.sampled_from(MODELS), placements)


def view_of(job_id: str, model: str, placement: Placement) -> JobView:
    return JobView(
        job_id=job_id, model=model, gpus=placement.total_gpus, submit_time=0.0, remaining_s=1.0,
        attained_gpu_s=0.0, comm_class=CAT.class_of(model),
    )


def build(name: str, running: list[tuple[str, Placement]]):
    state = make_contention(name).new_state(TOPO, CAT)
    for i, (model, where) in enumerate(running):
        state.add(RunningJob(f"r{i}", model, where.total_gpus, where))
    return state


def one_at_a_time(state, questions, pending):
    """The pre-batch predictor, inlined: add the pending launches, predict, remove, per question."""
    answers = []
    for job, placement in questions:
        for other, where in pending:
            state.add(RunningJob(other.job_id, other.model, other.gpus, where))
        answers.append(state.predict(RunningJob(job.job_id, job.model, job.gpus, placement)))
        for other, _ in reversed(pending):
            state.remove(other.job_id)
    return answers


@pytest.mark.slow  # ~3 s: the slowest test of the quick loop
@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(("profiled", "link")),
    running=st.lists(jobs, max_size=6),
    pending=st.lists(jobs, max_size=3),
    questions=st.lists(jobs, min_size=1, max_size=6),
    after=jobs,
)
def test_many_equals_one_question_at_a_time(name, running, pending, questions, after):
    pend = [(view_of(f"p{i}", m, w), w) for i, (m, w) in enumerate(pending)]
    asks = [(view_of(f"q{i}", m, w), w) for i, (m, w) in enumerate(questions)]
    old, new = build(name, running), build(name, running)
    before = [new.ratio(f"r{i}") for i in range(len(running))]
    expected = one_at_a_time(old, asks, pend)
    predict = predictor(new)
    assert predict_all(predict, asks, pend) == expected
    assert [predict(job, where, pend) for job, where in asks] == expected
    ratios = [new.ratio(f"r{i}") for i in range(len(running))]
    assert ratios == before == [old.ratio(f"r{i}") for i in range(len(running))]
    # the states also evolve alike afterwards
    model, where = after
    extra = RunningJob("a", model, where.total_gpus, where)
    assert old.add(extra) == new.add(extra)
    assert [old.ratio(f"r{i}") for i in range(len(running))] == [new.ratio(f"r{i}") for i in range(len(running))]


def test_predict_all_falls_back_to_single_questions():
    state = build("profiled", [("MoE", Placement.of({0: 2, 1: 2}))])
    calls = []

    def plain(job, placement, pending=()):
        calls.append(job.job_id)
        return predictor(state)(job, placement, pending)

    asks = [(view_of("q0", "FSDP", Placement.of({0: 1, 2: 1})), Placement.of({0: 1, 2: 1}))]
    assert predict_all(plain, asks) == [predictor(state)(*asks[0])]
    assert calls == ["q0"]
    assert predict_all(predictor(state), []) == []



@settings(max_examples=30, deadline=None)
@given(
    running=st.lists(jobs, max_size=5),
    pendings=st.lists(st.lists(jobs, max_size=3), min_size=1, max_size=3),
    questions=st.lists(jobs, min_size=1, max_size=4),
)
def test_snapshot_many_equals_one_question_at_a_time(running, pendings, questions):
    """The service's predictor keeps a decision's pending launches added between questions; its
    batch answers what one question at a time answers, also when the pending launches change."""
    shared = predictor(build("profiled", running))  # reference: adds and removes per question
    private = _private_predictor(build("profiled", running))
    asks = [(view_of(f"q{i}", m, w), w) for i, (m, w) in enumerate(questions)]
    for n, pending in enumerate(pendings):
        pend = [(view_of(f"p{n}_{i}", m, w), w) for i, (m, w) in enumerate(pending)]
        expected = [shared(job, where, pend) for job, where in asks]
        assert predict_all(private, asks, pend) == expected
        assert [private(job, where, pend) for job, where in asks] == expected


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(("profiled", "link")),
    running=st.lists(jobs, min_size=1, max_size=4),
    launches=st.lists(jobs, max_size=4),
    questions=st.lists(jobs, min_size=1, max_size=4),
)
def test_remembered_answers_equal_fresh_ones(name, running, launches, questions):
    """The service's predictor remembers answers until the pending launches change, shared by
    jobs of one shape: asked the way a decision asks (one list that grows launch by launch,
    each question twice, by two job ids, plus questions about a running and a launched job),
    every answer is the one a fresh add-predict-remove gives."""
    shared = predictor(build(name, running))
    resident = frozenset(f"r{i}" for i in range(len(running)))
    private = _private_predictor(build(name, running), resident)
    pending: list = []
    for step in range(len(launches) + 1):
        asks = [(view_of(f"q{i}{twin}", m, w), w) for i, (m, w) in enumerate(questions) for twin in "ab"]
        model, where = running[0]
        asks.append((view_of("r0", model, where), questions[0][1]))  # a running job asked about a move
        if pending:
            asks.append((pending[0][0], questions[-1][1]))  # a launched job asked again
        expected = [shared(job, placement, pending) for job, placement in asks]
        assert [private(job, placement, pending) for job, placement in asks] == expected
        assert predict_all(private, asks, pending) == expected
        if step < len(launches):
            model, where = launches[step]
            pending.append((view_of(f"p{step}", model, where), where))  # the same list, grown


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(("profiled", "link")), running=st.lists(jobs, max_size=6), question=jobs)
def test_an_isolated_placement_is_predicted_no_contention(name, running, question):
    """A state's ``isolated(placement)`` (which lets contention-aware placement skip predicting)
    is only ever True where the prediction is exactly no slowdown, for the job and the others."""
    from deepshare.core.contention.base import isolated_of
    from deepshare.core.view import Prediction

    state = build(name, running)
    model, where = question
    isolated = isolated_of(predictor(state))
    if name == "profiled":
        assert isolated is not None and isolated(where) == (where.num_nodes == 1)
    if isolated is not None and isolated(where):
        assert state.predict(RunningJob("q", model, where.total_gpus, where)) == Prediction(1.0)


def running_views(running):
    return [
        JobView(job_id=f"r{i}", model=m, gpus=w.total_gpus, submit_time=0.0, remaining_s=1.0, attained_gpu_s=0.0,
                comm_class=CAT.class_of(m), placement=w)
        for i, (m, w) in enumerate(running)
    ]


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(("profiled", "link")),
    running=st.lists(jobs, min_size=1, max_size=5),
    gone=st.sets(st.integers(0, 4), min_size=1, max_size=3),
    pending=st.lists(jobs, max_size=3),
    questions=st.lists(jobs, min_size=1, max_size=4),
)
def test_leaving_out_answers_as_a_state_that_never_had_those_jobs(name, running, gone, pending, questions):
    """A preemptive decision predicts with its victims gone (``leaving_out``): the answers are
    those of a state built without them, and the simulator's state afterwards is bit for bit what
    it was (its ratios, and how it evolves next), for the simulator's predictor and the service's."""
    views = running_views(running)
    victims = [views[i] for i in sorted(gone) if i < len(views)]
    pend = [(view_of(f"p{i}", m, w), w) for i, (m, w) in enumerate(pending)]
    asks = [(view_of(f"q{i}", m, w), w) for i, (m, w) in enumerate(questions)]
    fresh = make_contention(name).new_state(TOPO, CAT)
    for i, (m, w) in enumerate(running):
        if i not in gone:
            fresh.add(RunningJob(f"r{i}", m, w.total_gpus, w))
    expected = one_at_a_time(fresh, asks, pend)
    live = build(name, running)
    before = [live.ratio(f"r{i}") for i in range(len(running))]
    with leaving_out(predictor(live), victims) as bare:
        assert [bare(job, where, pend) for job, where in asks] == expected
        assert predict_all(bare, asks, pend) == expected
    assert [live.ratio(f"r{i}") for i in range(len(running))] == before
    model, where = questions[0]
    extra = RunningJob("a", model, where.total_gpus, where)
    reference = build(name, running)
    assert live.add(extra) == reference.add(extra)
    assert [live.ratio(f"r{i}") for i in range(len(running))] == [reference.ratio(f"r{i}") for i in range(len(running))]
    held = [0] * len(TOPO.nodes)
    for _, w in running:
        for node, gpus in w.alloc:
            held[node] += gpus
    if max(held) <= 8:  # the service's view of the same jobs (a real cluster holds at most 8 GPUs a node)
        served = build_view(TOPO, CAT, make_contention(name), 10.0, [8 - h for h in held], [],
                            [KnownJob(f"r{i}", m, w.total_gpus, 0.0, 1.0, placement=w) for i, (m, w) in enumerate(running)])
        with leaving_out(served.predict, victims) as bare:
            assert predict_all(bare, asks, pend) == expected
        assert predict_all(served.predict, asks, pend) == one_at_a_time(build(name, running), asks, pend)  # left as it was


def test_leaving_out_nothing_or_on_a_plain_function_is_the_predictor_itself():
    state = build("profiled", [("MoE", Placement.of({0: 2, 1: 2}))])
    predict = predictor(state)
    with leaving_out(predict, []) as same:
        assert same is predict
    plain = lambda job, placement, pending=(): predict(job, placement, pending)  # noqa: E731 - no ``leaving_out``
    with leaving_out(plain, running_views([("MoE", Placement.of({0: 2, 1: 2}))])) as same:
        assert same is plain
