"""Heuristic policies: every registered policy on every bundled trace, placements, orders,
preemption, and the registry."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import load_topology, uniform
from deepshare.core.traces import load
from deepshare.core.errors import DeepShareError
from deepshare.core.history import JobHistory
from deepshare.core.types import Decision, JobSpec, Launch, Placement, WAIT
from deepshare.core.view import JobView
from deepshare.policies import Policy, make_policy, policy_info, policy_names
from deepshare.policies.heuristic import HeuristicPolicy
from deepshare.policies.order import DLAS_THRESHOLDS_GPU_S, STARVE_FACTOR, STARVE_MIN_S, dlas, fifo, las, srtf
from deepshare.policies.placement import (
    candidate_placements,
    consolidated,
    PACKING_MARGIN,
    contention_aware,
    even_split,
    fit_equivalents,
    spread,
)

TRACES = sorted((Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces").glob("*.json"))


@lru_cache(maxsize=None)
def trace_jobs(path: Path) -> tuple[JobSpec, ...]:
    return load(path).jobs


# -- every policy on every bundled trace -------------------------------------------------------
def test_bundled_traces_are_there():
    assert len(TRACES) == 10
    assert all(len(trace_jobs(p)) == 256 for p in TRACES)


REPRESENTATIVES = ("fifo+consolidated", "las+spread", "srsf+packed+preempt", "dlas+uncontended+migrate",
                   "gittins+topo-aware+preempt", "bsrsf+topo-balanced+backfill", "themis+contention-aware",
                   "rl-hybrid", "rl-hybrid-preempt")
"""Policies that run on every bundled trace in the default run: every order family, every kind of
placement and every suffix among them; ``make test-all`` runs every policy on every trace."""


def finishes(name: str, runs: list[tuple[Path, float | None]]) -> None:
    """``name`` finishes each (trace, round length) of ``runs`` with every job and no preemption
    unless it preempts."""
    topo = load_topology("testbed")
    for path, round_s in runs:
        sim = Simulator(topo, trace_jobs(path), make_contention("profiled"), config=SimConfig(round_s=round_s))
        report = sim.run(make_policy(name))
        assert report.finished == 256, (name, path.name)
        assert report.rejected == 0
        assert report.policy == name
        assert 0.0 < report.gpu_util <= 1.0
        if not name.removesuffix("+migrate").removesuffix("+fill").endswith(("+preempt", "-preempt")) and name != "planner":
            # rl-hybrid-preempt preempts too, and the planner weighs preemptive heuristics' decisions
            assert report.preemptions == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", policy_names())
def test_every_policy_finishes_the_evaluation_trace(name):
    """Event-driven decision points, and the original's 300 s rounds."""
    assert TRACES[0].name == "deepshare-simulate-trace0.json"
    finishes(name, [(TRACES[0], None), (TRACES[0], 300.0)])


@pytest.mark.slow
@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_representative_policies_finish_every_bundled_trace(name):
    finishes(name, [(path, None) for path in TRACES[1:]])


@pytest.mark.slow
@pytest.mark.full_matrix
@pytest.mark.parametrize("name", policy_names())
def test_every_policy_finishes_every_bundled_trace(name):
    """The full product (``make test-all``): event-driven decision points on all ten traces."""
    finishes(name, [(path, None) for path in TRACES[1:]])


# -- placement strategies ----------------------------------------------------------------------
def jv(job_id: str = "j", gpus: int = 2, model: str = "FSDP", **kw) -> JobView:
    fields = dict(submit_time=0.0, remaining_s=100.0, attained_gpu_s=0.0, comm_class="heavy")
    fields.update(kw)
    return JobView(job_id, model, gpus, **fields)


def P(counts: dict[int, int]) -> Placement:
    return Placement.of(counts)


def test_consolidated_best_fit_single_node():
    assert consolidated(jv(gpus=2), [3, 2, 4]) == P({1: 2})
    assert consolidated(jv(gpus=3), [3, 2, 4]) == P({0: 3})
    assert consolidated(jv(gpus=4), [3, 2, 4]) == P({2: 4})
    assert consolidated(jv(gpus=2), [4, 2, 2]) == P({1: 2})  # ties: lowest index
    assert consolidated(jv(gpus=1), [0, 0, 1]) == P({2: 1})


