"""What quota preemption plans for: only jobs that need something stopped or withdrawn, and
within a bounded number of plans that ask the wrapped policy."""

from __future__ import annotations

from tenant_cases import job, run

from deepshare.core.contention import make_contention
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.tenants import Admitted, parse_tenants

TWO_NODES = parse_topology("name: two\nnode_types:\n  g: {gpus: 8}\nnodes:\n  - {type: g, count: 2, prefix: n}\n")


def test_a_job_the_policy_holds_on_purpose_gets_no_plan_with_or_without_victims():
    # +backfill reserves node 1 for x-head (8 GPUs, at b-small's end) and so does not launch
    # a-long (2 GPUs, 100,000 s), which would delay it. a is within its nominal quota and b
    # borrows 2, but a-long lacks neither quota nor GPUs: the what-if view (a-long alone queued)
    # would launch it, and the reclaim planner used to add that launch, with no victim or by
    # stopping b-small, breaking the reservation.
    tenants = parse_tenants("queues:\n  - {name: a, cohort: main, nominal_gpus: 8}\n"
                            "  - {name: b, cohort: main, nominal_gpus: 8}\n  - {name: x, nominal_gpus: 16}\n")
    running = [
        KnownJob("b-big", "resnet50", 8, 0.0, 10_000.0, placement=Placement(((0, 8),)), last_run_s=10.0, queue="b"),
        KnownJob("b-small", "resnet50", 2, 0.0, 50.0, placement=Placement(((1, 2),)), last_run_s=10.0, queue="b"),
    ]
    queued = [KnownJob("x-head", "resnet50", 8, 1.0, 100.0, queue="x"),
              KnownJob("a-long", "resnet50", 2, 2.0, 100_000.0, queue="a")]
    view = build_view(TWO_NODES, default_catalog(), make_contention("profiled"), 100.0, [0, 6], queued, running)
    inner = make_policy("fifo+consolidated+backfill")
    assert not inner.decide(view).launch
    decision = Admitted(inner, tenants).decide(view)
    assert (decision.launch, decision.preempt) == ((), ())


def test_reclaim_keeps_a_backfill_reservation_in_a_run():
    # The same in a run: x-head waits 99 s for its reservation, with reclaim on as with it off
    # (it waited 999 s behind a-long when the planner launched a-long past the policy).
    tenants = ("queues:\n  - {name: a, cohort: main, nominal_gpus: 4}\n  - {name: b, cohort: main, nominal_gpus: 4}\n"
               "  - {name: x, nominal_gpus: 8}\n")
    jobs = [job("b1", "b", 4, 0.0, 1000.0), job("b2", "b", 2, 0.0, 100.0),
            job("x-head", "x", 4, 1.0, 50.0), job("a-long", "a", 2, 2.0, 5000.0)]
    waits = {}
    for reclaim in (True, False):
        report = run(tenants, jobs, policy="fifo+consolidated+backfill", reclaim=reclaim)
        waits[reclaim] = {r.job_id: r.queue_s for r in report.records}
    assert waits[True]["x-head"] == waits[False]["x-head"] == 99.0
    assert waits[True] == waits[False]


def test_hopeless_jobs_ahead_do_not_use_up_the_plans():
    # Eight high-priority 8-GPU jobs of a (within nominal) come first, but the free GPUs (none)
    # and b's borrowed 4 could never hold one; behind them c-small (4 GPUs, within c's nominal
    # quota) is placed by stopping b-borrow. The eight used to count against MAX_PLANS though
    # no plan for them ever asked the policy, so c-small was never tried.
    from deepshare.tenants.wrapper import MAX_PLANS

    tenants = parse_tenants("queues:\n  - {name: a, cohort: main, nominal_gpus: 16}\n"
                            "  - {name: b, cohort: main, nominal_gpus: 0}\n  - {name: c, cohort: main, nominal_gpus: 4}\n"
                            "  - {name: d, nominal_gpus: 12}\npriority_classes: {low: 0, high: 10}\n")
    running = [
        KnownJob("b-borrow", "resnet50", 4, 0.0, 10_000.0, placement=Placement(((0, 4),)), last_run_s=10.0, queue="b"),
        KnownJob("d-job", "resnet50", 12, 0.0, 10_000.0, placement=Placement(((0, 4), (1, 8))), last_run_s=10.0, queue="d"),
    ]
    for hopeless in (1, MAX_PLANS, 3 * MAX_PLANS):
        queued = [KnownJob(f"a-big{i}", "resnet50", 8, 1.0 + i, 100.0, queue="a", priority="high") for i in range(hopeless)]
        queued.append(KnownJob("c-small", "resnet50", 4, 500.0, 100.0, queue="c", priority="low"))
        view = build_view(TWO_NODES, default_catalog(), make_contention("profiled"), 1000.0, [0, 0], queued, running)
        decision = Admitted(make_policy("fifo+consolidated"), tenants).decide(view)
        assert ([launch.job_id for launch in decision.launch], decision.preempt) == (["c-small"], ("b-borrow",)), hopeless
