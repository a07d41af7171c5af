"""Lean connector pipelines for the env runners: one fused piece each way instead of RLlib's chain.

The candidate module is stateless, its observations carry no time rank and its action space is
``Discrete``, and every env runner is single-agent with one observation per episode per step.
RLlib's default pipelines walk every batch through eleven pieces per env step for that (the
earlier lean ones here, seven), each behind its own metrics timer, building per-episode dicts
only to flatten them again. Here:

* env to module, :class:`ObservationsToTensors`: the latest observation of every episode, in
  episode (= vector env) order, stacked per key and wrapped as torch tensors: what
  ``AddObservationsFromEpisodesToBatch``, ``BatchIndividualItems`` and ``NumpyToTensor`` give.
* module to env, :class:`ActionsToEnv`: actions sampled from the module's logits (and their
  log-probabilities) as ``GetActions`` samples them, then every column as NumPy, split into one
  item per env (actions kept as one array): what ``TensorToNumpy``,
  ``UnBatchToIndividualItems`` and ``ListifyDataForVectorEnv`` give.

Same tensors into the module, same actions and extra model outputs into the episodes
(tests/rl/test_rollout_equivalence.py samples both ways with one seed); fewer passes per env
step (issue 14, item 5: faster rollouts). The factories are module-level functions so that the
algorithm config pickles them by reference into every env runner.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.utils.numpy import convert_to_numpy


class ObservationsToTensors(ConnectorV2):
    """Env to module: ``{obs: {key: tensor [episodes, ...]}}`` from each episode's latest observation."""

    def __init__(self, device: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._device = device

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list, explore: Any = None,
                 shared_data: Any = None, **kwargs: Any) -> Any:
        import torch

        if Columns.OBS in batch:  # as RLlib's piece: an earlier connector already set them
            return batch
        latest = [episode.get_observations(-1) for episode in episodes]
        first = latest[0]
        tensors = {}
        for key in first:
            tensor = torch.from_numpy(_stack([obs[key] for obs in latest]))
            if tensor.is_floating_point() and tensor.dtype != torch.float16:
                tensor = tensor.float()  # as RLlib's NumpyToTensor (a no-op on float32)
            tensors[key] = tensor if self._device is None else tensor.to(self._device)
        batch[Columns.OBS] = tensors
        return batch


class ActionsToEnv(ConnectorV2):
    """Module to env: sampled actions as one array, every other column as one NumPy item per env."""

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list, explore: Any = None,
                 shared_data: Any = None, **kwargs: Any) -> Any:
        if Columns.ACTIONS not in batch and Columns.ACTION_DIST_INPUTS in batch:
            dist_cls = rl_module.get_exploration_action_dist_cls() if explore else rl_module.get_inference_action_dist_cls()
            dist = dist_cls.from_logits(batch[Columns.ACTION_DIST_INPUTS])
            if not explore:
                dist = dist.to_deterministic()
            actions = batch[Columns.ACTIONS] = dist.sample()
            if Columns.ACTION_LOGP not in batch:
                batch[Columns.ACTION_LOGP] = dist.logp(actions)
        for column, data in convert_to_numpy(batch).items():  # RLlib's TensorToNumpy: int64 -> int32 too
            if column in (Columns.ACTIONS, Columns.ACTIONS_FOR_ENV):
                batch[column] = _stack(list(data))  # as RLlib re-batches them: items, then stacked
            else:
                batch[column] = list(data)  # one item per episode, in episode order
        return batch


def _stack(items: list) -> np.ndarray:
    """RLlib's ``batch()`` of one column: a new array (items that are not arrays: ``np.array``)."""
    first = items[0]
    if not isinstance(first, np.ndarray):
        return np.array(items)
    out = np.empty((len(items), *first.shape), dtype=first.dtype)
    for i, item in enumerate(items):
        out[i] = item
    return out


def env_to_module(env: Any = None, spaces: Any = None, device: Any = None) -> list:
    """Observations from the episodes, batched, as tensors (single agent, stateless module)."""
    return [ObservationsToTensors(device=device)]


def module_to_env(env: Any = None, spaces: Any = None) -> list:
    """Sampled actions, as numpy, one per vector env (single agent, ``Discrete`` actions)."""
    return [ActionsToEnv()]
