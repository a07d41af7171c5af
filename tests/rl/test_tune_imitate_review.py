"""Adversarial review of ``deepshare tune`` and ``deepshare imitate``'s own flags and outputs: a
second sweep into one experiment folder, an unreachable ``--address``, an ``--out`` URI Ray Tune
cannot store to, and ``imitate --out`` on a folder holding another run. The work itself (Ray, the
imitation) is replaced: each must be refused in one line before it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.core.errors import DeepShareError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "rl" / "tiny.yaml"  # name: tiny_hybrid


@pytest.fixture
def no_work(monkeypatch):
    import deepshare.rl.expert
    import deepshare.rl.imitate
    import deepshare.rl.tune

    def must_not_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the work started")

    monkeypatch.setattr(deepshare.rl.tune, "run_sweep", must_not_run)
    monkeypatch.setattr(deepshare.rl.imitate, "imitate", must_not_run)
    monkeypatch.setattr(deepshare.rl.expert, "expert_iteration", must_not_run)


def test_tune_refuses_an_experiment_folder_holding_a_sweep(tmp_path, capsys, no_work):
    """Tune names each trial folder anew: a second sweep into OUT/NAME added its trials (and a second
    experiment state) beside the first's, mixing the two in one folder and one TensorBoard."""
    earlier = tmp_path / "sweep" / "tiny_hybrid"
    earlier.mkdir(parents=True)
    (earlier / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", tmp_path / "sweep")
    assert rc == 2
    one_error_line(err, f"--out {tmp_path / 'sweep'}: the experiment folder {earlier} holds a sweep already "
                        "(experiment_state-2026-01-01_00-00-00.json)")
    (earlier / "experiment_state-2026-01-01_00-00-00.json").unlink()
    earlier.rmdir()
    earlier.write_text("x")
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", tmp_path / "sweep")
    assert rc == 2
    one_error_line(err, f"{earlier}, the sweep's experiment folder, is not a folder")


def test_tune_starts_in_an_empty_experiment_folder_or_another_configs(tmp_path, capsys, monkeypatch):
    import deepshare.rl.tune

    ran = []
    monkeypatch.setattr(deepshare.rl.tune, "run_sweep", lambda *a, **k: ran.append(a) or (str(tmp_path), []))
    (tmp_path / "sweep" / "tiny_hybrid").mkdir(parents=True)
    (tmp_path / "sweep" / "other_config" / "trial").mkdir(parents=True)
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", tmp_path / "sweep")
    assert rc == 0 and len(ran) == 1, err


def test_tune_refuses_an_unreachable_address_at_once(tmp_path, capsys, no_work):
    """``train --address`` checks the head answers; ``tune`` joined it with ray.init, which retried
    for minutes (over 200 s) before anything was said."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", tmp_path / "sweep",
                     "--address", f"127.0.0.1:{port}")
    assert rc == 2
    one_error_line(err, f"--address 127.0.0.1:{port}: no Ray cluster answers there")
    assert not (tmp_path / "sweep").exists()  # nothing made for a refused sweep


@pytest.mark.parametrize("uri", ["foo://bucket/x", "S3://bucket/x", "http://host/x"])
def test_tune_refuses_a_storage_uri_ray_tune_cannot_write_to(tmp_path, capsys, no_work, uri):
    """pyarrow's ArrowInvalid (a ValueError) came out of Ray Tune after Ray had started: a traceback."""
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", uri)
    assert rc == 2
    one_error_line(err, f"--out {uri}: Ray Tune stores a sweep in a folder or a file://, s3://")


def test_tune_accepts_the_storage_uris_ray_tune_knows(tmp_path, capsys, monkeypatch):
    import deepshare.rl.tune

    seen = []
    monkeypatch.setattr(deepshare.rl.tune, "run_sweep", lambda c, a, out, **k: seen.append(out) or (out, []))
    for uri in ("s3://bucket/sweeps", "gs://bucket/x", f"file://{tmp_path}/u"):
        rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", uri)
        assert rc == 0, err
    assert len(seen) == 3


@pytest.mark.parametrize("spec", ["ppo.lr=1,1.0", "model.hidden=16,16.0,32", "env.reward_scale=0.5,5e-1"])
def test_tune_refuses_one_value_written_twice(spec):
    """``1`` and ``1.0`` differ as text (the check compared reprs): two trials of one config."""
    from deepshare.core.errors import DeepShareError
    from deepshare.rl.tune import parse_grid

    with pytest.raises(DeepShareError, match="a value is listed twice"):
        parse_grid(spec)
    assert parse_grid("env.hybrid=true,1").values == (True, 1)  # a boolean is not the number 1


def test_tune_names_a_key_given_twice_once(capsys, no_work):
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.gamma=0.9,0.99", "--grid", "gamma=0.5")
    assert rc == 2
    one_error_line(err, "--grid: a key is given twice (ppo.gamma)")


@pytest.mark.parametrize("teacher", [[], ["--teacher", "planner=2"]])
@pytest.mark.parametrize("planted, needle", [
    (["metrics.csv", "checkpoints/iter_0001/x"], "holds another run (checkpoints, metrics.csv)"),
    (["tb/events"], "holds another run (tb)"),
    (["policy.pt"], "holds a policy.pt that is no earlier run of this command's"),
])
def test_imitate_refuses_a_folder_holding_another_run(tmp_path, capsys, no_work, teacher, planted, needle):
    """imitate replaced a train run's policy.pt and left its checkpoints, metrics and TensorBoard
    logs beside it (and a plain imitate an expert run's expert.json): a folder of two runs."""
    run = tmp_path / "run"
    for name in planted:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("x")
    rc, _, err = cli(capsys, "imitate", TINY, "--out", run, *teacher)
    assert rc == 2
    one_error_line(err, f"--out {run}: {needle}")
    assert (run / planted[0]).read_text() == "x"


@pytest.mark.parametrize("teacher, own, other", [([], "imitation.json", "expert.json"),
                                                 (["--teacher", "planner=2"], "expert.json", "imitation.json")])
def test_imitate_replaces_its_own_kind_of_run_but_not_the_other(tmp_path, capsys, monkeypatch, teacher, own, other):
    import deepshare.rl.expert
    import deepshare.rl.imitate

    ran = []
    monkeypatch.setattr(deepshare.rl.imitate, "imitate", lambda *a, **k: ran.append(a) or Path("p.pt"))
    monkeypatch.setattr(deepshare.rl.expert, "expert_iteration", lambda *a, **k: ran.append(a) or Path("p.pt"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "policy.pt").write_text("x")
    (run / own).write_text("{}")
    rc, _, err = cli(capsys, "imitate", TINY, "--out", run, *teacher)
    assert rc == 0 and len(ran) == 1, err  # an earlier run of this kind: replaced, both files
    (run / other).write_text("{}")
    rc, _, err = cli(capsys, "imitate", TINY, "--out", run, *teacher)
    assert rc == 2
    one_error_line(err, f"holds another run ({other})")


def test_tune_refuses_a_file_uri_whose_experiment_folder_holds_a_sweep(tmp_path, capsys, no_work):
    """``--out file:///PATH`` is the local folder PATH to Ray Tune: a second sweep there mixed its
    trials with the first's, as with ``--out PATH`` (the check looked at local paths only)."""
    earlier = tmp_path / "sweep" / "tiny_hybrid"
    earlier.mkdir(parents=True)
    (earlier / "experiment_state-2026-01-01_00-00-00.json").write_text("{}")
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", f"file://{tmp_path}/sweep")
    assert rc == 2
    one_error_line(err, f"--out file://{tmp_path}/sweep: the experiment folder {earlier} holds a sweep already")


@pytest.mark.parametrize("uri", ["file://runs/tune", "file://localhost/tmp/x", "file://"])
def test_tune_refuses_a_file_uri_that_names_no_local_folder(capsys, no_work, uri):
    """pyarrow takes only file:///ABSOLUTE/PATH: a host or a relative path failed in Ray Tune,
    after Ray had started, with pyarrow's traceback."""
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", uri)
    assert rc == 2
    one_error_line(err, f"--out {uri}: not a local file URI")


def test_tune_that_cannot_start_ray_leaves_no_empty_out_folder(tmp_path, capsys, monkeypatch):
    """A sweep whose Ray never started left the ``--out`` folder (and the parents it made) empty
    behind, as ``train`` no longer does."""
    import deepshare.rl.tune

    def no_ray(*args, **kwargs):
        raise DeepShareError("could not start Ray: no room for it here")

    monkeypatch.setattr(deepshare.rl.tune, "run_sweep", no_ray)
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", tmp_path / "new" / "sweep")
    assert rc == 2 and "could not start Ray" in err
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    rc, _, _ = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", tmp_path / "kept")
    assert rc == 2 and (tmp_path / "kept").is_dir()  # a folder that was there stays


@pytest.mark.parametrize("out, kept, gone, error", [
    ("new/../kept", ["kept"], ["new"], "could not start Ray"),  # an empty --out that was there, reached through a folder made
    ("link/new/sub", ["target", "link"], ["target/new"], "could not start Ray"),  # through a link: what was made where it leads
    ("new/../made/sub", [], ["new", "made"], "could not start Ray"),
    ("new/" + "x" * 300, [], ["new"], "cannot make the folder"),  # the folder cannot be made: the parent made for it goes too
])
def test_tune_removes_only_the_folders_it_made(tmp_path, capsys, monkeypatch, out, kept, gone, error):
    """``--out new/../kept``, ``kept`` an empty folder that was there: a sweep whose Ray could not
    start removed ``kept`` (the path, read as written, did not exist before ``new`` was made)."""
    import deepshare.rl.tune

    def no_ray(*args, **kwargs):
        raise DeepShareError("could not start Ray: no room for it here")

    monkeypatch.setattr(deepshare.rl.tune, "run_sweep", no_ray)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kept").mkdir()
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target", target_is_directory=True)
    rc, _, err = cli(capsys, "tune", TINY, "--grid", "ppo.lr=0.1,0.2", "--out", out)
    assert rc == 2 and error in err, err
    assert all((tmp_path / k).is_dir() for k in kept), sorted(p.name for p in tmp_path.iterdir())
    assert not any(os.path.lexists(tmp_path / g) for g in gone), sorted(p.name for p in tmp_path.iterdir())
