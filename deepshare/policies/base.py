"""The one interface every scheduling policy implements, heuristic or learned, and the stepped
form a learned policy also offers so that a server can run its scorer outside it."""

from __future__ import annotations

from typing import Callable, Generator, Protocol, runtime_checkable

import numpy as np

from deepshare.core.types import Decision
from deepshare.core.view import ClusterView

Observation = dict[str, np.ndarray]
"""``{"observations": (K, F), "action_mask": (K,)}``, from :func:`deepshare.policies.encoding.encode`."""
Scorer = Callable[[Observation], np.ndarray]
"""Maps one observation to its K row scores."""


@runtime_checkable
class Policy(Protocol):
    """``decide(view)`` is called at every decision point and returns what to do now.

    A policy must only return feasible decisions (the simulator raises otherwise) and must not
    keep jobs queued forever on an idle cluster.
    """

    name: str

    def decide(self, view: ClusterView) -> Decision: ...


@runtime_checkable
class SteppedPolicy(Policy, Protocol):
    """A policy whose decision is a sequence of scored choices, with the scorer outside.

    ``steps(view)`` yields each choice's observation and takes its scores; the decision is the
    generator's return value and equals ``decide(view)`` when every score comes from ``scorer``.
    The placement service drives it to check its deadline between steps and to batch forward
    passes across concurrent requests.
    """

    scorer: Scorer

    def steps(self, view: ClusterView) -> Generator[Observation, np.ndarray, Decision]: ...


@runtime_checkable
class BatchScorer(Protocol):
    """A scorer that also scores many observations in one call (one forward pass)."""

    def __call__(self, obs: Observation) -> np.ndarray: ...

    def batch(self, observations: list[Observation]) -> list[np.ndarray]: ...
