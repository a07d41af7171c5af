"""A queue's ``queueing``: best effort (the default) passes a held job over, strict holds the
queue's later jobs back behind it, in admission, in quota preemption, and wherever a tenants
file is read (the simulator, the placement service, the live scheduler)."""

from __future__ import annotations

import pytest
from tenant_cases import job, run

from deepshare.core.contention import ProfiledContention, make_contention
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology, uniform
from deepshare.core.types import Placement
from deepshare.core.view import JobView
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.tenants import Admitted, admit, parse_tenants

BACKFILL = "fifo+consolidated+backfill"


def _stream() -> list:
    """One 8-GPU queue: a 1-GPU job of 75 s every 10 s, and an 8-GPU gang at 95 s."""
    jobs = [job(f"s{i:03d}", "a", 1, at=10.0 * i, duration=75.0) for i in range(200)]
    jobs.append(job("gang", "a", 8, at=95.0, duration=50.0))
    return sorted(jobs, key=lambda j: j.submit_time)


def _gang_wait(report) -> float:  # type: ignore[no-untyped-def]
    return next(r.queue_s for r in report.records if r.job_id == "gang")


@pytest.mark.parametrize("cohort", ["", ", cohort: c"])
def test_strict_queueing_keeps_a_gang_from_starving_behind_small_jobs(cohort):
    # Without tenants, +backfill reserves the node for the gang: it waits 70 s. Best effort
    # admits the younger 1-GPU jobs while the gang's quota is short, so +backfill never sees the
    # gang until the stream ends (1970 s); strict holds them back behind it: 70 s again.
    jobs = _stream()
    alone = Simulator(uniform(1, 8), jobs, ProfiledContention(), default_catalog(), SimConfig()).run(make_policy(BACKFILL))
    waits = {}
    for queueing in ("best-effort", "strict"):
        tenants = f"queues:\n  - {{name: a, nominal_gpus: 8, queueing: {queueing}{cohort}}}\n" \
                  f"  - {{name: z, nominal_gpus: 0{cohort}}}\n"
        waits[queueing] = _gang_wait(run(tenants, jobs, policy=BACKFILL))
    assert _gang_wait(alone) == waits["strict"] == 70.0
    assert waits["best-effort"] == 1970.0


def test_best_effort_is_the_default_and_decides_as_before():
    jobs = _stream()[:40]
    plain = run("queues:\n  - {name: a, nominal_gpus: 8}\n", jobs, policy=BACKFILL)
    named = run("queues:\n  - {name: a, nominal_gpus: 8, queueing: best-effort}\n", jobs, policy=BACKFILL)
    assert parse_tenants("queues: [{name: a, nominal_gpus: 1}]").queues["a"].queueing == "best-effort"
    assert [(r.job_id, r.first_start_s, r.finish_s) for r in plain.records] == \
        [(r.job_id, r.first_start_s, r.finish_s) for r in named.records]


def _view_job(job_id: str, queue: str, gpus: int, at: float, priority: str | None = None) -> JobView:
    return JobView(job_id, "m", gpus, at, 100.0, 0.0, "c", queue=queue, priority=priority)


def test_a_held_job_of_a_strict_queue_holds_back_every_later_job_of_its_queue_only():
    text = ("queues:\n  - {name: a, nominal_gpus: 4, queueing: QUEUEING}\n  - {name: b, nominal_gpus: 4}\n"
            "priority_classes: {low: 0, high: 10}\n")
    running = [_view_job("a-run", "a", 2, 0.0)]
    queued = [_view_job("a-old-low", "a", 1, 1.0, "low"), _view_job("a-gang", "a", 4, 2.0, "high"),
              _view_job("a-young", "a", 1, 3.0, "high"), _view_job("b-young", "b", 1, 4.0)]
    best = admit(queued, running, parse_tenants(text.replace("QUEUEING", "best-effort")))
    assert [j.job_id for j in best.admitted] == ["a-old-low", "a-young", "b-young"] and not best.blocked
    strict = admit(queued, running, parse_tenants(text.replace("QUEUEING", "strict")))
    # a-gang (high) comes first in a's order and does not fit: a-young (high, younger) and
    # a-old-low (a lower class) are after it and wait; b is not held back.
    assert [j.job_id for j in strict.admitted] == ["b-young"]
    assert [j.job_id for j in strict.held] == ["a-gang", "a-young", "a-old-low"]
    assert strict.blocked == {"a-young", "a-old-low"}


def test_a_strict_queues_borrower_goes_first_then_the_jobs_behind_it():
    text = ("queues:\n  - {name: a, cohort: c, nominal_gpus: 2, queueing: strict}\n"
            "  - {name: b, cohort: c, nominal_gpus: BNOM}\n")
    queued = [_view_job("a-big", "a", 4, 1.0), _view_job("a-small", "a", 1, 2.0)]
    # b lends 2: a-big borrows them, then a-small fits no more (the pool is full).
    got = admit(queued, (), parse_tenants(text.replace("BNOM", "2")))
    assert [j.job_id for j in got.admitted] == ["a-big"] and [j.job_id for j in got.held] == ["a-small"]
    # b lends nothing: a-big cannot borrow and is held; a-small, within a's quota, waits behind it.
    got = admit(queued, (), parse_tenants(text.replace("BNOM", "0")))
    assert not got.admitted and got.blocked == {"a-small"}
    best = admit(queued, (), parse_tenants(text.replace("BNOM", "0").replace(", queueing: strict", "")))
    assert [j.job_id for j in best.admitted] == ["a-small"]


