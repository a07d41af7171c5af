"""A ``+preempt`` policy behind admission stops only the jobs the tenants' rules let it stop."""

from __future__ import annotations

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import Decision, Launch, Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.tenants import Admitted, parse_tenants

TWO_NODES = parse_topology("""
name: two
node_types:
  g: {gpus: 8}
nodes:
  - {type: g, count: 2, prefix: n}
""")
PREEMPTIVE = ("srsf+consolidated+preempt", "srsf+topo-aware+preempt", "bsrsf+uncontended+preempt")


def view(tenants_yaml: str, running: list[KnownJob], queued: list[KnownJob]):  # type: ignore[no-untyped-def]
    tenants = parse_tenants(tenants_yaml)
    return tenants, build_view(TWO_NODES, default_catalog(), make_contention("profiled"), 100.0, [0, 0], queued, running)


def whole_cluster(job_id: str, queue: str, priority: str) -> KnownJob:
    return KnownJob(job_id, "FSDP", 16, 0.0, 10_000.0, placement=Placement(((0, 8), (1, 8))), last_run_s=10.0,
                    queue=queue, priority=priority)


@pytest.mark.parametrize("policy", PREEMPTIVE)
def test_another_queues_job_inside_its_quota_is_never_preempted(policy):
    # both queues may hold the whole cluster (nominal 16 each, standalone): b's job is inside its quota
    tenants, v = view("""
queues:
  - {name: team-a, nominal_gpus: 16}
  - {name: team-b, nominal_gpus: 16}
priority_classes: {low: 0, high: 100}
""", [whole_cluster("b-critical", "team-b", "high")], [KnownJob("a-low", "FSDP", 8, 1.0, 10.0, queue="team-a", priority="low")])
    if policy.startswith("srsf"):  # the order alone would stop it: the short job ranks first
        assert make_policy(policy).decide(v).preempt == ("b-critical",)
    decision = Admitted(make_policy(policy), tenants).decide(v)
    assert decision.preempt == () and decision.launch == ()


@pytest.mark.parametrize("policy", PREEMPTIVE)
def test_the_orders_own_preemption_stays_inside_a_queue(policy):
    # the quota admits the short job (24 > 16 + 8), the cluster is full: the order preempts inside the queue
    tenants, v = view("""
queues:
  - {name: team-a, nominal_gpus: 24}
""", [whole_cluster("a-long", "team-a", None)], [KnownJob("a-short", "FSDP", 8, 1.0, 10.0, queue="team-a")])
    decision = Admitted(make_policy(policy), tenants).decide(v)
    assert decision.preempt == ("a-long",) and [launch.job_id for launch in decision.launch] == ["a-short"]


def test_a_borrower_may_be_preempted_for_its_cohort():
    tenants, v = view("""
queues:
  - {name: team-a, cohort: main, nominal_gpus: 8}
  - {name: team-b, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 8}
""", [whole_cluster("b-borrowing", "team-b", None)], [KnownJob("a-short", "FSDP", 8, 1.0, 10.0, queue="team-a")])
    decision = Admitted(make_policy("srsf+consolidated+preempt"), tenants).decide(v)
    assert decision.preempt == ("b-borrowing",) and [launch.job_id for launch in decision.launch] == ["a-short"]


def test_a_launch_its_nominal_quota_does_not_cover_reclaims_nothing():
    # team-b borrows (16 of nominal 8), but team-a's 16-GPU job (admitted: idle team-c lends) is
    # beyond team-a's own nominal 8: reclaim is for a job its queue's guarantee covers, so
    # team-b's jobs keep running
    tenants, v = view("""
queues:
  - {name: team-a, cohort: main, nominal_gpus: 8}
  - {name: team-b, cohort: main, nominal_gpus: 8}
  - {name: team-c, cohort: main, nominal_gpus: 16}
""", [KnownJob(f"b{i}", "FSDP", 8, 0.0, 10_000.0, placement=Placement(((i, 8),)), last_run_s=10.0, queue="team-b")
      for i in range(2)], [KnownJob("a-wide", "FSDP", 16, 1.0, 10.0, queue="team-a")])
    inner = make_policy("srsf+consolidated+preempt")
    assert set(inner.decide(v).preempt) == {"b0", "b1"}  # the order alone would stop both
    decision = Admitted(inner, tenants).decide(v)
    assert decision.preempt == () and decision.launch == ()


