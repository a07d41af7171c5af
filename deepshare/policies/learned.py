"""Learned policies: RL-base and RL-hybrid, driven by any candidate scorer.

Both build a decision choice by choice through the shared encoding: encode the partial decision,
score every candidate row, take the best unmasked row, repeat until the choice is *wait*.

* **RL-base** does exactly what the scorer says, waiting included.
* **RL-hybrid** is the artifact's decision-level multiplexing: when the scorer waits while a
  queued job fits, a rule-based safety net launches the contention-aware heuristic's pick if
  its predicted ratio is at least :attr:`HybridRules.min_ratio` (low contention) or if the
  cluster's utilisation would otherwise stay below :attr:`HybridRules.utilisation_floor`.

A scorer maps an observation ``{"observations": (K, F), "action_mask": (K,)}`` to K scores;
``deepshare.policies.checkpoint`` provides one backed by a trained RLModule checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping

import numpy as np

from deepshare.core.types import WAIT, ClusterView, Decision, JobView, Placement
from deepshare.policies.encoding import WAIT_INDEX, Candidate, EncodingConfig, PartialDecision, encode
from deepshare.policies.placement import contention_aware

Scorer = Callable[[dict[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class HybridRules:
    """Defaults chosen on the nine bundled training traces (not the evaluation trace): of
    min_ratio in {0.9, 0.95, 0.99} x floor in {0, 0.5, 0.7, 0.8, 0.85, 0.9}, (0.9, 0.5) gave
    the lowest average JCT with utilisation above 0.9 x the spread baselines'."""

    min_ratio: float = 0.9
    """Launch the heuristic's pick when its predicted throughput ratio is at least this."""
    utilisation_floor: float = 0.5
    """...or whenever utilisation would stay below this."""


@dataclass(frozen=True)
class LearnedPolicy:
    name: str
    scorer: Scorer
    encoding: EncodingConfig
    hybrid: HybridRules | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """What the scorer was trained on, and from which file it was loaded."""

    def decide(self, view: ClusterView) -> Decision:
        steps = self.steps(view)
        try:
            obs = next(steps)
            while True:
                obs = steps.send(self.scorer(obs))
        except StopIteration as done:
            return done.value

    def steps(self, view: ClusterView) -> Generator[dict[str, np.ndarray], np.ndarray, Decision]:
        """:meth:`decide` with the scorer outside: yields each observation, takes its scores.

        A server drives this to batch forward passes across concurrent requests; the decision
        is the generator's return value and equals ``decide(view)`` for the same scores.
        """
        partial = PartialDecision(view)
        while True:
            obs, rows = encode(partial, self.encoding)
            if len(rows) == 1:
                break
            scores = np.where(obs["action_mask"] > 0, (yield obs), -np.inf)
            action = int(np.argmax(scores))
            if action == WAIT_INDEX and self.hybrid is not None:
                fallback = safety_net(partial, rows, self.hybrid)
                if fallback is None:
                    break
                job, placement = fallback
            elif action == WAIT_INDEX:
                break
            else:
                job, placement = rows[action].job, rows[action].placement
            partial = partial.with_launch(job, placement)  # type: ignore[arg-type]
        return partial.decision if partial.launches else WAIT


def safety_net(partial: PartialDecision, rows: list[Candidate], rules: HybridRules) -> tuple[JobView, Placement] | None:
    """RL-hybrid's rule: the contention-aware launch to make instead of waiting, if any."""
    view = partial.view
    utilisation = 1.0 - sum(partial.free) / view.total_gpus
    pending = partial.pending()
    for candidate in rows[1:]:  # the encoding's offered jobs, oldest first
        job = candidate.job
        assert job is not None
        placement = contention_aware(job, list(partial.free), view, pending)
        if placement is None:
            continue
        ratio = view.predict(job, placement, pending).ratio
        if ratio >= rules.min_ratio or utilisation < rules.utilisation_floor:
            return job, placement
    return None
