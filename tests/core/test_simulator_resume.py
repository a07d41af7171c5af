"""The simulator's explicit resume constructor: ``Simulator(..., resume=ResumePoint(...))`` is what
``Simulator.from_view`` builds, and the hot constructor carries no reference mode (that is
``deepshare.core.reference.ReferenceSimulator``, which the scale tests compare against)."""

from __future__ import annotations

import inspect

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.reference import ReferenceSimulator
from deepshare.core.simulator import ResumePoint, SimConfig, Simulator
from deepshare.core.topology import uniform
from deepshare.core.traces import generate, mix_preset
from deepshare.core.types import JobSpec
from deepshare.policies import make_policy

CONFIG = SimConfig(round_s=300.0, preempt_overhead_s=0.0, migrate_overhead_s=0.0)


def _paused(decisions: int = 12):
    jobs = generate(30, load=1.3, total_gpus=32, mix=mix_preset("heavy"), seed=3).jobs
    sim, policy = Simulator(uniform(4, 8), jobs, make_contention("profiled"), config=CONFIG), make_policy("las+packed")
    view = sim.advance()
    for _ in range(decisions):
        sim.apply(policy.decide(view))
        view = sim.advance()
    assert view is not None and view.running and view.queued
    return jobs, view


def test_the_resume_point_holds_what_the_view_shows():
    _, view = _paused()
    point = ResumePoint.of_view(view)
    assert point.now == view.now and point.free == tuple(view.free)
    assert point.jobs == (*view.running, *view.queued)
    specs = point.specs()
    assert [s.job_id for s in specs] == [v.job_id for v in point.jobs]
    assert all(s.submit_time <= point.now for s in specs)


def test_from_view_is_the_resume_constructor():
    jobs, view = _paused()
    future = [j for j in jobs if j.submit_time > view.now]
    policy = make_policy("las+packed")
    via_view = Simulator.from_view(view, make_contention("profiled"), CONFIG, future).run(policy)
    direct = Simulator(view.topology, future, make_contention("profiled"), view.catalog, CONFIG, history=view.history,
                       resume=ResumePoint.of_view(view)).run(make_policy("las+packed"))
    assert via_view.to_dict() == direct.to_dict()


def test_a_resumed_run_refuses_jobs_submitted_by_its_time():
    _, view = _paused()
    early = JobSpec("early", "resnet50", 1, view.now, duration_s=10.0)
    with pytest.raises(DeepShareError, match="after the view's time"):
        Simulator(view.topology, [early], make_contention("profiled"), resume=ResumePoint.of_view(view))


def test_the_constructor_has_no_reference_mode():
    assert "reference_views" not in inspect.signature(Simulator).parameters
    jobs = generate(20, load=1.2, total_gpus=8, mix=mix_preset("random"), seed=1).jobs
    fast = Simulator(uniform(2, 4), jobs, make_contention("profiled")).run(make_policy("fifo+consolidated"))
    ref = ReferenceSimulator(uniform(2, 4), jobs, make_contention("profiled")).run(make_policy("fifo+consolidated"))
    assert fast.to_dict() == ref.to_dict()
