"""Placement strategies: where on the free GPUs a job's GPUs go.

Each strategy is ``place(job, free, view, pending) -> Placement | None`` where ``free`` is the
per-node free-GPU list (after launches chosen earlier in the same decision) and ``pending``
those launches. ``None`` means the job does not fit.

* ``consolidated`` — fewest nodes: the best-fitting single node when the job fits on one,
  else the nodes with the most free GPUs first.
* ``spread`` — the original artifact's baseline: one GPU at a time, round-robin over the
  nodes with free GPUs (most free first), so a job spans as many nodes as it can.
* ``contention-aware`` — among the candidate placements (:func:`candidate_placements`), the
  one with the least predicted loss: the job's own effective throughput relative to its best
  isolated placement plus the throughput it takes from the running jobs it would join; any
  placement other than the consolidated one must win by :data:`PACKING_MARGIN`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Sequence

from deepshare.core.types import ClusterView, JobView, Placement

Pending = Sequence[tuple[JobView, Placement]]
PlaceFn = Callable[[JobView, list[int], ClusterView, Pending], "Placement | None"]


def consolidated(job: JobView, free: list[int], view: ClusterView | None = None, pending: Pending = ()) -> Placement | None:
    return _consolidated(job.gpus, tuple(free))


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
    return _spread(job.gpus, tuple(free))


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
consolidated (best-fit) one before it is chosen: leaving the tightest fit fragments the free
GPUs and spreading takes network capacity, costs to later jobs that a one-decision prediction
cannot see."""


def contention_aware(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
    candidates = candidate_placements(job, free)
    if not candidates:
        return None
    thp = view.catalog.throughput
    best_iso = max(thp(job.model, job.gpus, p.num_nodes) for p in candidates)

    losses = {}
    for p in candidates:
        pred = view.predict(job, p, pending)
        losses[p] = 1.0 - thp(job.model, job.gpus, p.num_nodes) / best_iso * pred.ratio + pred.others_loss
    packed = consolidated(job, free)
    assert packed is not None and packed in losses  # candidates exist, so the job fits; packed is one
    best = min(candidates, key=lambda p: (losses[p], p.num_nodes))
    if best != packed and losses[best] > losses[packed] - PACKING_MARGIN:
        return packed
    return best


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


def make_packed(relax_after_s: float = PACKED_RELAX_S) -> PlaceFn:
    """The ``packed`` strategy with its own relaxation wait (seconds, >= 0)."""
    if not relax_after_s >= 0:
        raise ValueError(f"relax_after_s must be >= 0, got {relax_after_s}")

    def packed(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
        placement = _consolidated(job.gpus, tuple(free))
        if placement is None:
            return None
        if placement.num_nodes <= min_nodes(job.gpus, tuple(view.topology.capacity)):
            return placement
        return placement if view.now - job.queued_since >= relax_after_s else None

    return packed


packed = make_packed()


PLACEMENTS: dict[str, tuple[PlaceFn, str]] = {
    "consolidated": (consolidated, "fewest nodes (best-fit single node when possible)"),
    "spread": (spread, "round-robin over nodes: as many nodes as possible (the original's baseline)"),
    "contention-aware": (contention_aware, "least predicted throughput loss for the job and its neighbours"),
    "packed": (
        packed,
        f"fewest nodes the job can ever use, waiting for them rather than fragmenting "
        f"(takes the consolidated fallback after {PACKED_RELAX_S:.0f} s queued)",
    ),
}
