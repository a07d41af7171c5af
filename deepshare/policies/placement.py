"""Placement strategies: where on the free GPUs a job's GPUs go.

Each strategy is ``place(job, free, view, pending) -> Placement | None`` where ``free`` is the
per-node free-GPU list (after launches chosen earlier in the same decision) and ``pending``
those launches. ``None`` means the job does not fit.

``free`` may be a :class:`~deepshare.policies.free_index.FreeIndex` (what the built-in policies
pass): the strategies then answer from its index in time proportional to the nodes the answer
touches, not to the cluster. On a plain list they run the straightforward scans (the reference
the indexed answers are tested against: both give the same placement).

* ``consolidated`` — fewest nodes: the best-fitting single node when the job fits on one,
  else the nodes with the most free GPUs first.
* ``spread`` — the original artifact's baseline: one GPU at a time, round-robin over the
  nodes with free GPUs (most free first), so a job spans as many nodes as it can.
* ``contention-aware`` — consolidated's fit, contention-aware choice of nodes: among the
  placements that take the same GPUs from nodes with the same free counts as the consolidated
  one (:func:`fit_equivalents`: same number of nodes, same free GPUs left behind), the one with
  the least predicted loss (the job's own and its neighbours'); it must beat the consolidated
  one by :data:`PACKING_MARGIN`. Earlier versions also weighed spread and even-split
  placements: under ``--contention link`` that was up to 2.5x worse than ``consolidated``,
  because the one-decision prediction sees an idle NIC now but not the fragmentation and the
  network contention with the jobs that arrive later.
* ``packed`` — Tiresias-style consolidation that *waits*: the consolidated placement only when
  it spans the fewest nodes the job could ever use (one node when it fits on one; placed in a
  domain of a level it requires or prefers, in such a domain: :func:`least_nodes`), else none,
  so the job waits for GPUs to free up instead of fragmenting. Relaxation: once the job has
  waited :data:`PACKED_RELAX_S` since it was (re)queued it takes the consolidated fallback.
  The relaxation is checked at the decision points that arrivals and completions (and
  ``--round-s`` ticks) already create, not at the exact expiry: a job waiting for its shape
  always has something running that will complete (an idle cluster offers every shape), so
  the policy can never stall, and no timer is needed in the simulator.
* ``uncontended`` — ``packed``, and also waits while the contention model predicts the job would
  run below :data:`UNCONTENDED_MIN_RATIO` of its isolated speed there (the running jobs and the
  launches already chosen in this decision counted), with no bound on that wait; a job is
  launched anyway when nothing runs and nothing is being launched, so the cluster never idles
  with work queued and the policy cannot stall. It is what the learned policies were found to
  do on long queues (wait rather than launch into contention), written as a rule.
* ``topo-bestfit`` — the least free fabric domain that holds the job, lowest level first, the
  fewest nodes inside it (:mod:`deepshare.policies.fabric_place`).
* ``topo-balanced`` — ``topo-bestfit`` when one lowest-level domain holds the job, else an even
  split over the fewest child domains of the best-fitting parent.
* ``topo-aware`` — the predicted cheapest (the job's slowdown and its neighbours' loss) of the
  feasible shapes in the few least free domains of each level; ``topo-bestfit`` without
  contention (:mod:`deepshare.policies.topo_aware`).

Every strategy in :data:`PLACEMENTS` honours a job's topology request (a required or preferred
level, slices): :func:`~deepshare.policies.fabric_place.with_topology` chooses the job's domain
and the strategy places it there.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import islice
from operator import attrgetter
from typing import Callable, Hashable, Sequence

from deepshare.core.contention.base import isolated_of, predict_all
from deepshare.core.fabric import NO_TOPOLOGY
from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.fabric_place import make_topo_balanced, make_topo_bestfit, with_topology
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.masked_free import MaskedFree
from deepshare.policies.place_types import Pending, PlaceFn, at_speed
from deepshare.policies.topo_aware import make_topo_aware


def consolidated(job: JobView, free: list[int], view: ClusterView | None = None, pending: Pending = ()) -> Placement | None:
    return consolidate(job.gpus, free)


def consolidate(need: int, free: Sequence[int]) -> Placement | None:
    """:func:`consolidated`'s placement of ``need`` GPUs on ``free``."""
    if isinstance(free, FreeIndex):
        return _consolidated_indexed(need, free)
    return _consolidated(need, tuple(free))


