"""The fused env-runner connectors (deepshare.rl.connectors) and the acting forward without mode
toggles give the episodes exactly what RLlib's default pipelines and forward give."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray.rllib")

from deepshare.rl.env import DeepShareEnv, EnvConfig  # noqa: E402
from deepshare.rl.train import TrainConfig, build_algorithm_config  # noqa: E402

SMALL = {"generated_fraction": 1.0, "generated_jobs": 30, "generated_nodes": [2, 4]}


def _columns(episode) -> dict[str, list]:
    """Every per-step column of a sampled (numpy-ized) episode, as lists of per-step arrays."""
    obs = episode.get_observations()
    out = {
        "observations": list(np.asarray(obs["observations"])),
        "action_mask": list(np.asarray(obs["action_mask"])),
        "actions": list(np.asarray(episode.get_actions())),
        "rewards": list(np.asarray(episode.get_rewards())),
    }
    for key in ("action_logp", "action_dist_inputs"):
        out[key] = list(np.asarray(episode.get_extra_model_outputs(key)))
    out["done"] = [episode.is_terminated, episode.is_truncated]
    return out


def _sample(lean: bool, envs: int, steps: int) -> list[dict[str, list]]:
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    config = TrainConfig(name="t", model={"hidden": 8}, run={"envs_per_env_runner": envs})
    runner = SingleAgentEnvRunner(config=build_algorithm_config(config, EnvConfig.from_dict(SMALL), 1, 1.0, lean_connectors=lean),
                                  worker_index=1, num_workers=1)
    try:
        episodes = runner.sample(num_timesteps=steps) + runner.sample(num_timesteps=steps)  # a cut, then its continuation
        return [_columns(e) for e in episodes]
    finally:
        runner.stop()


def test_fused_connectors_give_the_episodes_what_rllibs_default_pipelines_give():
    default, fused = _sample(False, 3, 90), _sample(True, 3, 90)
    assert len(fused) == len(default) and sum(len(e["actions"]) for e in fused) >= 180
    assert any(e["done"][0] for e in fused)  # episodes ended and vector envs reset in between
    for got, want in zip(fused, default):
        assert got.keys() == want.keys()
        for key in want:
            assert len(got[key]) == len(want[key]), key
            for a, b in zip(got[key], want[key]):
                a, b = np.asarray(a), np.asarray(b)
                assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), key


def test_acting_forwards_ignore_the_module_mode_and_leave_it_alone():
    """The acting forwards no longer switch to eval() and back: the module has no layer whose
    output depends on the mode, and the mode the caller set stays."""
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from torch import nn

    from deepshare.policies.scorer_net import CandidateScorer
    from deepshare.rl.module import CandidatePPOModule, NoCatalog

    env = DeepShareEnv(SMALL)
    module = RLModuleSpec(module_class=CandidatePPOModule, observation_space=env.observation_space,
                          action_space=env.action_space, model_config={"hidden": 8}, catalog_class=NoCatalog).build()
    assert {type(m) for m in module.modules()} <= {CandidatePPOModule, CandidateScorer, nn.Sequential, nn.Linear, nn.ReLU}
    obs, _ = env.reset(seed=1)
    batch = {Columns.OBS: {k: torch.as_tensor(np.stack([v, v, v])) for k, v in obs.items()}}
    logits = {}
    for training in (True, False):
        module.train(training)
        for name in ("forward_exploration", "forward_inference"):
            logits[(training, name)] = getattr(module, name)(batch)[Columns.ACTION_DIST_INPUTS]
            assert module.training is training
    first = next(iter(logits.values()))
    assert all(torch.equal(first, value) for value in logits.values())
