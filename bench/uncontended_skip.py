"""Why ``uncontended`` skips a whole GPU demand once one of its jobs waits on contention.

Within one decision the order-then-place heuristics skip the later jobs of a GPU demand once one
of them failed to place (:mod:`deepshare.policies.heuristic`). For most placements that is only
a shortcut: the free GPUs only shrink, so the later jobs would fail too. ``uncontended`` also
refuses on the job's *model* (its predicted slowdown), so a job of the same size but another
model might have been placed: the skip makes the demand's best-ranked job hold the others back
for that decision. This measures the alternative, side by side on the same cells: a refusal for
contention skips only the jobs of that demand *and model*, a refusal for the shape (``packed``'s
wait) still the demand, every other job is tried.

Prints, per policy, the alternative's average JCT over the shipped rule's on each cell (geometric
mean, best and worst cell). Above 1: trying the other jobs costs JCT, which is why the shipped
rule skips. Both run the sorted path (``use_index=False``, the same decisions as the index).
Figures only: nothing is asserted.

Usage: python bench/uncontended_skip.py [--suite loaded] [--cells 12] [--policies srsf+uncontended,bsrsf+uncontended]
"""

from __future__ import annotations

import argparse
import math
from dataclasses import fields, replace

from record import Record, add_json_flag

from deepshare.core.simulator import Simulator
from deepshare.core.types import Launch
from deepshare.experiments.suite_cells import cell_contention, cell_topology, cell_trace, cells
from deepshare.experiments.suite_spec import load_suite
from deepshare.policies import make_policy
from deepshare.policies.fabric_place import with_topology
from deepshare.policies.free_index import FreeIndex
from deepshare.policies.heuristic import HeuristicPolicy
from deepshare.policies.placement import consolidate, demand, make_packed

SHAPE = with_topology(make_packed(), consolidate)
"""``uncontended``'s shape rule alone: a refusal here is the shape's, not contention's."""


class PerModel(HeuristicPolicy):
    """The heuristic with the alternative skip (module doc), on the sorted path."""

    def _place_in_order(self, jobs, free, view):  # type: ignore[no-untyped-def]
        launches, pending = [], []
        index = FreeIndex(free)
        total = index.total
        failed: set = set()
        for job in jobs:
            if job.gpus > total or demand(job) in failed or (demand(job), job.model) in failed:
                continue
            placement = self.place(job, index, view, pending)
            if placement is None:
                failed.add(demand(job) if SHAPE(job, index, view, pending) is None else (demand(job), job.model))
                continue
            index.take(placement)
            placement.take(free)
            total -= job.gpus
            launches.append(Launch(job.job_id, placement))
            pending.append((job, placement))
        return tuple(launches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="loaded")
    parser.add_argument("--cells", type=int, default=12, help="the suite's first N cells (default 12)")
    parser.add_argument("--policies", default="srsf+uncontended,bsrsf+uncontended")
    add_json_flag(parser)
    args = parser.parse_args()
    record = Record("uncontended_skip", args.json)
    spec = load_suite(args.suite, check_learned=False)
    grid = cells(spec)[: args.cells]
    print(f"suite {spec.name}, {len(grid)} cells: average JCT with a per-model skip over the shipped per-demand skip")
    for name in args.policies.split(","):
        shipped = replace(make_policy(name), use_index=False)
        if not isinstance(shipped, HeuristicPolicy) or shipped.preemptive:
            raise SystemExit(f"{name}: expected a non-preemptive order-then-place heuristic")
        alternative = PerModel(**{f.name: getattr(shipped, f.name) for f in fields(shipped) if f.init})
        logs = []
        for cell in grid:
            jcts = []
            for policy in (shipped, alternative):
                sim = Simulator(cell_topology(cell), cell_trace(spec, cell), cell_contention(spec, cell),
                                information=cell.information(spec))
                jcts.append(sim.run(policy).avg_jct_s)
            logs.append(math.log(jcts[1] / jcts[0]))
        mean = math.exp(sum(logs) / len(logs))
        print(f"  {name:24} geometric mean {mean:.4f}, best cell {math.exp(min(logs)):.4f}, worst cell {math.exp(max(logs)):.4f}")
        record.add(f"{name} on {spec.name}: per-model skip over per-demand skip (geometric mean)", mean, "x")
    record.write()


if __name__ == "__main__":
    main()
