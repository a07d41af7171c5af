"""The placement strategy's signature, shared by :mod:`deepshare.policies.placement` and
:mod:`deepshare.policies.fabric_place` (kept apart so that neither imports the other)."""

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
