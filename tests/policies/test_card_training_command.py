"""The training command a card rebuilds from a policy file's metadata (``export-policy`` without
``--training-command``) reproduces the file: parsed by the real CLI parser it gives back every
setting the metadata records; a run whose settings no flag of the command expresses (a Ray Tune
trial's grid values) is refused with one line asking for ``--training-command``."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path

import pytest
from cli_run import cli, one_error_line
from policy_files import write_policy_file

from deepshare.cli import build_parser
from deepshare.core.errors import DeepShareError
from deepshare.policies.policy_card import read_card, training_of
from deepshare.rl.imitate import FitSettings

TRAIN = {"config": "rllib_configs/rl_est_ppo.yaml", "name": "x", "seed": 2, "iterations": 40,
         "env": {"durations": ["exact"], "estimate_errors": [0.0]},
         "model": {"hidden": 64, "init_from": "runs/bc/policy.pt"}, "run": {"num_env_runners": 3, "envs_per_env_runner": 4}}
"""What ``deepshare train rllib_configs/rl_est_ppo.yaml --durations exact --estimate-error 0 --seed 2
--iterations 40 --init-from runs/bc/policy.pt --num-env-runners 3`` records (the parts the command
sets; the config sets 4 envs per runner)."""

IMITATE = {"trainer": "imitation (behaviour cloning, 1 DAgger rounds)", "imitates": "srsf+packed",
           "config": "cfg.yaml", "episodes": 64, "dagger_rounds": 1, "episode_seeds": [1000, 1191],
           "fit": {"hidden": 128, "epochs": 30, "batch_size": 512, "lr": 0.01, "held_out": 0.1, "seed": 5,
                   "label_smoothing": 0.1}, "model": {"hidden": 128}}
"""What ``deepshare imitate cfg.yaml --episodes 64 --seed-base 1000 --dagger-rounds 1 --hidden 128
--batch-size 512 --lr 0.01 --held-out 0.1 --seed 5 --label-smoothing 0.1`` records."""


def _parsed(command: str):
    words = shlex.split(command, comments=True)  # as a shell reads it: a trailing note is a comment
    assert words[0] == "deepshare"
    return build_parser().parse_args(words[1:])


def test_a_train_commands_information_model_seed_and_start_come_back() -> None:
    args = _parsed(training_of(TRAIN).command)
    assert (args.command, args.config) == ("train", TRAIN["config"])
    assert (args.iterations, args.seed, args.init_from, args.num_env_runners) == (40, 2, "runs/bc/policy.pt", 3)
    # cmd_train replaces env.durations / env.estimate_errors with one-item lists of the flags
    assert ([args.durations], [args.estimate_error]) == (TRAIN["env"]["durations"], TRAIN["env"]["estimate_errors"])


def test_a_train_commands_config_lists_stay_the_configs() -> None:
    """A list of several models or sigmas came from the config (no flag writes one): no flag."""
    mixed = {**TRAIN, "env": {"durations": ["estimated", "unknown"], "estimate_errors": [0.7, 1.4]}}
    args = _parsed(training_of(mixed).command)
    assert (args.durations, args.estimate_error) == (None, None)
    old = {k: v for k, v in TRAIN.items() if k != "env"}  # a file from before the information model
    args = _parsed(training_of(old).command)
    assert (args.durations, args.estimate_error) == (None, None)



def test_a_train_command_carries_the_runner_count_or_says_it_is_not_recorded() -> None:
    """The envs' episodes are keyed by (seed, env runner, env index): the rebuilt command repeats
    the run's runner count; a file from before the run recorded it says so, in a shell comment."""
    assert "--num-env-runners 3" in training_of(TRAIN).command and "#" not in training_of(TRAIN).command
    old = {k: v for k, v in TRAIN.items() if k != "run"}
    command = training_of(old).command
    assert command.endswith("  # env runners not recorded: this runs with the config's run.num_env_runners")
    args = _parsed(command)
    assert (args.num_env_runners, args.iterations, args.seed) == (None, 40, 2)
    with pytest.raises(DeepShareError, match=r"^metadata run\.num_env_runners: expected a whole number.*--training-command"):
        training_of({**TRAIN, "run": {"num_env_runners": "two"}})

@pytest.mark.parametrize("teacher", [None, "planner=4"])
def test_an_imitate_commands_fit_and_episode_seeds_come_back(teacher) -> None:
    metadata = dict(IMITATE)
    if teacher:  # expert iteration records the same fit and seeds, and its teacher
        metadata.update(trainer="imitation: expert iteration", imitates=teacher, teacher=teacher, rounds=1,
                        teacher_config={"futures": 4, "candidates": None})
    args = _parsed(training_of(metadata).command)
    assert (args.command, args.config, args.episodes, args.seed_base, args.dagger_rounds, args.teacher) == (
        "imitate", "cfg.yaml", 64, 1000, 1, teacher)
    # the settings cmd_imitate fits with, from these flags (its --hidden default is the config's width)
    settings = FitSettings(hidden=args.hidden, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                           held_out=args.held_out, seed=args.seed, label_smoothing=args.label_smoothing)
    assert asdict(settings) == metadata["fit"]



