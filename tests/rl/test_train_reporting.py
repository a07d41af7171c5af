"""What `deepshare train` reports for an iteration without a finished episode (issue 29: it printed
`nan` and wrote NaN to TensorBoard), and the RLModule built without RLlib's deprecation line."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from deepshare.cli import main
from deepshare.infra.raycompat import RLLIB_DEPRECATION_LOGGER

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "rl" / "tiny.yaml"
NAN_ROW = {"iteration": 1, "env_steps_lifetime": 200, "episode_return_mean": math.nan, "episode_len_mean": math.nan,
           "episodes": 0, "policy_loss": 0.5, "vf_loss": math.nan, "entropy": 1.2, "sample_s": 0.1, "learn_s": 0.2,
           "wall_s": 0.3}


def test_tensorboard_gets_no_nan_and_no_iteration() -> None:
    from deepshare.rl.train import tensorboard_scalars

    scalars = tensorboard_scalars(NAN_ROW)
    assert "episode_return_mean" not in scalars and "vf_loss" not in scalars and "iteration" not in scalars
    assert scalars["policy_loss"] == 0.5 and scalars["episodes"] == 0
    assert all(math.isfinite(v) for v in scalars.values())


def test_train_says_no_episode_finished_yet_instead_of_nan(tmp_path, monkeypatch, capsys) -> None:
    import deepshare.rl.train

    def fake_train(config_path, out, *, progress, **_kwargs):
        progress(1, 2, NAN_ROW)
        progress(2, 2, {**NAN_ROW, "iteration": 2, "episode_return_mean": -1.25})
        return Path(out) / "policy.pt"

    monkeypatch.setattr(deepshare.rl.train, "train", fake_train)
    assert main(["train", str(TINY), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "iteration 1/2: episode return no episode finished yet, 200 env steps" in err
    assert "iteration 2/2: episode return -1.2500" in err
    assert "nan" not in err.lower()


def test_the_module_is_built_by_keywords_without_rllibs_deprecation_line() -> None:
    """RLlib 2.60 logs `RLModule(config=[RLModuleConfig object])` is deprecated for every module it
    builds (its own compatibility shim); the module takes only the current keyword constructor."""
    from dataclasses import asdict

    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from deepshare.rl.env import DeepShareEnv
    from deepshare.rl.module import RLLIB_SHIM_WARNING, CandidatePPOModule, NoCatalog
    from deepshare.rl.train import load_train_config

    env = DeepShareEnv(asdict(load_train_config(TINY).env_config(TINY.parent)))
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(RLLIB_DEPRECATION_LOGGER)
    logger.addHandler(handler)
    try:
        spec = RLModuleSpec(module_class=CandidatePPOModule, observation_space=env.observation_space,
                            action_space=env.action_space, model_config={"hidden": 8}, catalog_class=NoCatalog)
        module = spec.build()
        args, kwargs = module.get_ctor_args_and_kwargs()  # how a checkpoint rebuilds it
        assert args == () and isinstance(CandidatePPOModule(**kwargs), CandidatePPOModule)
        logger.warning("DeprecationWarning: something else has been deprecated")  # other lines still pass
    finally:
        logger.removeHandler(handler)
    assert not [m for m in seen if RLLIB_SHIM_WARNING in m], seen
    assert any("something else" in m for m in seen)
    with pytest.raises(TypeError):
        CandidatePPOModule(spec.get_rl_module_config())  # the deprecated RLModule(config=...) form