def test_consolidated_multi_node_fewest_nodes():
    assert consolidated(jv(gpus=6), [3, 2, 4]) == P({2: 4, 0: 2})
    assert consolidated(jv(gpus=9), [3, 2, 4]) == P({0: 3, 1: 2, 2: 4})
    assert consolidated(jv(gpus=5), [2, 2, 2, 3]) == P({3: 3, 0: 2})
    assert consolidated(jv(gpus=10), [3, 2, 4]) is None
    assert consolidated(jv(gpus=1), [0, 0]) is None


def test_spread_round_robin():
    assert spread(jv(gpus=4), [3, 2, 4]) == P({2: 2, 0: 1, 1: 1})
    assert spread(jv(gpus=2), [8, 8, 8, 8]) == P({0: 1, 1: 1})
    assert spread(jv(gpus=8), [8, 8, 8, 8]) == P({0: 2, 1: 2, 2: 2, 3: 2})
    assert spread(jv(gpus=2), [0, 2, 1]) == P({1: 1, 2: 1})
    assert spread(jv(gpus=5), [1, 4, 0]) == P({1: 4, 0: 1})  # a node runs dry, the others continue
    assert spread(jv(gpus=3), [1, 1]) is None


def test_even_split_and_candidates():
    assert even_split(jv(gpus=4), [2, 4, 3], 2) == P({1: 2, 2: 2})
    assert even_split(jv(gpus=5), [2, 4, 3], 2) == P({1: 3, 2: 2})
    assert even_split(jv(gpus=4), [1, 1, 4], 2) is None  # node 0 cannot take 2
    assert even_split(jv(gpus=2), [2, 0, 0], 2) is None  # only one node has room
    cands = candidate_placements(jv(gpus=2), [2, 3, 0])
    assert cands[:2] == [P({0: 2}), P({1: 2})]  # singles, best fit first
    assert P({0: 1, 1: 1}) in cands
    assert len(cands) == len(set(cands))
    assert candidate_placements(jv(gpus=6), [2, 3, 0]) == []


def contention_view(single_node_contention_free: bool):
    """A view at t=10: FSDP (a heavy aggressor) holds node 0's first 2 GPUs, a light
    MobileNetV3 holds node 1's first 2; a MoE 2-GPU job is queued. free = [2, 2]."""
    jobs = (
        JobSpec("agg", "FSDP", 2, submit_time=0.0, duration_s=1000.0),
        JobSpec("light", "MobileNetV3", 2, submit_time=0.0, duration_s=1000.0),
        JobSpec("cand", "MoE", 2, submit_time=10.0, duration_s=100.0),
    )
    model = make_contention("profiled", single_node_contention_free=single_node_contention_free)
    sim = Simulator(uniform(2, 4), jobs, model)
    sim.advance()
    sim.apply(Decision(launch=(Launch("agg", P({0: 2})), Launch("light", P({1: 2})))))
    view = sim.advance()
    assert view.now == 10.0 and view.free == (2, 2)
    (cand,) = view.queued
    return sim, view, cand


def test_fit_equivalents_leave_the_same_free_gpus():
    assert fit_equivalents([2, 3, 2, 2], P({0: 2})) == [P({0: 2}), P({2: 2}), P({3: 2})]
    assert fit_equivalents([2, 3, 0], P({0: 2})) == [P({0: 2})]
    assert fit_equivalents([4, 4, 4, 1], P({0: 4, 1: 2})) == [
        P({0: 4, 1: 2}), P({2: 4, 1: 2}), P({0: 4, 2: 2}),
    ]
    assert len(fit_equivalents([8] * 20, P({0: 8}))) == 8  # bounded


