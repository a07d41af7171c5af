"""Cost of re-rating running jobs under the link contention model.

The simulator re-rates at every event: a job starts or ends, and every job connected to it
through shared links gets a new ratio. This prints, side by side in one run:

  1. 1,000 running jobs exactly filling 1,024 GPUs (128 x 8, the testbed's node type): 24
     two-GPU jobs split over two nodes and 976 single-GPU jobs (on 1,024 GPUs, 1,000 jobs are
     necessarily almost all single-GPU, which cross no shared link);
  2. a stress case where every job crosses shared links: 1,000 jobs of 2 or 4 GPUs, one GPU
     per node, on a 512 x 8 cluster: 1,000 jobs of 2-8 GPUs spread over 2-4 nodes of a 512 x 8 cluster;

and for each: the mean and p99 time of one incremental re-rate (a job leaves, then comes back:
two re-rates), and the time to re-solve every running job at once. Target: < 5 ms per re-rate.

Usage: python bench/contention.py [--ops 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from deepshare.core.contention import RunningJob
from deepshare.core.linkmodel import LinkContention
from deepshare.core.topology import uniform
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog

TARGET_MS = 5.0


def layout_1024(rng: np.random.Generator) -> tuple[object, list[RunningJob]]:
    """1,000 jobs exactly filling 1,024 GPUs: 24 two-GPU jobs split over 2 nodes, 976 one-GPU jobs."""
    topo = uniform(128, 8)
    models = default_catalog().models
    free = [8] * 128
    jobs = []
    for i in range(24):
        a, b = rng.choice(128, size=2, replace=False)
        free[a] -= 1
        free[b] -= 1
        jobs.append(RunningJob(f"m{i}", str(rng.choice(models)), 2, Placement.of({int(a): 1, int(b): 1})))
    n = 0
    for node in range(128):
        for _ in range(free[node]):
            jobs.append(RunningJob(f"s{n}", str(rng.choice(models)), 1, Placement(((node, 1),))))
            n += 1
    return topo, jobs


def layout_stress(rng: np.random.Generator) -> tuple[object, list[RunningJob]]:
    """1,000 jobs of 2 or 4 GPUs, one GPU per node over 2 or 4 nodes of a 512 x 8 cluster."""
    topo = uniform(512, 8)
    models = default_catalog().models
    free = np.full(512, 8)
    jobs = []
    while len(jobs) < 1000:
        k = int(rng.choice([2, 4]))
        per = 1
        nodes = rng.choice(np.flatnonzero(free >= per), size=k, replace=False)
        free[nodes] -= per
        jobs.append(RunningJob(f"j{len(jobs)}", str(rng.choice(models)), k * per, Placement.of({int(n): per for n in nodes})))
    return topo, jobs


def measure(label: str, topo, jobs: list[RunningJob], ops: int, rng: np.random.Generator) -> None:
    state = LinkContention().new_state(topo, default_catalog())
    start = time.perf_counter()
    for job in jobs:
        state.add(job)
    fill = time.perf_counter() - start
    times = []
    for job in rng.choice(len(jobs), size=ops, replace=False):
        t0 = time.perf_counter()
        state.remove(jobs[job].job_id)
        t1 = time.perf_counter()
        state.add(jobs[job])
        t2 = time.perf_counter()
        times += [t1 - t0, t2 - t1]
    ms = np.array(times) * 1000
    t0 = time.perf_counter()
    state._resolve(state._component([j.job_id for j in jobs]))
    full = (time.perf_counter() - t0) * 1000
    multi = sum(j.placement.num_nodes > 1 for j in jobs)
    print(
        f"{label}: {len(jobs)} jobs ({multi} multi-node) on {topo.total_gpus} GPUs | "
        f"re-rate mean {ms.mean():.3f} ms, p99 {np.percentile(ms, 99):.3f} ms (target < {TARGET_MS} ms) | "
        f"all jobs at once {full:.1f} ms | filling {fill:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=200, help="jobs removed and re-added per case")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for label, layout in (("1,024 GPUs", layout_1024), ("stress", layout_stress)):
        rng = np.random.default_rng(args.seed)
        topo, jobs = layout(rng)
        measure(label, topo, jobs, args.ops, rng)


if __name__ == "__main__":
    main()
