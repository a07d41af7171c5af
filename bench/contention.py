"""Cost of re-rating running jobs under the link contention model.

The simulator re-rates at every event: a job starts or ends, and every job connected to it
through shared links gets a new ratio. This prints, side by side in one run:

  1. 1,000 running jobs exactly filling 1,024 GPUs (128 x 8, the testbed's node type): 24
     two-GPU jobs split over two nodes and 976 single-GPU jobs (on 1,024 GPUs, 1,000 jobs are
     necessarily almost all single-GPU, which cross no shared link);
  2. a stress case where every job crosses shared links: 1,000 jobs of 2 or 4 GPUs, one GPU
     per node, on a 512 x 8 cluster (4,096 GPUs): they form one connected component, so every
     re-rate re-solves all 1,000 jobs;

and for each: the mean and p99 time of one incremental re-rate (a job leaves, then comes back:
two re-rates), and the time to re-solve every running job at once. Target: < 5 ms per re-rate.

Each case runs twice on the same jobs and the same removals, interleaved: ``before`` is the
first implementation (a breadth-first component search over Python sets at every event, the
system assembled element by element, and a solver step costing edges x models), kept here as
:class:`Before`; ``after`` is :class:`LinkState` as shipped (components kept up to date, per-job
arrays, a solver step linear in the edges, stopping when converged). Both print their largest
ratio difference, so a speed-up that changed the answers would show.

Usage: python bench/contention.py [--ops 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from record import Record, add_json_flag

from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.link import LinkContention, LinkState
from deepshare.core.contention.link import physics
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


def _solve_before(system: physics.System) -> np.ndarray:
    """The first solver: the same damped fixed point, 40 steps, one (edges x models) product per step
    (with the per-placement sensitivity added since, so that both compute the same model)."""
    n_models = system.kappa.shape[0]
    jobs = system.edge_job
    edge_model = system.model[jobs]
    gain = ((1.0 + system.congestion) * system.sensitivity)[jobs][:, None]
    kappa_rows = np.maximum(1.0, gain * system.kappa[edge_model])
    self_kappa = kappa_rows[np.arange(len(jobs)), edge_model]
    slot = system.edge_link * n_models + edge_model
    starts = np.flatnonzero(np.r_[True, jobs[1:] != jobs[:-1]]) if len(jobs) else jobs
    owners = jobs[starts]

    def comm(stretched: np.ndarray) -> np.ndarray:
        out = system.private.copy()
        if len(starts):
            out[owners] = np.maximum(out[owners], np.maximum.reduceat(stretched, starts))
        return out

    stretch = np.ones(len(jobs))
    for _ in range(physics.ITERATIONS):
        t = physics.iteration_time(system.compute, comm(system.work * stretch), system.overlap)
        duty = np.minimum(1.0, system.work * stretch / t[jobs])
        per_link_model = np.bincount(slot, weights=duty, minlength=system.n_links * n_models)
        per_link_model = per_link_model.reshape(system.n_links, n_models)
        others = np.einsum("em,em->e", kappa_rows, per_link_model[system.edge_link]) - self_kappa * duty
        stretch = physics.DAMPING * stretch + (1.0 - physics.DAMPING) * (1.0 + np.maximum(others, 0.0))
    t = physics.iteration_time(system.compute, comm(system.work * stretch), system.overlap)
    return np.minimum(1.0, physics.isolated_times(system) / t)


class Before(LinkState):
    """The first re-rate path: search the component from scratch, assemble it element by element."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self._ratio: dict[str, float] = {}

    def ratio(self, job_id: str) -> float:
        return self._ratio[job_id]

    def add(self, job: RunningJob) -> set[str]:
        record = self._record(job)
        self._jobs[job.job_id] = record
        for link in record.links:
            self._on_link.setdefault(link, set()).add(job.job_id)
        changed = self._old_resolve(self._old_component([job.job_id]))
        changed.add(job.job_id)
        return changed

    def remove(self, job_id: str) -> set[str]:
        record = self._jobs.pop(job_id)
        del self._ratio[job_id]
        neighbours: set[str] = set()
        for link in record.links:
            sharers = self._on_link[link]
            sharers.discard(job_id)
            neighbours |= sharers
        return self._old_resolve(self._old_component(sorted(neighbours)))

    def _old_component(self, seeds) -> list[str]:
        jobs, on_link = self._jobs, self._on_link
        seen = {s for s in seeds if s in jobs}
        stack = list(seen)
        expanded: set[int] = set()
        while stack:
            for link in jobs[stack.pop()].links:
                if link in expanded:
                    continue
                expanded.add(link)
                fresh = on_link[link] - seen
                seen |= fresh
                stack.extend(fresh)
        return sorted(seen)

    def _old_resolve(self, members: list[str]) -> set[str]:
        if not members:
            return set()
        jobs = [self._jobs[j] for j in members]
        edge_job = np.repeat(np.arange(len(jobs)), [len(j.links) for j in jobs])
        global_links = np.fromiter((l for j in jobs for l in j.links), dtype=np.int64, count=len(edge_job))
        local_links, edge_link = np.unique(global_links, return_inverse=True)
        system = physics.System(
            model=np.array([j.model for j in jobs]),
            compute=np.array([j.compute for j in jobs]),
            overlap=np.array([j.overlap for j in jobs]),
            congestion=np.array([j.congestion for j in jobs]),
            private=np.array([j.private for j in jobs]),
            edge_job=edge_job,
            edge_link=edge_link.reshape(-1),
            work=np.fromiter((w for j in jobs for w in j.works), dtype=float, count=len(edge_job)),
            n_links=len(local_links),
            kappa=self._kappa,
            sensitivity=np.array([j.sensitivity for j in jobs]),
        )
        changed = set()
        for job_id, value in zip(members, _solve_before(system)):
            value = float(value)
            if self._ratio.get(job_id) != value:
                self._ratio[job_id] = value
                changed.add(job_id)
        return changed


