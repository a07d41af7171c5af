"""The PPO RLModule (new API stack): the shared candidate scorer plus a value head.

Every candidate row is scored by the same :class:`CandidateScorer` (permutation-equivariant);
masked rows get a finite, lowest score in every forward path. The value head reads the masked
mean and max of the row embeddings. With ``init_from`` in the model config the scorer starts from
that policy file's weights (the value head from scratch). Built on ``DefaultPPOTorchRLModule``; its default catalog
cannot build encoders for this observation, so :class:`NoCatalog` stands in.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from torch import nn

from deepshare.infra.raycompat import RLLIB_DEPRECATION_LOGGER
from deepshare.policies.scorer_net import CandidateScorer


class NoCatalog:
    """Stands in for PPO's catalog: only the action distribution class is needed."""

    def __init__(self, observation_space: Any = None, action_space: Any = None, model_config_dict: Any = None, **_: Any) -> None:
        pass

    def get_action_dist_cls(self, framework: str = "torch") -> type:
        return TorchCategorical


RLLIB_SHIM_WARNING = "`RLModule(config=[RLModuleConfig object])` has been deprecated"
"""The start of the deprecation line RLlib 2.60's ``RLModule.__init__`` logs for every module it
builds, whichever constructor was called: it still makes an ``RLModuleConfig`` for subclasses
written against the old ``RLModule(config=...)`` (ray-project/ray issue 51630)."""


class _DropShimWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return RLLIB_SHIM_WARNING not in record.getMessage()


class CandidatePPOModule(DefaultPPOTorchRLModule):
    def __init__(self, *, observation_space: Any = None, action_space: Any = None, inference_only: bool | None = None,
                 learner_only: bool = False, model_config: dict[str, Any] | None = None, catalog_class: Any = NoCatalog) -> None:
        """RLlib's current constructor, keyword arguments only (what ``RLModuleSpec.build`` and
        checkpoints call); the deprecated ``RLModule(config=...)`` form is a TypeError here. The
        deprecation line RLlib logs from its own compatibility shim while it runs is dropped: it
        does not concern this module, and it told users to change a call they do not make."""
        quiet, logger = _DropShimWarning(), logging.getLogger(RLLIB_DEPRECATION_LOGGER)
        logger.addFilter(quiet)
        try:
            super().__init__(observation_space=observation_space, action_space=action_space, inference_only=inference_only,
                             learner_only=learner_only, model_config=model_config, catalog_class=catalog_class or NoCatalog)
        finally:
            logger.removeFilter(quiet)

    def setup(self) -> None:  # the parent's setup would ask the catalog for encoders
        features = self.observation_space["observations"].shape[-1]
        hidden = int(self.model_config.get("hidden", 64))
        self.scorer = CandidateScorer(features, hidden)
        init_from = self.model_config.get("init_from")
        if init_from:  # a warm start (e.g. imitation); checked against the config when it was read (with_init_from)
            from deepshare.policies.checkpoint import scorer_from_file

            # scorer_from_file again: a file changed since then is one DeepShareError naming it, not a state-dict dump
            self.scorer.load_state_dict(scorer_from_file(init_from)[0].net.state_dict())
        self.vf = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def _embed(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        obs = batch[Columns.OBS]  # never mutated: GAE reuses the batch
        mask = obs["action_mask"]
        logits, rows = self.scorer(obs["observations"], mask)
        m = mask.unsqueeze(-1)
        mean = (rows * m).sum(1) / m.sum(1).clamp(min=1.0)
        top = rows.masked_fill(m <= 0, -1e9).max(1).values
        return logits, torch.cat([mean, top], -1)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # Logits only: the pooled rows feed the value head, which acting never reads (a rollout
        # step skips the pooling; the logits are the same tensors _embed gives).
        obs = batch[Columns.OBS]
        return {Columns.ACTION_DIST_INPUTS: self.scorer(obs["observations"], obs["action_mask"])[0]}

    # The acting forwards skip TorchRLModule's eval()/train() around every call: no layer here
    # behaves differently in either mode (no dropout, no batch norm), and the toggle walked every
    # submodule twice per env-runner step (issue 14, item 5). forward_train still sets train().
    def forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)

    def forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_exploration(batch, **kwargs)

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        with torch.no_grad():
            return self._forward(batch, **kwargs)

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        with torch.no_grad():
            return self._forward(batch, **kwargs)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        logits, pooled = self._embed(batch)
        return {Columns.ACTION_DIST_INPUTS: logits, Columns.EMBEDDINGS: pooled}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        if embeddings is None:
            _, embeddings = self._embed(batch)
        return self.vf(embeddings).squeeze(-1)

    def get_non_inference_attributes(self) -> list[str]:
        return ["vf"]

    def get_initial_state(self) -> dict[str, Any]:
        return {}
