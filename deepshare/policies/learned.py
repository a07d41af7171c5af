"""Learned policies: RL-base and RL-hybrid, driven by any candidate scorer.

Both build a decision choice by choice through the shared encoding: encode the partial decision,
score every candidate row, take the best unmasked row, repeat until the choice is *wait*.

* **RL-base** does exactly what the scorer says, waiting included.
* **RL-hybrid** is the artifact's decision-level multiplexing: when the scorer waits while a
  queued job fits, a rule-based safety net launches what the strongest heuristic
  (:attr:`HybridRules.anchor`, ``srsf+packed``; the artifact used the contention-aware
  heuristic) would launch next, if its predicted ratio is at least
  :attr:`HybridRules.min_ratio` (low contention) or the cluster's utilisation would otherwise
  stay below :attr:`HybridRules.utilisation_floor`. With ``min_ratio`` 0 a scorer that always
  waits makes RL-hybrid exactly that heuristic.

A scorer maps an observation ``{"observations": (K, F), "action_mask": (K,)}`` to K scores;
``deepshare.policies.checkpoint`` provides one backed by a trained RLModule checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping

import numpy as np

from deepshare.core.types import Decision, Placement, WAIT
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.anchor import DEFAULT_ANCHOR, anchor_pick
from deepshare.policies.encoding import WAIT_INDEX, Candidate, EncodingConfig, PartialDecision, encode

Scorer = Callable[[dict[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class HybridRules:
    """When the scorer waits, launch the anchor heuristic's next pick if its predicted ratio is
    at least ``min_ratio`` or utilisation would stay below ``utilisation_floor``.

    The thresholds (0.9, 0.5) were chosen on the nine bundled training traces for the
    contention-aware fallback used until 2026-11-30. With the ``srsf+packed`` fallback, on the
    ``quick`` suite (24 cells, shipped network) they give a geometric-mean average-JCT ratio to
    each cell's best heuristic of 0.999 (worst cell 1.017, worst p99 1.025); always taking the
    pick (``min_ratio`` 0) gives 1.004 (worst 1.050, p99 1.149): waiting when the pick would be
    slowed down is worth keeping."""

    min_ratio: float = 0.9
    """Launch the heuristic's pick when its predicted throughput ratio is at least this."""
    utilisation_floor: float = 0.5
    """...or whenever utilisation would stay below this."""
    anchor: tuple[str, ...] = DEFAULT_ANCHOR
    """(order, placement) of the heuristic the safety net falls back to."""


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
    """RL-hybrid's rule: the anchor heuristic's launch to make instead of waiting, if any."""
    view = partial.view
    pending = partial.pending()
    launched = {launch.job_id for launch in partial.launches}
    pick = anchor_pick(view, partial.free, launched, pending, rules.anchor)
    if pick is None:
        return None
    job, placement = pick
    utilisation = 1.0 - sum(partial.free) / view.total_gpus
    if utilisation < rules.utilisation_floor or view.predict(job, placement, pending).ratio >= rules.min_ratio:
        return pick
    return None
