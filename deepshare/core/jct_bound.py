"""A lower bound on job completion times that no scheduler can beat on a given cluster.

Why it is a bound, from the simulator's rules (:mod:`deepshare.core.simulator`):

* a job cannot start before it is submitted, and it finishes when its work (samples; a
  ``duration_s`` is converted at the catalog's *reference* throughput) is done;
* while it runs on a placement spanning ``n`` nodes it progresses at
  ``catalog.throughput(model, gpus, n) x ratio``, and every contention model's ratio is at
  most 1 (``profiled``: pairwise table entries <= 1 and a floor <= 1; ``link``: clipped at 1;
  ``none``: 1), so contention never speeds a job up; start, restore and migration overheads
  add time without progress;
* a placement gives the job exactly its GPUs on distinct nodes with at least one GPU each, so
  ``n`` ranges over ``[fewest nodes that hold gpus, min(gpus, nodes with GPUs)]``.

So a job's completion time is at least ``work / max over feasible n of throughput(n)``: its
isolated run time at its fastest placement. The fastest placement is *not* always the fewest
nodes: the catalog interpolates measured spreads, and some models (MobileNetV3, GraphSage,
FSDP at 8 GPUs) measured faster on more nodes, so the maximum is taken over every feasible
node count, not assumed. For jobs that fit on one node, one node is the fastest (the catalog
gives a single node the best measured spread) and the bound is ``duration_s`` exactly when
the job's reference placement is one node.

The bound ignores queueing entirely: the gap between a scheduler's average JCT and it is the
most any scheduler could gain (an upper limit on the room; the true optimum may be higher).
Jobs the simulator rejects (more GPUs than the cluster has, or a topology request it can never
meet: :func:`~deepshare.core.simulator.topology_refusal`) have no bound (``None``); averages are
over the jobs that can run, as the simulator's report is. A topology request does not tighten
the bound of a job that can run (its fastest placement may lie inside the requested domain).
"""

from __future__ import annotations

import math
from typing import Sequence

from deepshare.core.simulator import topology_refusal
from deepshare.core.topology import Topology
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog, default_catalog


def node_count_range(topology: Topology, gpus: int) -> range:
    """Every number of nodes a placement of ``gpus`` GPUs can span on ``topology`` (empty when
    the cluster cannot hold the job)."""
    capacities = sorted((c for c in topology.capacity if c > 0), reverse=True)
    held, fewest = 0, 0
    for c in capacities:
        if held >= gpus:
            break
        held += c
        fewest += 1
    if held < gpus:
        return range(0)
    return range(fewest, min(gpus, len(capacities)) + 1)


def best_isolated_throughput(catalog: Catalog, topology: Topology, model: str, gpus: int) -> float | None:
    """The most samples/s ``model`` on ``gpus`` GPUs can reach on ``topology`` (no contention)."""
    counts = node_count_range(topology, gpus)
    if not counts:
        return None
    return max(catalog.throughput(model, gpus, n) for n in counts)


def job_jct_bounds(jobs: Sequence[JobSpec], topology: Topology, catalog: Catalog | None = None) -> list[float | None]:
    """Per job (trace order): its isolated run time at its fastest placement, a lower bound of
    its JCT under any policy and contention model; ``None`` for a job the cluster rejects."""
    cat = catalog if catalog is not None else default_catalog()
    best: dict[tuple[str, int], float | None] = {}
    out: list[float | None] = []
    for job in jobs:
        if not job.topology.empty and topology_refusal(job.topology, topology, job.gpus) is not None:
            out.append(None)
            continue
        key = (job.model, job.gpus)
        if key not in best:
            best[key] = best_isolated_throughput(cat, topology, job.model, job.gpus)
        rate = best[key]
        if rate is None:
            out.append(None)
            continue
        # the simulator's own conversion of a duration into work (samples)
        work = job.total_samples if job.total_samples is not None else job.duration_s * cat.reference_throughput(job.model, job.gpus)  # type: ignore[operator]
        out.append(work / rate)
    return out


def avg_jct_bound(jobs: Sequence[JobSpec], topology: Topology, catalog: Catalog | None = None) -> float | None:
    """Mean of :func:`job_jct_bounds` over the jobs the cluster can run (``None`` if none)."""
    values = [b for b in job_jct_bounds(jobs, topology, catalog) if b is not None]
    return math.fsum(values) / len(values) if values else None