def _consolidated_indexed(need: int, free: FreeIndex) -> Placement | None:
    return free.remembered(("consolidated", need), _consolidate_on_index, need, free)


@lru_cache(maxsize=65536)
def single(node: int, gpus: int) -> Placement:
    """``gpus`` GPUs on node ``node`` (one shared object per pair: placements are immutable, and
    a decision of thousands of launches builds the same few thousand)."""
    return Placement(((node, gpus),))


def _consolidate_on_index(need: int, free: FreeIndex) -> Placement | None:
    best = free.best_single(need)
    if best is not None:
        return single(best, need)
    if free.total < need:
        return None
    counts: dict[int, int] = {}
    for node in free.ranked():
        take = min(free[node], need)
        counts[node] = take
        need -= take
        if need == 0:
            break
    return Placement.of(counts)


@lru_cache(maxsize=1024)
def _consolidated(need: int, free: tuple[int, ...]) -> Placement | None:
    # Cached on (GPUs, free vector): one decision asks the same question many times (every
    # generator, the contention-aware candidates, the packing check), and placements are immutable.
    best = -1
    for node, f in enumerate(free):
        if f >= need and (best < 0 or f < free[best]):
            best = node
    if best >= 0:
        return Placement(((best, need),))
    if sum(free) < need:
        return None
    counts: dict[int, int] = {}
    for node in by_most_free(free):
        take = min(free[node], need)
        if take:
            counts[node] = take
            need -= take
        if need == 0:
            break
    return Placement.of(counts)


def spread(job: JobView, free: list[int], view: ClusterView | None = None, pending: Pending = ()) -> Placement | None:
    if isinstance(free, FreeIndex):
        need = job.gpus
        return free.remembered(("spread", need), _spread_on_index, need, free)
    return _spread(job.gpus, tuple(free))


def _spread_on_index(need: int, free: FreeIndex) -> Placement | None:
    if free.total < need:
        return None
    if need <= free.nonzero():  # one round of the round-robin: one GPU on each of the first nodes
        nodes = sorted(islice(free.ranked(), need))
        return single(nodes[0], 1) if need == 1 else Placement(tuple((node, 1) for node in nodes))
    return _spread(need, free.as_tuple())


@lru_cache(maxsize=1024)
def _spread(need: int, free: tuple[int, ...]) -> Placement | None:
    if sum(free) < need:
        return None
    order = by_most_free(free)
    left = {n: free[n] for n in order}
    counts: dict[int, int] = {}
    while need:
        for node in order:
            if need and left[node]:
                counts[node] = counts.get(node, 0) + 1
                left[node] -= 1
                need -= 1
    return Placement.of(counts)


def by_most_free(free: Sequence[int]) -> list[int]:
    """Nodes with free GPUs, most free first, ties by index (a fresh list: callers may keep it)."""
    return list(_ranked(tuple(free)))


@lru_cache(maxsize=256)
def _ranked(free: tuple[int, ...]) -> tuple[int, ...]:
    # One ranking per distinct free vector: a decision asks for the same one many times.
    ordered = sorted(range(len(free)), key=free.__getitem__, reverse=True)  # stable: ties keep index order
    return tuple(n for n in ordered if free[n] > 0)


def even_split(job: JobView, free: list[int], k: int, ranked: list[int] | None = None) -> Placement | None:
    """The job split as evenly as possible over the ``k`` nodes with the most free GPUs
    (``ranked``: :func:`by_most_free` of ``free``, when the caller has it already)."""
    if ranked is None and isinstance(free, FreeIndex):
        nodes = []
        for node in free.ranked():
            if len(nodes) == k:
                break
            nodes.append(node)
    else:
        nodes = (by_most_free(free) if ranked is None else ranked)[:k]
    if len(nodes) < k:
        return None
    base, extra = divmod(job.gpus, k)
    counts = {}
    for i, node in enumerate(nodes):
        share = base + (1 if i < extra else 0)
        if share > free[node] or share == 0:
            return None
        counts[node] = share
    return Placement.of(counts)


