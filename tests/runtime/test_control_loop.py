"""The live ControlLoop's logic without Ray: a real journal (SQLite in tmp_path, a fake clock), a
real or scripted policy, and the in-memory :class:`FakeLauncher` in place of Ray.

Covers queue -> launch -> finish, run outcomes (rank failed, worker lost, node gone), launch
failures (retried with exact back-off, then FAILED with the error; GPUs not granted never
count), cancel in every state, recovery from the journal after a restart, and a policy's
decisions applied exactly on 2 nodes x 2 GPUs. Runs in a few seconds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fake_launcher import FakeLauncher

from deepshare.core.contention import make_contention
from deepshare.core.types import Decision, Launch, Migrate, Placement, WAIT
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.runtime.journal import JobState, Journal
from deepshare.runtime.launcher import LaunchError
from deepshare.runtime.loop import ControlLoop, LoopConfig
from deepshare.runtime.ports import Launcher
from deepshare.runtime.spec import spec_from_json

NODES = {"node0": 2, "node1": 2}
MISSING = "[Errno 2] No such file or directory: '/nonexistent/bin'"


class Clock:
    """The journal's clock: moves only when a test says so."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Scripted:
    """A policy that answers the given decisions in order (then waits), keeping the views it saw."""

    name = "scripted"

    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)
        self.views: list[Any] = []  # ClusterViews (typed loosely: the lead is moving the class)

    def decide(self, view: Any) -> Decision:
        self.views.append(view)
        return self.decisions.pop(0) if self.decisions else WAIT


class Rig:
    def __init__(self, state: Path, policy: Any, nodes: dict[str, int] | None = None, **config: Any) -> None:
        self.state_dir = state
        self.clock = Clock()
        self.journal = Journal(state, clock=self.clock)
        self.fake = FakeLauncher(dict(nodes or NODES))
        self.policy = policy
        self.config = LoopConfig(**{"interval_s": 0.01, "preempt_grace_s": 5.0, "stop_wait_s": 0.0, "launch_retry_s": 10.0,
                                    **config})
        self.loop = self.make_loop()

    def make_loop(self) -> ControlLoop:
        return ControlLoop(self.journal, self.policy, default_catalog(), make_contention("profiled"), self.config,
                           launcher=self.fake, stop_clock=self.clock)  # the grace runs on the test's clock

    def submit(self, name: str, gpus: int, model: str = "GraphSage") -> str:
        job = self.journal.submit(spec_from_json(dict(
            name=name, gpus=gpus, model=model, command=["true"], checkpoint_dir=str(self.state_dir.parent / "ckpt"))))
        self.clock.t += 1.0  # distinct submit times: FIFO order is submission order
        return job.job_id

    def state(self, job_id: str) -> JobState:
        return self.journal.get(job_id).state

    def reasons(self, job_id: str) -> list[str]:
        return [t.reason for t in self.journal.transitions(job_id)]


@pytest.fixture
def fifo(tmp_path):
    return Rig(tmp_path / "state", make_policy("fifo+consolidated"))


def test_fake_launcher_is_a_launcher():
    assert isinstance(FakeLauncher(dict(NODES)), Launcher)


def test_queue_launch_report_finish(fifo):
    a = fifo.submit("a", 2)
    report = fifo.loop.tick()
    assert report.error is None and report.launched == (a,)
    job = fifo.journal.get(a)
    assert job.state is JobState.RUNNING and job.attempt == 1 and job.placement == (("node0", 2),)
    assert fifo.fake.launches == [(a, 1, (("node0", 2),))]
    assert job.predicted_throughput == pytest.approx(default_catalog().throughput("GraphSage", 2, 1))  # alone: ratio 1

    fifo.clock.t += 5.0
    fifo.fake.report(a, samples=640.0, step=40, throughput=128.0)
    assert fifo.loop.tick().ended == ()
    job = fifo.journal.get(a)
    assert (job.samples, job.step, job.throughput) == (640.0, 40, 128.0)

    fifo.clock.t += 5.0
    fifo.fake.finish(a)
    report = fifo.loop.tick()
    assert report.ended == ((a, "finished"),)
    job = fifo.journal.get(a)
    assert job.state is JobState.FINISHED and job.attained_gpu_s == 2 * 10.0 and job.error is None
    assert fifo.fake.teardowns == [(a, 1)] and fifo.fake.live() == set()
    assert fifo.reasons(a) == ["submitted", "launched", "finished"]


