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

What a scheduler without oracles knows of a launch's job (0 on the wait row), for the
``estimated`` and ``unknown`` information models (:mod:`deepshare.core.information`):

* ``belief_left_h``: the job's expected remaining run time under the belief its estimate, the
  history's forecast and the time it has run give together (log1p of hours;
  :func:`deepshare.policies.posterior.expected_remaining_s`; the truth under ``exact``);
* ``history_jobs``: how many finished jobs back the history's forecast for the job (log1p; 0
  when none does);
* ``history_spread``: their log run times' spread (0 with fewer than two);
* ``has_estimate``: 1 when the job came with an estimate, else 0.

Time left is a job's remaining work at its reference throughput over its current ratio (at
least 0.01; a launch being decided: its remaining work). Checkpoints without extras encode exactly as before.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from deepshare.policies.step_state import StepState

EXTRA_FEATURES = (
    "is_anchor", "neighbours_min_left_h", "neighbours_max_left_h", "next_finish_h",
    "belief_left_h", "history_jobs", "history_spread", "has_estimate",
)
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


class _NodeSpans:
    """Per node, the least and the most time left of the jobs on it: the running ones, and the
    launches of this decision as they are chosen (the state's ``pending`` only grows, so each is
    folded in once: a step costs what it adds, not the decision so far)."""

    __slots__ = ("spans", "first", "folded", "jobs", "belief")

    def __init__(self, state: StepState) -> None:
        self.jobs: dict[str, tuple[float, float, float, float]] = {}
        """The job columns of each job asked about in this decision (they depend on the job alone)."""
        self.belief: Any = None
        """The decision's remaining-time belief (built on first use)."""
        self.spans: dict[int, tuple[float, float]] = {}
        self.first = math.inf
        for job in state.view.running:
            left = _time_left(job.remaining_s, job.ratio)
            self.first = min(self.first, left)
            if job.placement is not None:
                self._add(job.placement.nodes, left)
        self.folded = 0

    def _add(self, nodes: Sequence[int], left: float) -> None:
        spans = self.spans
        for node in nodes:
            low, high = spans.get(node, (left, left))
            spans[node] = (min(low, left), max(high, left))

    def catch_up(self, pending: Sequence) -> None:
        for job, placement in pending[self.folded:]:
            self._add(placement.nodes, job.remaining_s)
        self.folded = len(pending)


def extra_columns(
    state: StepState, rows: Sequence[Any], anchored: bool, names: tuple[str, ...]
) -> list[tuple[float, ...]]:
    """The ``names`` columns of every row (the encoding's candidates: row 0 is wait, with no
    neighbours; each row's ``placement`` is read). ``anchored``: row 1 is the anchor's launch."""
    spans = state.extras
    if not isinstance(spans, _NodeSpans):
        spans = state.extras = _NodeSpans(state)
    spans.catch_up(state.pending)
    by_node = spans.spans
    next_finish = 0.0 if spans.first == math.inf else _hours(spans.first)
    columns = _columns(names)
    about_jobs = any(name in _JOB_COLUMNS for name in names)
    known = spans.jobs
    out = []
    for i, row in enumerate(rows):
        low, high = math.inf, -math.inf
        if row.placement is not None:
            for node in row.placement.nodes:
                span = by_node.get(node)
                if span is not None:
                    if span[0] < low:
                        low = span[0]
                    if span[1] > high:
                        high = span[1]
        met = low != math.inf
        values = (
            1.0 if anchored and i == 1 else 0.0,
            _hours(low) if met else 0.0,
            _hours(high) if met else 0.0,
            next_finish,
        )
        if about_jobs and row.job is not None:
            values += known.get(row.job.job_id) or _job_columns(spans, state, row.job)
        else:
            values += _NO_JOB
        out.append(values if columns is None else tuple(values[c] for c in columns))
    return out


_JOB_COLUMNS = ("belief_left_h", "history_jobs", "history_spread", "has_estimate")
_NO_JOB = (0.0,) * len(_JOB_COLUMNS)


def _job_columns(spans: _NodeSpans, state: StepState, job: Any) -> tuple[float, float, float, float]:
    """The job's columns (see the module doc), remembered for the decision; the history's part is
    shared by the jobs of one shape (GPUs and features) until the history grows."""
    from deepshare.policies.posterior import remaining_belief

    view = state.view
    if spans.belief is None:
        spans.belief = remaining_belief(view)
    memo = view.history.memo()
    shape = ("history-columns", job.gpus, job.user, job.group, job.vc)
    backing = memo.get(shape)
    if backing is None:
        forecast = view.history.forecast(job.gpus, job.user, job.group, job.vc)
        backing = memo[shape] = (math.log1p(forecast.jobs), forecast.spread) if forecast is not None else (0.0, 0.0)
    found = spans.jobs[job.job_id] = (_hours(spans.belief(job)), *backing, 0.0 if job.estimate_s is None else 1.0)
    return found


def _columns(names: tuple[str, ...]) -> tuple[int, ...] | None:
    """Positions of ``names`` in :data:`EXTRA_FEATURES`; None when they are all of them."""
    return None if names == EXTRA_FEATURES else tuple(EXTRA_FEATURES.index(n) for n in names)
