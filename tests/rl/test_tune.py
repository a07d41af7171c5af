"""``deepshare tune``: grid parsing, every combination validated before Ray starts, and one real
2-trial x 1-iteration sweep on a tiny config writing Tune's results layout plus a policy per trial."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.rl.tune import GridAxis, apply, parse_grid, validated_variants

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "rl" / "tiny.yaml"


@pytest.mark.parametrize(
    "spec, axis",
    [
        ("ppo.lr=0.0001,0.001", GridAxis("ppo", "lr", (0.0001, 0.001))),
        ("lr=1e-4,3e-4", GridAxis("ppo", "lr", (1e-4, 3e-4))),  # a bare key is a PPO key; 1e-4 is a number
        ("env.reward=jct,original", GridAxis("env", "reward", ("jct", "original"))),
        ("env.hybrid=true,false", GridAxis("env", "hybrid", (True, False))),
        ("model.hidden=16, 32", GridAxis("model", "hidden", (16, 32))),
        ("ppo.num_epochs=1", GridAxis("ppo", "num_epochs", (1,))),
    ],
)
def test_grid_specs_parse_to_exact_axes(spec, axis):
    assert parse_grid(spec) == axis


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("ppo.lr", "expected KEY=V1,V2"),
        ("=1,2", "expected KEY=V1,V2"),
        ("ppo.lr=", "expected KEY=V1,V2"),
        ("ppo.lr=1,,2", "empty value"),
        ("ppo.lr=1,1", "listed twice"),
        ("optim.lr=1,2", "SECTION one of ppo, env, model, run, or ppo_extras.OPTION.FIELD"),
        ("ppo.a.b=1,2", "SECTION.KEY"),
        ("ppo_extras.average_reward=1,2", "ppo_extras.OPTION.FIELD"),
        ("ppo_extras.average_reward.rate.x=1,2", "ppo_extras.OPTION.FIELD"),
        ("ppo_extras..rate=1,2", "ppo_extras.OPTION.FIELD"),
    ],
)
def test_bad_grid_specs_are_named(spec, needle):
    with pytest.raises(DeepShareError, match=needle):
        parse_grid(spec)


def test_a_ppo_extras_axis_sets_the_option_field_and_turns_the_option_on():
    axis = parse_grid("ppo_extras.average_reward.rate=0.01,0.1")
    assert axis == GridAxis("ppo_extras", "average_reward.rate", (0.01, 0.1))
    raw, combos = validated_variants(TINY, [axis, parse_grid("ppo.lr=0.001")])
    assert combos == [{"ppo_extras.average_reward.rate": 0.01, "ppo.lr": 0.001},
                      {"ppo_extras.average_reward.rate": 0.1, "ppo.lr": 0.001}]
    assert "ppo_extras" not in raw  # the base config has none: each trial's config turns it on
    trial = apply(raw, combos[1])
    assert trial["ppo_extras"] == {"average_reward": {"rate": 0.1}} and trial["ppo"]["lr"] == 0.001
    from deepshare.rl.train import parse_train_config

    config = parse_train_config(yaml.safe_dump(trial), TINY)
    assert config.ppo_extras.average_reward.rate == 0.1


def test_every_combination_is_validated_as_a_full_config():
    raw, combos = validated_variants(TINY, [parse_grid("ppo.lr=0.001,0.01"), parse_grid("model.hidden=8,16")])
    assert combos == [{"ppo.lr": 0.001, "model.hidden": 8}, {"ppo.lr": 0.001, "model.hidden": 16},
                      {"ppo.lr": 0.01, "model.hidden": 8}, {"ppo.lr": 0.01, "model.hidden": 16}]
    assert raw["name"] == "tiny_hybrid"
    assert apply(raw, combos[3])["ppo"]["lr"] == 0.01 and raw["ppo"].get("lr") is None  # apply copies


@pytest.mark.parametrize(
    "specs, needle",
    [
        (["ppo.clip_parm=0.1,0.2"], r"ppo\.clip_parm: not a key of RLlib's PPOConfig\.training\(\).*valid keys"),
        (["ppo.gamma=0.9,1.5"], r"--grid ppo\.gamma=1\.5: .*ppo\.gamma: must be in \(0, 1\]"),
        (["env.reward=jct,speed"], r"--grid env\.reward=speed: .*reward"),
        (["run.bogus=1,2"], "bogus"),
        (["ppo.lr=0.1,0.2", "lr=0.3,0.4"], "a key is given twice"),
        (["ppo_extras.average_reward.rate=0.1,0"], r"--grid ppo_extras\.average_reward\.rate=0: .*ppo_extras\.average_reward\.rate"),
        (["ppo_extras.average_reward.colour=1,2"], r"ppo_extras\.average_reward\.colour: Extra inputs are not permitted"),
        (["ppo_extras.input_baseline.group_size=1,2"], r"ppo_extras\.input_baseline\.group_size"),
    ],
)
def test_bad_combinations_fail_before_ray_starts(specs, needle, no_ray):
    import ray

    with pytest.raises(DeepShareError, match=needle):
        validated_variants(TINY, [parse_grid(s) for s in specs])
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    "argv, needle",
    [
        ([str(TINY)], "--grid: give at least one"),
        ([str(TINY), "--grid", "ppo.lr"], "expected KEY=V1,V2"),
        ([str(TINY), "--grid", "ppo.lambda=0.9,0.95"], "write lambda_"),
        (["missing.yaml", "--grid", "ppo.lr=0.1,0.2"], "missing.yaml: training config not found"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    assert main(["tune", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0]


def test_cli_bad_flag_values_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["tune", str(TINY), "--grid", "lr=0.1,0.2", "--iterations", "0"])
    assert exc.value.code == 2 and "--iterations" in capsys.readouterr().err


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, ray_local):
    """One real sweep on the session's local Ray (2 CPUs): 2 learning rates x 1 iteration of a tiny
    config (sampling in the learner's process)."""
    folder = tmp_path_factory.mktemp("tune")
    raw = yaml.safe_load(TINY.read_text())
    raw["ppo"]["train_batch_size_per_learner"] = 100
    raw["run"]["num_env_runners"] = 0  # no env-runner actors: two 1-CPU trials fit 2 cores at once
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw))
    out = folder / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = main(["tune", str(config), "--grid", "ppo.lr=0.0001,0.01", "--iterations", "1", "--out", str(out)])
    return rc, out / "tiny_hybrid", printed.getvalue()