def test_contention_aware_avoids_the_heavy_aggressor():
    sim, view, cand = contention_view(single_node_contention_free=False)
    # consolidated's best fit is node 0 (ties: lowest index), next to FSDP
    assert consolidated(cand, list(view.free), view) == P({0: 2})
    chosen = contention_aware(cand, list(view.free), view)
    assert chosen == P({1: 2})
    near, far = view.predict(cand, P({0: 2})), view.predict(cand, P({1: 2}))
    assert near.ratio < far.ratio
    assert near.cost > far.cost + PACKING_MARGIN
    assert set(near.others) == {"agg"}
    # the registered policies agree, and the simulator accepts their decisions
    aware = make_policy("fifo+contention-aware").decide(view)
    packed = make_policy("fifo+consolidated").decide(view)
    assert aware.launch == (Launch("cand", P({1: 2})),)
    assert packed.launch == (Launch("cand", P({0: 2})),)
    sim.apply(aware)
    running = {j.job_id: j for j in sim.view().running}
    assert running["cand"].ratio == far.ratio
    assert running["agg"].ratio == 1.0  # no MoE next to it


def test_contention_aware_never_fragments_more_than_consolidated():
    # a quieter node with more free GPUs is not taken: it would break a bigger free block
    sim, view, cand = contention_view(single_node_contention_free=False)
    assert contention_aware(cand, [2, 3], view) == consolidated(cand, [2, 3]) == P({0: 2})


def test_contention_aware_without_contention_takes_consolidated():
    sim, view, cand = contention_view(single_node_contention_free=True)
    # single-node jobs are contention-free: every candidate predicts the same; ties go to
    # the consolidated placement
    assert contention_aware(cand, list(view.free), view) == P({0: 2})
    big = jv("big", gpus=8, model="MoE")
    empty = Simulator(uniform(4, 8), (), make_contention("profiled"))
    assert contention_aware(big, [8, 8, 8, 8], empty.view()) == P({0: 8})
    assert contention_aware(big, [4, 4, 4, 4], empty.view()) == P({0: 4, 1: 4})
    assert contention_aware(big, [1, 1, 1, 1], empty.view()) is None


@pytest.mark.slow  # link-model simulations of a full trace
@pytest.mark.parametrize("order", ["srsf", "las"])
def test_contention_aware_at_least_as_good_as_consolidated_under_link(order):
    # Under the link model the old contention-aware was up to 2.5x worse than consolidated
    # (it spread jobs on a one-decision prediction). Now it only swaps nodes of equal free
    # GPUs. On the ten bundled traces (testbed) it equals consolidated on 8 of them for srsf
    # and 9 for las, is 2% better on one (las), and 5.3% worse on one (srsf: a single swap
    # that the prediction rightly says raises the job's ratio from 0.57 to 0.99 changes the
    # rest of the run); on average it is within 0.6%.
    topo = load_topology("testbed")
    ratios = []
    for path in TRACES:
        jct = {}
        for place in ("consolidated", "contention-aware"):
            sim = Simulator(topo, trace_jobs(path), make_contention("link"))
            jct[place] = sim.run(make_policy(f"{order}+{place}")).avg_jct_s
        ratios.append(jct["contention-aware"] / jct["consolidated"])
    assert max(ratios) <= 1.06, ratios
    assert sum(ratios) / len(ratios) <= 1.006, ratios
    assert sum(r > 1 + 1e-9 for r in ratios) <= 1, ratios


def test_contention_aware_uses_pending_launches():
    # Two MoE jobs in one decision: the second must see the first's pending launch.
    jobs = tuple(JobSpec(f"m{i}", "MoE", 2, duration_s=100.0) for i in range(2))
    model = make_contention("profiled", single_node_contention_free=False)
    sim = Simulator(uniform(2, 2), jobs, model)
    view = sim.advance()
    decision = make_policy("fifo+contention-aware").decide(view)
    placements = [launch.placement for launch in decision.launch]
    assert placements == [P({0: 2}), P({1: 2})]  # separate nodes: neither is slowed
    sim.apply(decision)
    assert all(j.ratio == 1.0 for j in sim.view().running)


# -- order keys --------------------------------------------------------------------------------
def at(now: float, history: JobHistory | None = None) -> SimpleNamespace:
    """What an order reads of a view: its time and history (orders are ``factory(view) -> key``)."""
    return SimpleNamespace(now=now, history=JobHistory() if history is None else history)


