"""The simulator's pending view (no queue copy per decision) gives exactly the straightforward
implementation's decisions, reports and per-job tables, for every registered non-learned policy.

Reference: :class:`~deepshare.core.reference.ReferenceSimulator` (a tuple copy of the queue at every decision, as
before) driving the policy with ``use_index=False`` (a full sort of the queue at every decision).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.pending import PendingJobs
from deepshare.core.reference import ReferenceSimulator
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy, policy_names
from deepshare.policies.heuristic import HeuristicPolicy
from deepshare.policies.migrate import Migrating

HEURISTICS = policy_names(heuristics_only=True)
MODELS = default_catalog().models


def drive(sim: Simulator, choose) -> list:
    """Run ``sim`` to the end; ``choose(step)`` is the policy deciding at that step."""
    decisions = []
    step = 0
    while (view := sim.advance()) is not None:
        decision = choose(step).decide(view)
        del view
        decisions.append(decision)
        sim.apply(decision)
        step += 1
    return decisions


def make_jobs(raw) -> list[JobSpec]:
    return [JobSpec(f"j{i}", m, g, s, duration_s=d) for i, (m, g, s, d) in enumerate(raw)]


jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(MODELS),
        st.sampled_from([1, 2, 3, 4, 8, 16]),
        st.floats(min_value=0, max_value=20_000, allow_nan=False),
        st.floats(min_value=60, max_value=20_000, allow_nan=False),
    ),
    min_size=1,
    max_size=40,
)


def reference_of(name: str) -> HeuristicPolicy | Migrating:
    policy = make_policy(name)
    if isinstance(policy, Migrating):  # a +migrate variant: its heuristic, unindexed, under the same rule
        assert isinstance(policy.base, HeuristicPolicy)
        return replace(policy, base=replace(policy.base, use_index=False))
    assert isinstance(policy, HeuristicPolicy)
    return replace(policy, use_index=False)


def build(raw, nodes: int, gpus: int, round_s, reference: bool) -> Simulator:
    return (ReferenceSimulator if reference else Simulator)(
        uniform(nodes, gpus), make_jobs(raw), make_contention("profiled"), config=SimConfig(round_s=round_s),
    )


@settings(max_examples=120, deadline=None)
@given(
    raw=jobs_strategy,
    name=st.sampled_from(HEURISTICS),
    nodes=st.integers(1, 4),
    gpus=st.sampled_from([2, 4, 8]),
    round_s=st.sampled_from([None, 300.0]),
)
def test_every_heuristic_matches_the_reference(raw, name, nodes, gpus, round_s):
    fast_policy, ref_policy = make_policy(name), reference_of(name)
    fast = build(raw, nodes, gpus, round_s, reference=False)
    ref = build(raw, nodes, gpus, round_s, reference=True)
    assert drive(fast, lambda _: fast_policy) == drive(ref, lambda _: ref_policy)
    fast_report, ref_report = fast.report(name), ref.report(name)
    assert fast_report.to_dict() == ref_report.to_dict()
    assert fast_report.jobs_csv() == ref_report.jobs_csv()


@settings(max_examples=60, deadline=None)
@given(
    raw=jobs_strategy,
    names=st.lists(st.sampled_from(HEURISTICS), min_size=2, max_size=3),
    picks=st.lists(st.integers(0, 2), min_size=1, max_size=60),
    nodes=st.integers(1, 3),
)
def test_indexes_stay_exact_when_other_policies_decide_in_between(raw, names, picks, nodes):
    """Several indexed policies take turns on one simulation: each index sees queue changes it
    did not make (and launches it planned that never happened) and must still match the queue."""
    fast_policies = [make_policy(n) for n in names]
    ref_policies = [reference_of(n) for n in names]

    def turn(policies):
        return lambda step: policies[picks[step % len(picks)] % len(policies)]

    fast = build(raw, nodes, 4, None, reference=False)
    ref = build(raw, nodes, 4, None, reference=True)
    assert drive(fast, turn(fast_policies)) == drive(ref, turn(ref_policies))


def test_a_view_kept_after_apply_still_shows_its_own_queue():
    jobs = [JobSpec(f"j{i}", "resnet50", 4, 0.0, duration_s=100.0) for i in range(4)]
    sim = Simulator(uniform(1, 4), jobs, make_contention("none"))
    view = sim.advance()
    assert isinstance(view.queued, PendingJobs)
    before = [j.job_id for j in view.queued]
    assert before == ["j0", "j1", "j2", "j3"]
    sim.apply(make_policy("fifo+consolidated").decide(view))
    assert [j.job_id for j in view.queued] == before  # frozen copy, not the live queue
    assert len(view.queued) == 4 and view.queued[0].job_id == "j0" and view.queued[1:][0].job_id == "j1"
    later = sim.advance()
    assert [j.job_id for j in later.queued] == ["j1", "j2", "j3"]
    changes = later.queued.changes(view.queued.position)
    assert [(added, j.job_id) for added, j in changes] == [(False, "j0")]


def test_a_decision_that_is_not_applied_leaves_the_index_exact():
    jobs = [JobSpec(f"j{i}", "resnet50", g, 0.0, duration_s=100.0 * (i + 1)) for i, g in enumerate([2, 2, 4, 1])]
    sim = Simulator(uniform(1, 4), jobs, make_contention("none"))
    policy = make_policy("srtf+consolidated")
    view = sim.advance()
    first = policy.decide(view)
    assert policy.decide(view) == first  # asked again: the jobs it took are back in its index
    assert [l.job_id for l in first.launch] == ["j0", "j1"]


def test_old_positions_are_refused_not_guessed():
    jobs = [JobSpec(f"j{i}", "resnet50", 1, float(i), duration_s=10.0) for i in range(6)]
    sim = Simulator(uniform(1, 1), jobs, make_contention("none"))
    policy = make_policy("fifo+consolidated")
    positions = []
    while (view := sim.advance()) is not None:
        positions.append(view.queued.position)
        current = view.queued
        sim.apply(policy.decide(view))
    assert current.changes(positions[-1]) == []
    assert current.changes(positions[0]) is None  # trimmed: a caller then re-reads the queue
    assert current.changes(positions[-1] + 1) is None


@pytest.mark.parametrize("name", ["fifo+consolidated", "las+packed"])
def test_run_matches_reference_on_a_burst(name):
    """Every job at t = 0 (the queue at its longest): run() with its dropped views."""
    raw = [(MODELS[i % len(MODELS)], [1, 2, 4, 8][i % 4], 0.0, 100.0 + 37 * i) for i in range(300)]
    fast = build(raw, 4, 8, None, reference=False).run(make_policy(name))
    ref = build(raw, 4, 8, None, reference=True).run(reference_of(name))
    assert fast.to_dict() == ref.to_dict()
    assert fast.jobs_csv() == ref.jobs_csv()


class HeapOfEverything:
    """The event queue as it was: every arrival pushed into the heap at the start, in trace order."""

    def __init__(self, arrival_times):
        import heapq
        from itertools import count

        self._heapq, self._heap, self._seq = heapq, [], count()
        for i, t in enumerate(arrival_times):
            self.push(t, 1, i)

    def push(self, time, kind, tag):
        self._heapq.heappush(self._heap, (time, kind, next(self._seq), tag))

    def pop(self):
        time, kind, _, tag = self._heapq.heappop(self._heap)
        return time, kind, tag


@settings(max_examples=200, deadline=None)
@given(
    arrivals=st.lists(st.sampled_from([0.0, 1.0, 2.5, 4.0, 7.0]), max_size=25),
    ops=st.lists(st.tuples(st.booleans(), st.sampled_from([0, 2]), st.sampled_from([0.0, 0.5, 1.5, 3.0]))),
)
def test_arrival_stream_pops_in_the_order_the_heap_of_everything_did(arrivals, ops):
    from deepshare.core.events import EventKind, EventQueue

    new, old = EventQueue(arrivals), HeapOfEverything(arrivals)
    got, want, now, tag = [], [], 0.0, 0
    for is_pop, kind, delay in ops + [(True, 0, 0.0)] * (len(arrivals) + len(ops)):
        if is_pop:
            if not len(new):
                continue
            assert new.peek_time() == old._heap[0][0]
            t, k, job_id, version = new.pop()
            got.append((t, int(k), version if k is EventKind.ARRIVAL else int(job_id)))
            want.append(old.pop())
            now = t
        else:
            tag += 1
            new.push(now + delay, EventKind(kind), str(tag))
            old.push(now + delay, kind, tag)
    assert got == want and not len(new) and not old._heap
    with pytest.raises(ValueError):
        new.push(1.0, EventKind.ARRIVAL)


@pytest.mark.parametrize("name", ["fifo+consolidated", "srsf+packed", "las+contention-aware"])
def test_run_never_copies_the_queue_and_the_index_never_rebuilds(name, monkeypatch):
    """The per-decision work is O(changes): run() drops each view before apply(), so no queue
    copy is made, and the index inserts each queued job once (a rebuild would re-insert all)."""
    from deepshare.core import pending
    from deepshare.policies.queue_index import QueueIndex

    copies, inserts = [], []
    real_tuple, real_insert = pending.PendingJobs._tuple, QueueIndex._insert
    monkeypatch.setattr(pending.PendingJobs, "freeze", lambda self: copies.append("freeze"))
    monkeypatch.setattr(pending.PendingJobs, "_tuple", lambda self: copies.append("tuple") or real_tuple(self))
    monkeypatch.setattr(QueueIndex, "_insert", lambda self, job: inserts.append(job.job_id) or real_insert(self, job))
    raw = [(MODELS[i % len(MODELS)], [1, 2, 4, 8][i % 4], float(i // 50) * 100.0, 100.0 + 37 * i) for i in range(400)]
    sim = build(raw, 4, 8, None, reference=False)
    report = sim.run(make_policy(name))
    assert report.finished == 400 and report.decisions > 50
    assert copies == ["tuple"]  # once in the whole run: the index's first build reads the queue
    assert sorted(inserts) == sorted(f"j{i}" for i in range(400))
