"""``deepshare.job`` without a scheduler, and the example job's exact checkpoint/resume."""

from __future__ import annotations

import json

import pytest
from job_env import job_env

from deepshare import job

torch = pytest.importorskip("torch")
ddp_mlp = pytest.importorskip("examples.jobs.ddp_mlp")


@pytest.fixture
def env(tmp_path, monkeypatch):
    return job_env(tmp_path, monkeypatch)


def test_defaults_and_environment(env, monkeypatch):
    assert (job.rank(), job.world_size(), job.local_rank(), job.attempt()) == (0, 1, 0, 0)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")
    monkeypatch.setenv("MASTER_PORT", "4567")
    assert (job.rank(), job.world_size(), job.master_addr(), job.master_port()) == (3, 4, "10.1.2.3", 4567)
    assert job.save_checkpoint({"x": 1}) is None  # only rank 0 writes
    job.report(samples=1)  # only rank 0 reports
    assert not (env / "ctl" / "report.json").exists()


def test_checkpoint_report_and_stop_flag(env):
    assert job.load_checkpoint() is None
    assert job.save_checkpoint({"step": 7, "w": torch.ones(2)}) == env / "ckpt" / "checkpoint.pt"
    state = job.load_checkpoint()
    assert state["step"] == 7 and torch.equal(state["w"], torch.ones(2))
    assert not list((env / "ckpt").glob(".*tmp"))  # the write went through a temporary file
    job.report(samples=64, throughput=12.5, step=2)
    doc = json.loads((env / "ctl" / "report.json").read_text())
    assert (doc["samples"], doc["throughput"], doc["step"]) == (64, 12.5, 2)
    assert job.should_stop() is False
    (env / "ctl" / "stop").touch()
    assert job.should_stop() is True


def _run_until_stopped(args: list[str], monkeypatch, stop_after_calls: int | None) -> None:
    calls = {"n": 0}

    def fake_should_stop(sync: bool = True) -> bool:
        calls["n"] += 1
        return stop_after_calls is not None and calls["n"] > stop_after_calls

    monkeypatch.setattr(job, "should_stop", fake_should_stop)
    assert ddp_mlp.main(args) == 0


@pytest.mark.slow  # trains the example job twice
def test_example_job_resumes_exactly(env, monkeypatch, tmp_path):
    args = ["--steps", "40", "--batch", "8", "--checkpoint-every", "100"]
    monkeypatch.setenv("DEEPSHARE_CHECKPOINT_DIR", str(tmp_path / "straight"))
    _run_until_stopped(args, monkeypatch, None)
    straight = json.loads((tmp_path / "straight" / "result.json").read_text())

    monkeypatch.setenv("DEEPSHARE_CHECKPOINT_DIR", str(tmp_path / "resumed"))
    _run_until_stopped(args, monkeypatch, 13)  # preempted after 13 steps: checkpoints and returns
    assert not (tmp_path / "resumed" / "result.json").exists()
    assert job.load_checkpoint()["step"] == 13
    monkeypatch.setenv("DEEPSHARE_ATTEMPT", "1")
    _run_until_stopped(args, monkeypatch, 11)  # preempted again at 24
    monkeypatch.setenv("DEEPSHARE_ATTEMPT", "2")
    _run_until_stopped(args, monkeypatch, None)
    resumed = json.loads((tmp_path / "resumed" / "result.json").read_text())
    assert resumed["step"] == straight["step"] == 40
    assert [r["start_step"] for r in resumed["runs"]] == [0, 13, 24]
    assert [r["attempt"] for r in resumed["runs"]] == [0, 1, 2]
    assert resumed["checksum"] == straight["checksum"]  # bit-identical parameters
    assert resumed["loss"] == straight["loss"]


class _Planted:
    """Unpickling this creates a marker file: what a planted checkpoint would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_checkpoint_that_names_code_is_refused_and_never_runs(env):
    import pickle

    marker = env / "pwned"
    (env / "ckpt").mkdir()
    (env / "ckpt" / "checkpoint.pt").write_bytes(pickle.dumps({"step": 1, "x": _Planted(str(marker))}))
    with pytest.raises(job.UnsafeCheckpoint, match="refused"):
        job.load_checkpoint()
    assert not marker.exists()
    # the job's own state (tensors, optimizer state, numbers) still loads as data
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    job.save_checkpoint({"step": 3, "model": model.state_dict(), "opt": opt.state_dict(), "seed": [1, 2.5, "a"]})
    state = job.load_checkpoint()
    assert state["step"] == 3 and torch.equal(state["model"]["weight"], model.state_dict()["weight"])
    assert state["opt"]["state"][0]["momentum_buffer"].shape == (2, 2)
