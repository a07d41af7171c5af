"""How much room is there over the best heuristic? The planner and the clairvoyant ceiling, per cell.

On any suite cell this runs, under the cell's own information model and contention:

* every heuristic the suite lists (``--heuristics`` to name fewer), behind the suite's tenants'
  admission when it names a tenants file, as the suite runs them (the planner's and the
  ceiling's candidates too, in the real run and in their copies): the *best heuristic* is the
  one with the least average JCT among all of them, challengers included, as
  ``bench/learned_targets.py`` chooses it (the suite's own tables choose among its anchors
  alone, so a ratio here is at or above the suite's);
* ``planner`` (:mod:`deepshare.policies.planner`), the registered non-clairvoyant policy: K
  futures drawn from what the view allows, arrivals like the past, common random numbers;
* the *clairvoyant ceiling*: the same planner, the same candidates, base heuristic and horizon,
  but with one future that is the truth: every known job's true remaining work (read from the
  simulation) and the trace's real arrivals up to the horizon, with the estimates they really
  come with. It is what choosing among the candidates' decisions could gain with perfect
  knowledge of the next ``--horizon`` seconds: a ceiling for look-ahead over these candidates,
  not a bound on every scheduler. With a horizon past the trace's end and ``--max-steps`` enough
  for every rollout to play the base heuristic to the end (``--horizon 31536000 --max-steps
  1000000``), each rollout's cost is the base's true cost-to-go, and the ceiling is exact one-step
  rollout improvement of the base (Bertsekas): a real run, never worse than the base, that
  measures what deciding differently among the candidates can win. Under ``estimated`` and
  ``unknown`` that holds because a copy's base sees what the real base would: the believed
  remaining times, the jobs' real estimates (the arrivals carry theirs here) and a history that
  grows with the jobs the copy finishes (:mod:`deepshare.policies.planner`), and the copies run
  the cell's own world (a perturbed one included). Exact up to two things a copy leaves out: a
  job still restoring from a checkpoint goes on at once in it (a preemptive base's rollout can
  then miss its real run by a few parts in 10^4), and under learned contention knowledge the
  copies' base predicts with the world's model, not the learned one. A short horizon can make it
  worse than the base: its rollouts stop early and judge the rest by the work left.

The ceiling is not a registered policy: it reads the simulator's private state, which no view,
no placement service and no live scheduler has, so there is nothing a user could run it on.

Prints per cell the best heuristic's, the planner's and the ceiling's average JCT, their ratios
to the best heuristic, the base heuristic's ratio, how many decisions the candidates contested and
how many the planner and the ceiling changed, and the CPU seconds of each; then geometric means,
the date and the commit. Figures only: nothing here asserts a result.

Usage: python bench/room.py --suite loaded --cells N [--only 1,7] [--futures 8] [--horizon 3600] [--heuristics a,b]
[--candidates a,b] [--max-steps 400] [--no-arrivals] [--no-planner | --no-ceiling] [--ceiling-knows all|work]
[--json runs/bench/room-SUITE.json] (figures for ``make results``) [--workers 2] (cells in
parallel processes; the figures are the same).
(``--cells N``: the suite's first N cells; ``--only 1,7``: those cells instead).
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from typing import Sequence

import numpy as np

from record import Record, add_json_flag

from deepshare.core.simulator import Simulator
from deepshare.core.types import JobSpec
from deepshare.core.view import ClusterView
from deepshare.experiments.suite import cell_contention, cell_topology, cell_trace, cells, load_suite
from deepshare.experiments.suite_spec import suite_tenants
from deepshare.experiments.provenance import commit, commit_label
from deepshare.policies import make_policy
from deepshare.policies.planner import Future, Planner, PlannerConfig


class TruthFutures:
    """The one true future of a decision point (the ceiling's): measurement only.

    Reads each job's true remaining work from ``sim``'s private state (nothing public carries it:
    that is the point of the information boundary) and the trace's arrivals, with the estimates
    the run gives them (under ``exact`` too: the copies then draw none of their own); with
    ``arrivals`` False, no arrivals (clairvoyant about the known jobs' work only: the gap to the
    full ceiling is what knowing the arrivals is worth)."""

    def __init__(self, sim: Simulator, jobs: Sequence[JobSpec], arrivals: bool = True) -> None:
        self.sim = sim
        self.with_arrivals = arrivals
        catalog, information = sim.catalog, sim.information
        true = [spec.duration_s if spec.duration_s is not None
                else spec.total_samples / catalog.reference_throughput(spec.model, spec.gpus)  # type: ignore[operator]
                for spec in jobs]
        estimates = information.estimates(jobs, true)
        self.arrivals = sorted(
            (spec if estimate is None else replace(spec, requested_s=estimate)
             for spec, estimate in zip(jobs, estimates)),
            key=lambda spec: spec.submit_time)

    def observe(self, view: ClusterView) -> bool:
        return True  # one true future

    def sample(self, view: ClusterView, horizon_end: float, rng: np.random.Generator) -> Future:
        known = [*view.queued, *view.running]  # reading the running jobs brings their progress to now
        state = self.sim._jobs  # noqa: SLF001 - the simulator's truth, for the ceiling only
        remaining = {j.job_id: max(state[j.job_id].remaining, 0.0) / state[j.job_id].ref_thp for j in known}
        arrivals = tuple(s for s in self.arrivals if view.now < s.submit_time < horizon_end) if self.with_arrivals else ()
        return Future(remaining, arrivals)


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def measure_cell(args: argparse.Namespace, index: int) -> tuple[list[str], str, float | None, float | None]:
    """One cell: its table row, the note for its figures, and the planner's and the ceiling's
    average JCT over the best heuristic's (None where not measured). A function of its
    arguments alone, so cells can be measured in worker processes (``--workers``)."""
    spec = load_suite(args.suite, check_learned=False)
    cell = cells(spec)[index]
    heuristics = args.heuristics.split(",") if args.heuristics else list(spec.heuristics)
    tenants = suite_tenants(spec)

    def make(name: str):  # type: ignore[no-untyped-def]
        """The heuristic ``name``, behind the suite's tenants' admission as the suite runs it; the
        planner and the ceiling build their candidates with it, so in their copies too."""
        built = make_policy(name)
        if tenants is None:
            return built
        from deepshare.tenants import Admitted

        return Admitted(built, tenants)

    jobs, topology, information = cell_trace(spec, cell), cell_topology(cell), cell.information(spec)

    def simulator() -> Simulator:
        return Simulator(topology, jobs, cell_contention(spec, cell), information=information)

    cpu = time.process_time()
    results = {name: simulator().run(make(name)).avg_jct_s for name in heuristics}
    best = min(results, key=lambda n: (results[n], n))
    heuristics_cpu = time.process_time() - cpu
    config = PlannerConfig(futures=args.futures, horizon_s=args.horizon, contention=cell.contention,
                           max_steps=args.max_steps, arrivals=not args.no_arrivals,
                           candidates=tuple(args.candidates.split(",")) if args.candidates else None)
    planner = Planner(config, make)
    base = planner.candidate_names(topology)[0]
    base_avg = results.get(base)
    if base_avg is None:
        base_avg = simulator().run(make(base)).avg_jct_s
    row = [f"{cell.label} (#{index})", f"`{best}` ({results[best]:,.0f})", f"{base_avg / results[best]:.3f}"]
    planned_cell, planned = ["-", "-", "-"], None  # ratio, decisions changed, CPU
    if not args.no_planner:
        cpu = time.process_time()
        planned = simulator().run(planner).avg_jct_s / results[best]
        planned_cell = [f"{planned:.3f}", str(planner.stats.changed), f"{time.process_time() - cpu:.0f}"]
    ceiling_cell, clairvoyant = ["-", "-", "-"], None
    contested = planner.stats.contested
    if not args.no_ceiling:
        sim = simulator()
        ceiling = Planner(replace(config, futures=1), make, name="clairvoyant",  # its copies run the cell's own world
                          futures_model=TruthFutures(sim, jobs, arrivals=args.ceiling_knows == "all"),
                          contention=cell_contention(spec, cell))
        cpu = time.process_time()
        clairvoyant = sim.run(ceiling).avg_jct_s / results[best]
        ceiling_cell = [f"{clairvoyant:.3f}", str(ceiling.stats.changed), f"{time.process_time() - cpu:.0f}"]
        contested = contested if not args.no_planner else ceiling.stats.contested
    row += [planned_cell[0], ceiling_cell[0], str(contested), f"{planned_cell[1]}, {ceiling_cell[1]}",
            f"{heuristics_cpu:.0f}, {planned_cell[2]}, {ceiling_cell[2]}"]
    return row, f"best heuristic {best}, {results[best]:,.0f} s", planned, clairvoyant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="loaded")
    parser.add_argument("--cells", type=int, default=1, help="run the suite's first N cells")
    parser.add_argument("--only", help="comma-separated cell indices in the suite's order instead, e.g. 1,7")
    parser.add_argument("--futures", type=int, default=PlannerConfig.futures, help="the planner's K")
    parser.add_argument("--horizon", type=float, default=PlannerConfig.horizon_s, help="rollout horizon, seconds")
    parser.add_argument("--heuristics", help="comma-separated heuristics to find the best among (default: the suite's)")
    parser.add_argument("--candidates", help="comma-separated heuristics the planner and the ceiling choose among, "
                        "the first the base (default: the planner's own for the cell's fabric)")
    parser.add_argument("--max-steps", type=int, default=PlannerConfig.max_steps,
                        help="most decisions one rollout takes (with a horizon past the trace's end and enough steps, "
                             "the ceiling's rollouts play the base to the end: exact rollout improvement, no worse than the base)")
    parser.add_argument("--no-arrivals", action="store_true",
                        help="the planner samples no arrivals (only the view's jobs): what a long horizon needs")
    parser.add_argument("--no-ceiling", action="store_true")
    parser.add_argument("--ceiling-knows", choices=("all", "work"), default="all",
                        help="what the ceiling is told: the known jobs' true work and the real arrivals (all), "
                             "or the true work alone (work: no arrivals in its copies)")
    parser.add_argument("--no-planner", action="store_true", help="the ceiling alone (a long horizon's planner is slow)")
    parser.add_argument("--workers", type=int, default=1, help="measure this many cells at once, one process each")
    add_json_flag(parser)
    args = parser.parse_args()
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: expected a positive number of processes")
    spec = load_suite(args.suite, check_learned=False)
    grid = cells(spec)
    try:
        chosen = [int(i) for i in args.only.split(",")] if args.only else list(range(min(args.cells, len(grid))))
    except ValueError:
        parser.error(f"--only {args.only!r}: expected comma-separated cell indices, e.g. 1,7")
    wrong = [i for i in chosen if not 0 <= i < len(grid)]
    if wrong:
        flag = "--only" if args.only else "--cells"
        parser.error(f"{flag}: {wrong} out of range: suite {spec.name} has {len(grid)} cells (0..{len(grid) - 1})")
    heuristics = args.heuristics.split(",") if args.heuristics else list(spec.heuristics)
    print(f"# room: suite {spec.name}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}, commit {commit_label(commit())}")
    setting = (f"planner K={args.futures}, horizon {args.horizon:g} s, at most {args.max_steps} steps a rollout"
               f"{', no arrivals' if args.no_arrivals else ''}"
               f"{'; the ceiling knows the true work, not the arrivals' if args.ceiling_knows == 'work' else ''}"
               f"{', candidates ' + args.candidates if args.candidates else ''}")
    record = Record(f"room ({spec.name})", args.json)
    print(f"# {setting}; best heuristic among {len(heuristics)}")
    print("| cell | best heuristic (avg JCT s) | base / best | planner / best | ceiling / best | contested | "
          "changed (planner, ceiling) | CPU s (heuristics, planner, ceiling) |")
    print("|---|---|---|---|---|---|---|---|")
    planner_ratios, ceiling_ratios = [], []
    same_args = [args] * len(chosen)
    if args.workers > 1 and len(chosen) > 1:
        pool = ProcessPoolExecutor(min(args.workers, len(chosen)))
        measured = pool.map(measure_cell, same_args, chosen)
    else:
        pool, measured = None, map(measure_cell, same_args, chosen)
    try:
        # in the cells' order, each as soon as it and those before are done
        for index, (row, note, planned, clairvoyant) in zip(chosen, measured):
            print("| " + " | ".join(row) + " |", flush=True)
            label = grid[index].label
            if planned is not None:
                planner_ratios.append(planned)
                record.add(f"{label}: planner / best heuristic", planned, "x", note=note)
            if clairvoyant is not None:
                ceiling_ratios.append(clairvoyant)
                record.add(f"{label}: clairvoyant ceiling / best heuristic", clairvoyant, "x", note=note)
            record.write(quiet=True)  # a long run stopped early keeps the cells it finished
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    parts = ([f"planner / best {geomean(planner_ratios):.3f}"] if planner_ratios else []) + (
        [f"ceiling / best {geomean(ceiling_ratios):.3f}"] if ceiling_ratios else [])
    print(f"geometric mean over {len(chosen)} cells: " + ", ".join(parts or ["nothing measured"]))
    for what, ratios in (("planner", planner_ratios), ("clairvoyant ceiling", ceiling_ratios)):
        if ratios:
            record.add(f"{what} / best heuristic, geometric mean over {len(chosen)} cells", geomean(ratios), "x",
                       note=setting)
    record.write()


if __name__ == "__main__":
    main()
