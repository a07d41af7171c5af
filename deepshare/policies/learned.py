"""Learned policies: RL-base and RL-hybrid, driven by any candidate scorer.

Both build a decision choice by choice through the shared encoding: encode the partial decision,
score every candidate row, take the best unmasked row, repeat until the choice is *wait*.

* **RL-base** does exactly what the scorer says, waiting included.
* **RL-hybrid** is the artifact's decision-level multiplexing: when the scorer waits while a
  queued job fits, a rule-based safety net launches what the strongest heuristic
  (:attr:`HybridRules.anchor`, ``srsf+uncontended``; the artifact used the contention-aware
  heuristic) would launch next, if its predicted ratio is at least
  :attr:`HybridRules.min_ratio` (low contention) or the cluster's utilisation would otherwise
  stay below :attr:`HybridRules.utilisation_floor`. With ``min_ratio`` 0 a scorer that always
  waits makes RL-hybrid exactly that heuristic. With :attr:`HybridRules.anchor_streak` above 1, a
  choice of the encoding's anchor row is repeated: the anchor's next launches of the same decision
  are made without asking the scorer again, up to that many launches in all (an action repeat,
  which bounds what a decision of thousands of launches costs).

A scorer maps an observation ``{"observations": (K, F), "action_mask": (K,)}`` to K scores;
``deepshare.policies.checkpoint`` provides one backed by a trained RLModule checkpoint.

:func:`take` applies one choice (the chosen row, or on wait the safety net) and is the only such
rule: :class:`LearnedPolicy` (evaluation and serving) and :class:`deepshare.rl.env.DeepShareEnv`
(training) both call it, so what is trained and what is served cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Mapping

import numpy as np

from deepshare.core.interrupt import checkpoint
from deepshare.core.types import Decision, Placement, WAIT
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.anchor import SAFETY_NET_ANCHOR
from deepshare.policies.base import Observation, Scorer
from deepshare.policies.encoding import (
    ANCHOR_ROW, WAIT_INDEX, Candidate, EncodingConfig, PartialDecision, anchor_launch, anchored, encode,
)

__all__ = ["HybridRules", "LearnedPolicy", "Scorer", "Step", "best_row", "drive", "safety_net", "take"]


@dataclass(frozen=True)
class HybridRules:
    """When the scorer waits, launch the anchor heuristic's next pick if its predicted ratio is
    at least ``min_ratio`` or utilisation would stay below ``utilisation_floor``.

    The thresholds (0.9, 0.5) were chosen on the nine bundled training traces; on the ``quick``
    suite, waiting when the pick would be slowed down measured better than always taking the pick
    (``min_ratio`` 0), in the average and more so in the p99 (the figures and their history are
    in CHANGELOG.md). The fallback is :data:`~deepshare.policies.anchor.SAFETY_NET_ANCHOR`."""

    min_ratio: float = 0.9
    """Launch the heuristic's pick when its predicted throughput ratio is at least this."""
    utilisation_floor: float = 0.5
    """...or whenever utilisation would stay below this."""
    anchor: tuple[str, ...] = SAFETY_NET_ANCHOR
    """(order, placement) of the heuristic the safety net falls back to."""
    anchor_streak: int = 1
    """Launches one choice of the encoding's anchor row (row 1, the anchor heuristic's next
    launch) makes at most: after the scorer chooses it, the anchor's next launches of the same
    decision, up to ``anchor_streak - 1`` more, are made without scoring them (an action repeat:
    "follow the anchor" holds for that many launches). 1: the scorer chooses every launch. The
    scorer is asked about once per ``anchor_streak`` launches where it follows its anchor, which is
    what bounds the CPU of a decision of thousands of launches (``bench/decide_scale.py``)."""

    def __post_init__(self) -> None:
        if not is_anchor_streak(self.anchor_streak):
            raise ValueError(f"anchor_streak must be an integer in 1..{MAX_ANCHOR_STREAK}, got {self.anchor_streak!r}")


MAX_ANCHOR_STREAK = 1024
"""Most launches one choice of the anchor's row may make (:attr:`HybridRules.anchor_streak`)."""


