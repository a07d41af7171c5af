"""Training through the CLI on a tiny config, resuming, and using the result as a policy."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.policies import make_policy
from deepshare.rl.train import load_train_config

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "rl" / "tiny.yaml"
TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, ray_local):
    """One real 1-iteration run, then one resumed iteration, on the session's local Ray (``train``
    uses the Ray this process is connected to), both scoring policy.pt on the tiny suite."""
    run = tmp_path_factory.mktemp("run") / "tiny"
    assert main(["train", str(TINY), "--out", str(run), "--eval-suite", "tiny"]) == 0
    first = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert main(["train", str(TINY), "--resume", str(run), "--iterations", "2", "--eval-suite", "tiny"]) == 0
    return run, first


def test_train_writes_metrics_checkpoints_and_a_policy(trained):
    run, first = trained
    assert first == ["iter_0001"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_0001", "iter_0002"]
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(float(r["iteration"])) for r in rows] == [1, 2]  # the resumed run continued the count
    assert float(rows[1]["env_steps_lifetime"]) > float(rows[0]["env_steps_lifetime"]) > 0
    assert any((run / "tb").iterdir())
    assert (run / "policy.pt").stat().st_size < 200_000
    # the runners the run sampled with (its episodes are keyed by env runner), for the card's command
    from deepshare.policies.checkpoint import load_policy_file

    assert load_policy_file(run / "policy.pt")["metadata"]["run"] == {"num_env_runners": 1, "envs_per_env_runner": 1}


def test_the_learning_curve_scores_each_export_on_the_suite(trained):
    """Rows for the starting weights (0) and each checkpoint (a resumed run does not score its
    starting checkpoint again); the last row is what `deepshare evaluate --suite` says of the
    final policy.pt; the figure is drawn."""
    from deepshare.experiments.suite import load_suite, run_suite

    run, _ = trained
    rows = list(csv.DictReader((run / "suite_curve.csv").open()))
    assert [r["iteration"] for r in rows] == ["0", "1", "2"]
    assert rows[0]["episode_return_mean"] == "" and float(rows[2]["env_steps_lifetime"]) > float(rows[1]["env_steps_lifetime"]) > 0
    metrics = list(csv.DictReader((run / "metrics.csv").open()))
    assert rows[2]["episode_return_mean"] == metrics[1]["episode_return_mean"]
    name = f"rl-hybrid={run / 'policy.pt'}"
    final = run_suite(load_suite("tiny").model_copy(update={"learned": (name,)})).summary(name)
    assert float(rows[2]["geomean_avg_jct_ratio"]) == pytest.approx(final["geomean_avg_jct_ratio"], rel=1e-12)
    assert rows[2]["worst_avg_cell"] == final["worst_avg_cell"] and rows[2]["policy"] == "rl-hybrid"
    assert (run / "curves.png").stat().st_size > 0
    assert [r["policy_file"] for r in rows] == [f"curve/iter_000{i}.pt" for i in range(3)]
    assert (run / "curve" / "iter_0002.pt").read_bytes() == (run / "policy.pt").read_bytes()


def test_the_trained_policy_loads_as_rl_hybrid_and_decides_feasibly(trained, capsys, tmp_path):
    run, _ = trained
    policy = make_policy(f"rl-hybrid={run / 'policy.pt'}")
    assert policy.metadata["name"] == "tiny_hybrid" and policy.metadata["iterations"] == 2
    assert main(["evaluate", "--trace", str(TRACE), "--policies", f"rl-hybrid={run / 'policy.pt'},rl-base={run / 'policy.pt'}",
                 "--seeds", "1", "--json", str(tmp_path / "e.json")]) == 0
    results = json.loads((tmp_path / "e.json").read_text())["results"]
    assert all(r["finished"] == 256 for r in results.values())  # every decision was feasible


def test_a_run_with_the_safety_net_in_the_loop_ships_its_rules(tmp_path):
    """``env.hybrid`` with its own thresholds: the exported file carries them and ``rl-hybrid=FILE``
    applies them; without ``env.hybrid`` the file has no rules and rl-hybrid gets the defaults."""
    from policy_files import write_policy_file

    from deepshare.policies.learned import HybridRules
    from deepshare.rl.env import EnvConfig
    from deepshare.rl.train import run_metadata

    config = load_train_config(TINY)
    for env_values, expected in [
        ({"hybrid": True, "hybrid_min_ratio": 1.01, "hybrid_utilisation_floor": 0.0, "anchor": ["srsf", "packed"]},
         HybridRules(1.01, 0.0, ("srsf", "packed"))),
        ({"hybrid": True, "hybrid_min_ratio": 0.8, "anchor": ["fifo", "consolidated"]},
         HybridRules(0.8, 0.5, ("fifo", "consolidated"))),
        ({"hybrid": True, "anchor": ["srsf", "packed"], "hybrid_anchor_streak": 4},
         HybridRules(anchor=("srsf", "packed"), anchor_streak=4)),
        ({"hybrid": False, "hybrid_min_ratio": 1.01}, HybridRules()),
    ]:
        env = EnvConfig.from_dict({**config.env, **env_values})
        metadata = run_metadata(config, TINY, env)
        assert ("hybrid_rules" in metadata) == env.hybrid
        assert ("anchor_streak" in metadata.get("hybrid_rules", {})) == (env.hybrid_anchor_streak > 1)  # absent when off
        path = write_policy_file(tmp_path / "policy.pt", metadata, env.encoding)
        assert make_policy(f"rl-hybrid={path}").hybrid == expected


@pytest.mark.parametrize(
    "text, needle",
    [
        ("name: x\nppo: {lr: -1}\n", "ppo.lr"),
        ("name: x\nbogus: 1\n", "bogus"),
        ("ppo: {}\n", "name"),
        ("name: x\nenv: {reward: speed}\n", "reward"),
        ("name: x\nenv: {traces: [missing.json]}\n", "missing.json"),
        ("- a list\n", "expected a mapping"),
        # the ppo section is RLlib's PPOConfig.training(): unknown keys name the valid ones
        ("name: x\nppo: {clip_parm: 0.2}\n", r"ppo\.clip_parm: not a key of RLlib's PPOConfig\.training\(\).*valid keys: .*clip_param"),
        ("name: x\nppo: {lambda: 0.9}\n", r"ppo\.lambda: .*write lambda_"),
        ("name: x\nppo: {train_batch_size: 100}\n", r"ppo\.train_batch_size: .*train_batch_size_per_learner"),
        ("name: x\nppo: {hidden: 8}\n", r"ppo\.hidden: .*model\.hidden"),
        ("name: x\nppo: {lr_schedule: [[0, 0.1]]}\n", r"ppo\.lr_schedule: RLlib's old API stack"),
        ("name: x\nppo: {num_sgd_iter: 3}\n", r"ppo\.num_sgd_iter: not a key"),  # deprecated in RLlib
        ("name: x\nppo: {gamma: 1.5}\n", r"ppo\.gamma: must be in \(0, 1\]"),
        ("name: x\nppo: {use_kl_loss: maybe}\n", r"ppo\.use_kl_loss: .*boolean"),
        ("name: x\nppo: {minibatch_size: 0}\n", r"ppo\.minibatch_size: must be > 0"),
        ("name: x\nppo: [1]\n", "ppo"),
        ("name: x\nmodel: {hidden: 0}\n", r"model\.hidden"),
        ("name: x\nmodel: {hidden: 100000}\n", r"model\.hidden: .*less than or equal to 4096"),
    ],
)
def test_bad_training_configs_are_named(tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(DeepShareError, match=needle):
        load_train_config(path)


def test_resuming_with_another_config_is_refused_before_ray_starts(trained, capsys, tmp_path, monkeypatch):
    """The restored algorithm keeps the run's network and encoding, and the export labels the
    weights with the config's: a changed config would ship them under another description."""
    import deepshare.rl.train as training

    run, _ = trained
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    monkeypatch.setattr(training, "start_ray", lambda address: pytest.fail("Ray started"))
    changed = tmp_path / "changed.yaml"
    changed.write_text(TINY.read_text().replace("hidden: 16", "hidden: 24").replace("generated_jobs: 12", "generated_jobs: 10"))
    assert main(["train", str(changed), "--resume", str(run), "--iterations", "3"]) == 2
    err = capsys.readouterr().err
    assert "CONFIG differs from the config this run was trained with" in err and "Traceback" not in err
    assert "env.generated_jobs" in err and "model.hidden" in err and str(TINY) in err
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before  # nothing written
    same = tmp_path / "same.yaml"  # the same config from another file (a comment added) is the same run
    same.write_text("# a copy\n" + TINY.read_text())
    metadata = training.run_metadata(training.load_train_config(same), same,
                                     training.load_train_config(same).env_config(same.parent))
    training.check_resumed_config(run, metadata)


