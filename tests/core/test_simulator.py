"""Simulator: exact hand-checked JCTs, step API, overheads, validation, determinism, invariants."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.simulator import SimConfig, SimulationStalled, Simulator
from deepshare.core.topology import uniform
from deepshare.core.errors import DeepShareError, InfeasibleDecision
from deepshare.core.types import Decision, JobSpec, Launch, Migrate, Placement, WAIT
from deepshare.core.view import ClusterView
from deepshare.core.workloads import Catalog, ProfileKey, default_catalog
from deepshare.policies import make_policy, policy_names

REPO = Path(__file__).resolve().parents[2]
EVAL_TRACE = REPO / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"

A2 = ProfileKey("A", 2, 2)
B2 = ProfileKey("B", 2, 2)


def hand_catalog() -> Catalog:
    """Two fake models measured only at 2 GPUs over 2 nodes.

    A runs 10 samples/s, B 5 samples/s. A keeps 0.5 of its throughput next to B, B keeps 0.8
    next to A, each keeps 0.9 next to itself.
    """
    return Catalog(
        {A2: 10.0, B2: 5.0},
        {(A2, A2): 0.9, (A2, B2): 0.5, (B2, A2): 0.8, (B2, B2): 0.9},
    )


def tight(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=1e-9)


def by_id(report) -> dict:
    return {r.job_id: r for r in report.records}


def P(**counts: int) -> Placement:
    """P(n0=2, n1=1) -> Placement.of({0: 2, 1: 1})."""
    return Placement.of({int(k[1:]): v for k, v in counts.items()})


def run(jobs, policy, contention="none", topology=None, config=SimConfig(), catalog=None):
    sim = Simulator(
        topology or uniform(2, 2), jobs, make_contention(contention), catalog=catalog or hand_catalog(), config=config
    )
    return sim.run(make_policy(policy) if isinstance(policy, str) else policy)


# -- exact JCTs --------------------------------------------------------------------------------
# (a) contention-free: j1 and j2 start at 0 on one node each, j3 (4 GPUs, ref. throughput 20/s)
#     arrives at 10, cannot fit until j2 leaves at 130, then runs 45 s.
JOBS_A = (
    JobSpec("j1", "A", 2, submit_time=0.0, duration_s=70.0),
    JobSpec("j2", "B", 2, submit_time=0.0, duration_s=130.0),
    JobSpec("j3", "A", 4, submit_time=10.0, duration_s=45.0),
)


@pytest.mark.parametrize(
    "policy,contention",
    [("fifo+consolidated", "none"), ("fifo+consolidated", "profiled"), ("fifo+spread", "none")],
)
@pytest.mark.parametrize("round_s", [None, 300.0, 50.0])
def test_exact_jcts_without_contention(policy, contention, round_s):
    report = run(JOBS_A, policy, contention, config=SimConfig(round_s=round_s))
    recs = by_id(report)
    assert recs["j1"].finish_s == tight(70.0)
    assert recs["j2"].finish_s == tight(130.0)
    assert recs["j3"].first_start_s == tight(130.0)
    assert recs["j3"].finish_s == tight(175.0)  # an exact time, not a round boundary
    assert [recs[j].jct_s for j in ("j1", "j2", "j3")] == [tight(70.0), tight(130.0), tight(165.0)]
    assert [recs[j].queue_s for j in ("j1", "j2", "j3")] == [tight(0.0), tight(0.0), tight(120.0)]
    assert all(r.mean_ratio == tight(1.0) for r in report.records)
    assert report.jobs == report.finished == 3
    assert report.rejected == 0
    assert report.avg_jct_s == tight((70 + 130 + 165) / 3)
    assert report.p50_jct_s == tight(130.0)
    assert report.p95_jct_s == tight(130 + 0.9 * 35)  # linear interpolation, rank 1.9
    assert report.p99_jct_s == tight(130 + 0.98 * 35)
    assert report.avg_queue_s == tight(40.0)
    assert report.avg_service_jct_s == tight((70 + 130 + 45) / 3)
    assert report.makespan_s == tight(175.0)
    assert report.gpu_util == tight((2 * 70 + 2 * 130 + 4 * 45) / (4 * 175))
    assert report.avg_slowdown == tight(1.0)
    assert report.preemptions == report.migrations == 0


def test_rounds_only_add_decision_points():
    plain = run(JOBS_A, "fifo+consolidated")
    ticked = run(JOBS_A, "fifo+consolidated", config=SimConfig(round_s=50.0))
    assert plain.records == ticked.records
    # j3 is queued from 10 to 130: the ticks at 50 and 100 are extra decision points
    assert ticked.decisions == plain.decisions + 2


# (b) profiled, spread: j1 (A) and j2 (B) both span nodes 0 and 1. j1 runs at 0.5 x 10 = 5/s,
#     j2 at 0.8 x 5 = 4/s. j1 finishes its 1000 samples at 200; j3 (A) takes its GPUs at 200, so
#     j2 stays at 0.8 and finishes its last 200 samples at 250. j3 ran at 5/s for 50 s and then,
#     its aggressor gone, at 10/s: its ratio goes back UP and it finishes at 250 + 750/10 = 325.
JOBS_B = (
    JobSpec("j1", "A", 2, submit_time=0.0, duration_s=100.0),
    JobSpec("j2", "B", 2, submit_time=0.0, duration_s=200.0),
    JobSpec("j3", "A", 2, submit_time=50.0, duration_s=100.0),
)


@pytest.mark.parametrize("round_s", [None, 300.0])
def test_exact_jcts_profiled_spread(round_s):
    report = run(JOBS_B, "fifo+spread", "profiled", config=SimConfig(round_s=round_s))
    recs = by_id(report)
    assert recs["j1"].finish_s == tight(200.0)
    assert recs["j2"].finish_s == tight(250.0)
    assert recs["j3"].first_start_s == tight(200.0)
    assert recs["j3"].finish_s == tight(325.0)
    assert recs["j1"].mean_ratio == tight(0.5)
    assert recs["j2"].mean_ratio == tight(0.8)
    assert recs["j3"].mean_ratio == tight((50 * 0.5 + 75 * 1.0) / 125)
    assert report.avg_jct_s == tight((200 + 250 + 275) / 3)
    assert report.p50_jct_s == tight(250.0)
    assert report.makespan_s == tight(325.0)
    assert report.avg_queue_s == tight((0 + 0 + 150) / 3)
    assert report.avg_service_jct_s == tight((200 + 250 + 125) / 3)
    assert report.gpu_util == tight((2 * 200 + 2 * 250 + 2 * 125) / (4 * 325))
    assert report.avg_slowdown == tight((2.0 + 1.25 + 1.25) / 3)


def test_ratio_goes_back_up_when_aggressor_finishes():
    # Without j3: j2 has 200 samples left at t=200 and runs alone at 5/s -> 240 (the original
    # artifact, which never raised a ratio again, would finish it at 250).
    report = run(JOBS_B[:2], "fifo+spread", "profiled")
    recs = by_id(report)
    assert recs["j1"].finish_s == tight(200.0)
    assert recs["j2"].finish_s == tight(240.0)
    assert recs["j2"].mean_ratio == tight((0.8 * 200 + 1.0 * 40) / 240)


def test_self_pair_ratio():
    jobs = (
        JobSpec("x", "A", 2, duration_s=90.0),
        JobSpec("y", "A", 2, duration_s=90.0),
    )
    recs = by_id(run(jobs, "fifo+spread", "profiled"))
    # both at 0.9 x 10 = 9/s over 900 samples
    assert recs["x"].finish_s == tight(100.0)
    assert recs["y"].finish_s == tight(100.0)


def test_single_node_jobs_are_contention_free_under_default_profiled():
    # consolidated puts each 2-GPU job on its own node: no contention, same as `none`.
    profiled = run(JOBS_B, "fifo+consolidated", "profiled")
    none = run(JOBS_B, "fifo+consolidated", "none")
    assert profiled.records == none.records
    recs = by_id(profiled)
    assert recs["j1"].finish_s == tight(100.0)
    assert recs["j2"].finish_s == tight(200.0)
    assert recs["j3"].finish_s == tight(200.0)  # starts at 100 on j1's node


def test_start_overhead_is_paid_on_first_launch_only():
    report = run(JOBS_A, "fifo+consolidated", config=SimConfig(start_overhead_s=5.0))
    recs = by_id(report)
    assert recs["j1"].finish_s == tight(75.0)
    assert recs["j2"].finish_s == tight(135.0)
    assert recs["j3"].finish_s == tight(135.0 + 5.0 + 45.0)
    assert recs["j1"].productive_s == tight(70.0)
    assert recs["j1"].gpu_time_s == tight(2 * 75.0)


def test_durations_use_one_node_reference_throughput():
    # Default catalog: a duration is seconds at the 1-node rate (= best measured spread).
    cat = default_catalog()
    jobs = (JobSpec("m", "MoE", 8, duration_s=1000.0),)
    for policy, nodes in (("fifo+consolidated", 1), ("fifo+spread", 4)):
        rec = by_id(Simulator(uniform(4, 8), jobs, make_contention("profiled")).run(make_policy(policy)))["m"]
        expected = 1000.0 * cat.throughput("MoE", 8, 1) / cat.throughput("MoE", 8, nodes)
        assert rec.finish_s == pytest.approx(expected, rel=1e-9)
    assert cat.throughput("MoE", 8, 1) == max(cat.isolated[ProfileKey("MoE", 8, n)] for n in (2, 4, 8))


def test_total_samples_jobs():
    jobs = (JobSpec("s", "B", 2, total_samples=1234.0),)
    rec = by_id(run(jobs, "fifo+consolidated"))["s"]
    assert rec.finish_s == tight(1234.0 / 5.0)


# -- preemption and migration through the step API ---------------------------------------------
def test_preempt_overhead_and_no_progress_during_restore():
    cfg = SimConfig(preempt_overhead_s=30.0, migrate_overhead_s=20.0, start_overhead_s=0.0)
    jobs = (
        JobSpec("j1", "A", 2, submit_time=0.0, duration_s=100.0),
        JobSpec("j2", "A", 2, submit_time=40.0, duration_s=100.0),
        JobSpec("j3", "A", 2, submit_time=150.0, duration_s=10.0),
    )
    sim = Simulator(uniform(1, 2), jobs, make_contention("none"), catalog=hand_catalog(), config=cfg)
    node = P(n0=2)

    view = sim.advance()
    assert view.now == 0.0 and [j.job_id for j in view.queued] == ["j1"]
    sim.apply(Decision(launch=(Launch("j1", node),)))

    view = sim.advance()
    assert view.now == 40.0
    (j1,) = view.running
    assert j1.remaining_s == tight(60.0)
    assert j1.attained_gpu_s == tight(80.0)
    sim.apply(Decision(launch=(Launch("j2", node),), preempt=("j1",)))

    view = sim.advance()  # j2 finishes at 140; j1 waits
    assert view.now == tight(140.0)
    (j1,) = view.queued
    assert j1.remaining_s == tight(60.0)
    assert j1.preemptions == 1
    assert j1.placement is None
    assert j1.last_run_s == tight(40.0)
    assert j1.queued_since == tight(40.0)
    sim.apply(Decision(launch=(Launch("j1", node),)))

    view = sim.advance()  # j3 arrives at 150, in the middle of j1's 30 s restore
    assert view.now == 150.0
    (j1,) = view.running
    assert j1.remaining_s == tight(60.0)  # no progress while restoring
    assert j1.attained_gpu_s == tight(80.0 + 2 * 10.0)  # but the GPUs are held
    sim.apply(WAIT)

    view = sim.advance()  # restore until 170, then 60 s of work
    assert view.now == tight(230.0)
    sim.apply(Decision(launch=(Launch("j3", node),)))
    assert sim.advance() is None
    assert sim.done

    report = sim.report("manual")
    recs = by_id(report)
    assert recs["j1"].finish_s == tight(230.0)
    assert recs["j1"].first_start_s == 0.0
    assert recs["j1"].preemptions == 1
    assert recs["j1"].gpu_time_s == tight(2 * (40.0 + 90.0))
    assert recs["j1"].productive_s == tight(100.0)
    assert recs["j1"].queue_s == tight(230.0 - 130.0)
    assert recs["j2"].finish_s == tight(140.0)
    assert recs["j3"].finish_s == tight(240.0)
    assert report.preemptions == 1
    assert report.migrations == 0
    assert report.policy == "manual"


def test_migrate_overhead_and_counting():
    cfg = SimConfig(preempt_overhead_s=30.0, migrate_overhead_s=20.0)
    jobs = (
        JobSpec("j1", "A", 2, submit_time=0.0, duration_s=100.0),
        JobSpec("j2", "A", 2, submit_time=40.0, duration_s=100.0),
        JobSpec("j3", "A", 2, submit_time=50.0, duration_s=10.0),
    )
    sim = Simulator(uniform(2, 2), jobs, make_contention("none"), catalog=hand_catalog(), config=cfg)
    sim.advance()
    sim.apply(Decision(launch=(Launch("j1", P(n0=2)),)))

    view = sim.advance()
    assert view.now == 40.0
    # move j1 to node 1 and give node 0 to j2 in the same decision
    sim.apply(Decision(launch=(Launch("j2", P(n0=2)),), migrate=(Migrate("j1", P(n1=2)),)))

    view = sim.advance()  # j3 arrives at 50, j1 still restoring until 60
    assert view.now == 50.0
    assert view.free == (0, 0)
    j1 = next(j for j in view.running if j.job_id == "j1")
    assert j1.placement == P(n1=2)
    assert j1.remaining_s == tight(60.0)
    assert j1.attained_gpu_s == tight(100.0)
    sim.apply(WAIT)

    view = sim.advance()  # j1: 60 + 60 = 120
    assert view.now == tight(120.0)
    assert view.free == (0, 2)
    sim.apply(Decision(launch=(Launch("j3", P(n1=2)),)))
    assert sim.advance() is None

    report = sim.report()
    recs = by_id(report)
    assert recs["j1"].finish_s == tight(120.0)
    assert recs["j1"].migrations == 1
    assert recs["j1"].preemptions == 0
    assert recs["j1"].productive_s == tight(100.0)
    assert recs["j2"].finish_s == tight(140.0)
    assert recs["j3"].finish_s == tight(130.0)
    assert report.migrations == 1
    assert report.preemptions == 0


def test_advance_twice_without_apply_is_an_error():
    sim = Simulator(uniform(1, 2), JOBS_A[:1], make_contention("none"), catalog=hand_catalog())
    assert sim.advance() is not None
    with pytest.raises(DeepShareError):
        sim.advance()


# -- infeasible decisions ----------------------------------------------------------------------
def snapshot(sim: Simulator) -> tuple:
    view = sim.view()
    return (
        view.now,
        view.free,
        tuple((j.job_id, j.placement, j.ratio, j.remaining_s, j.preemptions) for j in view.running),
        tuple((j.job_id, j.remaining_s, j.preemptions) for j in view.queued),
        sim.decisions,
    )


INFEASIBLE_AT_0 = {
    "over-allocated node": Decision(launch=(Launch("j1", P(n0=3)),)),
    "over-allocated by two launches": Decision(launch=(Launch("j1", P(n0=2)), Launch("j2", P(n0=2)))),
    "unknown node index": Decision(launch=(Launch("j1", P(n2=2)),)),
    "negative node index": Decision(launch=(Launch("j1", Placement(((-1, 2),))),)),
    "too few GPUs": Decision(launch=(Launch("j1", P(n0=1)),)),
    "too many GPUs": Decision(launch=(Launch("j1", P(n0=2, n1=1)),)),
    "zero count on a node": Decision(launch=(Launch("j1", Placement(((0, 0), (1, 2)))),)),
    "unknown job": Decision(launch=(Launch("nope", P(n0=2)),)),
    "preempt a queued job": Decision(preempt=("j1",)),
    "migrate a queued job": Decision(migrate=(Migrate("j1", P(n0=2)),)),
    "same job twice": Decision(launch=(Launch("j1", P(n0=2)), Launch("j1", P(n1=2)))),
    "valid launch then invalid one": Decision(launch=(Launch("j1", P(n0=2)), Launch("j2", P(n1=3)))),
}

INFEASIBLE_AT_10 = {
    "launch a running job": Decision(launch=(Launch("j1", P(n1=2)),)),
    "preempt a queued job": Decision(preempt=("j2",)),
    "preempt an unknown job": Decision(preempt=("zzz",)),
    "preempt and relaunch": Decision(launch=(Launch("j1", P(n1=2)),), preempt=("j1",)),
    "preempt twice": Decision(preempt=("j1", "j1")),
    "preempt and migrate": Decision(preempt=("j1",), migrate=(Migrate("j1", P(n1=2)),)),
    "migrate onto a launch": Decision(launch=(Launch("j2", P(n1=2)),), migrate=(Migrate("j1", P(n1=2)),)),
    "migrate with wrong GPU total": Decision(migrate=(Migrate("j1", P(n1=1)),)),
    "launch on busy node": Decision(launch=(Launch("j2", P(n0=2)),)),
}


def infeasible_sim() -> Simulator:
    jobs = (
        JobSpec("j1", "A", 2, submit_time=0.0, duration_s=100.0),
        JobSpec("j2", "A", 2, submit_time=0.0, duration_s=100.0),
        JobSpec("j3", "B", 2, submit_time=10.0, duration_s=100.0),
    )
    return Simulator(uniform(2, 2), jobs, make_contention("profiled"), catalog=hand_catalog())


def test_infeasible_decisions_raise_and_change_nothing():
    sim = infeasible_sim()
    assert sim.advance().now == 0.0
    before = snapshot(sim)
    for why, decision in INFEASIBLE_AT_0.items():
        with pytest.raises(InfeasibleDecision):
            sim.apply(decision)
        assert snapshot(sim) == before, why
    sim.apply(Decision(launch=(Launch("j1", P(n0=2)),)))  # a valid decision still works

    view = sim.advance()
    assert view.now == 10.0
    assert [j.job_id for j in view.queued] == ["j2", "j3"]
    before = snapshot(sim)
    for why, decision in INFEASIBLE_AT_10.items():
        with pytest.raises(InfeasibleDecision):
            sim.apply(decision)
        assert snapshot(sim) == before, why
    sim.apply(Decision(launch=(Launch("j2", P(n1=2)),)))
    while (view := sim.advance()) is not None:
        sim.apply(make_policy("fifo+consolidated").decide(view))
    report = sim.report()
    assert report.finished == 3
    recs = by_id(report)
    assert recs["j1"].finish_s == tight(100.0)
    assert recs["j2"].finish_s == tight(110.0)
    assert recs["j3"].finish_s == tight(200.0)  # B: 500 samples at 5/s from 100


def test_placement_listing_a_node_twice_is_rejected():
    sim = infeasible_sim()
    sim.advance()
    before = snapshot(sim)
    with pytest.raises(InfeasibleDecision):
        sim.apply(Decision(launch=(Launch("j1", Placement(((0, 1), (0, 1)))),)))
    assert snapshot(sim) == before


def test_infeasible_decision_is_a_deepshare_error():
    assert issubclass(InfeasibleDecision, DeepShareError)
    assert issubclass(SimulationStalled, DeepShareError)


# -- rejection and stalls ----------------------------------------------------------------------
def test_job_larger_than_cluster_is_rejected_others_finish():
    jobs = (
        JobSpec("big", "A", 8, submit_time=0.0, duration_s=10.0),
        JobSpec("j1", "A", 2, submit_time=5.0, duration_s=70.0),
        JobSpec("j2", "B", 4, submit_time=5.0, duration_s=30.0),
    )
    report = run(jobs, "fifo+consolidated")
    recs = by_id(report)
    assert report.jobs == 3
    assert report.rejected == 1
    assert report.finished == 2
    assert recs["big"].rejected
    assert recs["big"].finish_s is None and recs["big"].first_start_s is None
    assert recs["big"].jct_s is None
    # j1 on node 0 from 5 to 75; j2 (4 GPUs) waits for it, then runs 30 s
    assert recs["j1"].finish_s == tight(75.0)
    assert recs["j2"].finish_s == tight(105.0)
    assert report.avg_jct_s == tight((70.0 + 100.0) / 2)
    assert report.makespan_s == tight(100.0)  # from the first admitted submission


def test_stall_on_idle_cluster_raises():
    class Lazy:
        name = "lazy"

        def decide(self, view: ClusterView) -> Decision:
            return WAIT

    with pytest.raises(SimulationStalled):
        run(JOBS_A, Lazy())
    for round_s in (None, 60.0):
        with pytest.raises(SimulationStalled):
            run(JOBS_A, Lazy(), config=SimConfig(round_s=round_s))


def test_stall_after_some_work_raises():
    class OnlyJ1:
        name = "only-j1"

        def decide(self, view: ClusterView) -> Decision:
            for job in view.queued:
                if job.job_id == "j1":
                    return Decision(launch=(Launch("j1", P(n0=2)),))
            return WAIT

    with pytest.raises(SimulationStalled):
        run(JOBS_A, OnlyJ1())


def test_bad_config_and_duplicate_ids():
    with pytest.raises(DeepShareError):
        SimConfig(round_s=0)
    with pytest.raises(DeepShareError):
        SimConfig(preempt_overhead_s=-1)
    with pytest.raises(DeepShareError):
        Simulator(uniform(1, 2), (JOBS_A[0], JOBS_A[0]), make_contention("none"), catalog=hand_catalog())


@pytest.mark.parametrize("field", ["round_s", "preempt_overhead_s", "migrate_overhead_s", "start_overhead_s"])
@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0])
def test_an_infinite_or_negative_time_in_the_config_is_refused_where_it_is_given(field, value):
    """An infinite overhead was accepted and failed much later, inside the job history, naming
    no config field."""
    with pytest.raises(DeepShareError, match=f"^{field} must be a .*finite number of seconds"):
        SimConfig(**{field: value})


def test_empty_trace():
    sim = Simulator(uniform(1, 2), (), make_contention("none"), catalog=hand_catalog())
    report = sim.run(make_policy("fifo+consolidated"))
    assert report.jobs == report.finished == 0
    assert report.avg_jct_s is None
    assert report.makespan_s == 0.0


# -- determinism -------------------------------------------------------------------------------
def dump(report) -> str:
    return json.dumps([report.to_dict(), [asdict(r) for r in report.records]], sort_keys=True)


def test_same_inputs_same_report():
    from deepshare.core.traces import load

    jobs = load(EVAL_TRACE).jobs[:96]
    topo = uniform(4, 8)
    reports = [
        Simulator(topo, jobs, make_contention("profiled"), config=SimConfig(round_s=300.0)).run(
            make_policy("las+contention-aware+preempt")
        )
        for _ in range(2)
    ]
    assert reports[0].to_dict() == reports[1].to_dict()
    assert reports[0].records == reports[1].records
    assert dump(reports[0]) == dump(reports[1])


DETERMINISM_SCRIPT = """
import json, sys
from dataclasses import asdict
from deepshare.core.contention import make_contention
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import load_topology
from deepshare.core.traces import load
from deepshare.policies import make_policy