def ranked(order, jobs, now: float = 0.0, history: JobHistory | None = None) -> list[str]:
    """Job ids in ``order``'s ranking at time ``now``."""
    return [j.job_id for j in sorted(jobs, key=order(at(now, history)))]


def dlas_level(job: JobView, now: float) -> int:
    return dlas(at(now))(job)[0]


def test_fifo_by_submit_time():
    jobs = [jv("b", submit_time=5.0), jv("a", submit_time=9.0), jv("c", submit_time=1.0)]
    assert ranked(fifo, jobs) == ["c", "b", "a"]
    assert ranked(fifo, [jv("y", submit_time=1.0), jv("x", submit_time=1.0)]) == ["x", "y"]


def test_srtf_by_remaining_time_not_attained():
    jobs = [
        jv("long-new", remaining_s=5000.0, attained_gpu_s=0.0),
        jv("short-old", remaining_s=10.0, attained_gpu_s=90000.0),
        jv("mid", remaining_s=300.0, attained_gpu_s=10.0),
    ]
    assert ranked(srtf, jobs) == ["short-old", "mid", "long-new"]


def test_las_least_attained_first():
    jobs = [
        jv("hog", attained_gpu_s=9000.0, remaining_s=1.0),
        jv("fresh", attained_gpu_s=0.0, remaining_s=9999.0),
        jv("some", attained_gpu_s=100.0),
    ]
    assert ranked(las, jobs) == ["fresh", "some", "hog"]


def test_dlas_queues_and_fifo_within():
    q0, q1 = DLAS_THRESHOLDS_GPU_S
    now = 100.0
    jobs = [
        jv("level2", attained_gpu_s=q1 + 1, queued_since=0.0, submit_time=0.0),
        jv("level1", attained_gpu_s=q0, queued_since=10.0, submit_time=0.0),  # threshold -> next queue
        jv("level0-late", attained_gpu_s=q0 - 1, queued_since=50.0, submit_time=0.0),
        jv("level0-early", attained_gpu_s=0.0, queued_since=20.0, submit_time=30.0),
    ]
    assert ranked(dlas, jobs, now) == ["level0-early", "level0-late", "level1", "level2"]
    # within a queue, running jobs (which keep their place) come before queued ones
    running = jv("running", attained_gpu_s=500.0, submit_time=90.0, placement=P({0: 2}))
    assert ranked(dlas, [jobs[3], running], now)[0] == "running"
    # ... but a running job in a lower queue ranks after a queued job in a higher one
    old_running = jv("old", attained_gpu_s=q0 + 5, placement=P({0: 2}))
    assert ranked(dlas, [old_running, jobs[3]], now) == ["level0-early", "old"]


def test_dlas_starvation_promotion():
    q0, _ = DLAS_THRESHOLDS_GPU_S
    last_run = 3000.0
    wait_needed = max(STARVE_MIN_S, STARVE_FACTOR * last_run)
    assert wait_needed == 6000.0
    fresh = jv("fresh", attained_gpu_s=0.0, queued_since=0.0)
    starving = jv("starving", attained_gpu_s=q0 * 2, queued_since=0.0, last_run_s=last_run)
    assert dlas_level(starving, wait_needed - 1) == 1
    assert dlas_level(starving, wait_needed) == 0
    assert ranked(dlas, [fresh, starving], wait_needed - 1) == ["fresh", "starving"]
    # promoted: same queue as the fresh job, FIFO by time queued (tie -> job id)
    assert ranked(dlas, [fresh, starving], wait_needed) == ["fresh", "starving"]
    earlier = jv("earlier", attained_gpu_s=q0 * 2, queued_since=-10.0, last_run_s=last_run)
    assert ranked(dlas, [fresh, earlier], wait_needed) == ["earlier", "fresh"]
    # a short last run still needs STARVE_MIN_S of waiting
    short = jv("short", attained_gpu_s=q0 * 2, queued_since=0.0, last_run_s=10.0)
    assert dlas_level(short, STARVE_MIN_S - 1) == 1
    assert dlas_level(short, STARVE_MIN_S) == 0
    # never-run jobs and running jobs are not promoted
    never = jv("never", attained_gpu_s=0.0, queued_since=0.0)
    assert dlas_level(never, 1e9) == 0
    running = jv("run", attained_gpu_s=q0 * 2, queued_since=0.0, placement=P({0: 2}))
    assert dlas_level(running, 1e9) == 1


