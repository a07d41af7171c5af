"""A run that ignores its stop request holds only its own GPUs, not the control loop.

Cancel, preemption and migration ask a run to checkpoint and exit; the loop waits for it at most
``stop_wait_s`` in that tick, then goes on. Later ticks poll the stopping run: it ends the way it
was stopped once it exits, or is removed once ``preempt_grace_s`` has passed. Meanwhile every
other job is launched, reaped and cancelled as usual; only a launch that needs the stopping
run's GPUs waits. The grace runs on the test's clock (``stop_clock``), so nothing here sleeps.
"""

from __future__ import annotations

from deepshare.core.types import Decision, Launch, Migrate, Placement
from deepshare.policies import make_policy
from deepshare.runtime.journal import JobState
from deepshare.runtime.launcher import RunPhase
from deepshare.runtime.metrics import SchedulerMetrics

import test_control_loop as base


def exits(rig: base.Rig, job_id: str) -> None:
    """The stubborn run checkpoints and exits after all."""
    (run,) = [r for r in rig.fake.runs.values() if r.job_id == job_id]
    run.phase = RunPhase.STOPPED


def test_a_stubborn_cancel_holds_up_no_other_job(tmp_path):
    rig = base.Rig(tmp_path / "state", make_policy("fifo+consolidated"), preempt_grace_s=30.0)
    a = rig.submit("a", 1)
    rig.loop.tick()
    rig.fake.ignore_stop.add(a)
    rig.journal.cancel(a)
    b = rig.submit("b", 2)
    report = rig.loop.tick()  # asks a to stop, and launches b beside it in the same tick
    assert report.launched == (b,) and report.ended == ()
    assert rig.state(a) is JobState.RUNNING and rig.fake.stop_requests == [(a, 1)]
    assert rig.journal.get(b).placement == (("node1", 2),)

    rig.clock.t += 10.0
    rig.fake.finish(b)
    c = rig.submit("c", 2)
    report = rig.loop.tick()  # b's end is reaped and c launched while a is still stopping
    assert report.ended == ((b, "finished"),) and report.launched == (c,)
    assert rig.state(a) is JobState.RUNNING and rig.fake.stop_requests == [(a, 1)]

    rig.clock.t += 30.0
    assert rig.loop.tick().ended == ((a, "cancelled"),)
    assert rig.fake.live() == {(c, 1)} and rig.fake.stop_requests == [(a, 1)]
    assert rig.reasons(a) == ["submitted", "launched", "cancelled"]
    assert rig.fake.oversubscribed == []


def test_a_launch_into_a_stopping_runs_gpus_waits_and_the_rest_of_the_decision_goes_on(tmp_path):
    policy = base.Scripted(
        Decision(launch=(Launch("a-1", Placement.of({0: 2})), Launch("b-2", Placement.of({1: 1})))),
        Decision(preempt=("a-1",), launch=(Launch("c-3", Placement.of({0: 2})), Launch("d-4", Placement.of({1: 1})))),
        Decision(preempt=("a-1",), launch=(Launch("c-3", Placement.of({0: 2})),)),  # asks again: not asked twice
        Decision(),
        Decision(launch=(Launch("c-3", Placement.of({0: 2})),)),
    )
    rig = base.Rig(tmp_path / "state", policy)
    rig.loop.metrics = metrics = SchedulerMetrics("test", "scripted", lambda: ({}, 0))
    a, b, c, d = (rig.submit(n, g) for n, g in (("a", 2), ("b", 1), ("c", 2), ("d", 1)))
    assert rig.loop.tick().launched == (a, b)
    rig.fake.ignore_stop.add(a)

    report = rig.loop.tick()
    assert (report.preempted, report.launched) == ((a,), (d,))  # c needs a's GPUs: it waits
    assert rig.state(a) is JobState.RUNNING and rig.state(c) is JobState.QUEUED
    report = rig.loop.tick()
    assert (report.preempted, report.launched) == ((), ())
    assert rig.fake.stop_requests == [(a, 1)] and metrics.preemptions._value.get() == 1
    assert [j.job_id for j in policy.views[2].running] == [a, b, d]  # a still holds its GPUs in the view

    exits(rig, a)
    report = rig.loop.tick()
    assert report.ended == ((a, "queued"),) and report.launched == ()
    job = rig.journal.get(a)
    assert job.preemptions == 1 and rig.reasons(a)[-1] == "preempted"
    assert rig.loop.tick().launched == (c,)
    assert rig.fake.used() == {"node0": 2, "node1": 2} and rig.fake.oversubscribed == []


def test_a_migration_waits_for_its_old_run_and_the_stopped_run_is_removed_after_the_grace(tmp_path):
    policy = base.Scripted(
        Decision(launch=(Launch("a-1", Placement.of({0: 1})),)),
        Decision(migrate=(Migrate("a-1", Placement.of({1: 1})),)),
    )
    rig = base.Rig(tmp_path / "state", policy, preempt_grace_s=5.0)
    a = rig.submit("a", 1)
    rig.loop.tick()
    rig.fake.ignore_stop.add(a)
    report = rig.loop.tick()
    assert (report.migrated, report.launched) == ((), ())  # its old run has not stopped: no second run
    assert rig.fake.live() == {(a, 1)} and rig.state(a) is JobState.RUNNING

    rig.clock.t += 5.0
    report = rig.loop.tick()
    assert report.ended == ((a, "queued"),)
    assert rig.fake.teardowns == [(a, 1)] and rig.reasons(a)[-1] == "migrating"
    assert rig.journal.get(a).preemptions == 1


def test_a_cancel_while_a_preemption_is_stopping_the_run_cancels_it(tmp_path):
    policy = base.Scripted(Decision(launch=(Launch("a-1", Placement.of({0: 1})),)), Decision(preempt=("a-1",)))
    rig = base.Rig(tmp_path / "state", policy)
    a = rig.submit("a", 1)
    rig.loop.tick()
    rig.fake.ignore_stop.add(a)
    rig.loop.tick()
    rig.journal.cancel(a)
    assert rig.loop.tick().ended == ()
    exits(rig, a)
    assert rig.loop.tick().ended == ((a, "cancelled"),)
    assert rig.fake.stop_requests == [(a, 1)] and rig.fake.live() == set()


def test_a_stopping_run_that_does_not_answer_for_a_tick_keeps_its_request_and_its_grace(tmp_path):
    rig = base.Rig(tmp_path / "state", make_policy("fifo+consolidated"), preempt_grace_s=5.0)
    a = rig.submit("a", 1)
    rig.loop.tick()
    rig.fake.ignore_stop.add(a)
    rig.journal.cancel(a)
    rig.loop.tick()  # asked at t
    (run,) = rig.fake.runs.values()
    run.phase = RunPhase.UNKNOWN  # its workers did not answer this poll
    rig.clock.t += 3.0
    assert rig.loop.tick().ended == ()
    run.phase = RunPhase.RUNNING
    rig.clock.t += 2.0
    assert rig.loop.tick().ended == ((a, "cancelled"),)  # t + 5: the first request's grace, not a new one
    assert rig.fake.stop_requests == [(a, 1)]
