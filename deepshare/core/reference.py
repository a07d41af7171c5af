"""The simulator's straightforward reference mode, kept to test (and benchmark) the fast one.

:class:`ReferenceSimulator` hands policies a tuple copy of the queue at every decision (the
O(queue) way) instead of :class:`~deepshare.core.pending.PendingJobs` read through the queue;
everything else is :class:`~deepshare.core.simulator.Simulator`'s. Decisions, reports and
per-job tables are the same: ``tests/core/test_scale_pending.py`` checks that they are, driving
the heuristics unindexed (``use_index=False``) here, and ``bench/scale.py --burst`` measures what
the fast path saves. Nothing outside tests and benchmarks uses it.
"""

from __future__ import annotations

from typing import Sequence

from deepshare.core.simulator import Simulator
from deepshare.core.view import JobView


class ReferenceSimulator(Simulator):
    """A :class:`Simulator` (same arguments) whose views copy the queue at every decision."""

    def _queued_view(self) -> Sequence[JobView]:
        return tuple(self._queued_views.values())
