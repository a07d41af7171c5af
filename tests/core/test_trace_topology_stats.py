"""Topology requests in the artifact's JSON traces, and ``trace stats``' counts of requests per
level and of large gangs (issue 36)."""

from __future__ import annotations

import json

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.traces import Trace, load, trace_stats
from deepshare.core.traces.stats import GangShare, topology_stats
from deepshare.core.types import JobSpec


def artifact(tmp_path, **extra: dict) -> str:
    jobs = {"a": {"model": "FSDP", "gpu_demand": 16, "total_samples_to_train": 1000},
            "b": {"model": "FSDP", "gpu_demand": 8, "total_samples_to_train": 1000, "arrival_time": 5}}
    for job_id, fields in extra.items():
        jobs[job_id].update(fields)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(jobs))
    return str(path)


def test_artifact_reads_the_topology_keys(tmp_path) -> None:
    trace = load(artifact(tmp_path, a={"required_level": "leaf", "slice_size": 8, "slice_level": "nvlink"},
                          b={"preferred_level": "spine", "required_level": None}))
    assert trace.format == "artifact"
    assert [j.topology for j in trace.jobs] == [
        TopologyRequest(required_level="leaf", slice_size=8, slice_level="nvlink"),
        TopologyRequest(preferred_level="spine")]
    assert all(j.topology is NO_TOPOLOGY for j in load(artifact(tmp_path)).jobs)


@pytest.mark.parametrize("fields, message", [
    ({"slice_size": 0, "slice_level": "nvlink"}, "job 'a': field 'slice_size': expected a positive integer up to 65,536, got 0"),
    ({"slice_size": 8}, "job 'a': slice_size and slice_level go together"),
    ({"required_level": "leaf", "preferred_level": "spine"}, "job 'a': give required_level or preferred_level, not both"),
    ({"required_level": ["leaf"]}, "job 'a': field 'required_level'"),
])
def test_bad_topology_keys_name_the_job_and_field(tmp_path, fields: dict, message: str) -> None:
    path = artifact(tmp_path, a=fields)
    with pytest.raises(DeepShareError) as caught:
        load(path)
    assert str(caught.value).startswith(path) and message in str(caught.value)


def job(job_id: str, gpus: int, **asked: object) -> JobSpec:
    return JobSpec(job_id, "FSDP", gpus, 0.0, duration_s=60.0,
                   topology=TopologyRequest(**asked) if asked else NO_TOPOLOGY)


JOBS = (job("a", 8), job("b", 16, required_level="leaf"), job("c", 64, required_level="leaf"),
        job("d", 16, preferred_level="spine", slice_size=8, slice_level="nvlink"), job("e", 256, required_level="spine"))
"""360 GPUs: sizes 8, 16, 64, 16, 256."""


def test_topology_stats_count_requests_per_level_and_gang_shares() -> None:
    stats = topology_stats(JOBS)
    assert stats.required_level == {"leaf": 2, "spine": 1}
    assert stats.preferred_level == {"spine": 1}
    assert stats.slice_level == {"nvlink": 1}
    assert stats.gangs == (GangShare(16, 4, 0.8, 352 / 360), GangShare(64, 2, 0.4, 320 / 360),
                           GangShare(256, 1, 0.2, 256 / 360))
    empty = topology_stats(())
    assert (empty.required_level, empty.gangs[0]) == ({}, GangShare(16, 0, 0.0, 0.0))


def test_trace_stats_carry_them_into_json() -> None:
    doc = json.loads(json.dumps(trace_stats(Trace(JOBS, "t", "t")).to_dict()))
    assert doc["topology"]["required_level"] == {"leaf": 2, "spine": 1}
    assert doc["topology"]["gangs"][1] == {"at_least": 64, "jobs": 2, "job_share": 0.4, "gpu_share": 320 / 360}
