"""How much could a policy gain over the strongest heuristic by deciding differently? (issue 13)

Superseded by ``bench/room.py`` (issue 37), which runs the registered ``planner`` and the
clairvoyant ceiling with the same rollout machinery (:mod:`deepshare.policies.planner`), under the
cell's own information model; this script is kept to reproduce issue 13's figures.

A one-step look-ahead on a suite's cells: at every decision point, the decisions of the base
heuristic (``srsf+uncontended+preempt``) and of a few others are each tried on a copy of the
cluster (:meth:`deepshare.core.simulator.Simulator.from_view`), the copy is simulated to its end
with the base heuristic deciding from then on, and the decision whose copy accumulates the least
job-time (the integral of jobs in the system, i.e. the sum of their JCTs) is taken. Ties keep the
base's decision, so where every copy agrees the run is the base's own.

What the copies know of the future (``--future``):

* ``oracle``: the trace's real arrivals to come. Clairvoyant, so not a policy: a ceiling on what
  choosing among these decisions could gain.
* ``known``: no arrivals; only the jobs queued and running now.
* ``replay``: the last ``--horizon`` seconds' arrivals again, shifted forward by that much (a
  stationary guess that uses nothing from the future).

Prints, per cell, the base's and the look-ahead's average and p99 JCT, their ratio, how many
decisions differed from the base's and the CPU seconds of each; then the geometric mean of the
ratios. Figures only: nothing here asserts a result. ``oracle`` on a ``loaded`` cell takes
about 2 minutes of CPU on ``profiled`` and much longer on ``link``.

Only exact-duration cells on testbed nodes with the shipped contention model (others are refused;
``bench/room.py`` measures any cell).

Usage: python bench/lookahead_ceiling.py [--suite loaded] [--cells 0,6,12,18] [--future oracle|known|replay]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from typing import Sequence

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import Decision, JobSpec
from deepshare.core.view import ClusterView
from deepshare.experiments.suite import cell_trace, cells, load_suite
from deepshare.policies import make_policy

BASE = "srsf+uncontended+preempt"
ALTERNATIVES = ("srsf+uncontended", "srsf+packed+preempt", "srsf+consolidated+preempt")


def _key(decision: Decision) -> tuple:
    return (tuple(sorted((launch.job_id, launch.placement.alloc) for launch in decision.launch)),
            tuple(sorted(decision.preempt)), tuple(sorted((m.job_id, m.placement.alloc) for m in decision.migrate)))


class LookAhead:
    """The base heuristic, overruled where another decision's simulated copy does better."""

    def __init__(self, contention: str, jobs: Sequence[JobSpec], future: str, horizon_s: float) -> None:
        self.name = f"look-ahead ({future})"
        self.base, self.others = make_policy(BASE), [make_policy(name) for name in ALTERNATIVES]
        self.contention = contention
        self.jobs = sorted(jobs, key=lambda j: j.submit_time)
        self.future, self.horizon_s = future, horizon_s
        self.decisions = self.changed = self.copies = 0

    def decide(self, view: ClusterView) -> Decision:
        self.decisions += 1
        chosen = self.base.decide(view)
        options = {_key(chosen): chosen}
        for policy in self.others:
            decision = policy.decide(view)
            options.setdefault(_key(decision), decision)
        if len(options) == 1:
            return chosen
        arrivals = self._arrivals(view.now)
        best, best_cost = chosen, None
        for decision in options.values():  # the base's first: it wins ties
            cost = self._job_time(view, decision, arrivals)
            if cost is not None and (best_cost is None or cost < best_cost - 1e-6):
                best, best_cost = decision, cost
        self.changed += best is not chosen
        return best

    def _job_time(self, view: ClusterView, decision: Decision, arrivals: list[JobSpec]) -> float | None:
        self.copies += 1
        copy = Simulator.from_view(view, make_contention(self.contention), future=arrivals)
        try:
            copy.advance()
            copy.apply(decision)
            while (next_view := copy.advance()) is not None:
                copy.apply(self.base.decide(next_view))
        except DeepShareError:  # an alternative that stalls the copy is no option
            return None
        return copy.jobs_in_system_area

    def _arrivals(self, now: float) -> list[JobSpec]:
        if self.future == "oracle":
            return [job for job in self.jobs if job.submit_time > now]
        if self.future == "known":
            return []
        past = [job for job in self.jobs if now - self.horizon_s < job.submit_time <= now]
        return [dataclasses.replace(job, job_id=f"{job.job_id}~", submit_time=job.submit_time + self.horizon_s)
                for job in past]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="loaded")
    parser.add_argument("--cells", help="comma-separated cell indices in the suite's order (default: the suite's "
                        "profiled exact-duration cells; on loaded 0,6,12,18)")
    parser.add_argument("--future", choices=("oracle", "known", "replay"), default="oracle")
    parser.add_argument("--horizon", type=float, default=3600.0, help="seconds of arrivals --future replay repeats")
    args = parser.parse_args()
    spec = load_suite(args.suite, check_learned=False)
    grid = cells(spec)
    if args.cells is None:
        chosen = [i for i, cell in enumerate(grid) if cell.contention == "profiled" and cell.durations == "exact"
                  and not cell.cluster and cell.knowledge == "exact"]
    else:
        try:
            chosen = [int(i) for i in args.cells.split(",")]
        except ValueError:
            parser.error(f"--cells {args.cells!r}: expected comma-separated cell indices, e.g. 0,2")
        wrong = [i for i in chosen if not 0 <= i < len(grid)]
        if wrong:
            parser.error(f"--cells: {wrong} out of range: suite {spec.name} has {len(grid)} cells (0..{len(grid) - 1})")
    if not chosen:
        parser.error(f"suite {spec.name} has no profiled cell: name the cells with --cells")
    # it simulates exact durations on testbed nodes with the shipped model: a cell of another kind
    # would be labelled as itself and run as something else
    other = [i for i in chosen if grid[i].durations != "exact" or grid[i].cluster or grid[i].knowledge != "exact"
             or spec.perturb_contention is not None or spec.tenants is not None]
    if other:
        parser.error(f"--cells: {other} of suite {spec.name} are not exact-duration cells on testbed nodes with the "
                     "shipped contention model, the only kind this superseded script simulates (bench/room.py measures any cell)")
    ratios = []
    for index in chosen:
        cell = grid[index]
        jobs, topology = cell_trace(spec, cell), uniform(cell.nodes, cell.gpus_per_node)
        cpu = time.process_time()
        base = Simulator(topology, jobs, make_contention(cell.contention)).run(make_policy(BASE))
        base_cpu, cpu = time.process_time() - cpu, time.process_time()
        policy = LookAhead(cell.contention, jobs, args.future, args.horizon)
        mine = Simulator(topology, jobs, make_contention(cell.contention)).run(policy)
        mine_cpu = time.process_time() - cpu
        ratio = mine.avg_jct_s / base.avg_jct_s
        ratios.append(ratio)
        print(f"cell {index} ({cell.label}): {BASE} avg {base.avg_jct_s:,.0f} s p99 {base.p99_jct_s:,.0f} s | "
              f"look-ahead ({args.future}) avg {mine.avg_jct_s:,.0f} s p99 {mine.p99_jct_s:,.0f} s | "
              f"ratio {ratio:.3f} | {policy.changed} of {policy.decisions} decisions changed, {policy.copies} copies | "
              f"CPU {base_cpu:.1f} s / {mine_cpu:.1f} s", flush=True)
    print(f"geometric mean ratio over {len(ratios)} cells: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")


if __name__ == "__main__":
    main()