def test_rank_failure_fails_the_job_with_the_log_tail(fifo):
    a = fifo.submit("a", 1)
    fifo.loop.tick()
    fifo.fake.fail(a, "rank 0 exited with status 3:\nTraceback ... ValueError: bad lr")
    assert fifo.loop.tick().ended == ((a, "failed"),)
    job = fifo.journal.get(a)
    assert job.state is JobState.FAILED and job.error.endswith("ValueError: bad lr")
    assert fifo.fake.live() == set()


def test_lost_worker_and_lost_node_requeue_and_relaunch(fifo):
    a = fifo.submit("a", 1)
    fifo.loop.tick()
    fifo.fake.lose(a)
    report = fifo.loop.tick()  # reaped QUEUED, then relaunched in the same tick (its GPUs are free again)
    assert report.ended == ((a, "queued"),) and report.launched == (a,)
    assert fifo.reasons(a)[2].startswith("a worker died") and fifo.journal.get(a).attempt == 2

    fifo.fake.remove_node("node0")
    report = fifo.loop.tick()
    assert report.ended == ((a, "queued"),) and report.launched == (a,)
    assert fifo.reasons(a)[4] == "node lost; requeued to resume from its checkpoint"
    job = fifo.journal.get(a)
    assert job.attempt == 3 and job.placement == (("node1", 1),) and job.preemptions == 0
    assert fifo.fake.live() == {(a, 3)} and (a, 2) in fifo.fake.teardowns


def test_launch_failures_back_off_then_fail_with_the_error(fifo):
    a = fifo.submit("a", 1)
    t0 = fifo.clock.t
    fifo.fake.fail_launches(a, *(LaunchError(MISSING) for _ in range(3)))
    assert fifo.loop.tick().ended == ((a, "queued"),)  # failure 1 at t0: back off 10 s
    for at, launches in ((t0 + 9.9, 1), (t0 + 10.0, 2), (t0 + 29.9, 2), (t0 + 30.0, 3)):  # then 20 s
        fifo.clock.t = at
        fifo.loop.tick()
        assert len(fifo.fake.launches) == launches, at
    job = fifo.journal.get(a)
    assert job.state is JobState.FAILED and job.attempt == 3
    assert job.error == f"launch failed 3 time(s) in a row; last: {MISSING}"
    assert fifo.reasons(a)[-1] == f"launch failed: {MISSING}"
    assert [attempt for _, attempt, _ in fifo.fake.launches] == [1, 2, 3] and fifo.fake.live() == set()
    fifo.clock.t += 100.0
    fifo.loop.tick()
    assert len(fifo.fake.launches) == 3  # a failed job is never launched again


def test_a_success_resets_the_count_of_failed_launches(fifo):
    a = fifo.submit("a", 1)
    fifo.fake.fail_launches(a, LaunchError(MISSING), LaunchError(MISSING))
    for dt in (0.0, 10.0, 20.0):
        fifo.clock.t += dt
        fifo.loop.tick()
    assert fifo.state(a) is JobState.RUNNING and fifo.journal.get(a).attempt == 3
    fifo.fake.lose(a)
    fifo.fake.fail_launches(a, LaunchError(MISSING), LaunchError(MISSING))
    fifo.loop.tick()  # lost, relaunch fails: 1 in a row, not 3
    assert fifo.state(a) is JobState.QUEUED and fifo.journal.launch_failures(a)[0] == 1


def test_gpus_not_granted_never_count(fifo):
    a = fifo.submit("a", 1)
    fifo.fake.fail_launches(a, *(LaunchError("GPUs not granted within 30 s", counts=False) for _ in range(5)))
    for _ in range(5):  # no back-off, no limit
        assert fifo.loop.tick().ended == ((a, "queued"),)
    assert fifo.journal.get(a).error is None
    assert fifo.loop.tick().launched == (a,)
    assert fifo.reasons(a)[2] == "launch waited: GPUs not granted within 30 s"