def test_reclaim_never_takes_a_queue_below_its_nominal_quota():
    # team-b runs four 4-GPU jobs (16, nominal 8: it borrows 8); team-a's 16-GPU job is inside its
    # nominal 16 but needs all four stopped: the order would, the tenants' rules allow two (team-b
    # then holds its nominal 8), and two free too little: nothing is stopped for nothing
    tenants, v = view("""
queues:
  - {name: team-a, cohort: main, nominal_gpus: 16}
  - {name: team-b, cohort: main, nominal_gpus: 8}
  - {name: team-c, cohort: main, nominal_gpus: 8}
""", [KnownJob(f"b{i}", "FSDP", 4, 0.0, 10_000.0, placement=Placement(((i // 2, 4),)), last_run_s=10.0, queue="team-b")
      for i in range(4)], [KnownJob("a-wide", "FSDP", 16, 1.0, 10.0, queue="team-a")])
    inner = make_policy("srsf+consolidated+preempt")
    assert len(inner.decide(v).preempt) == 4
    decision = Admitted(inner, tenants).decide(v)
    assert decision.preempt == () and decision.launch == ()


@pytest.mark.parametrize("round_s", [None, 5.0])
def test_a_borrowing_launch_never_pushes_another_queue_below_nominal_in_a_run(round_s):
    """Queue b runs 8 GPUs (nominal 4); queue a's 8-GPU job (nominal 4, admitted on idle c's
    quota) came and srtf+preempt stopped all of b for it, then b's jobs took the GPUs back in
    turn (with decision rounds: 9 preemptions, a's 50-s job done after 3,070 s)."""
    from deepshare.core.contention import ProfiledContention
    from deepshare.core.simulator import SimConfig, Simulator
    from deepshare.core.topology import uniform
    from deepshare.core.types import JobSpec

    tenants = parse_tenants("""
queues:
  - {name: a, cohort: main, nominal_gpus: 4}
  - {name: b, cohort: main, nominal_gpus: 4}
  - {name: c, cohort: main, nominal_gpus: 8}
""")
    jobs = [JobSpec(f"b{i}", "FSDP", 2, 0.0, duration_s=1000.0, queue="b") for i in range(4)]
    jobs.append(JobSpec("a0", "FSDP", 8, 10.0, duration_s=50.0, queue="a"))
    config = SimConfig() if round_s is None else SimConfig(round_s=round_s)
    sim = Simulator(uniform(1, 8), jobs, ProfiledContention(), default_catalog(), config)
    policy = Admitted(make_policy("srtf+consolidated+preempt"), tenants)
    view = sim.advance()
    while view is not None:
        decision = policy.decide(view)
        stopped = {job.job_id for job in view.running if job.job_id in decision.preempt}
        b_left = sum(job.gpus for job in view.running if job.queue == "b" and job.job_id not in stopped)
        assert b_left >= min(4, sum(job.gpus for job in view.running if job.queue == "b")), view.now
        sim.apply(decision)
        view = sim.advance()
    report = sim.report("srtf+consolidated+preempt")
    assert report.finished == 5 and report.preemptions == 0


def _on(node: int, job_id: str, queue: str, priority: str | None = None, gpus: int = 8) -> KnownJob:
    return KnownJob(job_id, "FSDP", gpus, 0.0, 10_000.0, placement=Placement(((node, gpus),)), last_run_s=10.0,
                    queue=queue, priority=priority)


THREE_QUEUES = """
queues:
  - {name: a, nominal_gpus: 16}
  - {name: b, nominal_gpus: 24}
  - {name: c, nominal_gpus: 16}
priority_classes: {low: 0, mid: 50, high: 100}
"""


@pytest.mark.parametrize("b_node", [0, 1])
def test_a_stop_inside_a_queue_is_kept_only_for_a_launch_of_that_queue_that_needs_its_gpus(b_node):
    # The order stops b-low and c-long for a-short and b-high; c-long's stop is refused (c is
    # within its quota), so what fits is refitted. Before, b-low's stop was kept as soon as b
    # launched anything, and with b-low on node 0 its GPUs went to a-short while b-high was
    # dropped: b's job stopped for another tenant's.
    tenants, v = view(THREE_QUEUES, [_on(b_node, "b-low", "b", "low"), _on(1 - b_node, "c-long", "c")],
                      [KnownJob("a-short", "FSDP", 8, 1.0, 10.0, queue="a"),
                       KnownJob("b-high", "FSDP", 8, 2.0, 20.0, queue="b", priority="high")])
    inner = make_policy("srsf+consolidated+preempt")
    assert set(inner.decide(v).preempt) == {"b-low", "c-long"}
    decision = Admitted(inner, tenants).decide(v)
    if b_node == 0:  # b-high's place was c-long's node: nothing is launched, nothing stopped
        assert decision.preempt == () and decision.launch == ()
    else:
        assert decision.preempt == ("b-low",) and [launch.job_id for launch in decision.launch] == ["b-high"]


def test_no_stop_is_kept_for_a_launch_that_was_dropped():
    tenants, v = view(THREE_QUEUES, [_on(0, "b-low", "b", "low"), _on(1, "c-long", "c")],
                      [KnownJob("b-wide", "FSDP", 16, 2.0, 20.0, queue="b", priority="high")])
    decision = Admitted(make_policy("srsf+consolidated+preempt"), tenants).decide(v)
    assert decision.preempt == () and decision.launch == ()  # before: b-low stopped, nothing launched


def test_a_high_job_is_never_stopped_for_a_lower_one_of_its_queue():
    # b-top (high) runs on node 0, node 1 is free; b-hi2 (high) and b-lo (low) come. The order
    # puts b-hi2 on the free node and stops b-top for b-lo. Before, the stop was kept: b launched
    # a high job, and priorities were judged per queue, not per launch.
    tenants = parse_tenants(THREE_QUEUES)
    v = build_view(TWO_NODES, default_catalog(), make_contention("profiled"), 100.0, [0, 8],
                   [KnownJob("b-hi2", "FSDP", 8, 1.0, 20.0, queue="b", priority="high"),
                    KnownJob("b-lo", "FSDP", 8, 2.0, 10.0, queue="b", priority="low")], [_on(0, "b-top", "b", "high")])
    inner = make_policy("srsf+consolidated+preempt")
    alone = inner.decide(v)
    assert alone.preempt == ("b-top",) and {(l.job_id, l.placement.alloc) for l in alone.launch} == {
        ("b-hi2", ((1, 8),)), ("b-lo", ((0, 8),))}
    decision = Admitted(inner, tenants).decide(v)
    assert decision.preempt == () and [(l.job_id, l.placement.alloc) for l in decision.launch] == [("b-hi2", ((1, 8),))]


@pytest.mark.parametrize("with_tiny", [False, True])
def test_a_borrower_is_reclaimed_only_for_a_launch_of_its_own_cohort_that_needs_its_gpus(with_tiny):
    # B borrows (8 of nominal 0, cohort X); the order stops it for C-big, of cohort Y. Before,
    # an unrelated 1-GPU launch of A (cohort X, within its nominal) placed on free GPUs kept the stop.
    tenants = parse_tenants("""
queues:
  - {name: A, cohort: X, nominal_gpus: 9}
  - {name: B, cohort: X, nominal_gpus: 0}
  - {name: C, cohort: Y, nominal_gpus: 8}
  - {name: D, nominal_gpus: 8}
""")
    queued = [KnownJob("C-big", "FSDP", 8, 1.0, 10.0, queue="C")]
    if with_tiny:
        queued.append(KnownJob("A-tiny", "FSDP", 1, 2.0, 5000.0, queue="A"))
    v = build_view(TWO_NODES, default_catalog(), make_contention("profiled"), 100.0, [0, 1], queued,
                   [_on(0, "B-borrow", "B"), _on(1, "D-fill", "D", gpus=7)])
    inner = make_policy("srsf+consolidated+preempt")
    assert inner.decide(v).preempt == ("B-borrow",)
    decision = Admitted(inner, tenants).decide(v)
    assert decision.preempt == ()
    assert [launch.job_id for launch in decision.launch] == (["A-tiny"] if with_tiny else [])


ONE_NODE = parse_topology("name: one\nnode_types:\n  g: {gpus: 8}\nnodes:\n  - {type: g, count: 1, prefix: n}\n")
OWN_STOPS_FIRST = """
queues:
  - {name: a, cohort: c, nominal_gpus: 4}
  - {name: b, cohort: c, nominal_gpus: 4}
  - {name: x, cohort: c, nominal_gpus: 8}
priority_classes: {low: 0, mid: 5}
"""


def own_stops_view():  # type: ignore[no-untyped-def]
    """Queue b holds 6 of its nominal 4 (b-mid 2, b-low 4); a-new (queue a, within its nominal)
    and b-new (queue b, class low) wait on a full node."""
    def on(gpus: int) -> Placement:
        return Placement(((0, gpus),))
    running = [KnownJob("b-mid", "FSDP", 2, 0.0, 500.0, attained_gpu_s=9000, placement=on(2), last_run_s=10, queue="b", priority="mid"),
               KnownJob("b-low", "FSDP", 4, 0.0, 500.0, attained_gpu_s=9000, placement=on(4), last_run_s=10, queue="b", priority="low"),
               KnownJob("x-run", "FSDP", 2, 0.0, 500.0, attained_gpu_s=10, placement=on(2), last_run_s=10, queue="x", priority="low")]
    queued = [KnownJob("a-new", "FSDP", 2, 5.0, 100.0, queue="a", priority="low"),
              KnownJob("b-new", "FSDP", 4, 6.0, 100.0, queue="b", priority="low")]
    return parse_tenants(OWN_STOPS_FIRST), build_view(ONE_NODE, default_catalog(), make_contention("profiled"), 10.0, [0],
                                                      queued, running)


def test_a_queues_own_stops_count_before_its_jobs_are_reclaimed():
    """las+consolidated+preempt stops b-low (inside queue b, for b-new) and b-mid (as reclaim, for
    a-new). Once b-low stops, queue b holds 2 of its 4: it no longer borrows, so b-mid (a higher
    class than the b-new launched in its place) may not be reclaimed. Reclaim is then the
    planner's, which stops b's lowest class, b-low, for a-new."""
    tenants, v = own_stops_view()
    inner = make_policy("las+consolidated+preempt")
    assert set(inner.decide(v).preempt) == {"b-low", "b-mid"}
    decision = Admitted(inner, tenants).decide(v)
    assert decision.preempt == ("b-low",) and [launch.job_id for launch in decision.launch] == ["a-new"]


@pytest.mark.parametrize("order", [("b-mid", "b-low"), ("b-low", "b-mid")])
def test_a_queues_own_stops_count_whatever_their_place_in_the_decision(order):
    tenants, v = own_stops_view()

    class Inner:
        name = "stub"

        def decide(self, view):  # type: ignore[no-untyped-def]
            if {job.job_id for job in view.queued} != {"a-new", "b-new"}:
                return Decision()
            return Decision(launch=(Launch("a-new", Placement(((0, 2),))), Launch("b-new", Placement(((0, 4),)))),
                            preempt=order)

    decision = Admitted(Inner(), tenants, reclaim=False).decide(v)
    assert "b-mid" not in decision.preempt
