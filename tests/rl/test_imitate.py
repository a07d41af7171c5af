"""Behaviour cloning (deepshare.rl.imitate): demonstrations replay srsf+packed exactly, the fit
learns them, the export loads, and the CLI refuses bad input. No Ray."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils import seeding

from deepshare.cli import main
from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.policies import make_policy
from deepshare.policies.checkpoint import scorer_from_file
from deepshare.policies.encoding import WAIT_INDEX
from deepshare.policies.learned import LearnedPolicy
from deepshare.rl.env import DeepShareEnv, EnvConfig
from deepshare.rl.imitate import ANCHOR_ROW, Demonstrations, FitSettings, collect, fit, held_out_rows, imitate

ROOT = Path(__file__).resolve().parents[2]
TRACE = str(ROOT / "deepshare" / "data" / "traces" / "deepshare-train-jobset0-episode0.json")
SMALL = {"generated_fraction": 1.0, "generated_jobs": 40, "generated_nodes": [2, 4], "generated_loads": [1.3]}


def heuristic_report(config: EnvConfig, seed: int, name: str = "srsf+packed") -> dict:
    """The simulator running ``name`` on the scenario the env draws for ``seed``."""
    env = DeepShareEnv(config)
    rng = seeding.np_random(seed)[0]
    topology, jobs = env._scenario(rng)  # what reset(seed) draws first, then (one contention model) the information model
    sim = Simulator(topology, jobs, make_contention(config.contention), config=SimConfig(round_s=config.round_s),
                    information=config.information(rng))
    return sim.run(make_policy(name)).to_dict()


@pytest.mark.parametrize("values, seeds", [({"traces": [TRACE]}, 1), ({**SMALL, "contention": "link"}, 4), (SMALL, 4)])
def test_demonstrated_episodes_are_srsf_packed_exactly(values, seeds):
    config = EnvConfig.from_dict(values)
    demos = collect(config, seeds, seed_base=7)
    assert demos.forced == 0 and demos.seeds == list(range(7, 7 + seeds))
    for seed, avg in zip(demos.seeds, demos.avg_jct_s):
        # The same schedule: equal to the last bits or so (the env reads running jobs' views,
        # which syncs their progress at other instants: link contention rounds differently).
        assert avg == pytest.approx(heuristic_report(config, seed)["avg_jct_s"], rel=1e-12)
    assert set(np.unique(demos.actions)) <= {WAIT_INDEX, ANCHOR_ROW}
    others = [heuristic_report(config, seed, "fifo+spread")["avg_jct_s"] for seed in demos.seeds]
    assert any(o != pytest.approx(a, rel=1e-6) for o, a in zip(others, demos.avg_jct_s))  # the check can tell
    assert np.all(demos.masks[np.arange(len(demos)), demos.actions] == 1)


def test_demonstrations_follow_the_configured_anchor():
    config = EnvConfig.from_dict({**SMALL, "anchor": ["las", "consolidated"]})
    demos = collect(config, 2)
    for seed, avg in zip(demos.seeds, demos.avg_jct_s):
        assert avg == pytest.approx(heuristic_report(config, seed, "las+consolidated")["avg_jct_s"], rel=1e-12)
    assert demos.wait_share == 0.0  # consolidated never waits while a job fits


def test_collect_refuses_no_anchor_and_seeds_of_the_suite():
    from deepshare.experiments import suite
    from deepshare.rl import imitate as module

    assert module.SUITE_SEED_BASE == suite.SUITE_SEED_BASE
    with pytest.raises(DeepShareError, match="anchor is null"):
        collect(EnvConfig.from_dict({**SMALL, "anchor": None}), 1)
    with pytest.raises(DeepShareError, match=r"\[0, 2\^31\)"):
        collect(EnvConfig.from_dict(SMALL), 2, seed_base=2**31 - 1)
    with pytest.raises(DeepShareError, match="positive"):
        collect(EnvConfig.from_dict(SMALL), 0)


def test_the_fit_learns_a_small_set():
    config = EnvConfig.from_dict({**SMALL, "generated_nodes": [2]})
    demos = collect(config, 6)
    net, report = fit(demos, FitSettings(hidden=32, epochs=150, batch_size=64, lr=3e-3, held_out=0.0))
    assert report.train_choices == len(demos) and report.held_out_choices == 0
    assert report.train_accuracy >= 0.97
    assert report.losses[-1] < report.losses[0]
    assert np.isnan(report.held_out_accuracy)


def test_held_out_choices_are_whole_episodes():
    demos = collect(EnvConfig.from_dict(SMALL), 5)
    _, report = fit(demos, FitSettings(hidden=8, epochs=1, held_out=0.4))
    assert report.held_out_choices == int(np.sum(demos.episodes >= 3))
    assert report.train_choices + report.held_out_choices == len(demos)


def test_a_held_out_share_that_rounds_to_every_episode_still_fits_on_each_rounds_first(tmp_path):
    demos = Demonstrations(np.zeros((6, 2, 3), np.float32), np.ones((6, 2), np.float32), np.zeros(6, np.int64),
                           np.array([0, 0, 1, 1, 2, 3]), np.array([0, 0, 0, 0, 1, 1]))
    assert held_out_rows(demos, 0.8).tolist() == [False, False, True, True, False, True]  # round(1.6) = 2 of 2
    policy = imitate(small_config(tmp_path), tmp_path / "run", episodes=2, dagger_rounds=0,
                     settings=FitSettings(hidden=16, epochs=1, held_out=0.8))
    _, _, metadata = scorer_from_file(policy)  # it fitted nothing and exported the untrained scorer
    assert metadata["train_choices"] > 0 and metadata["held_out_choices"] > 0 and metadata["losses"][0] > 0


def test_fit_refuses_nothing_to_learn():
    empty = Demonstrations(np.zeros((0, 16, 18), np.float32), np.zeros((0, 16), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))
    with pytest.raises(DeepShareError, match="no choices"):
        fit(empty)


def small_config(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(
        "name: small\nenv:\n  generated_fraction: 1.0\n  generated_jobs: 30\n  generated_nodes: [2]\n"
        "model:\n  hidden: 16\n", encoding="utf-8")
    return path


def test_export_loads_as_a_scorer_and_says_it_was_imitation_trained(tmp_path):
    policy = imitate(small_config(tmp_path), tmp_path / "run", episodes=3, dagger_rounds=0, settings=FitSettings(hidden=16, epochs=2))
    scorer, encoding, metadata = scorer_from_file(policy)
    assert metadata["trainer"].startswith("imitation") and metadata["imitates"] == "srsf+packed"
    assert metadata["episodes"] == 3 and metadata["fit"]["epochs"] == 2
    assert metadata["episode_seeds"] == [0, 5]  # 3 demonstrated, 3 more to measure the scorer on its own
    assert metadata["learner_over_anchor_avg_jct"] > 0.5
    assert encoding.anchor == ("srsf", "packed")
    assert json.loads((tmp_path / "run" / "imitation.json").read_text())["choices"] == metadata["choices"]
    env = DeepShareEnv(replace(EnvConfig.from_dict({"generated_fraction": 1.0, "generated_jobs": 30, "generated_nodes": [2]})))
    obs, _ = env.reset(seed=0)
    assert scorer(obs).shape == (16,)
    LearnedPolicy("rl-base", scorer, encoding)  # usable as a policy


def test_cli_imitate_writes_the_policy(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["imitate", str(small_config(tmp_path)), "--out", str(out), "--episodes", "2", "--epochs", "1"]) == 0
    assert (out / "policy.pt").exists() and (out / "imitation.json").exists()
    assert "rl-base=" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--episodes", "0"], "--episodes"), (["--dagger-rounds", "-1"], "--dagger-rounds"), (["--epochs", "-1"], "--epochs"), (["--held-out", "1"], "--held-out"),
    (["--seed-base", str(2**31)], "--seed-base"), (["--lr", "0"], "--lr"), (["--label-smoothing", "1"], "--label-smoothing"),
    (["--label-smoothing", "-0.1"], "--label-smoothing"),
])
def test_cli_imitate_refuses_bad_flags(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exc:
        main(["imitate", str(small_config(tmp_path)), "--out", str(tmp_path / "run"), *flags])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_cli_imitate_refuses_a_missing_config_and_seeds_past_the_training_range(tmp_path, capsys):
    assert main(["imitate", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "run")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    args = ["imitate", str(small_config(tmp_path)), "--out", str(tmp_path / "run"), "--episodes", "5", "--seed-base", str(2**31 - 2)]
    assert main(args) == 2
    assert "2^31" in capsys.readouterr().err


def test_init_from_is_resolved_checked_and_loaded_into_the_module(tmp_path, capsys):
    from deepshare.rl.train import build_algorithm_config, load_train_config

    policy = imitate(small_config(tmp_path), tmp_path / "run", episodes=2, dagger_rounds=0, settings=FitSettings(hidden=16, epochs=1))
    warm = tmp_path / "warm.yaml"
    warm.write_text(small_config(tmp_path).read_text().replace("hidden: 16\n", "hidden: 16\n  init_from: run/policy.pt\n"))
    config = load_train_config(warm)
    assert config.model.init_from == str(policy.resolve())  # relative to the config's folder
    spec = build_algorithm_config(config, config.env_config(tmp_path), 0, 1.0).rl_module_spec
    env = DeepShareEnv(config.env_config(tmp_path))
    module = replace(spec, observation_space=env.observation_space, action_space=env.action_space).build()
    expected = scorer_from_file(policy)[0].net.state_dict()
    for name, tensor in module.scorer.state_dict().items():
        assert tensor.equal(expected[name])
    wide = tmp_path / "wide.yaml"
    wide.write_text(warm.read_text().replace("hidden: 16", "hidden: 32"))
    with pytest.raises(DeepShareError, match="16 wide.*model.hidden: 16"):
        load_train_config(wide)
    extras = tmp_path / "extras.yaml"
    extras.write_text(warm.read_text().replace("env:\n", "env:\n  extra_features: [is_anchor]\n"))
    with pytest.raises(DeepShareError, match=r"reads the extra columns \[\], the config's env encodes \['is_anchor'\]"):
        load_train_config(extras)
    assert main(["train", str(small_config(tmp_path)), "--init-from", str(tmp_path / "nope.pt")]) == 2
    assert "nope.pt: file not found" in capsys.readouterr().err
    assert main(["train", str(small_config(tmp_path)), "--init-from", str(policy), "--resume", str(tmp_path)]) == 2
    assert "give one" in capsys.readouterr().err


def test_dagger_rounds_add_the_scorers_own_states_labelled_by_the_anchor(tmp_path):
    policy = imitate(small_config(tmp_path), tmp_path / "run", episodes=2, dagger_rounds=2,
                     settings=FitSettings(hidden=16, epochs=1, held_out=0.5))
    metadata = scorer_from_file(policy)[2]
    assert [r["round"] for r in metadata["rounds"]] == [0, 1, 2]
    assert metadata["rounds"][0]["choices"] < metadata["rounds"][1]["choices"] < metadata["rounds"][2]["choices"]
    assert metadata["episode_seeds"] == [0, 7] and "DAgger" in metadata["trainer"]
    assert all(r["learner_over_anchor_avg_jct"] > 0 for r in metadata["rounds"])


def test_a_driver_moves_the_episode_but_the_labels_stay_the_anchors():
    config = EnvConfig.from_dict(SMALL)
    anchor = collect(config, 2)
    waiting = collect(config, 2, driver=lambda obs: -np.arange(len(obs["action_mask"]), dtype=np.float32))  # row 0 first
    assert set(np.unique(waiting.actions)) <= {WAIT_INDEX, ANCHOR_ROW}
    assert np.mean(waiting.actions == ANCHOR_ROW) > 0.5  # the anchor would launch where the driver waits
    assert all(w > a for w, a in zip(waiting.avg_jct_s, anchor.avg_jct_s))  # waiting whenever allowed costs JCT
    both = anchor.extended(waiting, 1)
    assert len(both) == len(anchor) + len(waiting) and set(both.episodes) == {0, 1, 2, 3}
    held = held_out_rows(both, 0.5)  # the last episode of each round
    assert held.sum() == np.sum(anchor.episodes == 1) + np.sum(waiting.episodes == 1)


def test_cli_imitate_never_overwrites_its_config(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    config = run / "policy.pt"
    config.write_text(small_config(tmp_path).read_text())
    assert main(["imitate", str(config), "--out", str(run), "--episodes", "1"]) == 2
    assert "would destroy the input" in capsys.readouterr().err
    assert config.read_text().startswith("name: small")


def test_with_is_anchor_a_short_fit_imitates_the_anchor_exactly_and_the_policy_is_the_heuristic():
    """The ``is_anchor`` column makes the anchor's row recognisable: a short fit reproduces every
    choice, and the exported network, as rl-base, schedules exactly as srsf+uncontended does."""
    values = {**SMALL, "generated_nodes": [2], "anchor": ["srsf", "uncontended"], "extra_features": ["is_anchor"],
              "durations": "exact"}  # the episodes this 100-epoch fit was sized on
    config = EnvConfig.from_dict(values)
    demos = collect(config, 6)
    assert demos.observations.shape[-1] == 19
    net, report = fit(demos, FitSettings(hidden=16, epochs=100, batch_size=64, lr=1e-2, held_out=0.3))
    assert report.train_accuracy == 1.0 and report.held_out_accuracy == 1.0
    from deepshare.policies.checkpoint import TorchScorer

    policy = LearnedPolicy("rl-base", TorchScorer(net.eval()), config.encoding)
    for seed in (50, 51):
        env = DeepShareEnv(config)
        rng = seeding.np_random(seed)[0]
        topology, jobs = env._scenario(rng)
        ours = Simulator(topology, jobs, make_contention(config.contention), config=SimConfig(round_s=config.round_s),
                         information=config.information(rng)).run(policy)
        assert ours.to_dict()["avg_jct_s"] == pytest.approx(heuristic_report(config, seed, "srsf+uncontended")["avg_jct_s"], rel=1e-12)


def test_label_smoothing_spreads_the_target_over_the_unmasked_rows_only():
    import math

    import torch

    from deepshare.policies.scorer_net import MASKED
    from deepshare.rl.imitate import imitation_loss

    logits = torch.tensor([[math.log(3.0), 0.0, MASKED], [0.0, 0.0, MASKED]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    target = torch.tensor([0, 1])
    # targets (0.9, 0.1, 0) and (0.1, 0.9, 0) against p = (0.75, 0.25) and (0.5, 0.5)
    expected = (-(0.9 * math.log(0.75) + 0.1 * math.log(0.25)) + math.log(2.0)) / 2
    assert imitation_loss(logits, mask, target, 0.2).item() == pytest.approx(expected, rel=1e-6)
    plain = torch.nn.functional.cross_entropy(logits, target).item()
    assert imitation_loss(logits, mask, target, 0.0).item() == plain


def test_a_smoothed_fit_keeps_the_best_row_but_not_certainty():
    values = {**SMALL, "generated_nodes": [2], "anchor": ["srsf", "uncontended"], "extra_features": ["is_anchor"]}
    demos = collect(EnvConfig.from_dict(values), 4)
    import torch

    net, report = fit(demos, FitSettings(hidden=16, epochs=100, batch_size=64, lr=1e-2, held_out=0.0, label_smoothing=0.1))
    assert report.train_accuracy == 1.0
    with torch.no_grad():
        logits, _ = net(torch.from_numpy(demos.observations), torch.from_numpy(demos.masks))
    top = torch.softmax(logits, -1).max(-1).values
    assert float(top.max()) < 0.999  # some probability stays on the other rows for PPO to sample
    with pytest.raises(DeepShareError, match="label_smoothing must be in"):
        fit(demos, FitSettings(label_smoothing=1.0))