def test_cancel_queued_job(fifo):
    big, a = fifo.submit("big", 4), fifo.submit("a", 1)
    fifo.loop.tick()
    assert fifo.state(a) is JobState.QUEUED  # the cluster is full
    assert fifo.journal.cancel(a) is JobState.CANCELLED
    fifo.fake.finish(big)
    fifo.loop.tick()
    assert [j for j, _, _ in fifo.fake.launches] == [big] and fifo.reasons(a) == ["submitted", "cancelled"]


def test_cancel_mark_on_a_queued_job_is_honoured(fifo):
    a = fifo.submit("a", 1)
    fifo.journal.request_cancel(a)  # the mark an older version could leave on a queued job
    assert fifo.loop.tick().ended == ((a, "cancelled"),)
    assert fifo.fake.launches == []


def test_cancel_running_job_stops_it(fifo):
    a = fifo.submit("a", 2)
    fifo.loop.tick()
    assert fifo.journal.cancel(a) is JobState.RUNNING
    assert fifo.loop.tick().ended == ((a, "cancelled"),)
    assert fifo.fake.stop_requests == [(a, 1)] and fifo.fake.teardowns == [(a, 1)] and fifo.fake.live() == set()
    assert fifo.reasons(a) == ["submitted", "launched", "cancelled"]


def test_cancel_running_job_that_ignores_the_stop(tmp_path):
    """Asked once; the ticks go on while it keeps running; removed by the first tick past the grace."""
    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"), preempt_grace_s=5.0)
    a = rig.submit("a", 1)
    rig.loop.tick()
    rig.fake.ignore_stop.add(a)
    rig.journal.cancel(a)
    for _ in range(3):  # asked at the first of these ticks
        assert rig.loop.tick().ended == ()
        assert rig.state(a) is JobState.RUNNING and rig.fake.live() == {(a, 1)}
        rig.clock.t += 2.0
    assert rig.loop.tick().ended == ((a, "cancelled"),)  # 6 s after the request
    assert rig.fake.live() == set() and rig.fake.stop_requests == [(a, 1)] and rig.fake.teardowns == [(a, 1)]


def test_cancel_of_a_run_that_finished_first_keeps_finished(fifo):
    a = fifo.submit("a", 1)
    fifo.loop.tick()
    fifo.journal.cancel(a)
    fifo.fake.finish(a)
    assert fifo.loop.tick().ended == ((a, "finished"),)
    assert fifo.fake.stop_requests == []


def test_cancel_during_a_failing_launch_cancels(fifo):
    a = fifo.submit("a", 1)
    fifo.fake.fail_launches(a, LaunchError(MISSING))
    fifo.fake.on_launch = lambda job_id, attempt: fifo.journal.cancel(job_id)  # job is RUNNING: marked
    assert fifo.loop.tick().ended == ((a, "cancelled"),)
    assert fifo.reasons(a)[-1] == f"launch failed: {MISSING}; cancelled"


def test_cancel_during_a_successful_launch_stops_it_next_tick(fifo):
    a = fifo.submit("a", 1)
    fifo.fake.on_launch = lambda job_id, attempt: fifo.journal.cancel(job_id)
    assert fifo.loop.tick().launched == (a,)
    assert fifo.loop.tick().ended == ((a, "cancelled"),)
    assert fifo.fake.live() == set()


def test_cancel_between_relaunches(fifo):
    a = fifo.submit("a", 1)
    fifo.fake.fail_launches(a, LaunchError(MISSING), LaunchError(MISSING))
    fifo.loop.tick()
    assert fifo.state(a) is JobState.QUEUED  # backing off
    assert fifo.journal.cancel(a) is JobState.CANCELLED
    fifo.clock.t += 60.0
    fifo.loop.tick()
    assert len(fifo.fake.launches) == 1 and fifo.state(a) is JobState.CANCELLED