def measure(record: Record, label: str, topo, jobs: list[RunningJob], ops: int, rng: np.random.Generator) -> None:
    catalog = default_catalog()
    links = LinkContention().new_state(topo, catalog)._links
    states = {"before": Before(topo, catalog, links), "after": LinkState(topo, catalog, links)}
    fill = {}
    for name, state in states.items():
        start = time.perf_counter()
        for job in jobs:
            state.add(job)
        fill[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in states}
    for job in rng.choice(len(jobs), size=ops, replace=False):
        for name, state in states.items():  # interleaved, so both see the same machine load
            t0 = time.perf_counter()
            state.remove(jobs[job].job_id)
            t1 = time.perf_counter()
            state.add(jobs[job])
            t2 = time.perf_counter()
            times[name] += [t1 - t0, t2 - t1]
    full = {}
    for name, state in states.items():
        t0 = time.perf_counter()
        if isinstance(state, Before):
            state._old_resolve(sorted(state._jobs))
        else:
            state._resolve(sorted(state._jobs))
        full[name] = (time.perf_counter() - t0) * 1000
    multi = sum(j.placement.num_nodes > 1 for j in jobs)
    diff = max(abs(states["before"].ratio(j.job_id) - states["after"].ratio(j.job_id)) for j in jobs)
    print(f"{label}: {len(jobs)} jobs ({multi} multi-node) on {topo.total_gpus} GPUs (target < {TARGET_MS} ms per re-rate)")
    for name in states:
        ms = np.array(times[name]) * 1000
        print(
            f"  {name:>6}: re-rate mean {ms.mean():.3f} ms, median {np.median(ms):.3f} ms, p99 {np.percentile(ms, 99):.3f} ms | "
            f"all jobs at once {full[name]:.1f} ms | filling {fill[name]:.2f} s"
        )
    print(f"  largest ratio difference before vs after: {diff:.1e}")
    ms = np.array(times["after"]) * 1000
    record.add(f"link-model re-rate, {label} ({len(jobs)} jobs on {topo.total_gpus} GPUs), mean", ms.mean(), "ms", at_most=TARGET_MS)
    record.add(f"link-model re-rate, {label}, p99", float(np.percentile(ms, 99)), "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=200, help="jobs removed and re-added per case")
    parser.add_argument("--seed", type=int, default=0)
    add_json_flag(parser)
    args = parser.parse_args()
    record = Record("contention", args.json)
    for label, layout in (("1,024 GPUs", layout_1024), ("stress", layout_stress)):
        rng = np.random.default_rng(args.seed)
        topo, jobs = layout(rng)
        measure(record, label, topo, jobs, args.ops, rng)
    record.write()


if __name__ == "__main__":
    main()
