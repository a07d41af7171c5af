"""The generator's gang-heavy mix (issue 36): the ``gang-heavy`` demand preset and shares of jobs
carrying a required or preferred topology level; deterministic under a seed, and no existing
trace moves (the pinned digests live in test_trace_recurrence.py)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from cli_run import cli, one_error_line

from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.traces import generate, load, parse_demand
from deepshare.core.traces.generator import DEMAND_PRESETS
from deepshare.core.traces.recurrence import RecurrenceModel

GANG = parse_demand("gang-heavy")
N = 4000


def shares(jobs) -> Counter:
    return Counter("required" if j.topology.required_level else "preferred" if j.topology.preferred_level else "none"
                   for j in jobs)


def test_the_preset_is_the_documented_distribution() -> None:
    assert GANG == {16: 4.0, 32: 3.0, 64: 2.0, 128: 1.0, 256: 0.5} == DEMAND_PRESETS["gang-heavy"]
    assert parse_demand(" gang-heavy ") == GANG
    assert parse_demand("gang-heavy", cluster_gpus=256) == GANG
    with pytest.raises(DeepShareError, match="largest jobs .256 GPUs. are more than the cluster's 128"):
        parse_demand("gang-heavy", cluster_gpus=128)


def test_gang_sizes_and_request_shares_for_a_seed() -> None:
    trace = generate(N, demand=GANG, required_level="leaf", required_share=0.3,
                     preferred_level="spine", preferred_share=0.2, seed=7)
    sizes = Counter(j.gpus for j in trace.jobs)
    assert set(sizes) <= {16, 32, 64, 128, 256} and all(16 <= j.gpus <= 256 for j in trace.jobs)
    total = sum(GANG.values())
    for g, w in GANG.items():  # within 4 binomial standard deviations
        p = w / total
        assert abs(sizes[g] / N - p) <= 4 * math.sqrt(p * (1 - p) / N), (g, sizes[g])
    got = shares(trace.jobs)
    for kind, p in (("required", 0.3), ("preferred", 0.2), ("none", 0.5)):
        assert abs(got[kind] / N - p) <= 4 * math.sqrt(p * (1 - p) / N), got
    assert {j.topology for j in trace.jobs} == {
        TopologyRequest(required_level="leaf"), TopologyRequest(preferred_level="spine"), NO_TOPOLOGY}
    assert "required=leaf:0.3, preferred=spine:0.2" in trace.source


def test_deterministic_and_moving_no_other_draw() -> None:
    kwargs = dict(rate_per_s=0.01, demand=GANG, duration_sigma=1.0, seed=5)
    asked = generate(300, required_level="leaf", required_share=0.5, **kwargs)
    assert asked.jobs == generate(300, required_level="leaf", required_share=0.5, **kwargs).jobs
    plain = generate(300, **kwargs)
    strip = lambda jobs: [(j.job_id, j.model, j.gpus, j.submit_time, j.duration_s) for j in jobs]  # noqa: E731
    assert strip(asked.jobs) == strip(plain.jobs)  # the requests' stream moves nothing else
    assert all(j.topology is NO_TOPOLOGY for j in plain.jobs)
    other = generate(300, required_level="leaf", required_share=0.5, **{**kwargs, "seed": 6})
    assert [j.topology for j in other.jobs] != [j.topology for j in asked.jobs]


def test_with_the_recurrence_model_too() -> None:
    trace = generate(500, demand=GANG, recurrence=RecurrenceModel(users=5), preferred_level="leaf",
                     preferred_share=1.0, seed=2)
    assert all(j.topology == TopologyRequest(preferred_level="leaf") for j in trace.jobs)
    plain = generate(500, demand=GANG, recurrence=RecurrenceModel(users=5), seed=2)
    assert [(j.gpus, j.user, j.duration_s) for j in trace.jobs] == [(j.gpus, j.user, j.duration_s) for j in plain.jobs]


@pytest.mark.parametrize("kwargs, message", [
    (dict(required_level="leaf"), "required_level and required_share go together"),
    (dict(preferred_share=0.2), "preferred_level and preferred_share go together"),
    (dict(required_level="leaf", required_share=1.5), "required_share must be a number from 0 to 1"),
    (dict(required_level="a", required_share=0.6, preferred_level="b", preferred_share=0.6), "at most 1"),
    (dict(required_level=" leaf", required_share=0.5), "must be a level's name"),
])
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(DeepShareError, match=message):
        generate(10, **kwargs)


def test_cli_writes_the_columns_and_checks_levels_against_the_cluster(capsys, tmp_path) -> None:
    out = tmp_path / "gangs.csv"
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 200, "--demand", "gang-heavy", "--load", 0.9,
                     "--cluster", "clos3-256", "--required-level", "leaf", "--required-share", 0.25,
                     "--preferred-level", "aggregation", "--preferred-share", 0.25, "--seed", 3, "--out", out)
    assert rc == 0, err
    header = out.read_text().splitlines()[0]
    assert header.endswith(",required_level,preferred_level")
    jobs = load(out).jobs
    assert all(16 <= j.gpus <= 256 for j in jobs)
    assert set(shares(jobs)) == {"required", "preferred", "none"}
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 5, "--load", 0.9, "--cluster", "clos3-256",
                     "--required-level", "spine", "--required-share", 0.5, "--out", tmp_path / "x.csv")
    assert rc != 0
    one_error_line(err, "--required-level", "unknown fabric level 'spine'", "leaf, aggregation, core")
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 5, "--preferred-share", 0.5, "--out", tmp_path / "y.csv")
    assert rc != 0
    one_error_line(err, "--preferred-level and --preferred-share go together")