def test_recovery_reattaches_live_runs_and_requeues_lost_ones(tmp_path):
    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"))
    a, b, c = rig.submit("a", 2), rig.submit("b", 2), rig.submit("c", 1)
    rig.loop.tick()
    assert {j: rig.journal.get(j).placement for j in (a, b)} == {a: (("node0", 2),), b: (("node1", 2),)}
    rig.journal.close()  # the scheduler dies; a's run survives, b's does not
    rig.fake.vanish(b)

    rig.journal = Journal(rig.state_dir, clock=rig.clock)  # restart on the same state folder
    rig.loop = rig.make_loop()
    assert rig.loop.recover() == ([a], [b])
    assert rig.fake.remembered == [(a, 1, (("node0", 2),))]  # a's nodes keep the names it was journalled under
    assert rig.fake.teardowns == [(b, 1)]  # leftovers removed before the requeue
    assert rig.reasons(b)[-1] == "scheduler restarted; run not found" and rig.state(c) is JobState.QUEUED
    report = rig.loop.tick()  # FIFO: b (2 GPUs, on the node it had) before c
    assert report.launched == (b,) and rig.journal.get(b).attempt == 2
    assert [j for j, _, _ in rig.fake.launches] == [a, b, b]  # a never relaunched
    rig.fake.finish(a)
    assert rig.loop.tick().ended == ((a, "finished"),) and rig.state(c) is JobState.RUNNING


def test_a_quarantined_run_is_removed_after_a_restart(tmp_path):
    """A running job's row is quarantined by a read (the API's), and the scheduler dies before its
    next tick: the run to remove was kept in memory only, so it held its GPUs for good while
    every launch onto them failed. The journal keeps it until the loop has removed it."""
    import sqlite3

    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"), nodes={"node0": 2})
    bad = rig.submit("bad", 2)
    rig.loop.tick()
    db = sqlite3.connect(rig.state_dir / "journal.sqlite")
    db.execute("UPDATE jobs SET spec='{not json' WHERE id=?", (bad,))
    db.commit()
    db.close()
    assert rig.state(bad) is JobState.FAILED  # GET /v1/jobs/ID quarantines it
    rig.journal.close()  # the scheduler dies before its next tick

    rig.journal = Journal(rig.state_dir, clock=rig.clock)
    rig.loop = rig.make_loop()
    assert rig.loop.recover() == ([], [])
    good = rig.submit("good", 2)
    assert rig.loop.tick().launched == (good,)
    assert rig.fake.teardowns == [(bad, 1)] and rig.fake.live() == {(good, 1)}
    assert rig.journal.orphans() == [] and rig.journal.runs(bad)[0].ended is not None
    rig.loop.tick()
    assert rig.fake.teardowns == [(bad, 1)]  # removed once


def test_scripted_decisions_are_applied_exactly(tmp_path):
    policy = Scripted(
        Decision(launch=(Launch("a-1", Placement.of({0: 1, 1: 1})), Launch("b-2", Placement.of({0: 1})))),
        Decision(preempt=("b-2",), migrate=(Migrate("a-1", Placement.of({1: 2})),)),
        Decision(launch=(Launch("c-3", Placement.of({0: 1})),)),
        Decision(launch=(Launch("b-2", Placement.of({1: 1})),)),  # node1 has no free GPU: infeasible
    )
    rig = Rig(tmp_path / "state", policy)
    a, b, c = rig.submit("a", 2), rig.submit("b", 1), rig.submit("c", 1)

    report = rig.loop.tick()
    assert report.launched == (a, b)
    assert rig.journal.get(a).placement == (("node0", 1), ("node1", 1))
    assert rig.journal.get(b).placement == (("node0", 1),)
    assert sorted(rig.fake.launches) == [(a, 1, (("node0", 1), ("node1", 1))), (b, 1, (("node0", 1),))]
    assert rig.fake.used() == {"node0": 2, "node1": 1}

    report = rig.loop.tick()
    view = policy.views[1]
    assert view.free == (0, 1) and [j.job_id for j in view.running] == [a, b] and [j.job_id for j in view.queued] == [c]
    assert (report.preempted, report.migrated, report.launched) == ((b,), (a,), (a,))
    assert rig.fake.stop_requests == [(b, 1), (a, 1)] and rig.fake.teardowns == [(b, 1), (a, 1)]
    job_a = rig.journal.get(a)
    assert job_a.placement == (("node1", 2),) and job_a.attempt == 2 and job_a.preemptions == 1
    assert rig.state(b) is JobState.QUEUED and rig.journal.get(b).preemptions == 1
    assert rig.reasons(a)[2] == "migrating" and rig.reasons(b)[2] == "preempted"
    assert rig.fake.used() == {"node1": 2}

    assert rig.loop.tick().launched == (c,)
    view = policy.views[2]
    assert view.free == (2, 0) and [j.job_id for j in view.queued] == [b, c]
    assert rig.journal.get(c).placement == (("node0", 1),)
    assert rig.fake.used() == {"node0": 1, "node1": 2}

    report = rig.loop.tick()
    assert report.error == "policy policy: job 'b-2': 1 GPUs on node1 but only 0 free" and report.launched == ()
    assert rig.state(b) is JobState.QUEUED and len(rig.fake.launches) == 4
    assert rig.fake.oversubscribed == []