ONE_NODE = parse_topology("name: one\nnode_types:\n  g: {gpus: 8}\nnodes:\n  - {type: g, count: 1, prefix: n}\n")


def _gang_view(queue: str = "a"):  # type: ignore[no-untyped-def]
    """Seven 1-GPU jobs of a run; the 8-GPU gang (older) and a 1-GPU job (younger) wait."""
    running = [KnownJob(f"s{i}", "resnet50", 1, float(i), 75.0, placement=Placement(((0, 1),)), last_run_s=1.0,
                        queue=queue) for i in range(7)]
    queued = [KnownJob("gang", "resnet50", 8, 8.0, 50.0, queue=queue), KnownJob("young", "resnet50", 1, 9.0, 75.0, queue=queue)]
    return build_view(ONE_NODE, default_catalog(), make_contention("profiled"), 10.0, [1], queued, running)


def test_strict_queueing_also_holds_in_quota_preemption():
    # b borrows 7 GPUs of a's 8; a runs 1. a-gang (8) is held: a's own a-run leaves it short
    # of quota, so nothing is reclaimed for it. Best effort reclaims b-run for a-young (1 GPU,
    # within a's quota); strict holds a-young behind a-gang in quota preemption too.
    text = "queues:\n  - {name: a, cohort: c, nominal_gpus: 8QUEUEING}\n  - {name: b, cohort: c, nominal_gpus: 0}\n"
    running = [KnownJob("b-run", "resnet50", 7, 0.0, 1000.0, placement=Placement(((0, 7),)), last_run_s=1.0, queue="b"),
               KnownJob("a-run", "resnet50", 1, 0.0, 1000.0, placement=Placement(((0, 1),)), last_run_s=1.0, queue="a")]
    queued = [KnownJob("a-gang", "resnet50", 8, 1.0, 50.0, queue="a"), KnownJob("a-young", "resnet50", 1, 2.0, 50.0, queue="a")]
    view = build_view(ONE_NODE, default_catalog(), make_contention("profiled"), 10.0, [0], queued, running)
    best = Admitted(make_policy("fifo+consolidated"), parse_tenants(text.replace("QUEUEING", ""))).decide(view)
    assert ([launch.job_id for launch in best.launch], best.preempt) == (["a-young"], ("b-run",))
    strict = Admitted(make_policy("fifo+consolidated"), parse_tenants(text.replace("QUEUEING", ", queueing: strict"))).decide(view)
    assert (strict.launch, strict.preempt) == ((), ())


@pytest.mark.parametrize("policy", ["fifo+consolidated", "srtf+consolidated"])
@pytest.mark.parametrize("older, younger, a1, launched", [(2, 1, 3, ["a1"]), (1, 2, 2, ["b1-older", "a1"])])
def test_reclaim_withdraws_a_strict_queues_launches_from_its_last(policy, older, younger, a1, launched):
    # One 8-GPU node: c0 (queue c, alone) and b0 (b, strict, nominal 2) run 2 GPUs each; 4 free.
    # b1-older and b2-younger borrow (b holds its 2), a1 is within a's nominal 6: admission takes
    # all three (the cohort's 8: b 2 + 3, a 3 or 2). The policy launches b1-older and b2-younger
    # and a1 no longer fits, so reclaim withdraws b's launches, b's last first.
    # b1-older 2 GPUs, b2-younger 1, a1 3: b2-younger (2 free), then b1-older (4 free): a1 goes.
    # b2-younger is not put back (a1 would still fit), as it would run ahead of the older one
    # held: 1 GPU idles. Cheapest first, reclaim withdrew the same two and put b2-younger back.
    # b1-older 1 GPU, b2-younger 2, a1 2: b2-younger alone frees enough (3 free) and b1-older
    # runs; cheapest first withdrew b1-older (2 free) and launched b2-younger.
    tenants = parse_tenants("queues:\n  - {name: a, cohort: main, nominal_gpus: 6}\n"
                            "  - {name: b, cohort: main, nominal_gpus: 2, queueing: strict}\n  - {name: c, nominal_gpus: 2}\n")
    running = [KnownJob("c0", "FSDP", 2, 0.0, 1000.0, placement=Placement(((0, 2),)), last_run_s=10.0, queue="c"),
               KnownJob("b0", "FSDP", 2, 0.0, 1000.0, placement=Placement(((0, 2),)), last_run_s=10.0, queue="b")]
    queued = [KnownJob("b1-older", "FSDP", older, 1.0, 100.0, queue="b"),
              KnownJob("b2-younger", "FSDP", younger, 2.0, 100.0, queue="b"),
              KnownJob("a1", "FSDP", a1, 3.0, 100.0, queue="a")]
    view = build_view(ONE_NODE, default_catalog(), make_contention("profiled"), 10.0, [4], queued, running,
                      durations="exact")
    assert [j.job_id for j in admit(view.queued, view.running, tenants).admitted] == ["b1-older", "b2-younger", "a1"]
    inner = make_policy(policy)
    assert [launch.job_id for launch in inner.decide(view).launch] == ["b1-older", "b2-younger"]
    decision = Admitted(inner, tenants).decide(view)
    assert ([launch.job_id for launch in decision.launch], decision.preempt) == (launched, ())