def is_anchor_streak(value: object) -> bool:
    """Whether ``value`` is an :attr:`HybridRules.anchor_streak`: an integer (not a bool) in
    1..MAX_ANCHOR_STREAK."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ANCHOR_STREAK


@dataclass(frozen=True)
class LearnedPolicy:
    name: str
    scorer: Scorer
    encoding: EncodingConfig
    hybrid: HybridRules | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """What the scorer was trained on, and from which file it was loaded."""

    def decide(self, view: ClusterView) -> Decision:
        return drive(self.steps(view), self.scorer, checkpoint)  # a caller's deadline is checked at every step

    def steps(self, view: ClusterView) -> Generator[Observation, np.ndarray, Decision]:
        """:meth:`decide` with the scorer outside: yields each observation, takes its scores.

        A server drives this to batch forward passes across concurrent requests; the decision
        is the generator's return value and equals ``decide(view)`` for the same scores.
        """
        partial = PartialDecision(view)
        while True:
            obs, rows = encode(partial, self.encoding)
            if len(rows) == 1:
                break
            mask = obs["action_mask"]
            step = take(partial, rows, mask, best_row((yield obs), mask), self.hybrid, self.encoding)
            if step.launched is None:
                break
            partial = step.partial
        return partial.decision if partial.count else WAIT


def drive(
    steps: Generator[Observation, np.ndarray, Decision], scorer: Scorer, before_each: Callable[[], None] | None = None
) -> Decision:
    """Run a policy's :meth:`~LearnedPolicy.steps` to its decision, scoring with ``scorer`` and
    calling ``before_each`` (e.g. a deadline check) before every score."""
    try:
        obs = next(steps)
        while True:
            if before_each is not None:
                before_each()
            obs = steps.send(scorer(obs))
    except StopIteration as done:
        return done.value


def best_row(scores: np.ndarray, mask: np.ndarray) -> int:
    """The highest-scoring unmasked row (the first of equals): exactly
    ``np.argmax(np.where(mask > 0, scores, -inf))`` (row 0 when every row is masked or scores
    -inf; the first unmasked NaN wins, as argmax's does), over Python floats, because a step
    scores a handful of rows and those two NumPy calls cost more than the loop."""
    keep = mask.tolist() if isinstance(mask, np.ndarray) else list(mask)
    values = scores.tolist() if isinstance(scores, np.ndarray) else list(scores)
    best, top = 0, -math.inf
    for row, value in enumerate(values):
        if keep[row] > 0:
            if value != value:  # NaN
                return row
            if value > top:
                best, top = row, value
    return best


@dataclass(frozen=True)
class Step:
    """What one choice did: the decision so far after it, and the launch it added (if any)."""

    partial: PartialDecision
    """The decision being built, with :attr:`launched` added."""
    launched: Candidate | None
    """The launch made; None: the choice was wait (and no safety net fired), the decision ends."""
    safety_net: bool = False
    """The launch is the safety net's, made instead of the chosen wait."""
    invalid: bool = False
    """The chosen row was masked or out of range and was replaced (see :func:`take`)."""
    repeated: int = 0
    """Launches the anchor streak added after :attr:`launched` (:attr:`HybridRules.anchor_streak`)."""


def take(
    partial: PartialDecision,
    rows: list[Candidate],
    mask: np.ndarray,
    action: int,
    rules: HybridRules | None,
    encoding: EncodingConfig | None = None,
) -> Step:
    """Apply the choice of row ``action`` among ``rows`` (with ``mask``, from one :func:`encode`).

    A masked or out-of-range row counts as wait, or as the first unmasked launch where waiting is
    masked (the cluster is wholly idle and a job fits); :class:`LearnedPolicy` picks a masked row only when
    every unmasked row scores -inf, the env whenever the agent samples one. A launch row is added to the decision; a wait is
    replaced by the safety net's launch when ``rules`` are given and it has one, and otherwise
    ends the decision (``launched`` None, ``partial`` unchanged). A chosen anchor row (row 1 of
    ``encoding``'s rows, when it is the anchor's launch) is followed by the anchor's next launches
    up to ``rules.anchor_streak`` launches in all; without ``encoding`` there is no streak.
    """
    action = int(action)
    invalid = not (0 <= action < len(mask)) or mask[action] == 0
    if invalid:
        action = WAIT_INDEX if mask[WAIT_INDEX] else int(np.flatnonzero(mask)[0])
    choice, by_net = rows[action], False
    if choice.job is None and rules is not None:
        fallback = safety_net(partial, rows, rules)
        if fallback is not None:
            choice, by_net = Candidate(*fallback), True
    if choice.job is None:
        return Step(partial, None, False, invalid)
    assert choice.placement is not None
    after = partial.with_launch(choice.job, choice.placement)
    repeated = 0
    if (rules is not None and rules.anchor_streak > 1 and encoding is not None and encoding.anchor is not None
            and action == ANCHOR_ROW and not by_net and not invalid and anchored(partial, encoding)):
        while repeated < rules.anchor_streak - 1:
            pick = anchor_launch(after, encoding.anchor)
            if pick is None:
                break
            after = after.with_launch(*pick)
            repeated += 1
    return Step(after, choice, by_net, invalid, repeated)


def safety_net(partial: PartialDecision, rows: list[Candidate], rules: HybridRules) -> tuple[JobView, Placement] | None:
    """RL-hybrid's rule: the anchor heuristic's launch to make instead of waiting, if any."""
    view = partial.view
    pick = anchor_launch(partial, rules.anchor)  # anchor_pick's answer, from the decision's indexed state
    if pick is None:
        return None
    job, placement = pick
    state = partial.state()
    pending = state.pending
    total = view.total_gpus
    utilisation = 1.0 - state.free.total / total if total else 0.0  # no node up yet
    if utilisation < rules.utilisation_floor or view.predict(job, placement, pending).ratio >= rules.min_ratio:
        return pick
    return None