def test_a_launch_after_a_migration_in_one_decision(tmp_path):
    """The migrating job's new run is predicted against the jobs still running, not against itself."""
    policy = Scripted(
        Decision(launch=(Launch("a-1", Placement.of({0: 1})),)),
        Decision(launch=(Launch("b-2", Placement.of({0: 1})),), migrate=(Migrate("a-1", Placement.of({1: 1})),)),
    )
    rig = Rig(tmp_path / "state", policy)
    a, b = rig.submit("a", 1), rig.submit("b", 1)
    rig.loop.tick()
    report = rig.loop.tick()
    assert (report.migrated, report.launched) == ((a,), (a, b))


def test_fifo_consolidated_on_two_by_two(fifo):
    """By hand: a(1) -> node0 (best fit, first of equals), b(2) -> node1 (the only fit), c(1) ->
    node0, d(1) waits; when b ends, d -> node1."""
    a, b, c, d = (fifo.submit(n, g) for n, g in (("a", 1), ("b", 2), ("c", 1), ("d", 1)))
    assert fifo.loop.tick().launched == (a, b, c)
    assert {j: fifo.journal.get(j).placement for j in (a, b, c)} == {
        a: (("node0", 1),), b: (("node1", 2),), c: (("node0", 1),)}
    assert fifo.state(d) is JobState.QUEUED
    fifo.fake.finish(b)
    report = fifo.loop.tick()
    assert report.ended == ((b, "finished"),) and report.launched == (d,)
    assert fifo.journal.get(d).placement == (("node1", 1),)


OPS = st.lists(st.tuples(st.sampled_from(["submit", "finish", "fail", "lose", "cancel", "cancel_running", "tick"]),
                         st.integers(0, 7), st.integers(1, 4)), max_size=30)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, stubborn=st.sets(st.integers(0, 7), max_size=4))
def test_the_cluster_always_matches_the_journal(tmp_path_factory, ops, stubborn):
    """Whatever happens, after every tick: the runs on the cluster are exactly the journal's
    RUNNING jobs' current runs, no node ever holds more GPUs than it has, no run is asked to stop
    twice, and none outlives its stop request by more than the grace. The runs of the ``stubborn``
    jobs (by submission number) ignore stop requests: they stay stopping for up to three ticks
    (12 s grace, 5 s a tick) while the policy goes on deciding. A tick follows every operation
    ("tick" alone only lets time pass)."""
    rig = Rig(tmp_path_factory.mktemp("j") / "state", make_policy("las+consolidated+preempt"),  # preempts: new jobs attained least
              preempt_grace_s=12.0)
    ids: list[str] = []
    asked: dict[tuple[str, int], float] = {}  # run -> when it was first asked to stop
    for op, pick, gpus in ops:
        running = [j.job_id for j in rig.journal.jobs(JobState.RUNNING)]
        if op == "submit":
            if len(ids) in stubborn:
                rig.fake.ignore_stop.add(f"j{len(ids)}-{len(ids) + 1}")
            ids.append(rig.submit(f"j{len(ids)}", gpus))
        elif op in ("finish", "fail", "lose") and running:
            getattr(rig.fake, op)(*([running[pick % len(running)]] + (["boom"] if op == "fail" else [])))
        elif op in ("cancel", "cancel_running") and (pool := running if op == "cancel_running" else ids):
            try:
                rig.journal.cancel(pool[pick % len(pool)])
            except Exception:  # noqa: BLE001 - already over
                pass
        rig.clock.t += 5.0
        rig.loop.tick()
        for run in rig.fake.stop_requests:
            asked.setdefault(run, rig.clock.t)
        assert rig.fake.live() == {(j.job_id, j.attempt) for j in rig.journal.jobs(JobState.RUNNING)}
        assert all(rig.fake.used().get(n, 0) <= g for n, g in NODES.items())
        assert rig.fake.oversubscribed == []
        assert len(rig.fake.stop_requests) == len(set(rig.fake.stop_requests))
        assert not [run for run in rig.fake.live() if run in asked and rig.clock.t >= asked[run] + 12.0]
    rig.journal.close()


