"""The pooled ideal: the suite's reference SRSF on one pool of GPUs, checked by hand."""

from __future__ import annotations

from deepshare.core.jct_bound import avg_jct_bound
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.experiments.pooled_ideal import pooled_ideal_avg_jct, pooled_ideal_report
from deepshare.experiments.suite import cell_trace, cells, load_suite


def test_a_short_job_preempts_a_long_one_for_free():
    # a: 4 GPUs x 100 s from t=0 fills the 4-GPU pool; b: 2 GPUs x 10 s arrives at t=10 with far
    # less GPU-service left (20 against 360 GPU-s), preempts a (no restore time), ends at 20;
    # a resumes at 20 with its 90 s left and ends at 110: JCTs 110 and 10
    jobs = [JobSpec("a", "MobileNetV3", 4, 0.0, duration_s=100.0), JobSpec("b", "MobileNetV3", 2, 10.0, duration_s=10.0)]
    report = pooled_ideal_report(jobs, 4)
    runs = {r.job_id: (r.first_start_s, r.finish_s, r.preemptions) for r in report.records}
    assert runs == {"a": (0.0, 110.0, 1), "b": (10.0, 20.0, 0)}
    assert pooled_ideal_avg_jct(jobs, 4) == 60.0


def test_no_contention_and_no_nodes_to_span():
    # two 8-GPU jobs of a model that slows down across nodes and under contention, side by side on
    # a 16-GPU pool: both run at their one-node speed, unslowed, and end together
    jobs = [JobSpec(f"j{i}", "MoE", 8, 0.0, duration_s=50.0) for i in range(2)]
    assert pooled_ideal_avg_jct(jobs, 16) == 50.0


def test_a_job_wider_than_the_pool_is_rejected_and_not_averaged():
    jobs = [JobSpec("big", "MoE", 16, 0.0, duration_s=50.0), JobSpec("ok", "MoE", 8, 0.0, duration_s=20.0)]
    report = pooled_ideal_report(jobs, 8)
    assert report.rejected == 1 and pooled_ideal_avg_jct(jobs, 8) == 20.0


def test_on_the_tiny_suite_it_is_never_below_the_lower_bound():
    # every job of the tiny grid fits one node: the bound (no queueing, fastest placement) is below it
    spec = load_suite("tiny")
    for cell in cells(spec):
        jobs = cell_trace(spec, cell)
        pooled = pooled_ideal_avg_jct(jobs, cell.nodes * cell.gpus_per_node)
        assert pooled >= avg_jct_bound(jobs, uniform(cell.nodes, cell.gpus_per_node)) * (1 - 1e-12)
