"""Placement inside the fabric: jobs' topology requests, and topology BestFit.

Every registered placement honours a job's :class:`~deepshare.core.fabric.TopologyRequest`
(:func:`with_topology` wraps each one), the way Kueue's Topology Aware Scheduling, Slurm's
``topology/tree`` and Volcano's HyperNodes do:

* ``required_level``: the job's domain is chosen among the domains of that level and the levels
  below it, **lowest level first**, and at each level the **least free domain that fits**
  (BestFit: the smallest hole that holds the job, which limits fragmentation); the placement
  itself is then the strategy's own, on that domain's free GPUs alone. No domain fits: the
  job waits (a gang never starts half).
* ``preferred_level``: the same up to that level; when no domain fits, the strategy's own
  placement on the whole cluster.
* ``slice_size`` / ``slice_level``: the job's GPUs are placed in slices of ``slice_size``, each
  inside one domain of ``slice_level`` (slice domains filled least-free-first), so a domain of
  ``slice_level`` holds a whole number of slices. The strategy's own shape does not apply then,
  but a strategy that waits on contention (``uncontended``) still waits while the slices would
  run below its ratio.

A job that asks nothing is placed by the strategy exactly as before. :func:`topo_bestfit` (the
``topo-bestfit`` placement) applies the lowest-level-first BestFit to every job, asking or not:
the lowest switch that fits, as Slurm's tree plugin picks it, with ``consolidated``'s fewest
nodes inside it; a job no single top-level domain can hold gets ``consolidated`` over the cluster.
The fewest-nodes rule is passed in (``fewest``: :func:`deepshare.policies.placement.consolidate`),
so that this module and the strategies' module do not import each other.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from deepshare.core.fabric import NO_TOPOLOGY, Fabric, TopologyRequest
from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.masked_free import MaskedFree
from deepshare.policies.place_types import FewestFn, Pending, PlaceFn, at_speed, waits_below


def domain_free(fabric: Fabric, free: Sequence[int], level: int) -> dict[int, int]:
    """Free GPUs of each domain of ``level``, by domain index."""
    out = {d: 0 for d in fabric.by_level[level]}
    for node, f in enumerate(free):
        if f:
            out[fabric.node_domains[node][level]] += f
    return out


def masked(free: Sequence[int], nodes: Sequence[int]) -> list[int]:
    """``free`` with every node outside ``nodes`` at 0, as a plain list (the reference of
    :class:`~deepshare.policies.masked_free.MaskedFree`, which placements get instead)."""
    out = [0] * len(free)
    for n in nodes:
        out[n] = free[n]
    return out


def candidate_domains(fabric: Fabric, free: Sequence[int], need: int, top: int,
                      request: TopologyRequest) -> Iterator[int]:
    """Domains that can hold ``need`` GPUs (and the request's slices), levels 0..``top``: lowest
    level first, least free first within a level, then by index (lazily: the first that places
    the job ends the search; a :class:`FreeIndex` answers from its domain index)."""
    for level in range(top + 1):
        yield from fitting_domains(fabric, free, need, level, request)


def fitting_domains(fabric: Fabric, free: Sequence[int], need: int, level: int,
                    request: TopologyRequest) -> Iterator[int]:
    """The domains of ``level`` alone that can hold ``need`` GPUs (and the request's slices),
    least free first, then by index (lazily, as :func:`candidate_domains`)."""
    slices = slice_of(fabric, request)
    if isinstance(free, FreeIndex):
        fits: Iterable[int] = free.domains(fabric).fitting(level, need)
    else:
        sums = domain_free(fabric, free, level)
        fits = [d for _, d in sorted((f, d) for d, f in sums.items() if f >= need)]
    for d in fits:
        if slices is None or slices_fit(fabric, free, fabric.domains[d].nodes, need, *slices):
            yield d


def constrained(job: JobView, free: Sequence[int], view: ClusterView, pending: Pending, place: PlaceFn,
                fewest: FewestFn, top: int | None = None, fallback: bool = False,
                min_ratio: float | None = None) -> Placement | None:
    """``place`` (a strategy) on the first of :func:`candidate_domains` where it places the job;
    without one, ``place`` over the whole cluster when ``fallback`` (see the module doc). Slices
    are laid out by their own rule, not the strategy's; with ``min_ratio`` (a strategy that waits
    on contention) a layout predicted below it is passed over like a domain that does not fit."""
    fabric = view.topology.fabric
    request = job.topology
    slices = slice_of(fabric, request)

    def fast_enough(placement: Placement) -> bool:
        return slices is None or min_ratio is None or at_speed(job, placement, view, pending, min_ratio)

    if top is not None:
        for d in candidate_domains(fabric, free, job.gpus, top, request):
            placement = _place_within(job, free, view, pending, place, fewest, fabric.domains[d].nodes, slices)
            if placement is not None and fast_enough(placement):
                return placement
        if not fallback:
            return None
    if slices is not None:
        placement = place_slices(fabric, free, range(len(free)), job.gpus, fewest, *slices)
        return placement if placement is not None and fast_enough(placement) else None
    return place(job, free, view, pending)



def with_topology(place: PlaceFn, fewest: FewestFn) -> PlaceFn:
    """``place``, honouring each job's topology request (see the module doc)."""
    min_ratio = waits_below(place)  # a strategy that waits on contention (uncontended)

    def placed(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
        request = job.topology
        if request is NO_TOPOLOGY or request.empty:  # the shared "no request" first: no property call
            return place(job, free, view, pending)
        fabric = view.topology.fabric
        if request.required_level is not None:
            return constrained(job, free, view, pending, place, fewest, fabric.level_index(request.required_level),
                               min_ratio=min_ratio)
        if request.preferred_level is not None:
            return constrained(job, free, view, pending, place, fewest, fabric.level_index(request.preferred_level),
                               True, min_ratio)
        return constrained(job, free, view, pending, place, fewest, min_ratio=min_ratio)

    placed.__name__ = getattr(place, "__name__", "placed")
    placed.__doc__ = place.__doc__
    placed.__dict__.update(getattr(place, "__dict__", {}))  # what the strategy says of itself (waits_below)
    return placed


def make_topo_bestfit(fewest: FewestFn) -> PlaceFn:
    """The ``topo-bestfit`` strategy: the least free domain that fits, lowest level first, the
    fewest nodes inside it (see the module doc)."""

    def on_fewest(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
        return fewest(job.gpus, free)

    def topo_bestfit(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
        fabric = view.topology.fabric
        if job.topology.empty:  # the common case: the first fitting domain, consolidated on its nodes alone
            for d in candidate_domains(fabric, free, job.gpus, len(fabric.levels) - 1, job.topology):
                return fewest_within(fabric.domains[d].nodes, job.gpus, free, fewest)
            return fewest(job.gpus, free)
        return constrained(job, free, view, pending, on_fewest, fewest, len(fabric.levels) - 1, fallback=True)

    return topo_bestfit


def make_topo_balanced(fewest: FewestFn) -> PlaceFn:
    """The ``topo-balanced`` strategy: ``topo-bestfit`` when one domain of the lowest level holds
    the job; otherwise the job is split across the fewest child domains of the best-fitting
    parent (the lowest level with a domain that holds it, or the whole cluster) as **evenly** as
    their free GPUs allow (water-filling: 8:8 across two NVLink racks, not 15:1), consolidated
    inside each child. An uneven split funnels one side's share of the cross-domain traffic
    through fewer NICs (:mod:`deepshare.core.contention.link.model`)."""

    def topo_balanced(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
        fabric = view.topology.fabric
        need = job.gpus
        single = next(candidate_domains(fabric, free, need, 0, NO_REQUEST), None)
        if single is not None:
            return fewest_within(fabric.domains[single].nodes, need, free, fewest)
        parent_index = next(candidate_domains(fabric, free, need, len(fabric.levels) - 1, NO_REQUEST), None)
        if parent_index is not None:
            parent = fabric.domains[parent_index]
            nodes, level = parent.nodes, parent.level - 1
        else:
            nodes, level = range(len(free)), len(fabric.levels) - 1
        return balanced_split(fabric, free, nodes, level, need, fewest)

    return topo_balanced


NO_REQUEST = TopologyRequest()


def fewest_within(nodes: Sequence[int], need: int, free: Sequence[int], fewest: FewestFn) -> Placement | None:
    """``fewest`` on ``nodes`` alone (their free GPUs as a short list), mapped back to node indices:
    a domain's placement costs its nodes, not the cluster's (a domain of every node: ``fewest`` on
    ``free`` itself, which a :class:`FreeIndex` answers from its index)."""
    if len(nodes) == len(free):
        return fewest(need, free)
    part = fewest(need, [free[n] for n in nodes])
    return None if part is None else Placement(tuple((nodes[i], g) for i, g in part.alloc))


def balanced_split(fabric: Fabric, free: Sequence[int], nodes: Sequence[int], level: int, need: int,
                   fewest: FewestFn) -> Placement | None:
    """``need`` GPUs over the fewest domains of ``level`` among ``nodes``, as evenly as they allow."""
    sums: dict[int, int] = {}
    for n in nodes:
        if free[n]:
            d = fabric.node_domains[n][level]
            sums[d] = sums.get(d, 0) + free[n]
    ranked = sorted(sums, key=lambda d: (-sums[d], d))
    total, count = 0, 0
    for d in ranked:
        total += sums[d]
        count += 1
        if total >= need:
            break
    if total < need:
        return None
    chosen = sorted(ranked[:count], key=lambda d: (sums[d], d))  # water-filling: the smallest first
    counts: dict[int, int] = {}
    left = need
    for i, d in enumerate(chosen):
        share = min(sums[d], -(-left // (len(chosen) - i)))
        part = fewest_within(fabric.domains[d].nodes, share, free, fewest)
        if part is None:
            return None
        for node, gpus in part.alloc:
            counts[node] = counts.get(node, 0) + gpus
        left -= share
    return Placement.of(counts) if left == 0 else None


def slice_of(fabric: Fabric, request: TopologyRequest) -> tuple[int, int] | None:
    """(slice size, slice level index), or None without slices."""
    if request.slice_size is None or request.slice_level is None:
        return None
    return request.slice_size, fabric.level_index(request.slice_level)


def _place_within(job: JobView, free: Sequence[int], view: ClusterView, pending: Pending, place: PlaceFn,
                  fewest: FewestFn, nodes: Sequence[int], slices: tuple[int, int] | None) -> Placement | None:
    if slices is not None:
        return place_slices(view.topology.fabric, free, nodes, job.gpus, fewest, *slices)
    return place(job, _masked(free, nodes), view, pending)  # the domain's nodes alone, never a copy of the cluster's


def _masked(free: Sequence[int], nodes: Sequence[int]) -> MaskedFree:
    """``MaskedFree(free, nodes)``; on a decision's :class:`FreeIndex`, one per domain until its
    free GPUs change (remembered by it), so every strategy asked about a job required in that
    domain, and the next such jobs, read one masked index and share its answers (it is read-only:
    nothing a strategy does changes it)."""
    if type(free) is FreeIndex:
        return free.remembered(("masked", nodes), MaskedFree, free, nodes)
    return MaskedFree(free, nodes)


def _slice_capacity(fabric: Fabric, free: Sequence[int], nodes: Sequence[int], size: int, level: int) -> dict[int, int]:
    """Whole slices of ``size`` each domain of ``level`` among ``nodes`` can hold, by domain."""
    sums: dict[int, int] = {}
    for n in nodes:
        if free[n]:
            d = fabric.node_domains[n][level]
            sums[d] = sums.get(d, 0) + free[n]
    return {d: f // size for d, f in sums.items() if f >= size}


def slices_fit(fabric: Fabric, free: Sequence[int], nodes: Sequence[int], need: int, size: int, level: int) -> bool:
    return sum(_slice_capacity(fabric, free, nodes, size, level).values()) * size >= need


def place_slices(fabric: Fabric, free: Sequence[int], nodes: Sequence[int], need: int, fewest: FewestFn,
                 size: int, level: int) -> Placement | None:
    """``need`` GPUs as slices of ``size``, each inside one domain of ``level``: slice domains
    least free first, each holding as many slices as it can, consolidated inside it."""
    capacity = _slice_capacity(fabric, free, nodes, size, level)
    if sum(capacity.values()) * size < need:
        return None
    members = set(nodes)
    counts: dict[int, int] = {}
    left = need
    held = {d: sum(free[n] for n in fabric.domains[d].nodes if n in members) for d in capacity}
    for d in sorted(capacity, key=lambda d: (held[d], d)):  # least free first (BestFit), not fewest slices
        slots = capacity[d]
        take = min(slots, left // size) * size
        if take == 0:
            continue
        part = fewest_within([n for n in fabric.domains[d].nodes if n in members], take, free, fewest)
        if part is None:  # cannot happen: the domain holds `slots` slices
            return None
        for node, gpus in part.alloc:
            counts[node] = counts.get(node, 0) + gpus
        left -= take
        if left == 0:
            return Placement.of(counts)
    return None