# -- what the policy knows live: estimates, features, history ----------------------------------
def test_the_live_view_counts_down_estimates_and_learns_from_finished_jobs(tmp_path):
    """The same information model as the simulator's ``estimated``: a spec's requested_s (or the
    flat prior) minus the time run; features as submitted; a history of the journal's finished
    jobs, read once each."""
    policy = Scripted()
    rig = Rig(tmp_path / "state", policy)
    ckpt = str(tmp_path / "ckpt")

    def submit(name: str, **extra: Any) -> str:
        job = rig.journal.submit(spec_from_json(dict(name=name, gpus=2, model="FSDP", command=["true"],
                                                     checkpoint_dir=ckpt, **extra)))
        rig.clock.t += 1.0
        return job.job_id

    a = submit("a", requested_s=900.0, user="ann", group="nightly", vc="vision")
    submit("b", expected_duration_s=300.0)  # the older name of requested_s
    submit("c")
    rig.policy.decisions = [Decision(launch=(Launch(a, Placement.of({0: 2})),))]
    rig.loop.tick()
    rig.clock.t += 100.0
    rig.loop.tick()
    view = policy.views[-1]
    assert view.durations == "estimated" and len(view.history) == 0
    (ra,) = view.running
    assert (ra.remaining_s, ra.estimate_s, ra.user, ra.group, ra.vc) == (800.0, 900.0, "ann", "nightly", "vision")
    qb, qc = view.queued
    assert (qb.remaining_s, qb.estimate_s) == (300.0, 300.0)
    assert (qc.remaining_s, qc.estimate_s, qc.user) == (3600.0, None, None)

    rig.fake.finish(a)
    rig.clock.t += 50.0
    rig.loop.tick()
    view = policy.views[-1]
    (done,) = view.history
    assert (done.job_id, done.run_s, done.user, done.group, done.gpus) == (a, 150.0, "ann", "nightly", 2)
    assert view.history.forecast(2, group="nightly").run_s == pytest.approx(150.0)
    rig.loop.tick()  # nothing new finished: the history is not read again
    assert len(policy.views[-1].history) == 1

    restarted = rig.make_loop()  # a restart reads the journal's finished jobs back
    restarted.tick()
    assert [j.job_id for j in policy.views[-1].history] == [a]


def test_a_live_spec_takes_requested_s_or_its_older_name_not_both():
    from deepshare.core.errors import DeepShareError

    base = dict(name="x", gpus=1, model="FSDP", command=["true"], checkpoint_dir="/tmp/c")
    assert spec_from_json({**base, "requested_s": 5.0}).estimate_s == 5.0
    assert spec_from_json({**base, "expected_duration_s": 7.0}).estimate_s == 7.0
    with pytest.raises(DeepShareError, match="not both"):
        spec_from_json({**base, "requested_s": 5.0, "expected_duration_s": 7.0})
    with pytest.raises(DeepShareError, match="user"):
        spec_from_json({**base, "user": ""})