def candidate_placements(job: JobView, free: list[int], max_single: int = 4) -> list[Placement]:
    """Distinct feasible placements worth comparing: a few single nodes, even splits, both packers."""
    found: list[Placement] = []
    singles = sorted((n for n in range(len(free)) if free[n] >= job.gpus), key=lambda n: (free[n], n))
    found.extend(Placement(((n, job.gpus),)) for n in singles[:max_single])
    ranked = by_most_free(free)
    k = 2
    while k <= min(job.gpus, len(ranked)):
        p = even_split(job, free, k, ranked)
        if p is not None:
            found.append(p)
        k *= 2
    for packer in (consolidated, spread):
        p = packer(job, free)
        if p is not None:
            found.append(p)
    return list(dict.fromkeys(found))


PACKING_MARGIN = 0.05
"""How much less predicted loss (in job-throughputs) another placement must promise than the
consolidated one before it is chosen: the prediction is for this instant only, and runs of
the simulator move by 10-20% in average JCT on small changes of which equal node is taken."""


def fit_equivalents(free: Sequence[int], base: Placement, limit: int = 8) -> list[Placement]:
    """``base`` and the placements that take the same GPUs from other nodes with the same free
    count (one node swapped at a time, at most ``limit`` in all): every one leaves the same
    multiset of free GPUs behind, so none fragments the cluster more than ``base``."""
    if isinstance(free, FreeIndex):
        return list(free.remembered(("fit_equivalents", base.alloc, limit), lambda: tuple(_fit_equivalents(free, base, limit))))
    return _fit_equivalents(free, base, limit)


def _fit_equivalents(free: Sequence[int], base: Placement, limit: int) -> list[Placement]:
    found = [base]
    indexed = isinstance(free, FreeIndex)
    if len(base.alloc) == 1:  # the usual case (a job that fits one node): the other nodes alike
        node, take = base.alloc[0]
        count = free[node]
        for other in free.with_free(count) if indexed else range(len(free)):  # type: ignore[attr-defined]
            if other != node and free[other] == count:
                found.append(single(other, take))
                if len(found) >= limit:
                    break
        return found
    used = set(base.nodes)
    for node, take in base.alloc:
        for other in free.with_free(free[node]) if indexed else range(len(free)):  # type: ignore[attr-defined]
            if other in used or free[other] != free[node]:
                continue
            counts = dict(base.alloc)
            del counts[node]
            counts[other] = take
            found.append(Placement.of(counts))
            if len(found) >= limit:
                return found
    return found


