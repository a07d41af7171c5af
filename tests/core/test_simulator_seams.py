"""The simulator's seams: Placement.take/release, TIMER events, SimJobState, SimNodePool."""

from __future__ import annotations

import heapq
from itertools import count

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.events import EventKind, EventQueue
from deepshare.core.nodepool import SimNodePool
from deepshare.core.simulator import SimConfig, SimJobState, SimulationStalled, Simulator
from deepshare.core.topology import uniform
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Decision, JobSpec, Launch, Placement

MODEL = "MobileNetV3"


# -- Placement.take / release / fits ---------------------------------------------------------
def test_take_and_release_exact_numbers_on_a_list():
    free = [8, 8, 8, 8]
    p = Placement(((0, 2), (3, 5)))
    p.take(free)
    assert free == [6, 8, 8, 3]
    Placement(((3, 3),)).take(free)
    assert free == [6, 8, 8, 0]
    p.release(free)
    assert free == [8, 8, 8, 5]


def test_take_and_release_on_a_mapping():
    free = {0: 4, 7: 4}
    Placement(((7, 4),)).take(free)
    assert free == {0: 4, 7: 0}
    Placement(((0, 1), (7, 2))).release(free)
    assert free == {0: 5, 7: 2}


def test_take_does_not_check_it_may_go_negative():
    """Documented: callers validate first; an unchecked what-if (free_after) may go below zero."""
    free = [1, 0]
    Placement(((0, 3), (1, 1))).take(free)
    assert free == [-2, -1]


def test_fits():
    assert Placement(((0, 2), (1, 4))).fits([2, 4])
    assert not Placement(((0, 2), (1, 4))).fits([2, 3])
    assert Placement(()).fits([])


placements = st.dictionaries(st.integers(0, 5), st.integers(1, 8), max_size=6).map(Placement.of)


@settings(max_examples=200, deadline=None)
@given(p=placements, free=st.lists(st.integers(-4, 16), min_size=6, max_size=6))
def test_take_then_release_is_the_identity(p, free):
    before = list(free)
    p.take(free)
    assert sum(before) - sum(free) == p.total_gpus
    assert p.fits(before) == all(free[n] >= 0 for n in p.nodes)
    p.release(free)
    assert free == before


# -- TIMER events ----------------------------------------------------------------------------
def test_timers_rank_with_round_ticks_in_insertion_order():
    q = EventQueue([5.0])
    q.push(5.0, EventKind.ROUND, "", 1)
    q.push(5.0, EventKind.TIMER, "", 2)
    q.push(5.0, EventKind.COMPLETION, "j", 3)
    q.push(5.0, EventKind.TIMER, "", 4)
    q.push(5.0, EventKind.ROUND, "", 5)
    q.push(4.0, EventKind.TIMER, "", 6)
    popped = [q.pop() for _ in range(len(q))]
    assert [(t, k, v) for t, k, _, v in popped] == [
        (4.0, EventKind.TIMER, 6),
        (5.0, EventKind.COMPLETION, 3),
        (5.0, EventKind.ARRIVAL, 0),
        (5.0, EventKind.ROUND, 1),
        (5.0, EventKind.TIMER, 2),
        (5.0, EventKind.TIMER, 4),
        (5.0, EventKind.ROUND, 5),
    ]


class TimersOnRound:
    """The queue as it was: timers pushed as ROUND (kind 2) events, ties by insertion."""

    def __init__(self, arrivals):  # type: ignore[no-untyped-def]
        self.heap, self.seq = [], count()
        for i, t in enumerate(arrivals):
            heapq.heappush(self.heap, (t, 1, next(self.seq), i))

    def push(self, t, kind, tag):  # type: ignore[no-untyped-def]
        heapq.heappush(self.heap, (t, 2 if kind == EventKind.TIMER else int(kind), next(self.seq), tag))

    def pop(self):  # type: ignore[no-untyped-def]
        t, _, _, tag = heapq.heappop(self.heap)
        return t, tag


