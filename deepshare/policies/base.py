"""The one interface every scheduling policy implements, heuristic or learned."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from deepshare.core.types import Decision
from deepshare.core.view import ClusterView


@runtime_checkable
class Policy(Protocol):
    """``decide(view)`` is called at every decision point and returns what to do now.

    A policy must only return feasible decisions (the simulator raises otherwise) and must not
    keep jobs queued forever on an idle cluster.
    """

    name: str

    def decide(self, view: ClusterView) -> Decision: ...