def test_train_cli_reports_a_missing_config_and_a_missing_resume_folder(capsys, tmp_path):
    assert main(["train", str(tmp_path / "none.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["train", str(TINY), "--resume", str(tmp_path)]) == 2
    assert "no complete checkpoints" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--eval-suite", "nope"], "--eval-suite: 'nope' is neither a bundled suite"),
        (["--eval-suite", "missing.yaml"], "--eval-suite missing.yaml"),
        (["--eval-workers", "2"], "--eval-workers: only with --eval-suite"),
        (["--eval-suite", "tiny", "--eval-workers", "2", "--address", "auto"], "--eval-workers: the size of a local pool"),
    ],
)
def test_train_cli_refuses_a_bad_learning_curve_before_ray_starts(capsys, tmp_path, monkeypatch, extra, needle):
    import deepshare.rl.train as training

    monkeypatch.setattr(training, "start_ray", lambda address: pytest.fail("Ray started"))
    assert main(["train", str(TINY), "--out", str(tmp_path / "run"), *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_train_cli_refuses_to_resume_a_curve_of_another_suite_before_ray_starts(capsys, tmp_path, monkeypatch):
    """``--resume DIR --eval-suite quick`` where DIR's learning curve was scored on ``tiny``: one
    line before Ray starts (it was refused only at the resumed run's first checkpoint)."""
    import deepshare.rl.train as training
    from deepshare.experiments.learning_curve import CURVE_COLUMNS, CURVE_FILE

    monkeypatch.setattr(training, "start_ray", lambda address: pytest.fail("Ray started"))
    run = tmp_path / "run"
    run.mkdir()
    (run / CURVE_FILE).write_text(",".join(CURVE_COLUMNS) + "\n"
                                  + ",".join("tiny" if c == "suite" else "1" for c in CURVE_COLUMNS) + "\n")
    assert main(["train", str(TINY), "--resume", str(run), "--eval-suite", "quick"]) == 2
    err = capsys.readouterr().err
    assert "--eval-suite quick: " in err and "holds this run's learning curve on suite 'tiny'" in err
    assert "Traceback" not in err


def test_the_ppo_section_reaches_rllib_unchanged(tmp_path):
    """RLlib's own key names, including ones DeepShare never set before, land on PPOConfig as written."""
    from deepshare.rl.train import build_algorithm_config

    path = tmp_path / "c.yaml"
    path.write_text("name: x\nppo: {lambda_: 0.9, train_batch_size_per_learner: 256, minibatch_size: 128, kl_coeff: 0.3, grad_clip: 0.5,"
                    " use_kl_loss: false, lr: [[0, 0.001], [1000, 0.0001]]}\nmodel: {hidden: 24}\n")
    config = load_train_config(path)
    algo = build_algorithm_config(config, config.env_config(tmp_path), num_env_runners=0, cpus=2)
    assert (algo.lambda_, algo.train_batch_size_per_learner, algo.kl_coeff, algo.grad_clip, algo.use_kl_loss) == (0.9, 256, 0.3, 0.5, False)
    assert algo.lr == [[0, 0.001], [1000, 0.0001]]  # a schedule, RLlib's new-stack form
    assert algo.minibatch_size == 128 and algo.gamma == 0.999  # gamma: DeepShare's default for a key left out
    assert algo.rl_module_spec.model_config == {"hidden": 24}


def test_valid_keys_come_from_rllib_and_are_ppo_config_attributes():
    from ray.rllib.algorithms.ppo import PPOConfig

    from deepshare.rl.ppo_keys import training_keys

    keys = set(training_keys())
    assert {"lr", "gamma", "lambda_", "train_batch_size_per_learner", "minibatch_size", "num_epochs", "clip_param",
            "vf_clip_param", "vf_loss_coeff", "entropy_coeff", "kl_coeff", "use_kl_loss", "grad_clip"} <= keys
    assert not keys & {"lambda", "train_batch_size", "hidden", "num_sgd_iter", "vf_share_layers", "learner_class", "model"}
    assert all(hasattr(PPOConfig(), k) for k in keys)


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "rllib_configs").rglob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_use_rllib_names_with_the_values_they_had(path):
    config = load_train_config(path)
    # the learnability check's episodes are short: half the batch (bench/learnability.py)
    batch = 2000 if path.name.startswith("learnability") else 4000
    assert config.ppo["lambda_"] == 0.95 and config.ppo["train_batch_size_per_learner"] == batch
    assert config.model.hidden == 64


def test_train_cli_names_an_unknown_ppo_key_on_one_line_and_exits_2(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nppo: {lambda: 0.9}\n")
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ppo.lambda" in err[0] and "lambda_" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "run").exists()  # refused before anything ran


def test_a_ray_that_does_not_start_is_one_line_and_exit_1(tmp_path, capsys, monkeypatch):
    import ray

    import deepshare.infra.localray

    def no_ray(**_kwargs):
        raise TimeoutError("Timed out after 30 seconds waiting for the GCS\nsecond line")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(deepshare.infra.localray, "init_local_ray", no_ray)
    assert main(["train", str(TINY), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["deepshare: error: could not start a local Ray instance (TimeoutError: Timed out after 30 "
                   "seconds waiting for the GCS)"]


def test_train_cli_seed_replaces_the_configs_run_seed_and_nothing_else(tmp_path, monkeypatch):
    """``--seed S`` reaches ``train`` as the config's ``run.seed`` (which RLlib and policy.pt's metadata read)."""
    import deepshare.rl.train

    seen = {}

    def fake_train(config_path, out, *, config, **_kwargs):
        seen["config"] = config
        return Path(out) / "policy.pt"

    monkeypatch.setattr(deepshare.rl.train, "train", fake_train)
    assert main(["train", str(TINY), "--out", str(tmp_path / "a"), "--seed", "7"]) == 0
    base = load_train_config(TINY)
    assert seen["config"].run.seed == 7 and base.run.seed != 7
    assert seen["config"].model_copy(update={"run": base.run}) == base  # only the seed changed
    assert deepshare.rl.train.run_metadata(seen["config"], TINY, base.env_config(TINY.parent))["seed"] == 7
    assert main(["train", str(TINY), "--out", str(tmp_path / "b")]) == 0
    assert seen["config"].run.seed == base.run.seed  # without --seed the config's


def test_train_cli_refuses_seed_with_resume_and_a_negative_seed(tmp_path, capsys):
    assert main(["train", str(TINY), "--resume", str(tmp_path), "--seed", "1"]) == 2
    assert "--seed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", str(TINY), "--seed", "-1"])


def test_cluster_spec_files_are_found_relative_to_the_config_from_any_folder(tmp_path, monkeypatch):
    """Traces and cluster spec files (cluster, generated_clusters) resolve against the config's folder, not the working
    directory; a preset name stays a name."""
    from deepshare.core.topology import load_topology

    folder = tmp_path / "configs"
    (folder / "clusters").mkdir(parents=True)
    (folder / "clusters" / "two.yaml").write_text(
        "name: two\nnode_types:\n  t: {gpus: 8, gpu_model: TITAN Xp, fabric: pcie, intra_node_gbps: 128, nic_gbps: 40}\n"
        "nodes:\n  - {type: t, count: 2, rack: r0}\n")
    (folder / "c.yaml").write_text(f"name: x\nenv:\n  traces: [{TRACE}]\n  cluster: clusters/two.yaml\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_train_config(folder / "c.yaml")
    env = config.env_config(folder)
    assert env.cluster == str(folder / "clusters" / "two.yaml")
    assert len(load_topology(env.cluster).nodes) == 2
    (folder / "p.yaml").write_text(f"name: x\nenv:\n  traces: [{TRACE}]\n  cluster: testbed\n")
    assert load_train_config(folder / "p.yaml").env_config(folder).cluster == "testbed"
    (folder / "g.yaml").write_text("name: x\nenv:\n  generated_fraction: 1.0\n"
                                   "  generated_clusters: [clusters/two.yaml, testbed]\n")
    generated = load_train_config(folder / "g.yaml").env_config(folder).generated_clusters
    assert list(generated) == [str(folder / "clusters" / "two.yaml"), "testbed"]
    (folder / "m.yaml").write_text(f"name: x\nenv:\n  traces: [{TRACE}]\n  cluster: clusters/none.yaml\n")
    with pytest.raises(DeepShareError, match=r"m\.yaml: env config: cluster '.*none\.yaml': is neither a preset"):
        load_train_config(folder / "m.yaml")


def test_train_with_an_address_nothing_answers_is_one_line_before_its_folder(tmp_path, capsys):
    """compare, evaluate, imitate and tune failed fast; train hung in ray.init for minutes and left
    its --out folder behind."""
    from cli_run import cli, one_error_line

    out = tmp_path / "run"
    rc, _, err = cli(capsys, "train", Path(__file__).parents[2] / "rllib_configs" / "rl_base.yaml", "--address",
                     "127.0.0.1:9", "--out", out)
    assert rc == 2
    one_error_line(err, "--address 127.0.0.1:9", "no Ray cluster answers there")
    assert not out.exists()


def test_the_run_metadata_records_the_algorithms_runners_not_the_flags():
    """A resumed run keeps its checkpoint's runners whatever --num-env-runners says: ``run`` is
    read from the algorithm's config."""
    from deepshare.rl.train import build_algorithm_config, runner_metadata

    config = load_train_config(TINY)
    algo = build_algorithm_config(config, config.env_config(TINY.parent), 3, 2.0)
    assert runner_metadata(algo) == {"num_env_runners": 3, "envs_per_env_runner": config.run.envs_per_env_runner}