@settings(max_examples=200, deadline=None)
@given(
    arrivals=st.lists(st.sampled_from([0.0, 1.0, 2.5]), max_size=10),
    ops=st.lists(st.tuples(st.booleans(), st.sampled_from([0, 2, 3]), st.sampled_from([0.0, 0.5, 1.5]))),
)
def test_timer_order_is_the_order_timers_had_riding_round(arrivals, ops):
    new, old = EventQueue(arrivals), TimersOnRound(arrivals)
    got, want, now, tag = [], [], 0.0, 0
    for is_pop, kind, delay in ops + [(True, 0, 0.0)] * (len(arrivals) + len(ops)):
        if is_pop:
            if not len(new):
                continue
            t, k, _, version = new.pop()
            got.append((t, version))
            want.append(old.pop())
            now = t
        else:
            tag += 1
            new.push(now + delay, EventKind(kind), "", tag)
            old.push(now + delay, EventKind(kind), tag)
    assert got == want and not len(new)


class Recorder:
    """A cluster control with one 4-GPU node: up at attach, timers logged as (now, token)."""

    def __init__(self, timers):  # type: ignore[no-untyped-def]
        self.timers, self.fired, self.sim = timers, [], None

    def attach(self, sim):  # type: ignore[no-untyped-def]
        self.sim = sim
        sim.set_node_up(0, True)
        for time, token, alive in self.timers:
            sim.schedule(time, token, keeps_alive=alive)

    def on_timer(self, token):  # type: ignore[no-untyped-def]
        self.fired.append((self.sim.now, token))

    def on_change(self):  # type: ignore[no-untyped-def]
        pass


def one_job(duration: float = 100.0, gpus: int = 4) -> list[JobSpec]:
    return [JobSpec("j0", MODEL, gpus, submit_time=0.0, duration_s=duration)]


def test_simulator_fires_timers_in_time_then_insertion_order_also_after_the_last_job():
    control = Recorder([(50.0, 1, False), (10.0, 2, False), (50.0, 0, False), (500.0, 3, False)])
    sim = Simulator(uniform(1, 4), one_job(), make_contention("none"), control=control,
                    config=SimConfig(round_s=50.0))
    rep = sim.run(_first_fit())
    assert rep.records[0].finish_s == 100.0
    assert control.fired == [(10.0, 2), (50.0, 1), (50.0, 0), (500.0, 3)]  # 500 s: drained after the trace
    assert sim.now == 500.0


def test_a_keep_alive_timer_is_a_future_event():
    control = Recorder([(30.0, 7, True)])
    sim = Simulator(uniform(2, 4), one_job(), make_contention("none"), control=control)
    sim.set_node_up(0, False)  # nothing up: the job cannot start before the timer
    view = sim.advance()
    assert view is not None and view.future_events and view.total_gpus == 0
    sim.apply(Decision())  # waiting does not stall: the timer is still to come
    view = sim.advance()  # the timer is a decision point (the job is still queued)
    assert view is not None and view.now == 30.0 and control.fired == [(30.0, 7)]
    assert view.future_events and sim.idle_forever  # the view never tells whether more is to come
    with pytest.raises(SimulationStalled):
        sim.apply(Decision())


# -- SimJobState -----------------------------------------------------------------------------
def test_job_states_through_a_run():
    jobs = [*one_job(), JobSpec("big", MODEL, 16, submit_time=0.0, duration_s=10.0)]
    sim = Simulator(uniform(1, 4), jobs, make_contention("none"))
    view = sim.advance()
    assert view is not None
    assert {j: s.state for j, s in sim._jobs.items()} == {"j0": SimJobState.QUEUED}  # "big" rejected, gone
    assert sim.report().records[1].rejected
    sim.apply(Decision(launch=(Launch("j0", Placement(((0, 4),))),)))
    assert sim._jobs["j0"].state is SimJobState.RUNNING
    assert sim.advance() is None and sim.done and not sim._jobs
    assert [s.value for s in SimJobState] == ["pending", "queued", "running", "done", "rejected"]


# -- SimNodePool -----------------------------------------------------------------------------
def test_node_pool_up_down_and_the_view_topology():
    topo = uniform(2, 4)
    free = [4, 4]
    pool = SimNodePool(topo, free, EventQueue(), control=Recorder([]))
    assert free == [0, 0] and pool.up == (False, False) and pool.view_topology.capacity == (0, 0)
    pool.set_up(1, True)
    assert free == [0, 4] and pool.view_topology.capacity == (0, 4)
    pool.set_up(0, True)
    assert pool.view_topology is topo
    free[0] -= 1  # a job holds a GPU on node 0
    with pytest.raises(DeepShareError, match="still runs jobs"):
        pool.set_up(0, False)
    pool.set_up(1, False)
    assert free == [3, 0] and pool.up == (True, False)


