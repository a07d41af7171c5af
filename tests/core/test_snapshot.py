"""Views built from outside state (service requests, the live scheduler's journal) match the
simulator's own views: same ratios, same predictions, same decisions from every policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import load_topology, uniform
from deepshare.core.traces import load
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy, policy_names

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


def known(job: JobView) -> KnownJob:
    return KnownJob(
        job.job_id, job.model, job.gpus, job.submit_time, job.remaining_s, job.attained_gpu_s,
        job.preemptions, job.placement, job.last_run_s, job.queued_since, job.estimate_s, job.user, job.group, job.vc,
    )


def rebuilt(view: ClusterView, contention) -> ClusterView:
    return build_view(
        view.topology, view.catalog, contention, view.now, view.free,
        [known(j) for j in view.queued], [known(j) for j in view.running],
        future_events=view.future_events, durations=view.durations, history=view.history,
    )


@pytest.mark.slow  # a full simulation per case
@pytest.mark.parametrize("contention_name", ["profiled", "link"])
@pytest.mark.parametrize("name", [n for n in policy_names() if "preempt" not in n][::3] + ["rl-hybrid", "las+spread+preempt"])
def test_rebuilt_views_give_the_simulators_decisions(name, contention_name):
    contention = make_contention(contention_name)
    policy = make_policy(name)
    jobs = load(TRACE).jobs[:60]
    sim = Simulator(load_topology("testbed"), jobs, contention)
    points = 0
    while (view := sim.advance()) is not None:
        decision = policy.decide(view)
        again = rebuilt(view, contention)
        assert [j.ratio for j in again.running] == pytest.approx([j.ratio for j in view.running], abs=1e-9)
        assert policy.decide(again) == decision
        sim.apply(decision)
        points += 1
    assert points > 20 and sim.done


def test_ratios_and_predictions_come_from_the_running_jobs():
    topo = uniform(2, 8)
    contention = make_contention("profiled")
    running = [
        KnownJob("a", "FSDP", 8, 0.0, 100.0, placement=Placement.of({0: 4, 1: 4})),
        KnownJob("b", "FSDP", 8, 0.0, 100.0, placement=Placement.of({0: 4, 1: 4})),
    ]
    view = build_view(topo, default_catalog(), contention, 10.0, [0, 0], [], running)
    alone = build_view(topo, default_catalog(), contention, 10.0, [4, 4], [], running[:1])
    assert view.running[0].ratio < 1.0 and alone.running[0].ratio == 1.0
    assert view.running[0].comm_class == default_catalog().class_of("FSDP")
    assert alone.predict(view.running[1], running[1].placement).ratio == pytest.approx(view.running[1].ratio)


@pytest.mark.parametrize(
    "free, queued, running, message",
    [
        ([8], [], [], "free GPUs given for 1 nodes"),
        ([9, 0], [], [], "free GPUs 9 outside 0..8"),
        ([-1, 0], [], [], "outside 0..8"),
        ([8, 8], [KnownJob("a", "FSDP", 2, 0, 1)], [KnownJob("a", "FSDP", 2, 0, 1, placement=Placement.of({0: 2}))],
         "duplicate job ids: a"),
        ([8, 8], [], [KnownJob("r", "FSDP", 2, 0, 1)], "has no placement"),
        ([8, 8], [], [KnownJob("r", "FSDP", 4, 0, 1, placement=Placement.of({0: 2}))], "holds 2 GPUs, the job has 4"),
        ([8, 8], [], [KnownJob("r", "FSDP", 2, 0, 1, placement=Placement.of({5: 2}))], "invalid placement"),
        ([7, 8], [], [KnownJob("r", "FSDP", 2, 0, 1, placement=Placement.of({0: 2}))], "hold 2 GPUs and 7 are free"),
        ([8, 8], [KnownJob("q", "FSDP", 2, 0, 1, placement=Placement.of({0: 2}))], [], "queued job 'q' has a placement"),
    ],
)
def test_inconsistent_state_is_refused(free, queued, running, message):
    with pytest.raises(DeepShareError, match=message):
        build_view(uniform(2, 8), default_catalog(), make_contention("profiled"), 0.0, free, queued, running)