# -- the decision deadline ----------------------------------------------------------------------
class Told:
    """A policy that waits, noting the time it was told it had."""

    name = "told"

    def __init__(self) -> None:
        self.told: list[float | None] = []

    def decide(self, view: Any) -> Decision:
        from deepshare.core.interrupt import time_left

        self.told.append(time_left())
        return WAIT


class Hurried(Told):
    """A policy that decides until its caller's check stops it (noting the time it was told it had)."""

    name = "hurried"

    def decide(self, view: Any) -> Decision:
        from deepshare.core.interrupt import checkpoint

        super().decide(view)
        while True:
            checkpoint()
            time.sleep(0.01)


def test_a_decision_still_running_at_the_timeout_is_stopped_and_nothing_is_applied(tmp_path):
    rig = Rig(tmp_path / "state", Hurried(), decision_timeout_s=0.2)
    a = rig.submit("a", 2)
    start = time.monotonic()
    report = rig.loop.tick()
    assert 0.2 <= time.monotonic() - start < 2.0
    assert report.error == "policy policy: no decision within 0.2 s; nothing applied this tick"
    assert rig.loop.last_error == report.error
    assert report.launched == () and rig.state(a) is JobState.QUEUED and rig.fake.launches == []
    assert 0 < rig.policy.told[0] <= 0.2


def test_a_decision_stopped_at_the_timeout_is_in_the_latency_metric(tmp_path):
    from types import SimpleNamespace

    seen: list[float] = []
    rig = Rig(tmp_path / "state", Hurried(), decision_timeout_s=0.2)
    rig.loop.metrics = SimpleNamespace(decision_latency=SimpleNamespace(observe=seen.append))
    rig.submit("a", 2)
    assert rig.loop.tick().error is not None
    assert len(seen) == 1 and 0.2 <= seen[0] < 2.0


def test_the_policy_is_told_the_time_left_and_nothing_without_a_timeout(tmp_path):
    bounded = Rig(tmp_path / "a", Told())
    bounded.submit("a", 2)
    assert bounded.loop.tick().error is None
    assert 59.0 < bounded.policy.told[0] <= 60.0  # the default: 60 s
    unbounded = Rig(tmp_path / "b", Told(), decision_timeout_s=None)
    unbounded.submit("a", 2)
    unbounded.loop.tick()
    assert unbounded.policy.told == [None]


def test_the_planner_answers_within_the_timeout(tmp_path):
    # Its candidates (consolidated, spread) disagree on where the first two jobs go; each base
    # decision in its rollouts (the other two jobs wait for them) takes 0.1 s, so its 4 futures x
    # 2 candidates would take seconds. With a 0.5 s timeout it answers on the futures done by
    # 0.4 s, and the two jobs are launched.
    from deepshare.policies.planner import Planner, PlannerConfig

    class Slowed:
        def __init__(self, name: str) -> None:
            self.inner = make_policy(name)

        def decide(self, view: Any) -> Decision:
            time.sleep(0.1)
            return self.inner.decide(view)

    config = PlannerConfig(futures=4, candidates=("fifo+consolidated", "fifo+spread"), contention="none", arrivals=False)
    planner = Planner(config, Slowed)
    rig = Rig(tmp_path / "state", planner, decision_timeout_s=0.5)
    a, b = rig.submit("a", 2), rig.submit("b", 2)
    rig.submit("c", 2), rig.submit("d", 2)
    start = time.monotonic()
    report = rig.loop.tick()
    assert time.monotonic() - start < 1.0
    assert report.error is None and report.launched == (a, b)
    assert planner.stats.contested == 1 and planner.stats.budget_hits == 1 and planner.stats.last_futures < 4


class RacingAPI:
    """A policy during whose decision the API (another thread) cancels a queued job and two
    running jobs finish: the decision then names jobs that are no longer queued or running."""

    name = "racing"

    def __init__(self, rig: "Rig") -> None:
        self.rig, self.calls = rig, 0

    def decide(self, view: Any) -> Decision:
        self.calls += 1
        if self.calls == 1:
            return Decision(launch=(Launch("a-1", Placement.of({0: 2})), Launch("d-4", Placement.of({1: 1})),
                                    Launch("e-5", Placement.of({1: 1}))))
        if self.calls == 2:
            journal = self.rig.journal
            journal.cancel("c-3")  # DELETE /v1/jobs/c-3 while the policy decides
            for job_id in ("d-4", "e-5"):
                journal.end_run(job_id, 1, JobState.FINISHED, "finished")
            return Decision(preempt=("a-1", "d-4"), migrate=(Migrate("e-5", Placement.of({0: 1})),),
                            launch=(Launch("b-2", Placement.of({0: 1})), Launch("c-3", Placement.of({0: 1}))))
        return WAIT


