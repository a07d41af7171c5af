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

What the fabric (:mod:`deepshare.core.fabric`) says of a launch (:data:`FABRIC_FEATURES`, after
the columns above when both are asked for). A fabric has ``L >= 1`` levels, lowest first; ``m_l``
is the number of domains of level ``l`` the launch's nodes lie in, ``g`` the job's GPUs. Every
column has the same meaning whatever ``L`` is, so the network's input width never depends on the
cluster. Per launch row (0 on the wait row):

* ``fabric_span_low`` / ``fabric_span_top``: ``log2(m_0) / 4`` and ``log2(m_{L-1}) / 4`` (the
  scale of ``log2_gpus``): 0 inside one domain of the lowest / the top level;
* ``fabric_crossed``: the highest level the launch crosses, ``(h + 1) / L`` for the highest ``h``
  with ``m_h > 1``; 0 inside one lowest-level domain, 1 across top-level domains;
* ``fabric_cross_traffic``: its predicted cross-domain traffic, the mean over the levels of
  ``2 (m_l - 1) / m_l``: the ring all-reduce volume per gradient byte that each spanned domain's
  uplink carries at that level (the link contention model's formula); 0 inside one lowest-level
  domain. The job's own volume is in the base ``comm_*`` columns;
* ``fabric_outside_share``: the share of its GPUs outside its largest lowest-level domain: 0
  inside one, 1/16 for a 15:1 split, 1/2 for an 8:8 split (how far from consolidated it is);
* ``fabric_domain_slack``: ``log2(F / g) / 4`` where ``F`` is the free GPUs, before this launch,
  of the smallest domain holding all of its nodes (the whole cluster when it spans top-level
  domains): 0 when the launch fills that domain exactly;
* ``fabric_bestfit_slack``: the same for the least free domain that could hold ``g`` GPUs at the
  lowest level where one can (topology BestFit's domain; the cluster when none can): comparing
  it with ``fabric_domain_slack`` says whether the launch fragments more than BestFit would;
* ``fabric_request``: +1 when the job asks for a required or preferred level and the launch lies
  inside one domain of it, -1 when it asks and does not (only a preference can be missed), 0
  when it asks for no level.

And of the cluster, the same in every row (wait included): ``fabric_free_l0``,
``fabric_free_l1``, ``fabric_free_l2`` and ``fabric_free_top``, the largest free block (the most
free GPUs of one domain) at levels 0, 1, 2 (a fabric with fewer levels repeats its top level;
levels between the third and the top of a deeper fabric are not shown) and at the top level, as
``log2(1 + GPUs) / 4``.

On a flat cluster (one ``rack`` level, all nodes in one rack) the launch columns are 0 but for
the two slacks, which are ``log2(free GPUs / g) / 4`` of the whole cluster, and every
``fabric_free_*`` is ``log2(1 + free GPUs) / 4``.

What tenancy (:mod:`deepshare.tenants`, ``docs/tenants.md``) says of a launch
(:data:`TENANCY_FEATURES`, after the fabric columns when both are asked for), 0 on the wait row.
A queue's *quota* is its nominal GPUs when the view's ``tenancy`` is a tenants file declaring it;
otherwise (no tenants file: every job in its own ``queue`` or ``default``, weight 1) its fair part
of the cluster, the cluster's GPUs x its weight / the total weight of the *active* queues (those
with a job running or queued in the view, the launch's own included). Its *usage* is the GPUs of
its running jobs and of this decision's launches so far.

* ``tenant_usage``: usage / quota before this launch, capped at 4 and divided by 4 (0: idle, 0.25:
  at its quota, 1: four times it or more); a quota of 0 counts as 1 GPU;
* ``tenant_borrows``: 1 when launching the job takes its queue's usage above its quota (it runs
  on borrowed GPUs), else 0;
* ``tenant_weight_share``: its weight / the total weight of the active queues (1 when it is the
  only one).

Without a tenants file and with every job in one queue, these read: the cluster's used share / 4,
whether the launch would pass the cluster's size (never), and 1.

The fabric columns cost per step what the step touches: a launch's spans are computed once per
placement in a decision, the domains' free GPUs come from the free index's
:meth:`~deepshare.policies.free_index.FreeIndex.domains` (moved in place as launches are
chosen), BestFit's domain once per GPU demand and step, and the largest free blocks are
rescanned only when the domain that held one lost GPUs.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Mapping, NamedTuple, Sequence

from deepshare.core.fabric import Fabric
from deepshare.policies.posterior import remaining_belief
from deepshare.policies.step_state import StepState

EXTRA_FEATURES = (
    "is_anchor", "neighbours_min_left_h", "neighbours_max_left_h", "next_finish_h",
    "belief_left_h", "history_jobs", "history_spread", "has_estimate",
)
"""The anchor, time-left and job columns, in the order a config's ``extra_features`` lists them."""

FABRIC_FEATURES = (
    "fabric_span_low", "fabric_span_top", "fabric_crossed", "fabric_cross_traffic", "fabric_outside_share",
    "fabric_domain_slack", "fabric_bestfit_slack", "fabric_request",
    "fabric_free_l0", "fabric_free_l1", "fabric_free_l2", "fabric_free_top",
)
"""The fabric columns (see the module doc), after :data:`EXTRA_FEATURES` in a config's list.
A tuple of their own, so :data:`EXTRA_FEATURES` (which tests and configs name whole) keeps its meaning."""

TENANCY_FEATURES = ("tenant_usage", "tenant_borrows", "tenant_weight_share")
"""The tenancy columns (see the module doc), after :data:`FABRIC_FEATURES` in a config's list."""

ALL_EXTRA_FEATURES = EXTRA_FEATURES + FABRIC_FEATURES + TENANCY_FEATURES
"""Every optional column, in the order a config's ``extra_features`` must list them (a subset)."""


def check_extra_features(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` as a tuple, if they are distinct known extras in :data:`ALL_EXTRA_FEATURES` order."""
    names = tuple(names)
    unknown = [n for n in names if n not in ALL_EXTRA_FEATURES]
    if unknown:
        raise ValueError(f"unknown extra features {unknown}; expected some of {list(ALL_EXTRA_FEATURES)}")
    if list(names) != [n for n in ALL_EXTRA_FEATURES if n in names]:
        raise ValueError(f"extra features must be distinct and in this order: {list(ALL_EXTRA_FEATURES)}; "
                         f"got {list(names)}")
    return names


def _hours(seconds: float) -> float:
    return math.log1p(max(0.0, seconds) / 3600.0)


def _time_left(remaining_s: float, ratio: float) -> float:
    return remaining_s / max(ratio, _MIN_RATIO)


_MIN_RATIO = 0.01
"""A stalled job's ratio, for its time left (a finite number for the network)."""
_NOT_MET = (0.0, 0.0)
"""The neighbour-time columns of a launch whose nodes hold no running job."""


class _NodeSpans:
    """Per node, the least and the most time left of the jobs on it: the running ones, and the
    launches of this decision as they are chosen (the state's ``pending`` only grows, so each is
    folded in once: a step costs what it adds, not the decision so far)."""

    __slots__ = ("spans", "first", "folded", "jobs", "belief", "hours")

    def __init__(self, state: StepState) -> None:
        self.jobs: dict[str, tuple[float, float, float, float]] = {}
        """The job columns of each job asked about in this decision (they depend on the job alone)."""
        self.belief: Any = None
        """The decision's remaining-time belief (built on first use)."""
        self.spans: dict[int, tuple[float, float]] = {}
        self.hours: dict[int, tuple[float, float]] = {}
        """A node's two columns (:meth:`columns` of the node alone), until its span changes."""
        self.first = math.inf
        for job in state.view.running:
            left = _time_left(job.remaining_s, job.ratio)
            self.first = min(self.first, left)
            if job.placement is not None:
                self._add(job.placement.nodes, left)
        self.folded = 0

    def _add(self, nodes: Sequence[int], left: float) -> None:
        spans, hours = self.spans, self.hours
        for node in nodes:
            low, high = spans.get(node, (left, left))
            spans[node] = (min(low, left), max(high, left))
            hours.pop(node, None)

    def columns(self, nodes: Sequence[int]) -> tuple[float, float]:
        """``neighbours_min_left_h`` and ``neighbours_max_left_h`` of a launch on ``nodes``
        (0, 0 when they hold no job); a single node's are remembered until its span changes (a
        step asks for the same few nodes as the step before)."""
        if len(nodes) == 1:
            found = self.hours.get(nodes[0])
            if found is None:
                found = self.hours[nodes[0]] = self._columns(nodes)
            return found
        return self._columns(nodes)

    def _columns(self, nodes: Sequence[int]) -> tuple[float, float]:
        by_node = self.spans
        low, high = math.inf, -math.inf
        for node in nodes:
            span = by_node.get(node)
            if span is not None:
                if span[0] < low:
                    low = span[0]
                if span[1] > high:
                    high = span[1]
        return (_hours(low), _hours(high)) if low != math.inf else _NOT_MET

    def catch_up(self, pending: Sequence) -> None:
        for job, placement in pending[self.folded:]:
            self._add(placement.nodes, job.remaining_s)
        self.folded = len(pending)


class _Memo:
    """A decision's data for the optional columns (the step state's ``extras``), each part built
    when a column first needs it."""

    __slots__ = ("spans", "fabric", "tenancy")

    def __init__(self) -> None:
        self.spans: _NodeSpans | None = None
        self.fabric: _FabricMemo | None = None
        self.tenancy: _TenancyMemo | None = None


def extra_columns(
    state: StepState, rows: Sequence[Any], anchored: bool, names: tuple[str, ...]
) -> list[tuple[float, ...]]:
    """The ``names`` columns of every row (the encoding's candidates: row 0 is wait, with no
    neighbours; each row's ``placement`` is read). ``anchored``: row 1 is the anchor's launch."""
    memo = state.extras
    if not isinstance(memo, _Memo):
        memo = state.extras = _Memo()
    timed, fabric, tenancy = _split(names)
    if not tenancy:
        return _base_columns(memo, state, rows, anchored, timed, fabric)
    ten = _tenancy_columns(memo, state, rows, tenancy)
    if not timed and not fabric:
        return ten
    return [a + b for a, b in zip(_base_columns(memo, state, rows, anchored, timed, fabric), ten)]


def _base_columns(memo: _Memo, state: StepState, rows: Sequence[Any], anchored: bool, timed: tuple[str, ...],
                  fabric: tuple[str, ...]) -> list[tuple[float, ...]]:
    """The time and fabric columns (as before the tenancy columns existed)."""
    if not fabric:
        return _time_columns(memo, state, rows, anchored, timed)
    fab = _fabric_columns(memo, state, rows, fabric)
    if not timed:
        return fab
    return [a + b for a, b in zip(_time_columns(memo, state, rows, anchored, timed), fab)]


@lru_cache(maxsize=64)
def _split(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``names`` (checked, in order) as its :data:`EXTRA_FEATURES`, :data:`FABRIC_FEATURES` and
    :data:`TENANCY_FEATURES`."""
    return (tuple(n for n in names if n in EXTRA_FEATURES), tuple(n for n in names if n in FABRIC_FEATURES),
            tuple(n for n in names if n in TENANCY_FEATURES))


def _time_columns(
    memo: _Memo, state: StepState, rows: Sequence[Any], anchored: bool, names: tuple[str, ...]
) -> list[tuple[float, ...]]:
    """The :data:`EXTRA_FEATURES` columns ``names`` of every row."""
    spans = memo.spans
    if spans is None:
        spans = memo.spans = _NodeSpans(state)
    spans.catch_up(state.pending)
    next_finish = 0.0 if spans.first == math.inf else _hours(spans.first)
    columns, about_jobs = _columns(names)
    known = spans.jobs
    hours = spans.hours
    out = []
    for i, row in enumerate(rows):
        job, placement = row.job, row.placement
        if placement is None:
            low, high = _NOT_MET
        else:
            nodes = placement.nodes
            # a single node's columns straight from their cache (what spans.columns answers)
            found = hours.get(nodes[0]) if len(nodes) == 1 else None
            low, high = found if found is not None else spans.columns(nodes)
        values = (1.0 if anchored and i == 1 else 0.0, low, high, next_finish)
        if about_jobs and job is not None:
            values += known.get(job.job_id) or _job_columns(spans, state, job)
        else:
            values += _NO_JOB
        out.append(values if columns is None else tuple(values[c] for c in columns))
    return out


_JOB_COLUMNS = ("belief_left_h", "history_jobs", "history_spread", "has_estimate")
_NO_JOB = (0.0,) * len(_JOB_COLUMNS)


def _job_columns(spans: _NodeSpans, state: StepState, job: Any) -> tuple[float, float, float, float]:
    """The job's columns (see the module doc), remembered for the decision; the history's part is
    shared by the jobs of one shape (GPUs and features) until the history grows."""
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


@lru_cache(maxsize=64)
def _columns(names: tuple[str, ...]) -> tuple[tuple[int, ...] | None, bool]:
    """Positions of ``names`` in :data:`EXTRA_FEATURES` (None when they are all of them), and
    whether any is a job column (looked up once per config, not at every step)."""
    positions = None if names == EXTRA_FEATURES else tuple(EXTRA_FEATURES.index(n) for n in names)
    return positions, any(name in _JOB_COLUMNS for name in names)


# -- fabric columns ----------------------------------------------------------------------------

FREE_SLOTS = 3
"""Levels shown one by one in ``fabric_free_l*`` (the top level has a column of its own)."""
_NO_LAUNCH = (0.0,) * 8
"""The launch columns of the wait row."""


class _Shape(NamedTuple):
    """What a placement's nodes say about the fabric (the same at every step of a decision)."""

    span_low: float
    span_top: float
    crossed: float
    cross_traffic: float
    outside_share: float
    enclosing: int
    """The smallest domain holding all its nodes; -1 when it spans top-level domains."""
    spans: tuple[int, ...]
    """Domains spanned per level, lowest first."""


class _FabricMemo:
    """A decision's fabric data: each placement's :class:`_Shape`, each request's level index,
    and per step (the count of launches chosen) BestFit's free GPUs per demand and the largest
    free block per level (with the domain that holds it)."""

    __slots__ = ("fabric", "domains", "shapes", "levels", "step", "bestfit", "blocks", "free_columns")

    def __init__(self, fabric: Fabric, state: StepState) -> None:
        self.fabric = fabric
        self.domains = state.free.domains(fabric)
        self.shapes: dict[tuple, _Shape] = {}
        self.levels: dict[str, int] = {}
        self.step = -1
        self.bestfit: dict[int, int] = {}
        self.blocks: list[tuple[int, int]] = [_largest(self.domains.sums, d) for d in fabric.by_level]
        """Per level, (free GPUs, domain) of a freest domain."""
        self.free_columns: tuple[float, ...] = ()

    def at_step(self, step: int) -> None:
        """Bring the per-step answers to ``step`` launches chosen. Within a decision free GPUs
        only fall, so a level's largest block changes only when the domain holding it lost GPUs."""
        if step == self.step:
            return
        self.step = step
        self.bestfit = {}
        sums, blocks = self.domains.sums, self.blocks
        for level, (value, d) in enumerate(blocks):
            if sums[d] != value:
                blocks[level] = _largest(sums, self.fabric.by_level[level])
        top = len(blocks) - 1
        shown = [blocks[min(i, top)][0] for i in range(FREE_SLOTS)] + [blocks[top][0]]
        self.free_columns = tuple(math.log2(1 + b) / 4.0 for b in shown)

    def shape(self, alloc: tuple) -> _Shape:
        found = self.shapes.get(alloc)
        if found is None:
            found = self.shapes[alloc] = _shape_of(self.fabric, alloc)
        return found

    def best_free(self, need: int, free_total: int) -> int:
        """Free GPUs of the least free domain holding ``need``, lowest level first (``free_total``,
        the cluster's, when no domain does)."""
        found = self.bestfit.get(need)
        if found is None:
            found = free_total
            for level in range(len(self.fabric.levels)):
                for d in self.domains.fitting(level, need):
                    found = self.domains.sums[d]
                    break
                else:
                    continue
                break
            self.bestfit[need] = found
        return found

    def level(self, name: str) -> int:
        found = self.levels.get(name)
        if found is None:
            found = self.levels[name] = self.fabric.level_index(name)
        return found


def _largest(sums: Sequence[int], domains: Sequence[int]) -> tuple[int, int]:
    """(free GPUs, domain) of the first of ``domains`` with the most free GPUs."""
    best, at = -1, -1
    for d in domains:
        if sums[d] > best:
            best, at = sums[d], d
    return best, at


def _shape_of(fabric: Fabric, alloc: tuple) -> _Shape:
    """The :class:`_Shape` of the placement ``alloc`` (``(node, GPUs)`` pairs)."""
    node_domains = fabric.node_domains
    levels = len(fabric.levels)
    low: dict[int, int] = {}
    sets: list[set[int]] = [set() for _ in range(levels)]
    total = 0
    for node, gpus in alloc:
        row = node_domains[node]
        low[row[0]] = low.get(row[0], 0) + gpus
        for level in range(levels):
            sets[level].add(row[level])
        total += gpus
    spans = tuple(len(s) for s in sets)
    # the domains form a tree: the spans only shrink going up, so the levels crossed are the lowest ones
    crossed = sum(1 for m in spans if m > 1)
    enclosing = next(iter(sets[crossed])) if crossed < levels else -1
    return _Shape(
        math.log2(spans[0]) / 4.0,
        math.log2(spans[-1]) / 4.0,
        crossed / levels,
        sum(2.0 * (m - 1) / m for m in spans) / levels,
        1.0 - max(low.values()) / total,
        enclosing,
        spans,
    )


def _fabric_columns(
    memo: _Memo, state: StepState, rows: Sequence[Any], names: tuple[str, ...]
) -> list[tuple[float, ...]]:
    """The :data:`FABRIC_FEATURES` columns ``names`` of every row (see the module doc)."""
    fabric = state.view.topology.fabric
    fab = memo.fabric
    if fab is None or fab.fabric is not fabric:
        fab = memo.fabric = _FabricMemo(fabric, state)
    fab.domains = state.free.domains(fabric)  # the free index's own, kept up to date as launches are chosen
    fab.at_step(len(state.pending))
    sums = fab.domains.sums
    free_total = state.free.total
    glob = fab.free_columns
    columns = _fabric_positions(names)
    out = []
    for row in rows:
        placement = row.placement
        if placement is None:
            values = _NO_LAUNCH + glob
        else:
            job = row.job
            gpus = job.gpus
            shape = fab.shape(placement.alloc)
            free = sums[shape.enclosing] if shape.enclosing >= 0 else free_total
            request = job.topology
            level = request.required_level or request.preferred_level
            if level is None:
                met = 0.0
            else:
                met = 1.0 if shape.spans[fab.level(level)] == 1 else -1.0
            values = (
                shape.span_low, shape.span_top, shape.crossed, shape.cross_traffic, shape.outside_share,
                math.log2(free / gpus) / 4.0,
                math.log2(fab.best_free(gpus, free_total) / gpus) / 4.0,
                met,
            ) + glob
        out.append(values if columns is None else tuple(values[c] for c in columns))
    return out


@lru_cache(maxsize=64)
def _fabric_positions(names: tuple[str, ...]) -> tuple[int, ...] | None:
    """Positions of ``names`` in :data:`FABRIC_FEATURES`; None when they are all of them."""
    return None if names == FABRIC_FEATURES else tuple(FABRIC_FEATURES.index(n) for n in names)


# -- tenancy columns ---------------------------------------------------------------------------

_TENANT_CAP = 4.0
"""``tenant_usage`` is capped at this many quotas."""


class _TenancyMemo:
    """A decision's usage per queue (running jobs, then its launches folded in as chosen) and the
    active queues' weights."""

    __slots__ = ("usage", "active", "total_weight", "folded", "quotas")

    def __init__(self, state: StepState) -> None:
        view = state.view
        tenancy = view.tenancy
        self.usage: dict[str, int] = {}
        for job in view.running:
            name = tenancy.queue_of(job)
            self.usage[name] = self.usage.get(name, 0) + job.gpus
        self.active = {*self.usage, *(tenancy.queue_of(job) for job in view.queued)}
        self.total_weight = math.fsum(tenancy.weight_of(q) for q in self.active)  # whatever the set's order
        self.folded = 0
        queues = getattr(tenancy, "queues", None)
        self.quotas: dict[str, float] = {}
        if isinstance(queues, Mapping):
            for name, queue in queues.items():
                nominal = getattr(queue, "nominal_gpus", None)
                if nominal is not None:
                    self.quotas[name] = float(nominal)

    def catch_up(self, state: StepState) -> None:
        tenancy = state.view.tenancy
        for job, _ in state.pending[self.folded:]:
            name = tenancy.queue_of(job)
            self.usage[name] = self.usage.get(name, 0) + job.gpus
        self.folded = len(state.pending)

    def columns(self, state: StepState, job: Any) -> tuple[float, float, float]:
        view = state.view
        tenancy = view.tenancy
        name = tenancy.queue_of(job)
        weight = tenancy.weight_of(name)
        total = self.total_weight + (0.0 if name in self.active else weight)
        quota = self.quotas.get(name)
        if quota is None:
            quota = view.total_gpus * weight / total
        used = self.usage.get(name, 0)
        borrows = 1.0 if used + job.gpus > quota else 0.0  # the quota itself: a launch in a queue of nominal 0 borrows
        return (min(used / max(quota, 1.0), _TENANT_CAP) / _TENANT_CAP, borrows, weight / total)


def _tenancy_columns(
    memo: _Memo, state: StepState, rows: Sequence[Any], names: tuple[str, ...]
) -> list[tuple[float, ...]]:
    """The :data:`TENANCY_FEATURES` columns ``names`` of every row (see the module doc)."""
    ten = memo.tenancy
    if ten is None:
        ten = memo.tenancy = _TenancyMemo(state)
    ten.catch_up(state)
    positions = None if names == TENANCY_FEATURES else tuple(TENANCY_FEATURES.index(n) for n in names)
    none = (0.0,) * len(TENANCY_FEATURES)
    out = []
    for row in rows:
        values = none if row.placement is None or row.job is None else ten.columns(state, row.job)
        out.append(values if positions is None else tuple(values[c] for c in positions))
    return out
