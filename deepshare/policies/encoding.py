"""Size-invariant observation and action encoding, shared by training, evaluation and serving.

A decision point is a sequence of choices. At each choice the policy sees up to ``K`` candidate
actions: row 0 is *wait* (launch nothing more now); row 1 is the anchor heuristic's next launch
(``srsf+packed`` by default, :mod:`deepshare.policies.anchor`) when it would launch one, so a
scorer can always imitate the strongest heuristic; the other rows are (queued job, placement)
pairs from the placement generators (consolidated, spread, contention-aware) for a few queued
jobs that fit. Every row carries the same ``F`` features (the job's and the placement's, then
the cluster's global features), so one network scores every row alike and the encoding works for
any cluster size. Padding rows are masked out. Choosing a launch adds it to a
:class:`PartialDecision` and the next choice is encoded on the GPUs that remain; choosing wait
(or having nothing feasible left) ends the decision.

``encode(partial)`` -> ``(observation, candidates)`` and ``decode(action, partial)`` are the only
way a view becomes numbers and a number becomes a launch.

A partial decision and the ones :meth:`PartialDecision.with_launch` derives from it share one
:class:`~deepshare.policies.step_state.StepState`, updated in place as the decision advances, so
a step costs what it touches rather than O(queue + nodes); asking about an older partial again
rebuilds the state (same answers, slower).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Hashable, NamedTuple

import numpy as np

from deepshare.core.contention.base import isolated_of, predict_all
from deepshare.core.types import Decision, Launch, Placement
from deepshare.core.view import ClusterView, JobView, Prediction
from deepshare.policies.anchor import DEFAULT_ANCHOR, check_anchor
from deepshare.policies.extra_features import check_extra_features, extra_columns
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.order import ORDERS
from deepshare.policies.placement import PLACEMENTS, SHAPE_KEYS, PlaceFn
from deepshare.policies.step_state import StepState

COMM_CLASSES = ("low", "medium", "heavy")
JOB_FEATURES = (
    "comm_low", "comm_medium", "comm_heavy", "log2_gpus", "remaining_h", "attained_gpu_h", "waiting_h",
    "nodes_per_gpu", "predicted_ratio", "others_loss", "free_after", "relative_throughput", "is_wait",
    "preemptions",
)
GLOBAL_FEATURES = ("utilisation", "queue_length", "running_jobs", "free_over_demand")
FEATURES = JOB_FEATURES + GLOBAL_FEATURES
WAIT_INDEX = 0
ANCHOR_ROW = 1
"""The row holding the anchor heuristic's next launch, when it has one (:func:`anchored`)."""
MAX_ROWS = 1024
"""Most rows a choice may show, and most jobs it may offer (the shipped encoding: 16 and 5): every
step builds a (rows x features) observation, so a policy file asking 10**12 rows asked for
terabytes at its first decision."""


