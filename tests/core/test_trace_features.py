"""Readers keep the job features their formats have: user, group, vc and requested_s."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deepshare.core.errors import DeepShareError
from deepshare.core.traces import assign, load, mix_preset, write_canonical
from deepshare.core.types import JobSpec

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"


def models(n: int) -> list[str]:
    return assign(n, mix_preset("random"), np.random.default_rng(0))


def error(path: Path, *fragments: str) -> str:
    with pytest.raises(DeepShareError) as info:
        load(path)
    message = str(info.value)
    for fragment in (path.name, *fragments):
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def test_canonical_keeps_features_and_blank_means_none() -> None:
    trace = load(FIXTURES / "canonical_features.csv")
    assert trace.jobs == (
        JobSpec("f1", "MoE", 4, 0.0, duration_s=3600.0, user="alice", group="train-moe", vc="vc1", requested_s=7200.0),
        JobSpec("f2", "MoE", 4, 10.0, duration_s=3500.0, user="alice", group="train-moe", vc="vc1"),
        JobSpec("f3", "DLRM", 2, 20.0, total_samples=1e6, user="bob", requested_s=600.5),
        JobSpec("f4", "FSDP", 8, 30.0, duration_s=900.0),
    )


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf"])
def test_canonical_bad_requested_names_line_and_field(tmp_path: Path, value: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"job_id,submit_time,model,gpus,duration_s,total_samples,requested_s\nx,0,MoE,2,60,,{value}\n")
    error(path, "line 2", "'requested_s'", "positive number", repr(value))


def test_write_canonical_round_trips_features_exactly(tmp_path: Path) -> None:
    trace = load(FIXTURES / "canonical_features.csv")
    path = write_canonical(trace, tmp_path / "out.csv")
    assert path.read_text().splitlines()[0] == "job_id,submit_time,model,gpus,duration_s,total_samples,user,group,vc,requested_s"
    assert load(path).jobs == trace.jobs
    odd = JobSpec("o", "MoE", 2, duration_s=1.0, user="a,b", group='say "hi"', requested_s=0.1 + 0.2)
    assert load(write_canonical([odd], tmp_path / "odd.csv")).jobs == (odd,)


def test_write_canonical_writes_only_features_some_job_has(tmp_path: Path) -> None:
    plain = write_canonical([JobSpec("p", "MoE", 2, duration_s=1.0)], tmp_path / "plain.csv")
    assert plain.read_text().splitlines()[0] == "job_id,submit_time,model,gpus,duration_s,total_samples"
    users = write_canonical(
        [JobSpec("u", "MoE", 2, duration_s=1.0, user="x"), JobSpec("v", "MoE", 2, duration_s=1.0)], tmp_path / "u.csv"
    )
    assert users.read_text().splitlines() == [
        "job_id,submit_time,model,gpus,duration_s,total_samples,user",
        "u,0.0,MoE,2,1.0,,x",
        "v,0.0,MoE,2,1.0,,",
    ]


def test_write_canonical_rejects_features_that_would_not_read_back(tmp_path: Path) -> None:
    with pytest.raises(DeepShareError, match="user ' x' must be non-empty, on one line"):
        write_canonical([JobSpec("x", "MoE", 2, duration_s=1.0, user=" x")], tmp_path / "t.csv")
    with pytest.raises(DeepShareError, match="group"):
        write_canonical([JobSpec("x", "MoE", 2, duration_s=1.0, group="a\nb")], tmp_path / "t.csv")


def test_artifact_keeps_optional_keys() -> None:
    trace = load(FIXTURES / "artifact_features.json")
    assert trace.jobs == (
        JobSpec("a0", "DLRM", 2, 0.0, total_samples=5e6, user="alice", group="g1", vc="vc1", requested_s=3600.0),
        JobSpec("a1", "MoE", 4, 5.0, total_samples=1000.0, user="bob"),
        JobSpec("a2", "FSDP", 8, 9.0, total_samples=2000.0),
    )


@pytest.mark.parametrize(
    "extra, fragments",
    [
        ({"requested_s": "soon"}, ["'requested_s'", "positive number"]),
        ({"requested_s": 0}, ["'requested_s'", "positive number"]),
        ({"user": ["a"]}, ["'user'", "a name"]),
        ({"group": True}, ["'group'", "a name"]),
        ({"vc": {"a": 1}}, ["'vc'", "a name"]),
    ],
)
def test_artifact_bad_features_name_job_and_field(tmp_path: Path, extra: dict, fragments: list[str]) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"j7": {"model": "MoE", "gpu_demand": 2, "total_samples_to_train": 10, **extra}}))
    error(path, "job 'j7'", *fragments)


def test_helios_jobname_becomes_group() -> None:
    trace = load(FIXTURES / "helios_full.csv")
    assert trace.format == "helios"
    m = models(3)
    assert trace.jobs == (
        JobSpec("7001", m[0], 1, 0.0, duration_s=3600.0, user="uXBbc", vc="vcJkd", group="resnet_train"),
        JobSpec("7002", m[1], 4, 60.0, duration_s=249.0, user="uVMrF", vc="vchbv"),
        JobSpec("7003", m[2], 1, 120.0, duration_s=3630.0, user="uXBbc", vc="vcJkd", group="resnet_train"),
    )


def test_philly_keeps_user_and_vc() -> None:
    jobs = load(FIXTURES / "philly.json").jobs
    assert [(j.user, j.vc, j.group, j.requested_s) for j in jobs] == [
        ("u1", "vc1", None, None), ("u3", "vc1", None, None), ("u1", "vc2", None, None)
    ]


def test_tiresias_has_no_features() -> None:
    jobs = load(FIXTURES / "tiresias.csv").jobs
    assert all((j.user, j.group, j.vc, j.requested_s) == (None, None, None, None) for j in jobs)
