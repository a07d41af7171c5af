"""The ``ppo:`` section's values RLlib would refuse only after Ray started (a schedule's form, a
``grad_clip_by`` name, a minibatch larger than the batch) or would train with silently (a negative
rate inside a schedule, an infinite clip): refused when the file is read, one line naming
``FILE: ppo.KEY``."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.rl.train import parse_train_config

BASE = "name: t\nenv: {generated_fraction: 1.0, generated_jobs: 12, generated_nodes: [2]}\nppo: %s\n"


@pytest.mark.parametrize(
    "ppo, needle",
    [
        ("{lr: [[0, 0.001], [100, -1.0]]}", r"ppo\.lr\[1\]: must be > 0, got -1"),
        ("{lr: [[0, .nan], [10, 0.001]]}", r"ppo\.lr\[0\]: must be a finite number"),
        ("{lr: [[0, .nan]]}", r"ppo\.lr: expected a number or a schedule .*2 or more pairs"),
        ("{lr: []}", r"ppo\.lr: expected a number or a schedule"),
        ("{lr: [[5, 0.001], [10, 0.0001]]}", r"ppo\.lr\[0\]: a schedule starts at timestep 0"),
        ("{lr: [[0, 0.001], [10, 0.0001], [5, 0.00001]]}", r"ppo\.lr\[2\]: timesteps must not decrease, got 5 after 10"),
        ("{grad_clip: .inf}", r"ppo\.grad_clip: must be a finite number \(grad_clip: null turns gradient clipping off\)"),
        ("{vf_clip_param: -.inf}", r"ppo\.vf_clip_param: must be a finite number"),
        ("{lr: [[0, 0.001], [1.5, 0.0001]]}", r"ppo\.lr\[1\]: the timestep must be a whole number"),
        ("{lr: [[0, 0.001], [10]]}", r"ppo\.lr\[1\]: expected a pair \[timestep, value\]"),
        ("{lr: [[0, 0.001], [10, x]]}", r"ppo\.lr\[1\]: expected a pair"),
        ("{entropy_coeff: [[0, 0.01], [10, -5]]}", r"ppo\.entropy_coeff\[1\]: must be >= 0"),
        ("{grad_clip_by: nosuch}", r"ppo\.grad_clip_by: expected one of value, norm, global_norm, got 'nosuch'"),
        ("{clip_param: .inf}", r"ppo\.clip_param: must be a finite number"),
        ("{kl_coeff: .inf}", r"ppo\.kl_coeff: must be a finite number"),
        ("{train_batch_size_per_learner: 10, minibatch_size: 500}", r"ppo\.minibatch_size: must be <= train_batch_size_per_learner \(10\)"),
        ("{train_batch_size_per_learner: 256}", r"ppo\.minibatch_size: .*DeepShare's default"),
        # null passed RLlib's Optional annotations, then failed in the first learner update (or, lr,
        # trained at another rate); use_gae false failed in RLlib's validate() once Ray had started
        ("{clip_param: null}", r"ppo\.clip_param: expected a number, got null"),
        ("{gamma: null}", r"ppo\.gamma: expected a number, got null"),
        ("{lambda_: }", r"ppo\.lambda_: expected a number, got null"),
        ("{lr: null}", r"ppo\.lr: expected a number, got null"),
        ("{num_epochs: null}", r"ppo\.num_epochs: expected a number, got null"),
        ("{vf_loss_coeff: null}", r"ppo\.vf_loss_coeff: expected a number, got null"),
        ("{use_gae: false}", r"ppo\.use_gae: false: RLlib's PPO without GAE needs whole episodes"),
        ("{use_gae: 0}", r"ppo\.use_gae: 0 \(read as false\): RLlib's PPO without GAE"),
        ("{use_gae: 'off'}", r"ppo\.use_gae: 'off' \(read as false\): RLlib's PPO without GAE"),
        ("{kl_coeff: null}", r"ppo\.kl_coeff: expected a number, got null \(RLlib reads it while use_kl_loss is true"),
    ],
)
def test_bad_ppo_values_are_refused_when_the_file_is_read(ppo, needle):
    with pytest.raises(DeepShareError, match=r"^/x/c\.yaml: " + needle):
        parse_train_config(BASE % ppo, Path("/x/c.yaml"))


def test_valid_schedules_and_names_pass_and_rllib_accepts_them():
    from deepshare.rl.train import build_algorithm_config

    ppo = "{lr: [[0, 0.001], [1000, 0.0001]], entropy_coeff: [[0, 0.01], [1000, 0.0]], grad_clip_by: norm}"
    config = parse_train_config(BASE % ppo, Path("/x/c.yaml"))
    assert config.ppo["lr"] == [[0, 0.001], [1000, 0.0001]] and config.ppo["entropy_coeff"] == [[0, 0.01], [1000, 0.0]]
    algo = build_algorithm_config(config, config.env_config(Path("/x")), 0, 1.0)
    algo.validate()  # what build_algo runs, in the driver: nothing left for it to refuse
    assert algo.grad_clip_by == "norm" and algo.entropy_coeff == [[0, 0.01], [1000, 0.0]]


def test_train_cli_refuses_a_bad_schedule_on_one_line_before_ray(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(BASE % "{lr: [[5, 0.001]]}")
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: ppo.lr" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "run").exists()


def test_a_schedule_in_e_notation_is_coerced_as_a_scalar_is():
    # PyYAML reads 3e-4 and 1e6 (no dot) as strings; the scalar lr: 3e-4 is coerced by pydantic,
    # and a schedule written the same way is coerced alike (timestep 1e6 -> 1000000).
    config = parse_train_config(BASE % "{lr: [[0, 3e-4], [1e6, 1e-5]], entropy_coeff: [[0, 1e-2], [2e3, 0]]}", Path("/x/c.yaml"))
    assert config.ppo["lr"] == [[0, 3e-4], [1000000, 1e-5]] and type(config.ppo["lr"][1][0]) is int
    assert config.ppo["entropy_coeff"] == [[0, 0.01], [2000, 0]]
    with pytest.raises(DeepShareError, match=r"ppo\.lr\[1\]: must be > 0, got -1e-05"):
        parse_train_config(BASE % "{lr: [[0, 3e-4], [1e6, -1e-5]]}", Path("/x/c.yaml"))
    with pytest.raises(DeepShareError, match=r"ppo\.lr\[1\]: expected a pair"):
        parse_train_config(BASE % "{lr: [[0, 3e-4], [1e6, true]]}", Path("/x/c.yaml"))


def test_an_infinite_vf_clip_and_a_step_schedule_pass_as_rllib_takes_them():
    # vf_clip_param: .inf is RLlib's unclipped value loss (clamp to [0, inf]); a schedule's
    # timesteps need only be sorted (PiecewiseSchedule's assert): an equal pair makes a step.
    from ray.rllib.utils.schedules.piecewise_schedule import PiecewiseSchedule

    from deepshare.rl.train import build_algorithm_config

    ppo = "{vf_clip_param: .inf, lr: [[0, 0.0003], [1000, 0.0003], [1000, 0.0001], [2000, 0.0001]]}"
    config = parse_train_config(BASE % ppo, Path("/x/c.yaml"))
    assert config.ppo["vf_clip_param"] == float("inf")
    assert config.ppo["lr"] == [[0, 0.0003], [1000, 0.0003], [1000, 0.0001], [2000, 0.0001]]
    algo = build_algorithm_config(config, config.env_config(Path("/x")), 0, 1.0)
    algo.validate()
    schedule = PiecewiseSchedule(config.ppo["lr"], outside_value=config.ppo["lr"][-1][1], framework=None)
    assert schedule.value(999) == 0.0003 and schedule.value(1000) == 0.0001


def test_a_schedule_value_is_coerced_exactly_as_a_scalar_is():
    """Python's float() reads non-ASCII digits ('١٢٣' is 123.0), pydantic refuses them: a schedule
    accepted what the same value as a scalar was refused for."""
    from deepshare.rl.ppo_keys import _as_number

    assert _as_number("\u0661\u0662\u0663") is None and _as_number("3e-4") == 3e-4 and _as_number(" 3e-4 ") == 3e-4


def test_nulls_rllib_gives_a_meaning_still_pass():
    """grad_clip: no clipping; vf_clip_param: the value loss unclipped; minibatch_size: the whole
    batch; the KL keys when use_kl_loss is off (RLlib never reads them then)."""
    ppo = "{grad_clip: null, use_gae: true, vf_clip_param: null, minibatch_size: null, use_kl_loss: false, kl_coeff: null}"
    config = parse_train_config(BASE % ppo, Path("/x/c.yaml"))
    assert config.ppo["grad_clip"] is None and config.ppo["use_gae"] is True and config.ppo["minibatch_size"] is None
    assert config.ppo["vf_clip_param"] is None and config.ppo["kl_coeff"] is None


@pytest.mark.parametrize("run, needle", [
    ("{seed: 4294967296}", r"run\.seed: Input should be less than or equal to 4294966271"),
    ("{num_env_runners: 1000000}", r"run\.num_env_runners: Input should be less than or equal to 1024"),
    ("{envs_per_env_runner: 1000000000}", r"run\.envs_per_env_runner: Input should be less than or equal to 1024"),
])
def test_run_settings_ray_or_rllib_cannot_take_are_refused_when_the_file_is_read(run, needle):
    """A seed past 2^32 - 1 less the runners failed in np.random.seed once Ray had started; a
    million runners or a billion envs hung or ran out of memory instead of failing."""
    text = "name: t\nenv: {generated_fraction: 1.0, generated_jobs: 12, generated_nodes: [2]}\nrun: %s\n" % run
    with pytest.raises(DeepShareError, match=needle):
        parse_train_config(text, Path("/x/c.yaml"))


def test_train_seed_flag_is_bounded_as_run_seed_is(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["train", "rllib_configs/rl_base.yaml", "--seed", "4294967296"])
    assert exited.value.code == 2 and "argument --seed: expected an integer from 0 to 4,294,966,271" in capsys.readouterr().err