@dataclass(frozen=True)
class EncodingConfig:
    """How many candidates a choice shows, and where they come from."""

    max_candidates: int = 16
    """K: rows of the observation (row 0 is wait)."""
    jobs_considered: int = 5
    """Queued jobs that fit offered per choice: half the oldest, the rest the least remaining GPU-time."""
    generators: tuple[str, ...] = ("consolidated", "spread", "contention-aware")
    """Placement strategies (registry names) that propose placements for each job."""
    anchor: tuple[str, ...] | None = DEFAULT_ANCHOR
    """(order, placement) of the heuristic whose next launch is always offered (row 1); None:
    not offered. Checkpoints exported before it existed load with the default."""
    max_wait_s: float | None = None
    """Bounded waiting: once an offered job (one that fits now) has been queued this long
    (simulated seconds since it was (re)queued), wait is masked and the choice must launch
    something, so the policy cannot leave free GPUs idle while a fitting job waits longer than
    this. None: no bound (the network may wait indefinitely; RL-hybrid's safety net covers it)."""
    extra_features: tuple[str, ...] = ()
    """Optional columns after :data:`FEATURES` (:data:`~deepshare.policies.extra_features.EXTRA_FEATURES`,
    a subset in that order). Checkpoints exported before it existed load with none."""
    offer_order: str = "srsf"
    """The order (a registry order) whose first fitting jobs fill the offered rows beside the
    oldest: ``srsf`` (remaining time x GPUs as the view says it), or e.g. ``bsrsf`` (the expected
    remaining GPU-service from the estimate and the history). Checkpoints exported before it
    existed load with ``srsf``."""

    @property
    def features(self) -> tuple[str, ...]:
        """The observation's columns: :data:`FEATURES`, then the extras."""
        return FEATURES + self.extra_features

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_features", check_extra_features(self.extra_features))
        if self.max_wait_s is not None and not self.max_wait_s >= 0:
            raise ValueError(f"max_wait_s must be a number of seconds >= 0 or None, got {self.max_wait_s}")
        if self.anchor is not None:
            object.__setattr__(self, "anchor", check_anchor(self.anchor))
        for name, least in (("max_candidates", 2), ("jobs_considered", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_ROWS:
                raise ValueError(f"{name} must be an integer in {least}..{MAX_ROWS}"
                                 f"{' (wait + one launch at least)' if least == 2 else ''}, got {value!r}")
        if self.offer_order not in ORDERS:
            raise ValueError(f"offer_order {self.offer_order!r} is unknown; expected one of {sorted(ORDERS)}")
        unknown = [g for g in self.generators if g not in PLACEMENTS]
        if unknown or not self.generators:
            raise ValueError(f"unknown placement generators {unknown}; expected some of {sorted(PLACEMENTS)}")
        if len(set(self.generators)) != len(self.generators):  # every step asks each: 100,000 copies cost 25x
            raise ValueError(f"placement generators must be distinct, got {len(self.generators)} with repeats")


class PartialDecision:
    """A decision point plus the launches already chosen in it.

    Immutable to its users: :meth:`with_launch` returns a new partial. What a step reads (free
    GPUs, pending launches, the offered jobs) lives in the decision's shared
    :class:`~deepshare.policies.step_state.StepState`; the partial itself keeps only a link to
    its parent, so a launch costs O(1) here however long the decision is. :attr:`launches` and
    :attr:`free` are built when first asked."""

    __slots__ = ("view", "count", "_chain", "_launches", "_free", "_state", "_token", "_parent", "_rows", "_jobs")

    def __init__(self, view: ClusterView, launches: tuple[Launch, ...] = ()) -> None:
        self.view = view
        self.count = len(launches)
        """How many launches this partial holds (``len(launches)`` without building them)."""
        self._chain: tuple = ()
        """The launches as ``(parent's chain, launch)`` pairs ending in ``()``."""
        for launch in launches:
            self._chain = (self._chain, launch)
        self._launches: tuple[Launch, ...] | None = tuple(launches)
        self._free: tuple[int, ...] | None = None
        self._state: StepState | None = None
        self._token = object()
        """This partial's identity for the state (a token, not the partial: a chain of partials
        that referenced each other would keep every step's data alive)."""
        self._parent: tuple[object, JobView, Placement] | None = None
        self._rows: tuple[EncodingConfig, list[Candidate], bool] | None = None
        """The candidates for a config, and whether row 1 is the anchor's launch."""
        self._jobs: tuple | None = () if not launches else None
        """The launched jobs' views when known (derived partials and ones without launches), as a
        chain ``(parent's chain, job)`` ending in ``()``: :meth:`pending` then needs no lookup."""

    def __repr__(self) -> str:
        return f"PartialDecision(view at {self.view.now}, launches={self.launches!r})"

    @property
    def launches(self) -> tuple[Launch, ...]:
        """The launches chosen so far, in order."""
        launches = self._launches
        if launches is None:
            launches = self._launches = tuple(_unchain(self._chain))
        return launches

    @property
    def free(self) -> tuple[int, ...]:
        """Free GPUs per node once this partial's launches are made."""
        free = self._free
        if free is None:
            state = self._state
            if state is not None and state.at is self._token:
                free = state.free.as_tuple()
            else:
                vector = list(self.view.free)
                for launch in self.launches:
                    launch.placement.take(vector)
                free = tuple(vector)
            self._free = free
        return free

    def with_launch(self, job: JobView, placement: Placement) -> "PartialDecision":
        # every slot set here, as __init__ would and then overwritten (without __init__'s own
        # work: a decision of thousands of steps derives one partial per launch)
        child = _new_partial(PartialDecision)
        child.view = self.view
        child.count = self.count + 1
        child._chain = (self._chain, Launch(job.job_id, placement))
        child._launches = None
        child._free = None
        child._state = self._state
        child._token = object()
        child._parent = (self._token, job, placement)
        child._rows = None
        child._jobs = (self._jobs, job) if self._jobs is not None else None
        return child

    def state(self) -> StepState:
        """The decision's :class:`StepState`, brought to this partial (in place when it was at
        the parent; rebuilt when it was elsewhere)."""
        state = self._state
        if state is not None and state.at is not self._token:
            parent = self._parent
            if parent is not None and state.at is parent[0]:
                state.advance(parent[1], parent[2])
                state.at = self._token
            else:
                state = None
        if state is None:
            state = StepState(self.view, self.free, self.launches)
            state.at = self._token
            self._state = state
        return state

    @property
    def decision(self) -> Decision:
        return Decision(launch=self.launches)

    def pending(self) -> list[tuple[JobView, Placement]]:
        """The launches chosen so far as (job view, placement), in launch order."""
        if self._jobs is None:
            by_id = {job.job_id: job for job in self.view.queued}
            jobs = [by_id[launch.job_id] for launch in self.launches]
        else:
            jobs = list(_unchain(self._jobs))
        return [(job, launch.placement) for job, launch in zip(jobs, self.launches)]


_new_partial = object.__new__


def _unchain(chain: tuple) -> list:
    """The items of a ``(parent's chain, item)`` chain, oldest first."""
    items = []
    while chain:
        chain, item = chain
        items.append(item)
    items.reverse()
    return items


class Candidate(NamedTuple):
    """One row of a choice: launch ``job`` at ``placement``, or wait (both None). A tuple: a
    decision of thousands of steps builds tens of thousands of them."""

    job: JobView | None  # None = wait
    placement: Placement | None


_WAIT_CANDIDATE = Candidate(None, None)
"""Row 0 (a tuple: one shared object serves every step)."""
_candidate = tuple.__new__
"""``_candidate(Candidate, (job, placement))`` is ``Candidate(job, placement)`` without the Python
frame of the named tuple's ``__new__`` (a step builds a dozen rows)."""


OLDEST = "fifo"
"""The order whose first jobs fill half the offered rows (submit time; the other half come from
:attr:`EncodingConfig.offer_order`); registry orders, so the decision's state keeps one sorted
list per order for the offered jobs and the anchor alike (the anchor ``srsf+packed`` reads the
same one as an ``srsf`` offer order)."""


def _jobs_offered(state: StepState, config: EncodingConfig) -> list[JobView]:
    """Fitting queued jobs not launched yet: half the oldest, the rest the least remaining GPU-time."""
    chosen = state.head(("order", OLDEST), state.order_key(OLDEST, ORDERS[OLDEST][0]), (config.jobs_considered + 1) // 2)
    ids = {job.job_id for job in chosen}  # queued ids are unique: the same as comparing the views
    shortest = config.offer_order
    key = state.order_key(shortest, ORDERS[shortest][0])
    return chosen + state.head(("order", shortest), key, config.jobs_considered - len(chosen), ids)


def _anchor_pick(state: StepState, anchor: tuple[str, ...]) -> tuple[JobView, Placement] | None:
    """:func:`~deepshare.policies.anchor.anchor_pick` on the decision's state."""
    order, place = anchor
    key = state.order_key(order, ORDERS[order][0])
    return state.first_placed(("order", order), key, PLACEMENTS[place][0])


def anchor_launch(partial: PartialDecision, anchor: tuple[str, ...]) -> tuple[JobView, Placement] | None:
    """The anchor heuristic's next launch on ``partial`` (what
    :func:`~deepshare.policies.anchor.anchor_pick` answers, from the decision's state)."""
    return _anchor_pick(partial.state(), check_anchor(anchor))


def candidates(partial: PartialDecision, config: EncodingConfig) -> list[Candidate]:
    """Wait, then the distinct (job, placement) launches, at most ``max_candidates`` in all
    (remembered on ``partial``: encode and decode of one partial compute them once)."""
    known = partial._rows
    if known is not None and (known[0] is config or known[0] == config):
        return known[1]
    state = partial.state()
    pick = _anchor_pick(state, config.anchor) if config.anchor is not None else None
    rows = _candidates(state, config, pick)
    partial._rows = (config, rows, pick is not None)
    return rows


def anchored(partial: PartialDecision, config: EncodingConfig) -> bool:
    """Whether row 1 of ``partial``'s candidates for ``config`` is the anchor's launch."""
    candidates(partial, config)
    return partial._rows[2]  # type: ignore[index]


def _candidates(state: StepState, config: EncodingConfig, pick: tuple[JobView, Placement] | None) -> list[Candidate]:
    """The rows (see :func:`candidates`), ``pick`` (the anchor's launch, if any) as row 1."""
    # Placements are compared by ``alloc`` (all that Placement's equality and hash look at),
    # which hashes in C rather than through the dataclass's generated __hash__.
    found = [_WAIT_CANDIDATE]
    pending = state.pending
    offered: tuple[str, tuple] | None = None
    if pick is not None:
        found.append(_candidate(Candidate, pick))
        offered = (pick[0].job_id, pick[1].alloc)
    places = _generators(config.generators)
    free, view = state.free, state.view
    limit = config.max_candidates
    known: dict[int, Placement | None] = {}  # this step's answers, by shape number
    if len(found) == limit:  # wait and the anchor's launch fill K = 2
        return found
    shapes = state.shapes.get(places)
    if shapes is None:
        shapes = state.shapes[places] = ({}, {})
    distinct: dict[tuple[int, ...], list[Placement]] = {}  # this step's placements, by shape numbers
    for job in _jobs_offered(state, config):
        anchored = offered is not None and offered[0] == job.job_id
        numbers = shapes[1].get(job.job_id)
        if numbers is None:
            numbers = _shape_numbers(shapes, places, job)
        placements = distinct.get(numbers)
        if placements is None:
            placements = _distinct(job, numbers, places, known, free, view, pending)
            if -1 not in numbers:  # every strategy answers by shape: so will the next job's
                distinct[numbers] = placements
        for placement in placements:
            if not (anchored and offered[1] == placement.alloc):  # type: ignore[index]
                found.append(_candidate(Candidate, (job, placement)))
                if len(found) == limit:
                    return found
    return found


def _distinct(job: JobView, numbers: tuple[int, ...], places: tuple, known: dict[int, Placement | None],
              free: FreeIndex, view: ClusterView, pending: list) -> list[Placement]:
    """The generators' placements of ``job``, the first of each ``alloc`` in generator order;
    answers by shape number (``numbers``, -1: none) come from and go to ``known``. The allocs
    met are kept in a list (one per generator at most): ``in`` on it compares the few tuples,
    mostly by identity (strategies share placement objects), where a set hashed each nested
    tuple."""
    seen: list[tuple] = []
    out = []
    for (_, place, _), number in zip(places, numbers):
        if number >= 0:
            placement = known.get(number, _UNKNOWN)
            if placement is _UNKNOWN:
                placement = known[number] = place(job, free, view, pending)  # type: ignore[arg-type]
        else:
            placement = place(job, free, view, pending)  # type: ignore[arg-type]
        if placement is not None:
            alloc = placement.alloc  # type: ignore[union-attr]
            if alloc not in seen:
                seen.append(alloc)
                out.append(placement)
    return out


def _shape_numbers(shapes: tuple[dict, dict], places: tuple, job: JobView) -> tuple[int, ...]:
    """Per generator of ``places``, a number for ``(strategy, shape key of job)``, the same for
    jobs with equal keys throughout the decision (-1: the strategy has no shape key), remembered
    per job id in ``shapes`` (numbers by shape, numbers by job): a step looks its answers up by
    these numbers, without building and hashing a shape key (a topology request hashes in
    Python) for each job and strategy at every step."""
    numbers = []
    interned = shapes[0]
    for name, _, shape_of in places:
        if shape_of is None:
            numbers.append(-1)
        else:
            shape = (name, shape_of(job))
            number = interned.get(shape)
            if number is None:
                number = interned[shape] = len(interned)
            numbers.append(number)
    found = shapes[1][job.job_id] = tuple(numbers)
    return found


_UNKNOWN = object()
"""A step's placement not asked yet (None is an answer: the job does not fit)."""


@lru_cache(maxsize=64)
def _generators(names: tuple[str, ...]) -> tuple[tuple[str, PlaceFn, Callable[[JobView], Hashable] | None], ...]:
    """(name, strategy, shape key) of each placement generator, looked up once per config."""
    return tuple((name, PLACEMENTS[name][0], SHAPE_KEYS.get(name)) for name in names)


def _log_hours(seconds: float) -> float:
    return math.log1p(max(0.0, seconds) / 3600.0)


_NO_CONTENTION = Prediction(1.0)
"""What a contention model predicts for an isolated placement (``isolated_of``)."""
_IS_WAIT = JOB_FEATURES.index("is_wait")
_WAIT_ROW = tuple(1.0 if i == _IS_WAIT else 0.0 for i in range(len(JOB_FEATURES)))


def _job_parts(job: JobView, now: float) -> tuple[tuple, tuple]:
    """A launch row's features that depend on the job alone (the decision's ``now`` fixed): those
    before the placement's and those after (remembered per decision by the step state)."""
    comm = job.comm_class
    return (
        comm == "low", comm == "medium", comm == "heavy",
        math.log2(job.gpus) / 4.0,
        _log_hours(job.remaining_s),
        _log_hours(job.attained_gpu_s),
        _log_hours(now - job.queued_since),
    ), (0.0, math.log1p(job.preemptions))


def encode(partial: PartialDecision, config: EncodingConfig) -> tuple[dict[str, np.ndarray], list[Candidate]]:
    """The observation ``{"observations": (K, F) float32, "action_mask": (K,) float32}`` and its rows.

    Rows are built as one list of Python floats and converted in one assignment from one buffer
    of doubles (:func:`_doubles`; each value rounds to float32 exactly as an element-wise assignment would, at a third
    of the cost of converting the row tuples); every launch row's isolated throughput is
    computed once and its contention prediction comes from one batched question
    (:func:`~deepshare.core.contention.base.predict_all`)."""
    view = partial.view
    rows = candidates(partial, config)
    state = partial.state()
    total = view.total_gpus
    free_total = state.free.total
    demand = state.demand
    glob = (
        1.0 - free_total / total if total else 0.0,  # no node up yet (an autoscaler's min_nodes 0)
        math.log1p(state.waiting),
        math.log1p(len(view.running) + partial.count),
        min(1.0, free_total / demand) if demand else 1.0,
    )
    launches = rows[1:]
    thp = view.catalog.throughput  # remembered by the catalog per (model, GPUs, nodes)
    isolated = []
    best_iso: dict[str, float] = {}
    for job, placement in launches:
        value = thp(job.model, job.gpus, len(placement.alloc))  # type: ignore[union-attr]
        isolated.append(value)
        best = best_iso.get(job.job_id, 0.0)  # type: ignore[union-attr]
        best_iso[job.job_id] = value if value > best else best  # max(best, value), without the call  # type: ignore[union-attr]
    predictions = _predictions(view, launches, state.pending)
    extras = config.extra_features
    more = extra_columns(state, rows, anchored(partial, config), extras) if extras else None
    flat: list[float] = [*_WAIT_ROW, *glob]  # every row's values in one list, then one buffer of doubles
    if more is not None:
        flat += more[0]
    known = state.job_features
    for i, ((job, placement), iso, prediction) in enumerate(zip(launches, isolated, predictions), 1):
        assert job is not None and placement is not None
        job_id = job.job_id
        parts = known.get(job_id)
        if parts is None:
            parts = known[job_id] = _job_parts(job, view.now)
        gpus = job.gpus
        loss = prediction.others_loss
        flat += parts[0]
        flat += (
            len(placement.alloc) / gpus,
            prediction.ratio,
            loss if loss < 4.0 else 4.0,  # min(4.0, loss), without the call (NaN: 4.0 alike)
            (free_total - gpus) / total,
            iso / best_iso[job_id],
        )
        flat += parts[1]
        flat += glob
        if more is not None:
            flat += more[i]
    size = len(flat)
    k = config.max_candidates
    width = len(FEATURES) + len(extras)  # len(config.features), without building that tuple
    if size != len(rows) * width:
        raise ValueError(f"encoded rows of {size / len(rows)} values, expected {width}")
    mask = _masks(k, len(rows)).copy()
    obs = np.zeros((k, width), dtype=np.float32)  # padding rows stay zero
    # each double rounds to float32 exactly as assigning the row tuples element-wise would
    obs.reshape(-1)[:size] = np.frombuffer(_doubles(size).pack(*flat), dtype=np.float64)
    if _waiting_would_stall(partial, rows) or _waited_too_long(view.now, rows, config.max_wait_s):
        mask[WAIT_INDEX] = 0.0
    return {"observations": obs, "action_mask": mask}, rows


@lru_cache(maxsize=1024)
def _masks(k: int, rows: int) -> np.ndarray:
    """The mask of ``rows`` rows out of ``k`` (a template, read only: :func:`encode` hands out copies)."""
    mask = np.zeros(k, dtype=np.float32)
    mask[:rows] = 1.0
    mask.flags.writeable = False
    return mask


@lru_cache(maxsize=64)
def _doubles(count: int) -> struct.Struct:
    """The packer of ``count`` native doubles: the observation's values, exactly (each Python
    float's own 8 bytes, as an ``array("d")`` holds them), in a third of the time that building
    an ``array("d")`` from the list took (struct converts in one C loop over the arguments; the
    array asked the argument parser for every item)."""
    return struct.Struct(f"{count}d")


def _predictions(view: ClusterView, launches: list[Candidate], pending: list) -> list:
    """Each launch row's contention prediction, asked once per distinct (model, GPUs, placement)
    in one batch (a queued job's prediction depends on nothing else: :data:`SHAPE_KEYS`); an
    isolated placement (``isolated_of``) is answered no contention without asking."""
    index: dict[tuple, int] = {}
    questions = []
    slots = []
    isolated = isolated_of(view.predict)
    alone: dict[int, bool] = {}  # isolated's answer by placement object: rows share a few placements
    for job, placement in launches:
        if isolated is not None:
            lone = alone.get(id(placement))
            if lone is None:
                lone = alone[id(placement)] = isolated(placement)
            if lone:
                slots.append(-1)  # exactly no contention: nothing to ask
                continue
        key = (job.model, job.gpus, placement.alloc)  # type: ignore[union-attr]
        slot = index.get(key)
        if slot is None:
            slot = index[key] = len(questions)
            questions.append((job, placement))
        slots.append(slot)
    answers = predict_all(view.predict, questions, pending) if questions else []
    return [_NO_CONTENTION if slot < 0 else answers[slot] for slot in slots]


def _waiting_would_stall(partial: PartialDecision, rows: list[Candidate]) -> bool:
    """Wait is infeasible when the cluster is wholly idle (nothing runs, every GPU is free),
    nothing is being launched and a launch is possible: the whole cluster would idle while a job
    fits. Whether an arrival is still to come is not asked: a live cluster does not know it, and
    a simulator that told its views made the mask say whether more jobs come (so a simulator's
    views never tell it, :attr:`ClusterView.future_events`). A view with GPUs taken by work it
    does not list (a live cluster's) is not idle: wait stays offered there, as before."""
    if len(rows) <= 1 or partial.count:
        return False
    view = partial.view
    return not view.running and sum(view.free) == view.total_gpus


def _waited_too_long(now: float, rows: list[Candidate], bound: float | None) -> bool:
    """Wait is masked when an offered job has been queued ``bound`` seconds or more."""
    return bound is not None and any(now - c.job.queued_since >= bound for c in rows[1:])  # type: ignore[union-attr]


def decode(action: int, partial: PartialDecision, config: EncodingConfig) -> Candidate:
    """The candidate at row ``action`` (rows are recomputed from ``partial``: same inputs, same rows)."""
    rows = candidates(partial, config)
    if not 0 <= action < len(rows):
        raise ValueError(f"action {action} is not a valid candidate (0..{len(rows) - 1})")
    return rows[action]