# -- preemption --------------------------------------------------------------------------------
def view_at(jobs, topo, launches, contention="none"):
    """Launch ``launches`` at t=0 by hand, then return the simulator and its next view."""
    sim = Simulator(topo, jobs, make_contention(contention))
    sim.advance()
    sim.apply(Decision(launch=tuple(Launch(j, P(c)) for j, c in launches)))
    return sim, sim.advance()


LONG_THEN_SHORT = (
    JobSpec("long", "FSDP", 2, submit_time=0.0, duration_s=1000.0),
    JobSpec("short", "FSDP", 2, submit_time=100.0, duration_s=100.0),
)


@pytest.mark.parametrize("name", ["las+consolidated+preempt", "srtf+spread+preempt", "las+contention-aware+preempt"])
def test_preemptive_policy_preempts_for_better_ranked_job(name):
    sim, view = view_at(LONG_THEN_SHORT, uniform(1, 2), [("long", {0: 2})])
    assert view.now == 100.0
    decision = make_policy(name).decide(view)
    assert decision.preempt == ("long",)
    assert decision.launch == (Launch("short", P({0: 2})),)
    sim.apply(decision)
    while (v := sim.advance()) is not None:
        sim.apply(make_policy(name).decide(v))
    recs = {r.job_id: r for r in sim.report().records}
    assert recs["short"].finish_s == pytest.approx(200.0)
    assert recs["long"].preemptions == 1
    assert recs["long"].finish_s == pytest.approx(200.0 + 30.0 + 900.0)


@pytest.mark.parametrize("name", ["las+consolidated", "srtf+consolidated", "dlas+consolidated+preempt"])
def test_no_preemption_without_preempt_or_when_dlas_keeps_queue(name):
    # non-preemptive variants never preempt; DLAS keeps the running job (same queue) in place
    sim, view = view_at(LONG_THEN_SHORT, uniform(1, 2), [("long", {0: 2})])
    assert make_policy(name).decide(view) == WAIT


def test_dlas_preempts_after_the_running_job_leaves_the_first_queue():
    jobs = (
        JobSpec("long", "FSDP", 2, submit_time=0.0, duration_s=10000.0),
        JobSpec("short", "FSDP", 2, submit_time=2000.0, duration_s=100.0),
    )
    sim, view = view_at(jobs, uniform(1, 2), [("long", {0: 2})])
    (running,) = view.running
    assert running.attained_gpu_s == 4000.0 > DLAS_THRESHOLDS_GPU_S[0]
    decision = make_policy("dlas+consolidated+preempt").decide(view)
    assert decision.preempt == ("long",)
    assert decision.launch == (Launch("short", P({0: 2})),)


def test_srtf_preempt_keeps_shorter_running_job():
    jobs = (
        JobSpec("short", "FSDP", 2, submit_time=0.0, duration_s=200.0),
        JobSpec("long", "FSDP", 2, submit_time=100.0, duration_s=1000.0),
    )
    sim, view = view_at(jobs, uniform(1, 2), [("short", {0: 2})])
    assert make_policy("srtf+consolidated+preempt").decide(view) == WAIT


def test_preemptive_policy_uses_free_gpus_before_preempting():
    jobs = (
        JobSpec("old", "FSDP", 2, submit_time=0.0, duration_s=1000.0),
        JobSpec("new", "FSDP", 2, submit_time=100.0, duration_s=100.0),
    )
    sim, view = view_at(jobs, uniform(2, 2), [("old", {0: 2})])
    decision = make_policy("las+consolidated+preempt").decide(view)
    assert decision.preempt == ()
    assert decision.launch == (Launch("new", P({1: 2})),)


def single_node_only(job, free, view=None, pending=()):
    """A placement that refuses to span nodes."""
    fits = [n for n, f in enumerate(free) if f >= job.gpus]
    return Placement(((fits[0], job.gpus),)) if fits else None


