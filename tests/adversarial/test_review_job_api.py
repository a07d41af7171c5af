"""A review of the job API (``deepshare.job``), each case failing before its fix: checkpoints
left half-written or written through a planted symlink, damaged checkpoints called unsafe, a FIFO
that hung a job's start, environment values that were tracebacks or silently no rank 0, and
progress reports that crashed the training step (a numpy number) or wrote non-standard JSON."""

from __future__ import annotations

import json
import os
import time

import pytest
from job_env import job_env

from deepshare import job
from deepshare.core.errors import DeepShareError

torch = pytest.importorskip("torch")


@pytest.fixture
def env(tmp_path, monkeypatch):
    return job_env(tmp_path, monkeypatch)


def test_a_failed_save_leaves_the_old_checkpoint_and_no_temporary_file(env, monkeypatch):
    job.save_checkpoint({"step": 1})

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", full)
        with pytest.raises(DeepShareError, match="checkpoint.pt: cannot write checkpoint: No space left on device"):
            job.save_checkpoint({"step": 2, "blob": b"x" * 100_000})
    assert sorted(p.name for p in (env / "ckpt").iterdir()) == ["checkpoint.pt"]
    assert job.load_checkpoint() == {"step": 1}


def test_a_symlink_planted_at_the_old_temporary_name_is_not_written_through(env):
    folder = env / "ckpt"
    folder.mkdir()
    victim = env / "victim.txt"
    victim.write_text("precious")
    (folder / f".checkpoint.pt.{os.getpid()}.tmp").symlink_to(victim)
    job.save_checkpoint({"step": 3})
    assert victim.read_text() == "precious"
    assert not (folder / "checkpoint.pt").is_symlink() and job.load_checkpoint() == {"step": 3}


def test_a_save_removes_orphaned_temporary_files_of_killed_saves(env):
    folder = env / "ckpt"
    folder.mkdir()
    old, young = folder / ".checkpoint.pt.abc.tmp", folder / ".checkpoint.pt.def.tmp"
    for path in (old, young):
        path.write_bytes(b"x" * 1000)
    from deepshare.runtime.job import STALE_TEMP_S

    stale = time.time() - STALE_TEMP_S - 60
    os.utime(old, (stale, stale))
    job.save_checkpoint({"step": 4})
    assert sorted(p.name for p in folder.iterdir()) == [young.name, "checkpoint.pt"]  # a save in progress may own it


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("content", [b"", b"\0" * 4096, b"not a checkpoint at all"])
def test_a_damaged_checkpoint_is_corrupt_not_unsafe(env, content, weights_only):
    folder = env / "ckpt"
    folder.mkdir()
    (folder / "checkpoint.pt").write_bytes(content)
    with pytest.raises(job.CorruptCheckpoint, match="checkpoint.pt: damaged or not a checkpoint"):
        job.load_checkpoint(weights_only=weights_only)


def test_a_fifo_or_folder_at_the_checkpoint_is_one_error_not_a_hang(env):
    folder = env / "ckpt"
    folder.mkdir()
    os.mkfifo(folder / "checkpoint.pt")
    with pytest.raises(job.CorruptCheckpoint, match="cannot read the checkpoint: not a regular file"):
        job.load_checkpoint()
    os.unlink(folder / "checkpoint.pt")
    (folder / "checkpoint.pt").mkdir()
    with pytest.raises(job.CorruptCheckpoint, match="cannot read the checkpoint"):
        job.load_checkpoint()


@pytest.mark.parametrize("variables, call, message", [
    ({"RANK": "abc"}, job.rank, r"\$RANK: expected an integer >= 0, got 'abc'"),
    ({"WORLD_SIZE": "2.0"}, job.world_size, r"\$WORLD_SIZE: expected an integer >= 1, got '2.0'"),
    ({"RANK": "-1"}, job.rank, r"\$RANK: expected an integer >= 0, got -1"),
    ({"RANK": "5", "WORLD_SIZE": "2"}, job.rank, r"\$RANK: expected 0..1 \(\$WORLD_SIZE is 2\), got 5"),
])
def test_bad_environment_values_name_the_variable(env, monkeypatch, variables, call, message):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        call()


def test_an_empty_checkpoint_dir_is_the_default_and_a_file_there_is_one_error(env, monkeypatch):
    monkeypatch.setenv("DEEPSHARE_CHECKPOINT_DIR", "")
    assert str(job.checkpoint_dir()) == "checkpoints"
    (env / "afile").write_text("x")
    monkeypatch.setenv("DEEPSHARE_CHECKPOINT_DIR", str(env / "afile"))
    with pytest.raises(DeepShareError, match="afile: cannot hold checkpoints"):
        job.save_checkpoint({"step": 1})


def test_reports_take_numpy_and_torch_numbers_and_leave_out_what_the_scheduler_refuses(env):
    import numpy as np

    job.report(samples=np.int64(64), throughput=torch.tensor(1.5), step=np.int32(3))
    assert json.loads((env / "ctl" / "report.json").read_text())["samples"] == 64.0
    with pytest.warns(RuntimeWarning, match="throughput=nan left out"):
        job.report(samples=10, throughput=float("nan"), step=True)
    doc = json.loads((env / "ctl" / "report.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert (doc["samples"], doc["throughput"], doc["step"]) == (10.0, None, None)