def contention_aware(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
    isolated = isolated_of(view.predict)
    fit = _fit_of(job.gpus, free, isolated)
    if fit is None:
        return None
    packed, candidates, settled = fit
    if settled:
        return packed
    predictions = predict_all(view.predict, [(job, p) for p in candidates], pending)
    cost = {p: prediction.cost for p, prediction in zip(candidates, predictions)}
    best = min(candidates, key=cost.__getitem__)  # ties: the consolidated one (listed first)
    return best if cost[best] < cost[packed] - PACKING_MARGIN else packed


Fit = tuple[Placement, list[Placement], bool]


def _fit_of(need: int, free: Sequence[int], isolated: Callable[[Placement], bool] | None) -> Fit | None:
    """Contention-aware's model-independent part for a job of ``need`` GPUs: the consolidated
    placement, its fit equivalents, and whether that settles the answer (no alternative, or
    every alternative isolated: every cost exactly 0, the consolidated one is kept); None when
    the job does not fit. On an index, remembered until the free GPUs change (the contention
    state changes only with them: a launch takes some), so queued jobs of every model ask once."""
    if isinstance(free, FreeIndex):
        return free.remembered(("contention-aware fit", need, isolated), _fit, need, free, isolated)
    return _fit(need, free, isolated)


def _fit(need: int, free: Sequence[int], isolated: Callable[[Placement], bool] | None) -> Fit | None:
    packed = consolidate(need, free)
    if packed is None:
        return None
    candidates = fit_equivalents(free, packed)
    settled = len(candidates) == 1 or (isolated is not None and all(map(isolated, candidates)))
    return packed, candidates, settled


SHAPE_KEYS: dict[str, Callable[[JobView], Hashable]] = {
    "consolidated": attrgetter("gpus", "topology"),
    "spread": attrgetter("gpus", "topology"),
    "contention-aware": attrgetter("model", "gpus", "topology"),
}
"""What a strategy's placement depends on in a job, with the free GPUs, the view and the pending
launches fixed (never its id, age or history): within one step of a decision, queued jobs with
equal keys get the same placement, so the encoding asks once per key. Consolidated and spread
read only the GPU count (and the job's topology request, which every strategy honours);
contention-aware also the model, because a contention prediction for a queued job depends on its
model, GPUs and placement alone (the contention models key on those)."""


PACKED_RELAX_S = 600.0
"""How long (simulated seconds since it was queued) ``packed`` keeps a job waiting for its
fewest-node shape before accepting a fragmented consolidated placement."""


@lru_cache(maxsize=256)
def min_nodes(gpus: int, capacity: tuple[int, ...]) -> int:
    """The fewest nodes of ``capacity`` (GPUs per node) that can hold ``gpus`` GPUs at all."""
    total = 0
    for k, cap in enumerate(sorted(capacity, reverse=True), 1):
        total += cap
        if total >= gpus:
            return k
    return len(capacity)


_LAST_CAPACITY: tuple[tuple[int, ...], dict[int, int]] | None = None


def _min_nodes_of(gpus: int, capacity: tuple[int, ...]) -> int:
    """:func:`min_nodes`, remembered for the last capacity tuple seen (by identity: a topology
    keeps one, and hashing 4,096 capacities per call costs more than the answer)."""
    global _LAST_CAPACITY
    entry = _LAST_CAPACITY  # one read: another thread may replace it meanwhile
    if entry is None or entry[0] is not capacity:
        entry = (capacity, {})
        _LAST_CAPACITY = entry
    known = entry[1]
    if gpus not in known:
        known[gpus] = min_nodes(gpus, capacity)
    return known[gpus]


_LAST_FABRIC: tuple[object, tuple[int, ...], dict[tuple[int, int], int]] | None = None


def least_nodes(job: JobView, view: ClusterView, in_domain: bool = False) -> int:
    """The fewest nodes ``job`` can ever use: on the whole cluster, the cluster's; placed inside
    one domain of its request (``in_domain``: a required or preferred level), the least over the
    domains it may be placed in (that level and those below it) that can hold it at all. On a
    fabric whose domains differ, the cluster's fewest may exist in no such domain (a 6-GPU node
    beside four 2-GPU nodes: 8 GPUs need 2 nodes, the only leaf that holds 8 needs 4), and
    ``packed`` then waited for a shape that never comes, on an idle cluster too (or, for a
    preferred level, took the cluster-wide fallback across leaves while a leaf had room).
    Remembered per fabric and capacity (by identity, as :func:`_min_nodes_of`: nodes going up or
    down give a new capacity)."""
    capacity = view.topology.capacity
    request = job.topology
    level = (request.required_level or request.preferred_level) if in_domain else None
    if level is None:
        return _min_nodes_of(job.gpus, capacity)
    global _LAST_FABRIC
    fabric = view.topology.fabric
    entry = _LAST_FABRIC  # one read: another thread may replace it meanwhile
    if entry is None or entry[0] is not fabric or entry[1] is not capacity:
        entry = (fabric, capacity, {})
        _LAST_FABRIC = entry
    top = fabric.level_index(level)
    key = (job.gpus, top)
    known = entry[2].get(key)
    if known is None:
        sizes = [min_nodes(job.gpus, tuple(sorted(capacity[n] for n in fabric.domains[d].nodes)))
                 for at in range(top + 1) for d in fabric.by_level[at]
                 if sum(capacity[n] for n in fabric.domains[d].nodes) >= job.gpus]
        known = entry[2][key] = min(sizes, default=_min_nodes_of(job.gpus, capacity))
    return known


def make_packed(relax_after_s: float = PACKED_RELAX_S) -> PlaceFn:
    """The ``packed`` strategy with its own relaxation wait (seconds, >= 0)."""
    if not relax_after_s >= 0:
        raise ValueError(f"relax_after_s must be >= 0, got {relax_after_s}")

    def packed(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
        placement = consolidate(job.gpus, free)
        if placement is None:
            return None
        if placement.num_nodes <= least_nodes(job, view, isinstance(free, MaskedFree)):  # a domain's GPUs alone
            return placement
        return placement if view.now - job.queued_since >= relax_after_s else None

    return packed


packed = make_packed()


UNCONTENDED_MIN_RATIO = 0.9
"""Predicted speed (fraction of isolated) below which ``uncontended`` waits: the threshold of
RL-hybrid's safety net (chosen on the training traces), not tuned on the suites."""


def make_uncontended(min_ratio: float = UNCONTENDED_MIN_RATIO, relax_after_s: float = PACKED_RELAX_S) -> PlaceFn:
    """The ``uncontended`` strategy with its own threshold (0..1) and ``packed`` relaxation."""
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"min_ratio must be in [0, 1], got {min_ratio}")
    shaped = make_packed(relax_after_s)

    def uncontended(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
        placement = shaped(job, free, view, pending)
        return placement if placement is None or at_speed(job, placement, view, pending, min_ratio) else None

    uncontended.min_ratio = float(min_ratio)  # type: ignore[attr-defined]
    return uncontended



uncontended = make_uncontended()


def demand(job: JobView) -> Hashable:
    """What a placement asks of the free GPUs for ``job``: its GPU count, with its topology request
    when it has one. Within a decision, once a demand fails to place, later jobs of the same demand
    are skipped (free GPUs only shrink), so two jobs of one size but different requests must not
    share a demand."""
    request = job.topology
    return job.gpus if request is NO_TOPOLOGY or request.empty else (job.gpus, request)


def demand_gpus(key: Hashable) -> int:
    """The GPU count of a :func:`demand`."""
    return key if type(key) is int else key[0]  # type: ignore[index, return-value]


topo_bestfit = make_topo_bestfit(consolidate)
topo_balanced = make_topo_balanced(consolidate)

PLACEMENTS: dict[str, tuple[PlaceFn, str]] = {
    name: (with_topology(place, consolidate), doc) for name, (place, doc) in {
        "consolidated": (consolidated, "fewest nodes (best-fit single node when possible)"),
        "spread": (spread, "round-robin over nodes: as many nodes as possible (the original's baseline)"),
        "contention-aware": (
            contention_aware,
            "consolidated's fit on the nodes with the least predicted throughput loss for the job and its neighbours",
        ),
        "packed": (
            packed,
            f"fewest nodes the job can ever use, waiting for them rather than fragmenting "
            f"(takes the consolidated fallback after {PACKED_RELAX_S:.0f} s queued)",
        ),
        "uncontended": (
            uncontended,
            f"packed, and waits (unbounded) while the job would run below {UNCONTENDED_MIN_RATIO:g}x its isolated speed "
            "there; launches anyway on an idle cluster",
        ),
        "topo-bestfit": (
            topo_bestfit,
            "the least free fabric domain that holds the job, lowest level first (Kueue TAS / Slurm tree), "
            "fewest nodes inside it",
        ),
        "topo-balanced": (
            topo_balanced,
            "topo-bestfit when one lowest-level domain holds the job, else an even split over the fewest child "
            "domains of the best-fitting parent (8:8 across two racks, not 15:1)",
        ),
    }.items()
}
PLACEMENTS["topo-aware"] = (  # chooses among domains itself: wrapped, it would see BestFit's domain alone
    make_topo_aware(consolidate),
    "the predicted cheapest of the fabric's feasible shapes (topo-bestfit's and topo-balanced's in the few least "
    "free domains of each level): the job's slowdown x its GPUs plus its neighbours' loss; topo-bestfit without "
    "contention",
)
"""Every strategy by name, each honouring jobs' topology requests (:func:`~deepshare.policies.fabric_place.with_topology`;
``topo-aware`` honours them itself, :mod:`deepshare.policies.topo_aware`)."""