@pytest.mark.parametrize("queueing, launched", [("best-effort", ["young"]), ("strict", [])])
def test_every_reader_of_a_tenants_file_queues_alike(tmp_path, queueing, launched):
    # The simulator and the live scheduler read the file (load_tenants), the placement service
    # its text (parse_tenants_text): the same field, the same Admitted, the same decision.
    from deepshare.runtime.tenancy import LiveTenants
    from deepshare.serving.engine import EngineSettings, PlacementEngine
    from deepshare.serving.settings import parse_tenants_text
    from deepshare.serving.translate import response_to_decision, view_to_request
    from deepshare.tenants import load_tenants

    text = f"queues:\n  - {{name: a, nominal_gpus: 8, queueing: {queueing}}}\n"
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    view = _gang_view()
    simulator = Admitted(make_policy(BACKFILL), load_tenants(path)).decide(view)
    live = LiveTenants("admin-token", path).policy(make_policy(BACKFILL)).decide(view)
    engine = PlacementEngine(EngineSettings(policy=BACKFILL, tenants=parse_tenants_text(text)))
    served = response_to_decision(engine.place(view_to_request(view)), view)
    assert [launch.job_id for launch in simulator.launch] == [launch.job_id for launch in live.launch] == launched
    assert [launch.job_id for launch in served.launch] == launched


def test_no_job_of_a_strict_queue_is_planned_past_an_older_one_this_decision_sent_back():
    """Second read: W's reclaim withdraws X-older's launch; Y-younger (the same strict queue and
    class) then got a priority plan in that decision (stopping z) and started at t=10, ahead of
    X-older. The quota plans now skip a strict queue's jobs behind one they sent back."""
    tenants = ("queues:\n  - {name: a, cohort: c, nominal_gpus: 6}\n"
               "  - {name: q, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2, queueing: strict}\n"
               "  - {name: x, nominal_gpus: 6}\npriority_classes: {low: 0, mid: 5}\n")
    jobs = [job("z", "q", 2, 0.0, 1000.0, "low"), job("x0", "x", 1, 0.0, 1000.0), job("f", "x", 4, 0.0, 10.0),
            job("X-older", "q", 2, 5.0, 100.0, "mid"), job("Y-younger", "q", 3, 10.0, 100.0, "mid"),
            job("W", "a", 4, 10.0, 100.0, "low")]
    starts = {r.job_id: r.first_start_s for r in run(tenants, jobs).records}
    assert starts["W"] == 10.0
    assert starts["X-older"] < starts["Y-younger"]
    assert (starts["X-older"], starts["Y-younger"]) == (110.0, 210.0)


def test_no_launch_of_a_strict_queue_is_withdrawn_once_a_later_job_of_it_was_planned_for():
    """Third read: Bj's reclaim made W within its nominal quota only after Y-younger (strict q)
    got its plan; W's reclaim then withdrew X-older, and Y-younger started at t=10 ahead of it.
    A strict queue's launch is no longer withdrawn once a job after it in its queue was planned."""
    tenants = ("queues:\n  - {name: a, cohort: c, nominal_gpus: 4, borrowing_limit_gpus: 4}\n"
               "  - {name: b, cohort: c, nominal_gpus: 4}\n"
               "  - {name: q, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2, queueing: strict}\n"
               "  - {name: x, nominal_gpus: 16}\npriority_classes: {low: 0, mid: 5}\n")
    jobs = [job("z", "q", 2, 0.0, 1000.0, "low"), job("ra", "a", 6, 0.0, 1000.0, "low"),
            job("x0", "x", 6, 0.0, 1000.0), job("f", "x", 2, 0.0, 10.0),
            job("X-older", "q", 2, 5.0, 100.0, "mid"), job("Y-younger", "q", 2, 10.0, 100.0, "mid"),
            job("Bj", "b", 4, 10.0, 100.0), job("W", "a", 4, 10.0, 100.0, "low")]
    starts = {r.job_id: r.first_start_s for r in run(tenants, jobs, gpus=16).records}
    assert starts["X-older"] <= starts["Y-younger"]
    assert (starts["X-older"], starts["Y-younger"], starts["Bj"], starts["W"]) == (10.0, 10.0, 10.0, 110.0)
