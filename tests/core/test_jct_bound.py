"""The JCT lower bound: exact on hand-checked jobs, attained by a lone job at its fastest
placement, and never beaten by any registered heuristic under either contention model."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.jct_bound import avg_jct_bound, job_jct_bounds, node_count_range
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.core.workloads import ProfileKey, default_catalog
from deepshare.policies import make_policy, policy_names

CAT = default_catalog()


def iso(model: str, gpus: int, nodes: int) -> float:
    return CAT.isolated[ProfileKey(model, gpus, nodes)]


def test_node_count_range():
    assert list(node_count_range(uniform(4, 8), 4)) == [1, 2, 3, 4]
    assert list(node_count_range(uniform(4, 8), 16)) == [2, 3, 4]
    assert list(node_count_range(uniform(2, 4), 8)) == [2]
    assert list(node_count_range(uniform(2, 8), 17)) == []  # rejected: more GPUs than the cluster


def test_exact_bounds_on_hand_checked_jobs():
    jobs = [
        # fits on one node, its reference placement: the bound is its duration
        JobSpec("a", "Transformer-XL", 4, 0.0, duration_s=100.0),
        # 16 GPUs on 8-GPU nodes: reference = 2 nodes, but MobileNetV3 measured faster spread
        # (8 GPUs: 2432.0 on 2 nodes, 2864.1 on 8): on 4 nodes the best is its 4-node value
        JobSpec("b", "MobileNetV3", 16, 5.0, duration_s=1000.0),
        # given as samples: samples / best throughput (2 GPUs: one node = the 2-node measurement)
        JobSpec("c", "FSDP", 2, 7.0, total_samples=1710.0),
        # the cluster cannot hold it: rejected, no bound
        JobSpec("d", "MoE", 64, 9.0, duration_s=50.0),
    ]
    bounds = job_jct_bounds(jobs, uniform(4, 8))
    assert bounds[0] == pytest.approx(100.0, rel=1e-12)
    assert bounds[1] == pytest.approx(1000.0 * iso("MobileNetV3", 8, 2) / iso("MobileNetV3", 8, 4), rel=1e-12)
    assert bounds[1] < 1000.0  # faster than its reference placement
    assert bounds[2] == pytest.approx(1710.0 / iso("FSDP", 2, 2), rel=1e-12)
    assert bounds[3] is None
    assert avg_jct_bound(jobs, uniform(4, 8)) == pytest.approx(sum(bounds[:3]) / 3, rel=1e-12)
    # 8 GPUs on 4-GPU nodes must span 2 nodes: slower than its one-node reference (the 8-node value)
    (slow,) = job_jct_bounds([JobSpec("e", "MobileNetV3", 8, 0.0, duration_s=10.0)], uniform(2, 4))
    assert slow == pytest.approx(10.0 * iso("MobileNetV3", 8, 8) / iso("MobileNetV3", 8, 2), rel=1e-12)


def test_a_lone_job_at_its_fastest_placement_attains_the_bound():
    job = JobSpec("b", "MobileNetV3", 16, 5.0, duration_s=1000.0)
    (bound,) = job_jct_bounds([job], uniform(4, 8))
    jcts = {}
    for name in ("las+spread", "las+consolidated"):
        report = Simulator(uniform(4, 8), [job], make_contention("profiled")).run(make_policy(name))
        jcts[name] = report.avg_jct_s
    assert jcts["las+spread"] == pytest.approx(bound, rel=1e-9)  # 4 nodes: its fastest
    assert jcts["las+consolidated"] == pytest.approx(1000.0, rel=1e-9)  # 2 nodes: its reference


HEURISTICS = policy_names(heuristics_only=True)

job_st = st.tuples(
    st.sampled_from(CAT.models),
    st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]),
    st.floats(0, 2000, allow_nan=False),
    st.floats(10, 5000, allow_nan=False),
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=st.lists(job_st, min_size=1, max_size=7),
    cluster=st.sampled_from([(2, 4), (2, 8), (3, 8)]),
    contention=st.sampled_from(["profiled", "link"]),
)
def test_no_heuristic_beats_the_bound(raw, cluster, contention):
    jobs = [JobSpec(f"j{i}", m, g, t, duration_s=d) for i, (m, g, t, d) in enumerate(raw)]
    topology = uniform(*cluster)
    bounds = dict(zip((j.job_id for j in jobs), job_jct_bounds(jobs, topology)))
    avg_bound = avg_jct_bound(jobs, topology)
    for name in HEURISTICS:
        report = Simulator(topology, jobs, make_contention(contention)).run(make_policy(name))
        for rec in report.records:
            if rec.rejected:
                assert bounds[rec.job_id] is None
                continue
            assert rec.finish_s - rec.submit_s >= bounds[rec.job_id] * (1 - 1e-9), (name, rec)
        if avg_bound is not None:
            assert report.avg_jct_s >= avg_bound * (1 - 1e-9), name
