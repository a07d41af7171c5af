"""A review of the training configuration surface, each case failing before its fix (and before
Ray starts): a new run into a folder holding a run mixed the two (metrics appended to the old
rows, some checkpoints replaced, the others left for --resume to pick); ``--out`` with
``--resume`` was ignored; ``tune --grid run.iterations`` was shown but not trained; ``tune --out``
at a file failed inside Ray Tune; ``ppo.optimizer`` (ignored by the new stack), a learner
pipeline without its default connectors, 10^12-step batches and float32-overflowing
coefficients passed; ``true`` read as 1 iteration or hidden unit; a curriculum longer than the
run said nothing."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from cli_run import cli, one_error_line
from rich.console import Console

from deepshare.cli.train import _warn_unreached_stages
from deepshare.core.errors import DeepShareError
from deepshare.rl.train import check_new_run_folder, parse_train_config

CONFIG = "rllib_configs/rl_base.yaml"
BASE = "name: t\nenv: {generated_fraction: 1.0, generated_jobs: 12, generated_nodes: [2]}\n"


@pytest.mark.parametrize("entry", ["checkpoints/iter_0040/algorithm_state.pkl", "policy.pt", "metrics.csv",
                                   "tb/events"])
def test_a_new_run_refuses_a_folder_that_holds_a_run(tmp_path, capsys, entry):
    run = tmp_path / "run"
    (run / entry).parent.mkdir(parents=True, exist_ok=True)
    (run / entry).write_text("old run")
    rc, out, err = cli(capsys, "train", CONFIG, "--out", run, "--iterations", 1)
    assert rc == 2 and out == ""
    if entry.startswith("checkpoints"):  # a checkpoint: the run can go on
        one_error_line(err, f"--out {run}: holds a training run already (checkpoints); continue it with "
                            f"--resume {run}, or give a new run its own --out")
    else:  # stopped before its first checkpoint: --resume would find nothing
        one_error_line(err, f"--out {run}: holds a training run already ({entry.split('/')[0]}) with no checkpoint to "
                            "resume from; remove those files, or give a new run its own --out")
    assert (run / entry).read_text() == "old run"
    with pytest.raises(DeepShareError, match="holds a training run already"):
        check_new_run_folder(run)


def test_an_empty_or_unrelated_folder_is_a_new_runs_folder(tmp_path):
    check_new_run_folder(tmp_path / "missing")
    check_new_run_folder(tmp_path)  # empty
    (tmp_path / "notes.txt").write_text("mine")
    check_new_run_folder(tmp_path)


def test_out_with_resume_is_refused(tmp_path, capsys):
    rc, _, err = cli(capsys, "train", CONFIG, "--resume", tmp_path / "a", "--out", tmp_path / "b", "--iterations", 9)
    assert rc == 2
    one_error_line(err, "--out: a resumed run goes on in its own folder (--resume's); drop --out or --resume")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("grid, needle", [
    ("run.iterations=1,2", "run.iterations cannot be swept: every trial trains --iterations"),
    ("run.checkpoint_every=1,2", "run.checkpoint_every cannot be swept: a trial keeps only its last policy"),
])
def test_tune_refuses_a_grid_over_keys_no_trial_reads(tmp_path, capsys, grid, needle):
    rc, _, err = cli(capsys, "tune", CONFIG, "--grid", grid, "--out", tmp_path / "sweep")
    assert rc == 2
    one_error_line(err, needle)
    assert not (tmp_path / "sweep").exists()  # nothing made for a refused sweep


@pytest.mark.parametrize("where, words", [("file", "File exists"), ("file/sub", "Not a directory")])
def test_tune_out_that_cannot_be_a_folder_is_one_line_before_ray(tmp_path, capsys, where, words):
    (tmp_path / "file").write_text("x")
    rc, _, err = cli(capsys, "tune", CONFIG, "--grid", "ppo.lr=0.1,0.2", "--out", tmp_path / where)
    assert rc == 2
    one_error_line(err, f"--out {tmp_path / where}: cannot make the folder: {words}")


@pytest.mark.parametrize("ppo, needle", [
    ("{optimizer: {type: SGD}}", "ppo.optimizer: RLlib's old API stack; on the new stack use lr"),
    ("{add_default_connectors_to_learner_pipeline: false}",
     "ppo.add_default_connectors_to_learner_pipeline: false: the learner would get no batching"),
    ("{train_batch_size_per_learner: 1000000000000, minibatch_size: 100}",
     "ppo.train_batch_size_per_learner: must be at most 10,000,000, got 1000000000000"),
    ("{num_epochs: 1000000000000}", "ppo.num_epochs: must be at most 10,000"),
    ("{entropy_coeff: 1.0e+308}", "ppo.entropy_coeff: must be at most 3.403e+38 in size"),
    ("{lr: [[0, 1.0e+300], [10, 0.001]]}", "ppo.lr[0]: must be at most 3.403e+38 in size"),
    ("{num_epochs: %s}" % (10**400), "ppo.num_epochs: must be at most 10,000, got an integer of about 401 digits"),
    ("{lr: [[0, 0.1], [%s, 0.01]]}" % (10**400), "ppo.lr[1]: the timestep must be a whole number from 0 to "
                                                 "9,007,199,254,740,992, got an integer of about 401 digits"),
])
def test_ppo_values_rllib_would_ignore_or_never_finish_are_refused(ppo, needle):
    with pytest.raises(DeepShareError, match="^" + re.escape(f"/x/c.yaml: {needle}")):
        parse_train_config(BASE + f"ppo: {ppo}\n", Path("/x/c.yaml"))


@pytest.mark.parametrize("section", ["run: {iterations: true}", "run: {num_env_runners: false}",
                                     "model: {hidden: true}", "run: {checkpoint_every: 10000000}",
                                     "run: {iterations: 1000001}"])
def test_a_bool_is_no_count_and_counts_are_bounded(section):
    with pytest.raises(DeepShareError, match=r"^/x/c\.yaml: (run|model)\.\w+: "):
        parse_train_config(BASE + section + "\n", Path("/x/c.yaml"))


@pytest.mark.parametrize("iterations, warned", [(40, "40 iterations reach 1 of the curriculum's 3 stages (lengths [3];"),
                                                (101, "101 iterations reach 2 of the curriculum's 3 stages"),
                                                (201, None), (500, None)])
def test_a_curriculum_the_run_does_not_reach_is_warned_about(iterations, warned):
    config = parse_train_config(BASE + "ppo_extras: {curriculum: {lengths: [3, 6, 12], iterations_per_stage: 100}}\n",
                                Path("/x/c.yaml"))
    buffer = io.StringIO()
    _warn_unreached_stages(config, iterations, Console(file=buffer, width=300))
    assert (warned in buffer.getvalue()) if warned else buffer.getvalue() == ""


def test_a_new_run_whose_ray_cannot_start_leaves_no_folder_behind(tmp_path, capsys, monkeypatch):
    """`train --out runs/x` made the folder, then failed to start Ray: an empty folder was left."""
    from deepshare.core.errors import RuntimeFailure
    from deepshare.rl import train as training

    def no_ray(address):
        raise RuntimeFailure.could_not("start a local Ray instance", OSError("no room"))

    monkeypatch.setattr(training, "start_ray", no_ray)
    run = tmp_path / "runs" / "x"
    rc, out, err = cli(capsys, "train", CONFIG, "--out", run, "--iterations", 1)
    assert rc != 0 and "start a local Ray instance" in err
    assert not run.exists() and not run.parent.exists()  # `runs/` was made for it too
    mine = tmp_path / "mine"  # a folder that was there before is the user's: it stays
    mine.mkdir()
    rc, _, err = cli(capsys, "train", CONFIG, "--out", mine, "--iterations", 1)
    assert rc != 0 and mine.is_dir()
