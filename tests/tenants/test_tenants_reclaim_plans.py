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


ONE_NODE = parse_topology("name: one\nnode_types:\n  g: {gpus: 8}\nnodes:\n  - {type: g, count: 1, prefix: n}\n")


def test_a_within_nominal_job_is_planned_for_before_a_borrowing_one_of_a_higher_class():
    # a (nominal 6) and b (nominal 2) lend to each other; b-low (b, 4 GPUs, low) borrows 2. a1
    # (6, low) is within a's quota but the cohort's 8 are overdrawn (4 + 6); b-mid (6, mid)
    # would borrow. b-mid, the higher class, used to be planned first: it stopped b-low and
    # launched, b borrowing 4, and a1's reclaim found nothing left to stop, so a1 waited 300 s
    # for b-mid. Within-nominal jobs go first (Kueue's order): a1 reclaims b-low and starts at
    # 10; b-mid then has nothing to stop and waits for a1 (a 6 + b 6 > 8) until 110.
    tenants = "queues:\n  - {name: a, cohort: c, nominal_gpus: 6}\n  - {name: b, cohort: c, nominal_gpus: 2}\n" \
              "priority_classes: {low: 0, mid: 5}\n"
    jobs = [job("b-low", "b", 4, at=0.0, duration=1000.0, priority="low"),
            job("a1", "a", 6, at=10.0, duration=100.0, priority="low"),
            job("b-mid", "b", 6, at=10.0, duration=300.0, priority="mid")]
    starts = {r.job_id: r.first_start_s for r in run(tenants, jobs).records}
    assert starts == {"b-low": 0.0, "a1": 10.0, "b-mid": 110.0}


def _b_low_x_and(queued, x_gpus):  # type: ignore[no-untyped-def]
    running = [KnownJob("b-low", "resnet50", 4, 0.0, 1000.0, placement=Placement(((0, 4),)), last_run_s=1.0, queue="b",
                        priority="low"),
               KnownJob("x0", "resnet50", x_gpus, 0.0, 40.0, placement=Placement(((0, x_gpus),)), last_run_s=1.0, queue="x")]
    return build_view(ONE_NODE, default_catalog(), make_contention("profiled"), 10.0, [4 - x_gpus], queued, running)


def test_a_borrowing_jobs_priority_plan_does_not_take_victims_a_within_nominal_job_reclaims():
    # b (nominal 2, borrowing limit 2) runs b-low (4, low): it borrows 2; x0 fills the node. a1
    # (a, 4: within a's 6, admitted) lacks GPUs; b-mid (b, 4, mid) is over b's limit. Planned
    # first, b-mid's priority plan stopped b-low and took its place (b still borrowing 2: nothing
    # raised) and a1's reclaim had nothing left to stop. Now a1 reclaims b-low first; b-mid is
    # then within b's limit and waits for GPUs.
    tenants = parse_tenants("queues:\n  - {name: a, cohort: c, nominal_gpus: 6}\n"
                            "  - {name: b, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2}\n"
                            "  - {name: x, nominal_gpus: 4}\npriority_classes: {low: 0, mid: 5}\n")
    queued = [KnownJob("a1", "resnet50", 4, 5.0, 100.0, queue="a", priority="low"),
              KnownJob("b-mid", "resnet50", 4, 5.0, 100.0, queue="b", priority="mid")]
    decision = Admitted(make_policy("fifo+consolidated"), tenants).decide(_b_low_x_and(queued, 4))
    assert ([launch.job_id for launch in decision.launch], decision.preempt) == (["a1"], ("b-low",))


def test_a_priority_plan_does_not_borrow_the_room_a_within_nominal_job_is_guaranteed():
    # a and b (nominal 4 each) lend to each other; b-low (b, 4, low) and x0 (queue x, 2 GPUs)
    # run, 2 GPUs free. a1 (a, 4) is within a's quota and admitted, but lacks GPUs until x0
    # ends; nothing of the cohort borrows, so nothing is reclaimed for it. b-mid (b, 6, mid)
    # would borrow 2: its priority plan (stop b-low, 6 GPUs free) used to launch it, the cohort
    # then 6 + a1's 4 > 8, so a1's guaranteed quota went to a borrower (to be reclaimed, b-mid
    # stopped, once x0 ends). As Kueue reserves a1's quota in the cycle, the plan is refused.
    tenants = parse_tenants("queues:\n  - {name: a, cohort: c, nominal_gpus: 4}\n  - {name: b, cohort: c, nominal_gpus: 4}\n"
                            "  - {name: x, nominal_gpus: 4}\npriority_classes: {low: 0, mid: 5}\n")
    queued = [KnownJob("a1", "resnet50", 4, 5.0, 100.0, queue="a", priority="low"),
              KnownJob("b-mid", "resnet50", 6, 5.0, 100.0, queue="b", priority="mid")]
    decision = Admitted(make_policy("fifo+consolidated"), tenants).decide(_b_low_x_and(queued, 2))
    assert (decision.launch, decision.preempt) == ((), ())
    # without a1 waiting, the same plan goes: b-mid's priority over b-low within its own queue
    alone = Admitted(make_policy("fifo+consolidated"), tenants).decide(_b_low_x_and(queued[1:], 2))
    assert ([launch.job_id for launch in alone.launch], alone.preempt) == (["b-mid"], ("b-low",))