out = []
for policy, aggregate in (("dlas+contention-aware+preempt", "min"), ("srtf+contention-aware", "product")):
    sim = Simulator(load_topology("testbed"), load(sys.argv[1]).jobs,
                    make_contention("profiled", aggregate=aggregate), config=SimConfig(round_s=300.0))
    report = sim.run(make_policy(policy))
    out.append([report.to_dict(), [asdict(r) for r in report.records]])
print(json.dumps(out, sort_keys=True))
"""


@pytest.mark.slow  # simulations in subprocesses
def test_deterministic_across_processes_and_hash_seeds():
    outputs = []
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        proc = subprocess.run(
            [sys.executable, "-c", DETERMINISM_SCRIPT, str(EVAL_TRACE)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]
    data = json.loads(outputs[0])
    assert all(entry[0]["finished"] == 256 for entry in data)


# -- invariants on random small traces ---------------------------------------------------------
MODELS = default_catalog().models


class Checked:
    """Wraps a policy and checks every view it is shown."""

    def __init__(self, inner, capacity: tuple[int, ...]) -> None:
        self.inner = inner
        self.name = inner.name
        self.capacity = capacity
        self.views = 0

    def decide(self, view: ClusterView) -> Decision:
        self.views += 1
        assert all(f >= 0 for f in view.free), view.free
        used = [0] * len(self.capacity)
        for job in view.running:
            assert job.placement is not None
            assert job.placement.total_gpus == job.gpus
            for node, gpus in job.placement.alloc:
                used[node] += gpus
        assert [f + u for f, u in zip(view.free, used)] == list(self.capacity)
        assert sum(view.free) + sum(j.gpus for j in view.running) == view.total_gpus
        for job in view.running:
            assert 0.0 < job.ratio <= 1.0, (job.job_id, job.ratio)
            assert job.remaining_s >= 0.0
        for job in view.queued:
            assert job.placement is None
            assert job.gpus <= view.total_gpus
        assert view.queued, "a decision point always has a queued job"
        ids = [j.job_id for j in (*view.queued, *view.running)]
        assert len(ids) == len(set(ids))
        return self.inner.decide(view)


@st.composite
def scenarios(draw):
    nodes = draw(st.integers(1, 4))
    gpn = draw(st.integers(2, 8))
    count = draw(st.integers(1, 10))
    jobs = tuple(
        JobSpec(
            f"j{i}",
            draw(st.sampled_from(MODELS)),
            draw(st.integers(1, 8)),
            submit_time=draw(st.floats(0.0, 3000.0, allow_nan=False)),
            duration_s=draw(st.floats(1.0, 5000.0, allow_nan=False)),
        )
        for i in range(count)
    )
    policy = draw(st.sampled_from(policy_names()))
    contention = draw(st.sampled_from(["profiled", "none", "product", "all-contend"]))
    round_s = draw(st.sampled_from([None, 300.0]))
    return nodes, gpn, jobs, policy, contention, round_s


CONTENTION_VARIANTS = {
    "profiled": lambda: make_contention("profiled"),
    "none": lambda: make_contention("none"),
    "product": lambda: make_contention("profiled", aggregate="product"),
    "all-contend": lambda: make_contention("profiled", single_node_contention_free=False),
}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_on_random_traces(scenario):
    nodes, gpn, jobs, policy_name, contention, round_s = scenario
    topo = uniform(nodes, gpn)
    policy = Checked(make_policy(policy_name), topo.capacity)
    sim = Simulator(topo, jobs, CONTENTION_VARIANTS[contention](), config=SimConfig(round_s=round_s))
    report = sim.run(policy)
    assert report.finished + report.rejected == report.jobs == len(jobs)
    for spec, rec in zip(jobs, report.records):
        assert rec.job_id == spec.job_id
        if spec.gpus > topo.total_gpus:
            assert rec.rejected and rec.finish_s is None
            continue
        assert not rec.rejected
        assert rec.finish_s is not None and rec.first_start_s is not None
        assert spec.submit_time <= rec.first_start_s <= rec.finish_s
        # nothing runs faster than its reference (1-node, ratio 1) throughput
        assert rec.jct_s >= spec.duration_s * (1 - 1e-9)
        assert rec.productive_s >= spec.duration_s * (1 - 1e-9)
        assert 0.0 < rec.mean_ratio <= 1.0 + 1e-12
        assert rec.gpu_time_s >= rec.productive_s * spec.gpus * (1 - 1e-9)
        assert rec.queue_s >= 0.0
    assert 0.0 <= report.gpu_util <= 1.0 + 1e-9
    if "preempt" not in policy_name and policy_name != "planner":  # the planner weighs preemptive heuristics' decisions
        assert report.preemptions == 0
    if not policy_name.endswith("+migrate"):  # only the +migrate variants move jobs
        assert report.migrations == 0


def test_arrival_on_idle_cluster_starts_at_its_timestamp():
    jobs = (
        JobSpec("early", "A", 2, submit_time=0.0, duration_s=10.0),
        JobSpec("late", "B", 2, submit_time=512.5, duration_s=20.0),
    )
    report = run(jobs, "fifo+consolidated", config=SimConfig(round_s=300.0))
    recs = by_id(report)
    assert recs["late"].first_start_s == 512.5  # not the next round boundary (600)
    assert recs["late"].finish_s == tight(532.5)
    assert recs["late"].jct_s == tight(20.0)
    assert report.makespan_s == tight(532.5)
    assert report.gpu_util == tight((2 * 10 + 2 * 20) / (4 * 532.5))


def test_jobs_in_system_area_is_the_sum_of_jcts_and_the_timeline_tracks_allocation():
    from deepshare.core.topology import load_topology
    from deepshare.core.traces import load as load_trace
    from deepshare.policies import make_policy

    path = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
    sim = Simulator(load_topology("testbed"), load_trace(path).jobs, make_contention("profiled"))
    report = sim.run(make_policy("las+consolidated"))
    assert sim.jobs_in_system_area == pytest.approx(sum(r.jct_s for r in report.records), rel=1e-12)
    times = [t for t, _ in sim.util_timeline]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert all(0 <= busy <= 32 for _, busy in sim.util_timeline)
    assert sim.util_timeline[-1] == (report.makespan_s, 0)
    area = sum(b * (t2 - t1) for (t1, b), (t2, _) in zip(sim.util_timeline, sim.util_timeline[1:]))
    assert area / (32 * report.makespan_s) == pytest.approx(report.gpu_util, rel=1e-9)


class _RestoreThenMove:
    """t=0 launch a (100 s of work) on node 0 and c on node 2; t=10 preempt a; t=20 relaunch it on
    node 0 (restoring from then on); at ``move_at``, move it to node 1; b (the whole cluster) keeps
    a job queued, so every 10-s round is a decision point."""

    name = "restore-then-move"

    def __init__(self, move_at: float | None) -> None:
        self.move_at = move_at

    def decide(self, view: ClusterView) -> Decision:
        queued, running = {j.job_id for j in view.queued}, {j.job_id for j in view.running}
        if view.now == 0 and "a" in queued:
            return Decision(launch=(Launch("a", Placement.of({0: 4})), Launch("c", Placement.of({2: 4}))))
        if view.now == 10 and "a" in running:
            return Decision(preempt=("a",))
        if view.now == 20 and "a" in queued:
            return Decision(launch=(Launch("a", Placement.of({0: 4})),))
        if view.now == self.move_at and "a" in running:
            return Decision(migrate=(Migrate("a", Placement.of({1: 4})),))
        if not running and "b" in queued and "a" not in queued:
            return Decision(launch=(Launch("b", Placement.of({0: 4, 1: 4, 2: 4})),))
        return WAIT


@pytest.mark.parametrize("preempt_s, migrate_s, finish_still, finish_moved", [
    (30.0, 30.0, 140.0, 150.0),  # restoring until 50: moved at 30 it pays the move's 30 s from there
    (300.0, 30.0, 410.0, 410.0),  # restoring until 320: a 30-s move must not cut that to 60
])
def test_a_move_never_shortens_the_restore_a_job_still_owes(preempt_s, migrate_s, finish_still, finish_moved) -> None:
    jobs = [JobSpec("a", "FSDP", 4, 0.0, duration_s=100.0), JobSpec("c", "FSDP", 4, 0.0, duration_s=500.0),
            JobSpec("b", "FSDP", 12, 0.0, duration_s=1.0)]
    config = SimConfig(round_s=10.0, preempt_overhead_s=preempt_s, migrate_overhead_s=migrate_s)
    for move_at, finish in ((None, finish_still), (30.0, finish_moved)):
        report = Simulator(uniform(3, 4), jobs, make_contention("none"), config=config).run(_RestoreThenMove(move_at))
        assert {r.job_id: r for r in report.records}["a"].finish_s == pytest.approx(finish), move_at
