"""Backfilling with a reservation (issue 36): the head gang's reservation comes from the running
jobs' estimated completions, and a backfilled job never delays it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.feasibility import check_view_decision
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import uniform
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.policies.backfill import estimated_left, launched_left, reservation
from deepshare.policies.placement import PLACEMENTS

TOPO = uniform(4, 4)  # 16 GPUs
CATALOG = default_catalog()


def view(queued: list[KnownJob], running: list[KnownJob]):
    free = list(TOPO.capacity)
    for job in running:
        job.placement.take(free)
    return build_view(TOPO, CATALOG, make_contention("profiled"), 1000.0, free, queued, running, durations="estimated")


def queued(name: str, gpus: int, left: float, t: float) -> KnownJob:
    return KnownJob(name, "GraphSage", gpus, t, left, estimate_s=left)


def test_a_short_job_is_backfilled_and_a_long_one_waits_for_the_head():
    a = KnownJob("a", "GraphSage", 8, 0.0, 100.0, placement=Placement(((0, 4), (1, 4))), estimate_s=100.0)
    head, short, long_ = queued("head", 16, 600.0, 1.0), queued("short", 4, 50.0, 2.0), queued("long", 4, 500.0, 3.0)
    v = view([head, short, long_], [a])
    decision = make_policy("fifo+consolidated+backfill").decide(v)
    check_view_decision(decision, v)
    assert [l.job_id for l in decision.launch] == ["short"]  # ends by t+100, when the head can start
    plain = make_policy("fifo+consolidated").decide(v)
    assert [l.job_id for l in plain.launch] == ["short", "long"]  # without a reservation the long one delays the head


def test_a_job_that_leaves_the_head_room_starts_however_long():
    """At a's end (100 s) nodes 0, 1 and 3 are free: the 8-GPU head needs two of them, so a long
    job on node 3 now delays nothing; a 16-GPU head would need node 3 too."""
    a = KnownJob("a", "GraphSage", 8, 0.0, 100.0, placement=Placement(((0, 4), (1, 4))), estimate_s=100.0)
    b = KnownJob("b", "GraphSage", 4, 0.0, 10_000.0, placement=Placement(((2, 4),)), estimate_s=10_000.0)
    long_ = queued("long", 4, 5000.0, 2.0)
    v = view([queued("head", 8, 600.0, 1.0), long_], [a, b])
    decision = make_policy("fifo+consolidated+backfill").decide(v)
    assert [(l.job_id, l.placement.alloc) for l in decision.launch] == [("long", ((3, 4),))]
    v = view([queued("head", 12, 600.0, 1.0), long_], [a, b])
    assert make_policy("fifo+consolidated+backfill").decide(v).empty


jobs = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 12, 16]), st.sampled_from([10.0, 100.0, 1000.0, 10_000.0])),
                min_size=1, max_size=8)


@settings(max_examples=80, deadline=None)
@given(running_left=st.lists(st.sampled_from([10.0, 100.0, 1000.0]), min_size=4, max_size=4),
       busy=st.lists(st.booleans(), min_size=4, max_size=4), queue=jobs,
       place=st.sampled_from(["consolidated", "topo-bestfit", "topo-balanced", "topo-aware"]))
def test_a_backfilled_job_never_delays_the_reservation(running_left, busy, queue, place):
    run = [KnownJob(f"r{n}", "GraphSage", 4, 0.0, left, placement=Placement(((n, 4),)), estimate_s=left)
           for n, (left, b) in enumerate(zip(running_left, busy)) if b]
    waiting = [queued(f"q{i}", g, left, float(i)) for i, (g, left) in enumerate(queue)]
    v = view(waiting, run)
    policy = make_policy(f"fifo+{place}+backfill")
    decision = policy.decide(v)
    check_view_decision(decision, v)
    launched = {l.job_id: l.placement for l in decision.launch}
    head = next((j for j in sorted(v.queued, key=policy.order(v)) if j.job_id not in launched), None)
    if head is None:
        return
    strategy = PLACEMENTS[place][0]
    before_running = [(j, j.placement, estimated_left(v, j)) for j in v.running]
    # The reservation as the head's turn saw it: the launches placed before it count as running.
    order = [j.job_id for j in sorted(v.queued, key=policy.order(v))]
    earlier = launched_left(v, [(j, launched[j.job_id]) for j in v.queued
                                if j.job_id in launched and order.index(j.job_id) < order.index(head.job_id)])
    free_then = list(v.free)
    for _, p, _ in earlier:
        p.take(free_then)
    before = reservation(head, v, free_then, strategy, [*before_running, *earlier])
    if before is None:
        return
    free_after = list(v.free)
    for p in launched.values():
        p.take(free_after)
    after = reservation(head, v, free_after, strategy,
                        [*before_running, *launched_left(v, [(j, launched[j.job_id]) for j in v.queued if j.job_id in launched])])
    assert after is not None and after.at <= before.at


def test_a_gang_split_over_more_nodes_than_its_reference_is_timed_at_its_own_speed():
    """A backfilled gang's remaining work is reference-throughput seconds: an 8-GPU gang over two
    4-GPU nodes runs slower than that, so its 900 s of work takes longer than the head's wait of
    1000 s and must not be backfilled (it was, and the head started at 1072.6 instead of 1000).
    Under ``exact`` with no contention the estimates are the truth, so the head starts on time."""
    from deepshare.core.simulator import Simulator
    from deepshare.core.types import JobSpec

    topology = uniform(3, 4)
    jobs = [JobSpec("a", "GraphSage", 4, 0.0, duration_s=1000.0), JobSpec("head", "GraphSage", 12, 1.0, duration_s=100.0),
            JobSpec("s", "GraphSage", 8, 2.0, duration_s=900.0)]
    assert CATALOG.throughput("GraphSage", 8, 2) < CATALOG.reference_throughput("GraphSage", 8)
    report = Simulator(topology, jobs, make_contention("none")).run(make_policy("fifo+consolidated+backfill"))
    runs = {r.job_id: (r.first_start_s, r.finish_s) for r in report.records}
    assert runs["head"][0] == 1000.0 and runs["s"][0] == runs["head"][1]  # s waits for the head


def test_a_running_gang_ends_by_its_own_speed_in_the_reservation():
    """A running 8-GPU gang over two 4-GPU nodes with 100 s of reference work left ends later
    than 100 s from now: the reservation says when, from the view alone."""
    a = KnownJob("a", "GraphSage", 8, 0.0, 100.0, placement=Placement(((0, 4), (1, 4))), estimate_s=100.0)
    v = view([queued("head", 16, 600.0, 1.0)], [a])
    slow = CATALOG.reference_throughput("GraphSage", 8) / CATALOG.throughput("GraphSage", 8, 2)
    assert slow > 1.0
    held = reservation(v.queued[0], v, list(v.free), PLACEMENTS["consolidated"][0],
                       [(j, j.placement, estimated_left(v, j)) for j in v.running])
    assert held is not None and held.at == 100.0 * slow