def test_sweep_writes_tunes_results_layout_with_one_trial_per_value(sweep):
    rc, experiment, printed = sweep
    assert rc == 0
    assert (experiment / "tuner.pkl").is_file() and list(experiment.glob("experiment_state-*.json"))
    trials = sorted(p for p in experiment.iterdir() if p.is_dir())
    assert len(trials) == 2
    lrs = []
    for trial in trials:
        params = json.loads((trial / "params.json").read_text())
        lrs.append(params["ppo.lr"])
        results = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        assert [r["training_iteration"] for r in results] == [1]
        assert results[0]["env_steps_lifetime"] >= 100
        assert (trial / "progress.csv").read_text().count("\n") == 2  # header + one iteration
        assert list(trial.glob("events.out.tfevents.*"))  # TensorBoard, from Tune's logger
    assert sorted(lrs) == [0.0001, 0.01]
    assert f"tensorboard --logdir {experiment}" in printed  # what to run to see the curves
    assert printed.count("policy of ") == 2 and "checkpoint_000000/policy.pt" in printed


def test_each_trial_leaves_a_policy_trained_with_its_own_values(sweep):
    import torch

    from deepshare.policies import make_policy

    _, experiment, _ = sweep
    weights = {}
    for trial in sorted(p for p in experiment.iterdir() if p.is_dir()):
        (path,) = trial.glob("checkpoint_*/policy.pt")  # the last report's Tune checkpoint
        policy = make_policy(f"rl-hybrid={path}")
        lr = json.loads((trial / "params.json").read_text())["ppo.lr"]
        assert policy.metadata["tune"] == {"ppo.lr": lr} and policy.metadata["ppo"]["lr"] == lr
        assert policy.metadata["iterations"] == 1
        weights[lr] = torch.load(path, weights_only=False)
    state_a, state_b = (w["state_dict"] for w in weights.values())
    assert state_a.keys() == state_b.keys()  # the same network ...
    assert any(not torch.equal(state_a[k], state_b[k]) for k in state_a)  # ... updated with different learning rates


def test_a_grid_of_more_trials_than_a_sweep_runs_is_refused_before_any_is_checked():
    big = [parse_grid("ppo.lr=" + ",".join(f"0.{i:04d}1" for i in range(50))),
           parse_grid("model.hidden=" + ",".join(str(8 + i) for i in range(50)))]
    with pytest.raises(DeepShareError, match=r"--grid: 50 x 50 = 2,500 trials; a sweep runs at most 1,000"):
        validated_variants(TINY, big)