def test_jobs_cancelled_or_ended_while_the_policy_decides_are_skipped_not_a_half_applied_tick(tmp_path):
    rig = Rig(tmp_path / "state", None, nodes={"node0": 4, "node1": 2})
    rig.policy = RacingAPI(rig)
    rig.loop = rig.make_loop()
    for name, gpus in (("a", 2), ("b", 1), ("c", 1), ("d", 1), ("e", 1)):
        rig.submit(name, gpus)
    assert rig.loop.tick().launched == ("a-1", "d-4", "e-5")
    report = rig.loop.tick()
    assert report.error is None and report.launched == ("b-2",) and report.preempted == ("a-1",)
    assert report.migrated == ()
    assert rig.state("b-2") is JobState.RUNNING and ("b-2", 1) in rig.fake.live()  # journalled and launched
    assert (rig.state("a-1"), rig.state("c-3")) == (JobState.QUEUED, JobState.CANCELLED)
    assert rig.journal.get("c-3").attempt == 0  # never started
    later = rig.loop.tick()
    assert later.error is None and ("b-2", "queued") not in later.ended  # b-2's run was not lost
    assert rig.reasons("b-2") == ["submitted", "launched"]


def test_a_journal_locked_part_way_through_a_ticks_starts_launches_the_runs_it_journalled(tmp_path, monkeypatch):
    """An operator's sqlite3 shell holds the journal while the loop journals a tick's starts: the
    first start was journalled RUNNING, the second raised, and the tick ended there, the first
    never launched; the next tick found its run missing and requeued it as lost."""
    import sqlite3

    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"))
    a, b, c = rig.submit("a", 2), rig.submit("b", 2), rig.submit("c", 2)
    real = rig.journal.start_run
    calls = []

    def locked_after_the_first(job_id, alloc, predicted):  # type: ignore[no-untyped-def]
        calls.append(job_id)
        if len(calls) > 1:
            raise sqlite3.OperationalError("database is locked")
        return real(job_id, alloc, predicted)

    monkeypatch.setattr(rig.journal, "start_run", locked_after_the_first)
    report = rig.loop.tick()
    assert calls == [a, b]  # no start tried after the lock: each would wait out SQLite's busy timeout
    assert report.launched == (a,) and ("a-1", 1) in rig.fake.live()
    assert "journal" in (report.error or "") and "database is locked" in report.error
    assert (rig.state(b), rig.state(c)) == (JobState.QUEUED, JobState.QUEUED)
    monkeypatch.setattr(rig.journal, "start_run", real)  # the shell let go
    later = rig.loop.tick()
    assert later.error is None and later.ended == () and later.launched == (b,)  # c: no GPUs left
    assert rig.reasons(a) == ["submitted", "launched"]  # a's run was launched, never "lost"


def test_a_journal_failing_to_read_back_a_started_job_still_launches_the_runs_before_it(tmp_path, monkeypatch):
    """The read of a job's record right after its start is journalled raised out of the tick,
    leaving every run journalled earlier in the tick RUNNING but never launched."""
    import sqlite3

    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"))
    a, b = rig.submit("a", 2), rig.submit("b", 2)
    real = rig.journal.get

    def locked_for_b(job_id):  # type: ignore[no-untyped-def]
        if job_id == b:
            raise sqlite3.OperationalError("database is locked")
        return real(job_id)

    monkeypatch.setattr(rig.journal, "get", locked_for_b)
    report = rig.loop.tick()
    assert report.launched == (a,) and ("a-1", 1) in rig.fake.live()
    assert "database is locked" in (report.error or "")