def test_no_preemption_when_freed_gpus_cannot_be_used():
    jobs = (
        JobSpec("r1", "FSDP", 2, submit_time=0.0, duration_s=1000.0),
        JobSpec("r2", "MoE", 2, submit_time=0.0, duration_s=1000.0),
        JobSpec("big", "FSDP", 4, submit_time=100.0, duration_s=100.0),
    )
    sim, view = view_at(jobs, uniform(2, 2), [("r1", {0: 2}), ("r2", {1: 2})])
    # LAS ranks the fresh 4-GPU job first, so both running jobs are victims ...
    greedy = make_policy("las+consolidated+preempt").decide(view)
    assert set(greedy.preempt) == {"r1", "r2"}
    assert greedy.launch == (Launch("big", P({0: 2, 1: 2})),)
    # ... but a placement that cannot use the freed GPUs must not preempt anyone
    picky = HeuristicPolicy("las+single+preempt", las, single_node_only, preemptive=True)
    assert picky.decide(view) == WAIT


def test_preempt_decisions_are_feasible_on_a_loaded_cluster():
    # a mixed scenario: preemption and launches in one decision, applied by the simulator
    jobs = tuple(JobSpec(f"a{i}", "MoE", 2, submit_time=0.0, duration_s=5000.0) for i in range(4)) + tuple(
        JobSpec(f"b{i}", "FSDP", 2, submit_time=50.0 + i, duration_s=50.0) for i in range(4)
    )
    for name in ("las+spread+preempt", "srtf+contention-aware+preempt", "dlas+consolidated+preempt"):
        report = Simulator(uniform(2, 4), jobs, make_contention("profiled"), config=SimConfig(round_s=300.0)).run(
            make_policy(name)
        )
        assert report.finished == 8
        if not name.startswith("dlas"):
            assert report.preemptions >= 1


# -- registry ----------------------------------------------------------------------------------
def test_registry_names():
    names = policy_names()
    assert len(names) == len(set(names))
    orders = ("fifo", "srtf", "srsf", "las", "dlas", "gittins", "qssf", "bsrsf", "drf", "themis")
    placements = ("consolidated", "spread", "contention-aware", "packed", "uncontended", "topo-bestfit", "topo-balanced",
                  "topo-aware")
    expected = {f"{o}+{p}" for o in orders for p in placements}
    expected |= {f"{o}+{p}+preempt" for o in orders if o != "fifo" for p in placements}
    migrating = ("contention-aware", "packed", "uncontended")
    expected |= {f"{n}+migrate" for n in set(expected) if n.split("+")[1] in migrating}
    backfilling = ("consolidated", "topo-bestfit", "topo-balanced", "topo-aware")
    expected |= {f"{o}+{p}+backfill" for o in orders for p in backfilling}
    expected |= {f"{o}+{p}+preempt+fill" for o in orders if o != "fifo" for p in backfilling}
    assert set(policy_names(heuristics_only=True)) == expected
    # every order x placement, +preempt but for fifo; +migrate; +backfill (non-preemptive); +preempt+fill
    assert len(expected) == (10 * 8 + 9 * 8) + (10 * 3 + 9 * 3) + 10 * 4 + 9 * 4
    assert expected <= set(names)
    assert not [n for n in names if n.startswith("fifo+") and n.endswith("+preempt")]
    for name in expected:
        policy = make_policy(name)
        assert isinstance(policy, Policy)
        assert policy.name == name
        assert policy_info(name).description


@pytest.mark.parametrize("name", ["nope", "fifo+consolidated+preempt", "las", "las+spreadx", ""])
def test_unknown_policy_names(name):
    with pytest.raises(DeepShareError) as info:
        make_policy(name)
    assert "deepshare policies" in str(info.value)


def test_heuristic_takes_no_argument():
    with pytest.raises(DeepShareError) as info:
        make_policy("las+consolidated=ckpt.pt")
    assert "takes no argument" in str(info.value)


def test_register_twice_is_refused():
    from deepshare.policies import register

    with pytest.raises(ValueError):
        register(policy_info("las+consolidated"))
