"""The strong baselines: the ``srsf`` order and the ``packed`` placement (exact JCTs on
hand-checkable cases; the relaxation never stalls and never fragments before it expires)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import Decision, JobSpec, Placement
from deepshare.core.view import ClusterView, JobView, Prediction
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy, policy_names
from deepshare.policies.heuristic import HeuristicPolicy
from deepshare.policies.order import ORDERS, srsf
from deepshare.policies.placement import (
    PACKED_RELAX_S,
    UNCONTENDED_MIN_RATIO,
    make_packed,
    make_uncontended,
    min_nodes,
    packed,
    uncontended,
)

CATALOG = default_catalog()


def finishes(name: str, jobs, nodes: int, gpus: int, **config) -> dict[str, float]:
    sim = Simulator(uniform(nodes, gpus), jobs, make_contention("none"), config=SimConfig(**config))
    report = sim.run(make_policy(name))
    return {r.job_id: r.finish_s for r in report.records}


# -- srsf --------------------------------------------------------------------------------------
def test_srsf_key_is_remaining_time_times_gpus():
    key = srsf(None)
    wide = JobView("w", "FSDP", 4, 0.0, remaining_s=300.0, attained_gpu_s=0.0, comm_class="heavy")
    narrow = JobView("n", "FSDP", 1, 5.0, remaining_s=1000.0, attained_gpu_s=0.0, comm_class="heavy")
    assert key(wide) == (1200.0, 0.0, "w")
    assert key(narrow) < key(wide)  # 1000 GPU-s before 1200 GPU-s, although it is longer


def test_srsf_runs_least_gpu_service_first():
    # 1 node x 4 GPUs. a holds all 4 until t=100; then b (4 GPUs x 300 s = 1200 GPU-s) and
    # c (1 GPU x 1000 s = 1000 GPU-s) compete: srsf runs c first, srtf b first.
    jobs = [
        JobSpec("a", "FSDP", 4, 0.0, duration_s=100.0),
        JobSpec("b", "FSDP", 4, 1.0, duration_s=300.0),
        JobSpec("c", "FSDP", 1, 2.0, duration_s=1000.0),
    ]
    assert finishes("srsf+consolidated", jobs, 1, 4) == {"a": 100.0, "b": 1400.0, "c": 1100.0}
    assert finishes("srtf+consolidated", jobs, 1, 4) == {"a": 100.0, "b": 400.0, "c": 1400.0}


def test_srsf_preempt_preempts_a_wide_job_that_srtf_keeps():
    # a: 4 GPUs x 1000 s from t=0; at t=100 b arrives: 1 GPU x 950 s. a has 900 s left
    # (srtf keeps it: 900 < 950) but 3600 GPU-s (srsf preempts it for b's 950 GPU-s);
    # a restarts when b finishes, after the 30 s restore: 1050 + 30 + 900.
    jobs = [JobSpec("a", "FSDP", 4, 0.0, duration_s=1000.0), JobSpec("b", "FSDP", 1, 100.0, duration_s=950.0)]
    assert finishes("srsf+consolidated+preempt", jobs, 1, 4) == {"a": 1980.0, "b": 1050.0}
    assert finishes("srtf+consolidated+preempt", jobs, 1, 4) == {"a": 1000.0, "b": 1950.0}


# -- packed ------------------------------------------------------------------------------------
def test_min_nodes():
    assert min_nodes(4, (8, 8)) == 1
    assert min_nodes(8, (8, 8)) == 1
    assert min_nodes(12, (8, 8, 8)) == 2
    assert min_nodes(16, (4, 8, 8)) == 2
    assert min_nodes(13, (4, 8, 2)) == 3
    assert min_nodes(6, (4, 2, 2)) == 2


def _view(free, now=0.0, capacity=None) -> ClusterView:
    topo = uniform(len(free), 4) if capacity is None else None
    return ClusterView(now, topo, CATALOG, tuple(free), (), (), lambda *a: None)


def _job(gpus: int, queued_since: float = 0.0) -> JobView:
    return JobView("j", "MoE", gpus, 0.0, 100.0, 0.0, "heavy", queued_since=queued_since)


def test_packed_takes_only_the_fewest_node_shape_until_the_wait_expires():
    assert packed(_job(2), [1, 1, 4], _view([1, 1, 4])) == Placement(((2, 2),))
    assert packed(_job(2), [1, 1, 0], _view([1, 1, 0], now=10.0)) is None  # would split: wait
    late = PACKED_RELAX_S
    assert packed(_job(2), [1, 1, 0], _view([1, 1, 0], now=late)) == Placement(((0, 1), (1, 1)))
    assert packed(_job(2, queued_since=5.0), [1, 1, 0], _view([1, 1, 0], now=late)) is None
    assert packed(_job(6), [4, 4, 0], _view([4, 4, 0])) == Placement(((0, 4), (1, 2)))  # 2 nodes is the least
    assert packed(_job(6), [3, 2, 1], _view([3, 2, 1])) is None
    assert packed(_job(6), [2, 2, 1], _view([2, 2, 1], now=1e9)) is None  # does not fit at all
    eager = make_packed(0.0)
    assert eager(_job(2), [1, 1, 0], _view([1, 1, 0])) == Placement(((0, 1), (1, 1)))
    with pytest.raises(ValueError):
        make_packed(-1.0)


# 2 nodes x 4 GPUs: r0 and r1 (3 GPUs each, 3000 s) take one node each, leaving 1 + 1 free;
# x (2 GPUs, 100 s) arrives at t=10.
RUNNERS = [JobSpec("r0", "MobileNetV3", 3, 0.0, duration_s=3000.0), JobSpec("r1", "MobileNetV3", 3, 0.0, duration_s=3000.0)]
X = JobSpec("x", "Transformer-XL", 2, 10.0, duration_s=100.0)
SPLIT_S = 100.0 * CATALOG.reference_throughput("Transformer-XL", 2) / CATALOG.throughput("Transformer-XL", 2, 2)


def test_consolidated_splits_at_once():
    assert finishes("srsf+consolidated", [*RUNNERS, X], 2, 4) == {"r0": 3000.0, "r1": 3000.0, "x": 10.0 + SPLIT_S}


def test_packed_waits_for_one_node():
    # no decision point between t=10 and the completions at 3000: x starts on one node then
    assert finishes("srsf+packed", [*RUNNERS, X], 2, 4) == {"r0": 3000.0, "r1": 3000.0, "x": 3100.0}


def test_packed_relaxes_at_the_first_decision_point_after_the_wait():
    # y (1 GPU, arriving at t=700) is a decision point 690 s >= 600 s after x queued: x takes
    # the split placement there; y (10,000 GPU-s, behind x in srsf) starts when x finishes.
    y = JobSpec("y", "MobileNetV3", 1, 700.0, duration_s=10_000.0)
    got = finishes("srsf+packed", [*RUNNERS, X, y], 2, 4)
    assert got == {"r0": 3000.0, "r1": 3000.0, "x": 700.0 + SPLIT_S, "y": 10_700.0 + SPLIT_S}
    # an arrival before the wait expires changes nothing: x still waits for a node
    early = JobSpec("y", "MobileNetV3", 1, 300.0, duration_s=10_000.0)
    assert finishes("srsf+packed", [*RUNNERS, X, early], 2, 4)["x"] == 3100.0


def test_packed_relaxes_on_round_ticks():
    # with 300 s rounds the tick at t=900 is the first decision point after 610 s of waiting
    got = finishes("srsf+packed", [*RUNNERS, X], 2, 4, round_s=300.0)
    assert got["x"] == 900.0 + SPLIT_S


def test_every_order_has_a_packed_policy():
    names = set(policy_names(heuristics_only=True))
    for order in ORDERS:
        for placement in ("packed", "uncontended"):
            assert f"{order}+{placement}" in names
            assert (f"{order}+{placement}+preempt" in names) == (order != "fifo")
    assert "srsf+consolidated+preempt" in names


# -- uncontended -------------------------------------------------------------------------------
def _predicting(free, ratio: float, running: tuple = (), now: float = 0.0) -> tuple[ClusterView, list]:
    """A view whose every prediction is ``ratio``, and the list of questions it was asked."""
    asked = []

    def predict(job, placement, pending=()):
        asked.append((job.job_id, placement, tuple(pending)))
        return Prediction(ratio)

    return ClusterView(now, uniform(len(free), 4), CATALOG, tuple(free), (), running, predict), asked


def test_uncontended_waits_below_the_ratio_unless_nothing_runs():
    busy = (JobView("r", "MoE", 2, 0.0, 100.0, 0.0, "heavy"),)
    view, asked = _predicting([2, 4], UNCONTENDED_MIN_RATIO - 0.01, running=busy)
    assert uncontended(_job(4), [2, 4], view) is None  # packed's node, but predicted too slow: wait
    assert asked == [("j", Placement(((1, 4),)), ())]
    view, _ = _predicting([2, 4], UNCONTENDED_MIN_RATIO, running=busy)
    assert uncontended(_job(4), [2, 4], view) == Placement(((1, 4),))  # at the threshold: launch
    idle, asked = _predicting([2, 4], 0.1)
    assert uncontended(_job(4), [2, 4], idle) == Placement(((1, 4),)) and asked == []  # idle cluster: never wait
    launching = [(_job(1), Placement(((0, 1),)))]
    assert uncontended(_job(4), [1, 4], idle, launching) is None  # a launch is pending: it contends
    assert asked == [("j", Placement(((1, 4),)), tuple(launching))]
    split, _ = _predicting([1, 1, 0], 1.0, running=busy, now=10.0)
    assert uncontended(_job(2), [1, 1, 0], split) is None  # packed's shape rule first
    assert make_uncontended(0.0)(_job(4), [2, 4], view) == Placement(((1, 4),))
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError):
            make_uncontended(bad)


def test_uncontended_waits_out_a_contended_launch():
    # 3 nodes x 4 GPUs. r (6 GPUs, 1000 s) takes node 0 and half of node 1; x (6 GPUs, 500 s,
    # at t=10) fits only on nodes 1 + 2, sharing node 1 with r: srsf+packed starts it there at
    # once and both slow down; srsf+uncontended waits until r finishes, then x runs alone.
    jobs = [JobSpec("r", "Transformer-XL", 6, 0.0, duration_s=1000.0), JobSpec("x", "Transformer-XL", 6, 10.0, duration_s=500.0)]
    sim = Simulator(uniform(3, 4), jobs, make_contention("profiled"))
    report = sim.run(make_policy("srsf+uncontended"))
    assert {r.job_id: r.finish_s for r in report.records} == {"r": 1000.0, "x": 1500.0}
    contended = Simulator(uniform(3, 4), jobs, make_contention("profiled")).run(make_policy("srsf+packed"))
    finish = {r.job_id: r.finish_s for r in contended.records}
    assert finish["r"] > 1000.0 and finish["x"] < 1500.0  # launched at t=10, slowed by sharing node 1


# -- the relaxation never stalls, and never fragments early ------------------------------------
MODELS = CATALOG.models


class Checked:
    """Wraps a packed policy: every launch is the fewest-node shape or waited out the relaxation."""

    def __init__(self, policy: HeuristicPolicy, relax: float) -> None:
        self.policy, self.relax, self.name = policy, relax, policy.name

    def decide(self, view: ClusterView) -> Decision:
        decision = self.policy.decide(view)
        queued = {j.job_id: j for j in view.queued}
        capacity = tuple(view.topology.capacity)
        for launch in decision.launch:
            job = queued[launch.job_id]
            assert launch.placement.num_nodes == min_nodes(job.gpus, capacity) or (
                view.now - job.queued_since >= self.relax
            )
        return decision


@st.composite
def packed_scenarios(draw):
    nodes = draw(st.integers(1, 4))
    gpn = draw(st.integers(2, 8))
    jobs = tuple(
        JobSpec(
            f"j{i}",
            draw(st.sampled_from(MODELS)),
            draw(st.integers(1, 2 * gpn)),
            submit_time=draw(st.floats(0.0, 3000.0, allow_nan=False)),
            duration_s=draw(st.floats(1.0, 5000.0, allow_nan=False)),
        )
        for i in range(draw(st.integers(1, 12)))
    )
    order = draw(st.sampled_from(sorted(ORDERS)))
    preemptive = order != "fifo" and draw(st.booleans())
    relax = draw(st.sampled_from([0.0, 60.0, PACKED_RELAX_S, 1e7]))
    contention = draw(st.sampled_from(["profiled", "none", "link"]))
    round_s = draw(st.sampled_from([None, 300.0]))
    waits_out_contention = draw(st.booleans())
    return nodes, gpn, jobs, order, preemptive, relax, contention, round_s, waits_out_contention


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packed_scenarios())
def test_packed_never_stalls(scenario):
    """Neither ``packed`` nor ``uncontended`` (which may wait forever for a calm placement while
    anything runs) leaves a job unfinished, and neither fragments before the relaxation."""
    nodes, gpn, jobs, order, preemptive, relax, contention, round_s, waits_out_contention = scenario
    place = make_uncontended(relax_after_s=relax) if waits_out_contention else make_packed(relax)
    policy = HeuristicPolicy(f"{order}+packed", ORDERS[order][0], place, preemptive)
    sim = Simulator(uniform(nodes, gpn), jobs, make_contention(contention), config=SimConfig(round_s=round_s))
    report = sim.run(Checked(policy, relax))
    assert report.finished + report.rejected == len(jobs)
    assert report.rejected == sum(j.gpus > nodes * gpn for j in jobs)