def test_node_pool_without_a_control_and_timers_in_the_past():
    events = EventQueue()
    pool = SimNodePool(uniform(1, 2), [2], events, control=None)
    assert pool.up == (True,)
    with pytest.raises(DeepShareError, match="needs a simulator built with a ClusterControl"):
        pool.set_up(0, False)
    with pytest.raises(DeepShareError, match="before now"):
        pool.schedule(1.0, 0, keeps_alive=True, now=2.0)
    pool.schedule(3.0, 9, keeps_alive=True, now=2.0)
    assert pool.live_timers == 1 and events.pop() == (3.0, EventKind.TIMER, "", 9)


def _first_fit():  # type: ignore[no-untyped-def]
    from deepshare.policies import make_policy

    return make_policy("fifo+consolidated")


def test_counting_the_running_jobs_builds_no_views_and_keeps_the_float_path(monkeypatch):
    """``len(view.running)`` (what a learned policy's encoding reads at every step) answers
    without building a view per running job, yet leaves the simulation on exactly the floating-
    point path that reading the views does (both bring the jobs' progress to now)."""
    from deepshare.core import simulator as simulator_module
    from deepshare.core.traces import generate, mix_preset
    from deepshare.policies import make_policy

    jobs = generate(60, load=1.2, total_gpus=32, mix=mix_preset("random"), duration_sigma=1.0, seed=3).jobs
    built = []
    views = simulator_module.Simulator._running_views
    monkeypatch.setattr(simulator_module.Simulator, "_running_views", lambda self, t: built.append(t) or views(self, t))

    def run(read):  # type: ignore[no-untyped-def]
        inner = make_policy("las+consolidated")

        class Reader:
            name = "reader"

            def decide(self, view):  # type: ignore[no-untyped-def]
                read(view.running)
                return inner.decide(view)

        return Simulator(uniform(4, 8), jobs, make_contention("profiled")).run(Reader())

    counted = run(len)
    assert built == []
    viewed = run(tuple)
    assert built  # the views were built this time
    assert counted.avg_jct_s == viewed.avg_jct_s and counted.p99_jct_s == viewed.p99_jct_s
    assert counted.makespan_s == viewed.makespan_s and counted.gpu_util == viewed.gpu_util


# -- round ticks -----------------------------------------------------------------------------
class _TickRecorder:
    """A policy that records the times it is asked and launches everything first-fit."""

    name = "ticks"

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.inner = _first_fit()

    def decide(self, view):  # type: ignore[no-untyped-def]
        self.asked.append(view.now)
        return self.inner.decide(view)


def test_rounds_skip_the_idle_gap_on_their_grid():
    """While nothing is queued or running no round can decide anything: a trace with a job at
    1e11 s ticked every round_s between (3e8 empty rounds, minutes of CPU). The next round is the
    first of the same grid at or after the next event; rounds while jobs run are kept."""
    jobs = [JobSpec("a", MODEL, 4, submit_time=0.0, duration_s=100.0),
            JobSpec("b", MODEL, 4, submit_time=10_000.0, duration_s=100.0)]
    sim = Simulator(uniform(1, 4), jobs, make_contention("none"), config=SimConfig(round_s=60.0))
    report = sim.run(_first_fit())
    assert [(r.first_start_s, r.finish_s) for r in report.records] == [(0.0, 100.0), (10_000.0, 10_100.0)]
    # arrivals 2, completions 2, rounds at 60 and 120, then 10,020 (120 + 165 x 60) and 10,080 (the
    # run ends with its last job, at 10,100): 172 events when every round ticked
    assert sim.events_processed == 8

    late = [JobSpec("late", MODEL, 4, submit_time=1e11, duration_s=100.0)]
    sim = Simulator(uniform(1, 4), late, make_contention("none"), config=SimConfig(round_s=1.0))
    report = sim.run(_first_fit())
    assert report.records[0].finish_s == 1e11 + 100.0 and sim.events_processed < 110
