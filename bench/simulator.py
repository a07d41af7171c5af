"""Simulator speed: wall time, jobs/s and events/s, and how cost grows with the trace size.

Runs, side by side in one process:
  1. the bundled 256-job evaluation trace on the testbed with las+spread (the original
     simulator took 6.8 s wall on this machine for the same trace);
  2. generated Poisson traces (offered load 0.9, log-normal run times, median 1 h, sigma 1)
     on uniform clusters of 8-GPU nodes: 2,500 jobs on 32 nodes, 5,000 on 64, 10,000 on 128
     and 20,000 on 512;
and fits cost ~ jobs^k over the generated runs (k close to 1 means linear growth).

Usage: python bench/simulator.py [--policy las+spread] [--load 0.9] [--quick]
"""

from __future__ import annotations

import argparse
import time
from importlib import resources

import numpy as np

from deepshare.core.simulator import SimConfig
from deepshare.core.topology import uniform, load_topology
from deepshare.core.traces import generate, load, mix_preset
from deepshare.experiments import Scenario, simulate

TARGET_256_S = 0.3
TARGET_20K_S = 30.0


def run(label: str, scenario: Scenario, policy: str) -> tuple[int, float]:
    start = time.perf_counter()
    report, sim = simulate(scenario, policy)
    wall = time.perf_counter() - start
    jobs = len(scenario.jobs)
    print(
        f"{label:42s} {wall:8.3f} s  {jobs / wall:10,.0f} jobs/s  {sim.events_processed / wall:10,.0f} events/s"
        f"  decisions {report.decisions:7,d}  util {report.gpu_util:.3f}  finished {report.finished}/{jobs}"
    )
    return jobs, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="las+spread")
    parser.add_argument("--load", type=float, default=0.9, help="offered load of the generated traces")
    parser.add_argument("--quick", action="store_true", help="stop at 5,000 jobs")
    args = parser.parse_args()

    trace_path = resources.files("deepshare.data") / "traces" / "deepshare-simulate-trace0.json"
    testbed = load_topology("testbed")
    jobs = load(str(trace_path)).jobs
    runs = [run("256-job bundled trace, testbed (x5, best)", Scenario(testbed, jobs), args.policy) for _ in range(5)]
    best_256 = min(w for _, w in runs)
    print(f"  -> best of 5: {best_256:.3f} s (target < {TARGET_256_S} s; original simulator: 6.8 s)")

    sizes = [(2500, 32), (5000, 64), (10000, 128), (20000, 512)]
    if args.quick:
        sizes = sizes[:2]
    points = []
    for n_jobs, nodes in sizes:
        topo = uniform(nodes, 8)
        trace = generate(
            n_jobs, load=args.load, total_gpus=topo.total_gpus, mix=mix_preset("random"),
            duration_sigma=1.0, seed=1,
        )
        points.append(run(f"{n_jobs:,} Poisson jobs, {nodes} x 8 GPUs", Scenario(topo, trace.jobs), args.policy))
    n, w = np.array(points, dtype=float).T
    k = np.polyfit(np.log(n), np.log(w), 1)[0]
    print(f"  -> fitted cost ~ jobs^{k:.2f} over {len(points)} sizes")
    if not args.quick:
        print(f"  -> 20,000-job run: {points[-1][1]:.2f} s (target < {TARGET_20K_S} s)")


if __name__ == "__main__":
    main()
