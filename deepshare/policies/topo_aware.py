"""The ``topo-aware`` placement: a contention-aware choice among the fabric's feasible shapes.

Kueue's, KAI's and Slurm's topology placements pick a domain by its free GPUs alone (BestFit:
the least free domain that holds the job). None of them knows what a placement will cost in
contention; DeepShare's view can predict it. ``topo-aware`` lists the feasible shapes a topology
scheduler would consider and takes the one with the least predicted cost:

* **Candidates** (each honours the job's request: a required level's domain, slices, a gang
  whole or not at all), in BestFit's order of preference:

  - ``topo-bestfit``'s own placement (always first: the reference);
  - ``topo-balanced``'s own placement;
  - for each level considered, the :data:`K` least free domains of it that hold the job; inside
    each, the lowest, least free sub-domain that holds it (BestFit inside the domain), and there
    the fewest-nodes placement and (when the sub-domain is above the lowest level) the even split
    over its child domains. The levels considered: the job's ``required_level``, else its
    ``preferred_level``, else every level from the lowest one where some domain holds the job;
  - for a job that asks nothing of the fabric, the unconstrained fewest-nodes placement.

  At most ``2 + 2 K x levels + 1`` placements, usually far fewer (duplicates dropped), whatever
  the cluster's size; ``K`` bounds the work of one decision on 4,096 nodes.

* **Cost** of a candidate, in GPUs' worth of throughput lost (:func:`~deepshare.policies.launch_cost.gpu_loss`):
  the job's own predicted slowdown weighted by its GPUs, ``gpus x (1 - ratio)``, plus its
  neighbours' predicted loss (:attr:`~deepshare.core.view.Prediction.others_loss`, in whole
  jobs' throughput) weighted by the mean GPU count of the jobs holding GPUs. All candidates are predicted in one batch
  (:func:`~deepshare.core.contention.base.predict_all`) with the decision's pending launches.

* **Choice**: the cheapest candidate, if it beats BestFit's by more than :data:`TIE_MARGIN` of
  the job's GPUs; ties and near-ties go to the earlier candidate (the fragmentation tie-break:
  candidates are listed least free domain first, as BestFit ranks them), so without contention
  (every cost 0) ``topo-aware`` decides exactly as ``topo-bestfit``. When the contention model
  says BestFit's placement is isolated (it neither suffers nor causes contention, whatever runs),
  nothing is predicted: that is the answer.

The answer for a job is remembered on a :class:`~deepshare.policies.free_index.FreeIndex` until
the free GPUs change, keyed on what it depends on (the job's model, GPUs and request), so the
queued jobs of one shape ask once per step of a decision.
"""

from __future__ import annotations

from itertools import islice
from typing import Sequence

from deepshare.core.contention.base import isolated_of, predict_all
from deepshare.core.fabric import Fabric, TopologyRequest
from deepshare.core.types import Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.fabric_place import (
    balanced_split,
    fewest_within,
    fitting_domains,
    make_topo_balanced,
    make_topo_bestfit,
    place_slices,
    slice_of,
    slices_fit,
    with_topology,
)
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.launch_cost import gpu_loss, mean_job_gpus
from deepshare.policies.place_types import FewestFn, Pending, PlaceFn

K = 4
"""Domains per level considered (the least free that hold the job). It bounds the work of one
placement whatever the number of domains: at most ``2 + 2 K x levels + 1`` candidates predicted
(35 on a four-level fabric), and the K least free domains of a level come from the free index's
domain buckets without a scan. Four offers BestFit's domain a few alternatives under other
uplinks; more rarely finds a cheaper one, since the less free domains come later in BestFit's
order and lose ties to it anyway. (The 1-GPU jobs of ``bench/decide_scale.py --fabric`` are
single-node, contention-free placements that never reach the candidates; the bound is for gangs.)"""

TIE_MARGIN = 0.02
"""How much cheaper than BestFit's (a fraction of the job's GPUs, in GPUs' worth of throughput) a
candidate must be predicted to be before it is chosen: a prediction is for this instant only, and
leaving BestFit's domain costs fragmentation the prediction does not see."""


