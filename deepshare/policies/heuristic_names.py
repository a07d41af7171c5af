"""Which orders and placements make the heuristics: the one rule the registry registers them by
and a policy file's preemptive heuristic is checked against.

It lives apart from the registry because :mod:`deepshare.policies.hybrid_preempt`, which the
registry imports, must check a file's ``preemptive`` name by the same rule without importing
the registry back.
"""

from __future__ import annotations

from typing import Any

from deepshare.policies.heuristic import HeuristicPolicy
from deepshare.policies.order import ORDERS
from deepshare.policies.placement import PLACEMENTS
from deepshare.tenants.orders import FAIRNESS_ORDERS


def heuristic_orders() -> dict[str, tuple[Any, str]]:
    """Every order a heuristic may rank by, name -> (key factory, description): the plain orders
    and the tenants' fairness orders."""
    return {**ORDERS, **FAIRNESS_ORDERS}


def may_preempt(order_name: str) -> bool:
    """Whether ``ORDER+PLACEMENT+preempt`` heuristics exist for this order: not for ``fifo``,
    which never ranks a queued job above a running one."""
    return order_name != "fifo"


def preemptive_heuristic_named(name: object) -> HeuristicPolicy | None:
    """The preemptive heuristic ``ORDER+PLACEMENT+preempt`` called ``name``, built as the registry
    builds it; None when no registered heuristic has that name."""
    parts = name.split("+") if isinstance(name, str) else []
    if len(parts) != 3 or parts[2] != "preempt" or not may_preempt(parts[0]):
        return None
    order, place = heuristic_orders().get(parts[0]), PLACEMENTS.get(parts[1])
    if order is None or place is None:
        return None
    return HeuristicPolicy(name, order[0], place[0], preemptive=True)  # type: ignore[arg-type]


def preemptive_parts() -> tuple[list[str], list[str]]:
    """The orders and the placements that make the preemptive heuristics' names, sorted."""
    return sorted(o for o in heuristic_orders() if may_preempt(o)), sorted(PLACEMENTS)
