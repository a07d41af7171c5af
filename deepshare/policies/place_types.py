"""The placement strategy's signature, and what a strategy that waits on contention says of
itself, shared by :mod:`deepshare.policies.placement` and :mod:`deepshare.policies.fabric_place`
(kept apart so that neither imports the other)."""

from __future__ import annotations

from typing import Callable, Sequence

from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView

Pending = Sequence[tuple[JobView, Placement]]
"""Launches chosen earlier in the same decision."""
PlaceFn = Callable[[JobView, list[int], ClusterView, Pending], "Placement | None"]
"""``place(job, free, view, pending) -> Placement | None`` (None: the job does not fit)."""
FewestFn = Callable[[int, Sequence[int]], "Placement | None"]
"""``fewest(need, free)``: ``need`` GPUs on the fewest nodes of ``free`` (``consolidate``)."""


def waits_below(place: PlaceFn) -> float | None:
    """The predicted ratio below which ``place`` waits rather than launch (``uncontended``'s, kept
    by :func:`~deepshare.policies.fabric_place.with_topology`), or None for a placement that never
    waits on contention. The preemptive heuristics keep a victim stopped when running it would
    put a launch below that ratio."""
    ratio = getattr(place, "min_ratio", None)
    return ratio if isinstance(ratio, float) else None


def at_speed(job: JobView, placement: Placement, view: ClusterView, pending: Pending, min_ratio: float) -> bool:
    """Whether ``job`` runs at ``min_ratio`` or above on ``placement`` beside ``pending``
    (``uncontended``'s test): always on a cluster where nothing runs and nothing is being launched."""
    return not pending and not view.running or view.predict(job, placement, pending).ratio >= min_ratio
