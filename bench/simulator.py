"""Simulator speed: wall time, jobs/s and events/s, and how cost grows with the trace size.

Runs, side by side in one process:
  1. the bundled 256-job evaluation trace on the testbed with las+spread, best of 5 (the
     issue quotes 6.8 s wall for the original simulator on this trace on this machine; that
     simulator is not in this repository, so it is not re-run here);
  2. generated Poisson traces (offered load 0.9, log-normal run times with median 1 h and
     sigma 1) of 2,500, 5,000, 10,000 and 20,000 jobs on a fixed 128 x 8-GPU cluster, with the
     fitted exponent k of cost ~ jobs^k (k close to 1 = linear);
  3. a 20,000-job trace on 512 x 8 GPUs.

``--quick`` stops at 10,000 jobs: the 20,000-job traces (of 2 and 3) are not run, and the exponent
is fitted over three sizes.

Usage: python bench/simulator.py [--policy las+spread] [--load 0.9] [--quick]
"""

from __future__ import annotations

import argparse
import time
from importlib import resources

import numpy as np

from record import Record, add_json_flag

from deepshare.core.topology import load_topology, uniform
from deepshare.core.traces import generate, load, mix_preset
from deepshare.experiments.scenario import Scenario, simulate

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
    parser.add_argument("--quick", action="store_true", help="stop at 10,000 jobs: no 20,000-job trace (the exponent over 2,500-10,000)")
    add_json_flag(parser)
    args = parser.parse_args()
    record = Record("simulator", args.json)

    trace_path = resources.files("deepshare.data") / "traces" / "deepshare-simulate-trace0.json"
    testbed = load_topology("testbed")
    jobs = load(str(trace_path)).jobs
    runs = [run("256-job bundled trace, testbed (x5, best)", Scenario(testbed, jobs), args.policy) for _ in range(5)]
    best_256 = min(w for _, w in runs)
    print(f"  -> best of 5: {best_256:.3f} s (target < {TARGET_256_S} s; original simulator: 6.8 s)")
    record.add(f"bundled 256-job trace on the testbed, {args.policy}, best of 5", best_256, "s", at_most=TARGET_256_S)

    sizes = [2500, 5000, 10000] if args.quick else [2500, 5000, 10000, 20000]
    topo = uniform(128, 8)
    points = [
        run(f"{n:,} Poisson jobs, 128 x 8 GPUs", Scenario(topo, poisson(n, topo.total_gpus, args.load).jobs), args.policy)
        for n in sizes
    ]
    n, w = np.array(points, dtype=float).T
    k = np.polyfit(np.log(n), np.log(w), 1)[0]
    print(f"  -> on a fixed cluster, cost ~ jobs^{k:.2f} over {len(points)} sizes")
    record.add(f"growth exponent of wall time over {len(points)} trace sizes on 128 x 8 GPUs", k, "")
    if not args.quick:
        big = uniform(512, 8)
        _, wall = run("20,000 Poisson jobs, 512 x 8 GPUs", Scenario(big, poisson(20000, big.total_gpus, args.load).jobs), args.policy)
        print(f"  -> 20,000 jobs on 512 x 8 GPUs: {wall:.2f} s (target < {TARGET_20K_S} s)")
        record.add("20,000 Poisson jobs on 512 x 8 GPUs", wall, "s", at_most=TARGET_20K_S)
    record.write()


def poisson(n_jobs: int, total_gpus: int, load_: float):
    return generate(n_jobs, load=load_, total_gpus=total_gpus, mix=mix_preset("random"), duration_sigma=1.0, seed=1)


if __name__ == "__main__":
    main()
