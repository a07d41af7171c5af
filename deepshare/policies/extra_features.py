"""Optional encoding columns: what the base features do not say about a candidate.

The base features (:data:`deepshare.policies.encoding.FEATURES`) describe a launch's job, its
predicted slowdown and the cluster now, but not *how long* a slowdown would last nor whether a row
is the anchor heuristic's pick. A network trained with :attr:`EncodingConfig.extra_features`
sees, after the base columns of every row:

* ``is_anchor``: 1 on the anchor heuristic's launch (row 1 when it launches), else 0. A scorer
  can then imitate the anchor exactly and learn only where to deviate from it.
* ``neighbours_min_left_h`` / ``neighbours_max_left_h``: of the jobs already running or being
  launched on the nodes the launch touches, the least and the most time left (log1p of hours;
  0 when those nodes hold none): how soon the contention the launch meets starts to ease, and
  when it is gone.
* ``next_finish_h``: the time left of the running job that ends first (log1p of hours; 0 when
  none runs), the same in every row: what waiting for freed GPUs would cost at the least.

Time left is a job's remaining work at its reference throughput over its current ratio (at
least 0.01; a launch being decided: its remaining work). Checkpoints without extras encode exactly as before.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # encoding imports this module
    from deepshare.policies.encoding import Candidate
    from deepshare.policies.step_state import StepState

EXTRA_FEATURES = ("is_anchor", "neighbours_min_left_h", "neighbours_max_left_h", "next_finish_h")
"""The optional columns, in the order a config's ``extra_features`` must list them (a subset)."""


def check_extra_features(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` as a tuple, if they are distinct known extras in :data:`EXTRA_FEATURES` order."""
    names = tuple(names)
    unknown = [n for n in names if n not in EXTRA_FEATURES]
    if unknown:
        raise ValueError(f"unknown extra features {unknown}; expected some of {list(EXTRA_FEATURES)}")
    if list(names) != [n for n in EXTRA_FEATURES if n in names]:
        raise ValueError(f"extra features must be distinct and in this order: {list(EXTRA_FEATURES)}; got {list(names)}")
    return names


def _hours(seconds: float) -> float:
    return math.log1p(max(0.0, seconds) / 3600.0)


def _time_left(remaining_s: float, ratio: float) -> float:
    return remaining_s / max(ratio, _MIN_RATIO)


_MIN_RATIO = 0.01
"""A stalled job's ratio, for its time left (a finite number for the network)."""


class _RunningLeft:
    """Per node, the time left of the jobs running there; and the least over all (one decision)."""

    __slots__ = ("by_node", "first")

    def __init__(self, state: StepState) -> None:
        by_node: dict[int, list[float]] = {}
        first = math.inf
        for job in state.view.running:
            left = _time_left(job.remaining_s, job.ratio)
            first = min(first, left)
            if job.placement is not None:
                for node in job.placement.nodes:
                    by_node.setdefault(node, []).append(left)
        self.by_node = by_node
        self.first = first


def extra_columns(
    state: StepState, rows: list[Candidate], anchored: bool, names: tuple[str, ...]
) -> list[tuple[float, ...]]:
    """The ``names`` columns of every row (row 0 is wait: no neighbours, not the anchor's).
    ``anchored``: row 1 is the anchor heuristic's launch."""
    running = state.extras
    if running is None:
        running = state.extras = _RunningLeft(state)
    launching: dict[int, list[float]] = {}
    for job, placement in state.pending:
        for node in placement.nodes:
            launching.setdefault(node, []).append(job.remaining_s)
    next_finish = 0.0 if running.first == math.inf else _hours(running.first)
    out = []
    for i, row in enumerate(rows):
        lefts: list[float] = []
        if row.placement is not None:
            for node in row.placement.nodes:
                lefts += running.by_node.get(node, ())
                lefts += launching.get(node, ())
        values = {
            "is_anchor": 1.0 if anchored and i == 1 else 0.0,
            "neighbours_min_left_h": _hours(min(lefts)) if lefts else 0.0,
            "neighbours_max_left_h": _hours(max(lefts)) if lefts else 0.0,
            "next_finish_h": next_finish,
        }
        out.append(tuple(values[n] for n in names))
    return out
