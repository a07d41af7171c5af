"""Lean connector pipelines for the env runners: RLlib's default pieces minus the no-ops.

The candidate module is stateless, its observations carry no time rank and its action space is
``Discrete``, so four default pieces do nothing here but still walk every batch on every env
step: ``AddTimeDimToBatchAndZeroPad`` and ``AddStatesFromEpisodesToBatch`` (env to module),
``RemoveSingleTsTimeRankFromBatch`` and ``NormalizeAndClipActions`` (module to env). These
pipelines keep the other pieces, in RLlib's default order, so the module sees the same tensors
and the env the same actions (issue 14, item 5: faster rollouts). They are module-level
functions so that the algorithm config pickles them by reference into every env runner.
"""

from __future__ import annotations

from typing import Any


def env_to_module(env: Any = None, spaces: Any = None, device: Any = None) -> list:
    """Observations from the episodes, batched, as tensors (RLlib's defaults, single agent)."""
    from ray.rllib.connectors.common import AddObservationsFromEpisodesToBatch, BatchIndividualItems, NumpyToTensor

    return [AddObservationsFromEpisodesToBatch(), BatchIndividualItems(multi_agent=False), NumpyToTensor(device=device)]


def module_to_env(env: Any = None, spaces: Any = None) -> list:
    """Sampled actions, as numpy, one per vector env (RLlib's defaults, single agent)."""
    from ray.rllib.connectors.common import TensorToNumpy
    from ray.rllib.connectors.module_to_env import GetActions, ListifyDataForVectorEnv, UnBatchToIndividualItems

    return [GetActions(), TensorToNumpy(), UnBatchToIndividualItems(), ListifyDataForVectorEnv()]