def test_an_expert_iterations_teacher_is_checked_and_quoted_not_pasted() -> None:
    """The teacher spec and candidates come from the file: one ``imitate --teacher`` would refuse
    is refused with the --training-command line, never pasted as shell syntax into the card."""
    expert = {**IMITATE, "trainer": "imitation: expert iteration", "imitates": "planner", "rounds": 1,
              "teacher": "planner=4 (candidates bsrsf+uncontended, srsf+packed)",
              "teacher_config": {"horizon_s": 3600, "arrivals": True,
                                 "candidates": ["bsrsf+uncontended", "srsf+packed"]}}
    args = _parsed(training_of(expert).command)
    assert (args.teacher, args.teacher_candidates) == ("planner=4:::3600", "bsrsf+uncontended,srsf+packed")
    for odd in ({"teacher": "planner=4;touch /tmp/x"},
                {"teacher_config": {**expert["teacher_config"], "candidates": ["fifo+packed", "x;id"]}}):
        with pytest.raises(DeepShareError, match=r"^metadata teacher: --teacher.*--training-command$"):
            training_of({**expert, **odd})

def test_an_imitate_fit_field_no_flag_sets_is_refused() -> None:
    odd = {**IMITATE, "fit": {**IMITATE["fit"], "weight_decay": 0.01}}
    with pytest.raises(DeepShareError, match="fit.*weight_decay.*--training-command"):
        training_of(odd)
    assert training_of(odd, "python fit.py").command == "python fit.py"  # given, nothing is rebuilt


def test_a_tune_trials_command_is_refused_not_invented(tmp_path: Path, capsys) -> None:
    trial = {**TRAIN, "env": {"durations": ["estimated"]}, "model": {"hidden": 64, "init_from": None},
             "tune": {"ppo.lr": 0.001, "env.reward_scale": 0.2}}
    with pytest.raises(DeepShareError, match="tune.*ppo.lr=0.001.*--training-command"):
        training_of(trial)
    source = write_policy_file(tmp_path / "trial.pt", trial)
    out = tmp_path / "out"
    out.mkdir()
    flags = ("--kind", "network", "--commit", "0123abc")
    rc, stdout, err = cli(capsys, "export-policy", source, "--out", out / "p.pt", *flags)
    assert rc == 2 and stdout == ""
    one_error_line(err, "metadata tune", "--training-command")
    assert list(out.iterdir()) == []
    given = "deepshare tune rllib_configs/rl_est_ppo.yaml --grid ppo.lr=0.001 --grid env.reward_scale=0.2"
    rc, _, err = cli(capsys, "export-policy", source, "--out", out / "p.pt", *flags, "--training-command", given)
    assert (rc, err) == (0, ""), err
    assert read_card(out / "p.card.yaml").training.command == given


def test_export_writes_the_rebuilt_command_on_the_card(tmp_path: Path, capsys) -> None:
    source = write_policy_file(tmp_path / "bc.pt", IMITATE)
    rc, _, err = cli(capsys, "export-policy", source, "--out", tmp_path / "p.pt", "--kind", "network",
                     "--commit", "0123abc")
    assert (rc, err) == (0, ""), err
    args = _parsed(read_card(tmp_path / "p.card.yaml").training.command)
    assert (args.seed_base, args.hidden, args.label_smoothing, args.lr) == (1000, 128, 0.1, 0.01)


@pytest.mark.parametrize("horizon, token", [(3600, "3600"), (1234567, "1234567"), (100000.5, "100000.5"),
                                            (1e-3, "0.001")])
def test_the_teachers_horizon_is_written_exactly(horizon, token):
    """The rebuilt --teacher names the horizon the run used; ``:g`` wrote 1234567 s as
    1.23457e+06 (read back as 1234570) and 100000.5 as 100000."""
    from deepshare.policies.policy_card import _with_horizon

    written = _with_horizon("planner=4", {"horizon_s": horizon, "arrivals": True})
    assert written == f"planner=4:::{token}" and float(written.rsplit(":", 1)[1]) == horizon


def test_a_recorded_path_starting_with_a_dash_is_read_as_a_path_not_an_option() -> None:
    """Review: a relative config or init_from starting with '-' went into the command as is, and
    the CLI read it as an option; it gets './' before it (the same file)."""
    dashed = {**TRAIN, "config": "-x.yaml", "model": {"hidden": 64, "init_from": "--help"}}
    training = training_of(dashed)
    assert training.config == "-x.yaml" and training.init_from == "--help"  # the record itself is unchanged
    args = _parsed(training.command)
    assert (args.command, args.config, args.init_from) == ("train", "./-x.yaml", "./--help")
    args = _parsed(training_of({**IMITATE, "config": "-cfg.yaml"}).command)
    assert (args.command, args.config) == ("imitate", "./-cfg.yaml")
    assert _parsed(training_of(TRAIN).command).config == TRAIN["config"]  # other paths as they were