def make_topo_aware(fewest: FewestFn, k: int = K, margin: float = TIE_MARGIN) -> PlaceFn:
    """The ``topo-aware`` strategy (see the module doc), honouring every topology request itself."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    bestfit = with_topology(make_topo_bestfit(fewest), fewest)
    balanced = with_topology(make_topo_balanced(fewest), fewest)

    def choose(job: JobView, free: Sequence[int], view: ClusterView, pending: Pending) -> Placement | None:
        first = bestfit(job, free, view, pending)  # type: ignore[arg-type]
        if first is None:
            return None  # BestFit places a job wherever any domain (or the cluster) holds it
        isolated = isolated_of(view.predict)
        if isolated is not None and isolated(first):
            return first  # cost exactly 0: nothing beats it
        options = candidates(job, free, view, pending, first, fewest, balanced, k)
        if len(options) == 1:
            return first
        predictions = predict_all(view.predict, [(job, p) for p in options], pending)
        neighbour = mean_job_gpus(view, pending, job.gpus) if any(p.others_loss for p in predictions) else 0.0
        costs = [gpu_loss(job, p, neighbour) for p in predictions]
        best = min(range(len(options)), key=lambda i: (costs[i], i))
        return options[best] if costs[best] < costs[0] - margin * job.gpus else first

    def topo_aware(job: JobView, free: list[int], view: ClusterView, pending: Pending = ()) -> Placement | None:
        if isinstance(free, FreeIndex):
            key = ("topo-aware", job.model, job.gpus, job.topology, k, margin)
            return free.remembered(key, lambda: choose(job, free, view, pending))
        return choose(job, free, view, pending)

    return topo_aware


def candidates(job: JobView, free: Sequence[int], view: ClusterView, pending: Pending, first: Placement,
               fewest: FewestFn, balanced: PlaceFn, k: int = K) -> list[Placement]:
    """The feasible shapes ``topo-aware`` compares, ``first`` (BestFit's) first, without
    duplicates (see the module doc)."""
    fabric = view.topology.fabric
    request = job.topology
    need = job.gpus
    slices = slice_of(fabric, request)
    found = [first]
    split = balanced(job, free, view, pending)  # type: ignore[arg-type]
    if split is not None:
        found.append(split)
    for level in _levels(fabric, free, need, request):
        for domain in islice(fitting_domains(fabric, free, need, level, request), k):
            sub = fabric.domains[_best_inside(fabric, free, need, domain, request)]
            if slices is not None:
                found.append(place_slices(fabric, free, sub.nodes, need, fewest, *slices))
                continue
            found.append(fewest_within(sub.nodes, need, free, fewest))
            if sub.level > 0:
                found.append(balanced_split(fabric, free, sub.nodes, sub.level - 1, need, fewest))
    if request.empty:
        found.append(fewest(need, free))
    return list(dict.fromkeys(p for p in found if p is not None))


def _levels(fabric: Fabric, free: Sequence[int], need: int, request: TopologyRequest) -> range:
    """The levels whose domains ``topo-aware`` considers (see the module doc)."""
    level = request.required_level or request.preferred_level
    if level is not None:
        index = fabric.level_index(level)
        return range(index, index + 1)
    top = len(fabric.levels)
    for lowest in range(top):
        if next(fitting_domains(fabric, free, need, lowest, request), None) is not None:
            return range(lowest, top)
    return range(0)


def _best_inside(fabric: Fabric, free: Sequence[int], need: int, domain: int, request: TopologyRequest) -> int:
    """BestFit inside ``domain`` (which holds ``need``): its lowest, least free sub-domain that
    holds the job (ties by index), ``domain`` itself when no lower one does."""
    outer = fabric.domains[domain]
    slices = slice_of(fabric, request)
    for level in range(outer.level):
        sums: dict[int, int] = {}
        for n in outer.nodes:
            if free[n]:
                d = fabric.node_domains[n][level]
                sums[d] = sums.get(d, 0) + free[n]
        for f, d in sorted((f, d) for d, f in sums.items() if f >= need):
            if slices is None or slices_fit(fabric, free, fabric.domains[d].nodes, need, *slices):
                return d
    return domain
