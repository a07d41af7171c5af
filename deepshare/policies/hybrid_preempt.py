"""RL-hybrid with preemption: decision-level multiplexing between the network and a preemptive heuristic.

The learned policies can only launch or wait; on loaded clusters the strongest heuristic,
``srsf+uncontended+preempt``, wins by preempting (a job with little remaining GPU-service displaces
running ones with much more). :class:`PreemptiveHybrid` extends RL-hybrid's idea (a heuristic
decides where the network cannot) from the *wait* choice to the *preempt* choice: at every
decision point it asks the preemptive heuristic first; when that decision preempts anything, it
is returned as is (its preemptions and its launches), otherwise the learned policy decides.

It is a :class:`~deepshare.policies.base.SteppedPolicy`: :meth:`PreemptiveHybrid.steps` returns
the heuristic's decision without yielding when it preempts (``drive`` and the serving engine
take a generator that returns at once), else yields the learned policy's steps, so the
placement service batches its forward passes like RL-hybrid's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Mapping

import numpy as np

from deepshare.core.interrupt import checkpoint
from deepshare.core.types import Decision
from deepshare.core.view import ClusterView
from deepshare.policies.base import Observation, Policy, Scorer
from deepshare.policies.encoding import EncodingConfig
from deepshare.policies.heuristic import HeuristicPolicy
from deepshare.policies.heuristic_names import preemptive_heuristic_named, preemptive_parts
from deepshare.policies.learned import LearnedPolicy, drive

DEFAULT_PREEMPTIVE = "srsf+uncontended+preempt"
"""The preemptive heuristic deferred to when a policy file names none (one of the leading
preemptive heuristics of the ``loaded`` suite; ``docs/results.md`` has the current figures)."""


@dataclass(frozen=True)
class PreemptiveHybrid:
    name: str
    learned: LearnedPolicy
    """Decides whenever the heuristic would not preempt (normally RL-hybrid)."""
    preemptive: Policy
    """Asked first at every decision point; its decision is taken whenever it preempts."""
    min_gain: float | None = None
    """None: defer whenever the heuristic preempts. A number: only when every victim's remaining
    GPU-service (remaining time x GPUs) is at least this times that of each job the decision launches
    (a variant: preempt only for a clear win, leaving near-ties to the network)."""
    min_pressure: float | None = None
    """None: defer whenever the heuristic preempts. A number: only while the queued jobs' GPU demand
    is at least this times the cluster's GPUs (preempt under queue pressure only; with a short
    queue the learned policy decides, so a long job is not displaced for a brief gain)."""

    @property
    def scorer(self) -> Scorer:
        return self.learned.scorer

    @property
    def encoding(self) -> EncodingConfig:
        return self.learned.encoding

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The learned policy's (checkpoint and training), plus the heuristic deferred to."""
        return {**self.learned.metadata, "preemptive": self.preemptive.name}

    def decide(self, view: ClusterView) -> Decision:
        return drive(self.steps(view), self.scorer, checkpoint)  # a caller's deadline is checked at every step

    def steps(self, view: ClusterView) -> Generator[Observation, np.ndarray, Decision]:
        """The heuristic's decision, unscored, when it preempts; else the learned policy's steps."""
        heuristic = self.preemptive.decide(view)
        if heuristic.preempt and self._under_pressure(view) and self._clear_win(view, heuristic):
            return heuristic
        return (yield from self.learned.steps(view))

    def _under_pressure(self, view: ClusterView) -> bool:
        if self.min_pressure is None:
            return True
        return sum(j.gpus for j in view.queued) >= self.min_pressure * view.total_gpus

    def _clear_win(self, view: ClusterView, decision: Decision) -> bool:
        if self.min_gain is None:
            return True
        victims = set(decision.preempt)
        launched = {launch.job_id for launch in decision.launch}
        smallest_victim = min((j.remaining_s * j.gpus for j in view.running if j.job_id in victims), default=0.0)
        largest_launch = max((j.remaining_s * j.gpus for j in view.queued if j.job_id in launched), default=0.0)
        return smallest_victim >= self.min_gain * largest_launch


PREEMPT_RULES = ("min_gain", "min_pressure")
"""The keys of a policy file's metadata ``preempt_rules``: :class:`PreemptiveHybrid`'s gates."""


def preemptive_hybrid(name: str, path: str | None = None, preemptive: Policy | None = None) -> PreemptiveHybrid:
    """RL-hybrid (``path``, or the shipped ``rl_est_hybrid_preempt.pt``) deferring to ``preemptive``
    (default: the file's metadata ``preemptive``, else :data:`DEFAULT_PREEMPTIVE`) when it preempts;
    the file's metadata ``preempt_rules``
    (``{"min_gain": .., "min_pressure": ..}``, any subset) sets the gates, none when absent."""
    from deepshare.policies.checkpoint import default_file, learned_policy

    learned = learned_policy("rl-hybrid", path or default_file("rl-hybrid-preempt"), hybrid=True)
    file = learned.metadata.get("checkpoint", path)
    if preemptive is None:
        preemptive = preemptive_heuristic(learned.metadata.get("preemptive", DEFAULT_PREEMPTIVE), file)
    gates = preempt_rules(learned.metadata.get("preempt_rules"), file)
    return PreemptiveHybrid(name, learned, preemptive, **gates)


def preemptive_heuristic(name: Any, file: Any) -> HeuristicPolicy:
    """The registry's preemptive heuristic ``ORDER+PLACEMENT+preempt`` that a policy file's metadata
    ``preemptive`` names, built by the registry's own rule
    (:mod:`deepshare.policies.heuristic_names`: the tenants' fairness orders count, ``fifo``, never
    preemptive, does not); anything else is a DeepShareError naming the file and the key."""
    from deepshare.core.errors import DeepShareError, shown

    policy = preemptive_heuristic_named(name)
    if policy is None:
        orders, placements = preemptive_parts()
        raise DeepShareError(
            f"policy checkpoint {file}: metadata preemptive: expected a preemptive heuristic ORDER+PLACEMENT+preempt"
            f" (orders {', '.join(orders)}; placements {', '.join(placements)}), got {shown(name)}"
        )
    return policy


def preempt_rules(given: Any, file: Any) -> dict[str, float]:
    """A file's ``preempt_rules`` as :class:`PreemptiveHybrid` fields; a bad key or value is a
    DeepShareError naming the file and the key (a hand-edited file is user input)."""
    from deepshare.policies.checkpoint import rule_mapping, rule_number

    where = f"policy checkpoint {file}: metadata preempt_rules"
    return {key: rule_number(f"{where}.{key}", value) for key, value in rule_mapping(given, where, PREEMPT_RULES).items()}


def with_margin(min_gain: str) -> PreemptiveHybrid:
    """The ``min_gain`` variant of the shipped rl-hybrid-preempt (its other gates kept), for measuring it
    as ``deepshare.policies.hybrid_preempt:with_margin=G`` in a suite's ``learned:``."""
    from dataclasses import replace

    from deepshare.core.errors import DeepShareError
    from deepshare.policies.checkpoint import rule_number

    from deepshare.core.errors import shown
    from deepshare.core.written import NUMBER

    if not NUMBER.fullmatch(min_gain):  # float() also reads 1_0, other scripts' digits and spaces around them
        raise DeepShareError(f"with_margin={shown(min_gain)}: expected a number >= 0")
    gain = float(min_gain)
    policy = preemptive_hybrid(f"rl-hybrid-preempt-x{min_gain}")
    return replace(policy, min_gain=rule_number(f"with_margin={shown(min_gain)}", gain))
