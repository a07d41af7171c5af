"""The anchor heuristic's next launch on a partial decision: what the strongest heuristic
(``srsf+packed`` by default; ``docs/learned-policies.md``) would launch next.

The candidate encoding always offers this launch (so a learned scorer can imitate the
heuristic), and RL-hybrid's safety net falls back to it when the scorer waits. It is the
non-preemptive greedy of :class:`deepshare.policies.heuristic.HeuristicPolicy` stopped at its
first launch: queued jobs not launched yet, in the order's ranking, the first that the
placement places (a demand that fails once is skipped, as there).
"""

from __future__ import annotations

from typing import Sequence

from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.order import ORDERS
from deepshare.policies.placement import PLACEMENTS, demand

DEFAULT_ANCHOR = ("srsf", "packed")
"""(order, placement): SRSF + packed, the strong baseline of issue 13. On the ``standard``
suite's 48 cells it is within 1% of each cell's best heuristic on average (geometric mean
1.009; ``las+packed`` 1.005), and as RL-hybrid's anchor on ``quick`` the two give the same
result (0.9988 and 0.9987)."""

SAFETY_NET_ANCHOR = ("srsf", "uncontended")
"""(order, placement) RL-hybrid's safety net falls back to by default (since 2026-12-01, fifth
session; :data:`DEFAULT_ANCHOR` before): ``srsf+uncontended``, the strongest non-preemptive
heuristic on the ``loaded`` suite. With the shipped ``rl_base.pt`` it gives 1.180 on ``loaded``'s
two seeds (1.187 with ``srsf+packed``) and 1.004 on ``quick`` (the same; worst cell 1.039, 1.045
before). The encoding's row 1 stays :data:`DEFAULT_ANCHOR`'s: that is what the networks saw."""


def check_anchor(anchor: Sequence[str]) -> tuple[str, str]:
    """``(order, placement)`` registry parts, validated (ValueError names the bad one)."""
    if len(anchor) != 2:
        raise ValueError(f"anchor must be [order, placement], got {list(anchor)!r}")
    order, place = anchor
    if order not in ORDERS:
        raise ValueError(f"anchor order {order!r} is unknown; expected one of {sorted(ORDERS)}")
    if place not in PLACEMENTS:
        raise ValueError(f"anchor placement {place!r} is unknown; expected one of {sorted(PLACEMENTS)}")
    return str(order), str(place)


def anchor_pick(
    view: ClusterView,
    free: Sequence[int],
    launched: set[str],
    pending: Sequence[tuple[JobView, Placement]],
    anchor: Sequence[str] = DEFAULT_ANCHOR,
) -> tuple[JobView, Placement] | None:
    """The anchor heuristic's next launch given the launches already chosen, or None (it waits)."""
    order, place_name = check_anchor(anchor)
    place = PLACEMENTS[place_name][0]
    total = sum(free)
    fitting = [j for j in view.queued if j.gpus <= total and j.job_id not in launched]
    if not fitting:
        return None
    fitting.sort(key=ORDERS[order][0](view))
    failed: set = set()
    free_list = list(free)
    for job in fitting:
        if demand(job) in failed:
            continue
        placement = place(job, free_list, view, pending)
        if placement is not None:
            return job, placement
        failed.add(demand(job))
    return None
