"""Million-job traces: simulator wall time, jobs/s, peak memory and the fitted cost exponent.

Each (size, policy) point runs in its own process, so its peak RSS (``resource.getrusage``'s
``ru_maxrss``) is that run's alone. Traces come from the generator (``deepshare.core.traces``):
Poisson arrivals sized to an offered load of 0.9 on 512 x 8 = 4,096 GPUs, GPU demands 2/4/8,
log-normal run times (median 1 h, sigma 1), the ``random`` model mix, seed 1. The simulation
keeps no per-job records (``keep_records=False``: the report's numbers come from NumPy
columns), as ``deepshare simulate`` does with ``--jobs-csv``. The wall time is the simulation's
alone (generation and building the policy, for a learned one importing torch and loading its
checkpoint, are printed apart), CPU its process time; the exponent k is the least-squares slope of
log(wall) on log(jobs) over the sizes measured (cost ~ jobs^k; 1 = linear).

Target (issue 14): 1,000,000 jobs on 4,096 GPUs in <= 10 minutes for every non-preemptive
heuristic, cost ~ jobs^<=1.1. ``--target-s S``: a wall-time target for every size measured instead
(``make bench`` gives rl-hybrid's on 20,000 jobs, 60 s).

``--burst N`` instead: N jobs all queued at t = 0 on 64 x 8 GPUs (the queue at its longest),
``fifo+consolidated`` run by the simulator as it is and by its straightforward reference mode
(a copy of the queue and a full sort at every decision: ``ReferenceSimulator``
with ``use_index=False``) side by side in this process: each side warmed up on a burst of 1,000
jobs, then ``--repeats K`` (default 3) runs of each, the order alternating, the median CPU time of
each and their ratio; the reports must agree.

``--cluster PRESET_OR_SPEC`` instead: each (size, policy) point on that cluster (a fabric preset
such as ``h100-leafspine-2to1`` or ``clos3-256``, or a spec file) and on the **flat cluster of
the same size** (the same nodes and hardware with the fabric's levels and domains dropped: one
``rack`` level, as a spec without levels means), each in its own process on the same trace (load
0.9 on that many GPUs), and the CPU ratio fabric / flat (issue 36's target: within 2x).

Usage: python bench/scale.py [--sizes 25000,100000,400000,1000000] [--policies las+consolidated,...]
       python bench/scale.py --cluster h100-leafspine-2to1 --sizes 100000 --policies las+topo-bestfit
       python bench/scale.py --sizes 20000 --policies rl-hybrid --target-s 60
       python bench/scale.py --quick          # 25,000 and 100,000 jobs only
       python bench/scale.py --burst 20000 [--repeats 3]   # the long-queue case beside the reference
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from record import Record, add_json_flag

TARGET_1M_S = 600.0
TARGET_EXPONENT = 1.1
NODES, GPUS_PER_NODE, LOAD = 512, 8, 0.9


def cluster_of(spec: str, flat: bool):  # -> Topology (imported in the child only)
    """The cluster ``spec`` names (a preset or a spec file), or with ``flat`` the same nodes and
    hardware without its fabric: ``levels`` and every node group's ``domains`` dropped."""
    from importlib import resources

    import yaml

    from deepshare.core.topology import load_topology, parse_topology, preset_names

    if not flat:
        return load_topology(spec)
    if spec in preset_names():
        text = (resources.files("deepshare.data") / "clusters" / f"{spec}.yaml").read_text()
    else:
        text = Path(spec).read_text()
    raw = yaml.safe_load(text)
    raw.pop("levels", None)
    for group in raw.get("nodes", []):
        group.pop("domains", None)
    raw["name"] = f"{raw.get('name', 'cluster')}-flat"
    return parse_topology(yaml.safe_dump(raw), source=f"{spec} without its fabric")


def child(n: int, policy: str, cluster: str = "", flat: bool = False) -> None:
    """One point, in this process: print its measurements as one JSON line."""
    import resource

    from deepshare.core.simulator import Simulator
    from deepshare.core.topology import uniform
    from deepshare.core.traces import generate, mix_preset
    from deepshare.core.workloads import default_catalog
    from deepshare.experiments.scenario import Scenario, scenario_policy

    topo = cluster_of(cluster, flat) if cluster else uniform(NODES, GPUS_PER_NODE)
    start = time.perf_counter()
    jobs = generate(n, load=LOAD, total_gpus=topo.total_gpus, mix=mix_preset("random"), duration_sigma=1.0, seed=1).jobs
    generated = time.perf_counter()
    rss_trace = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scenario = Scenario(topo, jobs)
    built = scenario_policy(scenario, policy)  # before the clock: a learned policy imports torch, loads its checkpoint
    policy_s = time.perf_counter() - generated
    cpu, began = time.process_time(), time.perf_counter()
    sim = Simulator(scenario.fixed_topology, scenario.jobs, scenario.contention, catalog=scenario.catalog or default_catalog(),
                    config=scenario.config, keep_records=False, information=scenario.information, history=scenario.history)
    report = sim.run(built)  # what deepshare.experiments.scenario.simulate runs, the policy already built
    cpu = time.process_time() - cpu
    done = time.perf_counter()
    print(json.dumps({
        "jobs": n, "policy": policy, "gen_s": generated - start, "policy_s": policy_s, "wall_s": done - began, "cpu_s": cpu,
        "rss_trace_mb": rss_trace / 1024, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "decisions": report.decisions, "events": sim.events_processed, "finished": report.finished,
        "gpu_util": report.gpu_util, "avg_jct_s": report.avg_jct_s,
    }))


def measure(n: int, policy: str, cluster: str = "", flat: bool = False) -> dict:
    extra = ["--child-cluster", cluster] + (["--child-flat"] if flat else []) if cluster else []
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(n), policy, *extra], capture_output=True, text=True, check=False,
    )
    if out.returncode != 0:
        where = f" on {cluster}{' (flat)' if flat else ''}" if cluster else ""
        raise SystemExit(f"{policy} on {n:,} jobs{where} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


BURST_WARMUP = 1000
"""Jobs of the burst each side first runs untimed (imports, first-call caches, the allocator)."""


def burst(n: int, repeats: int, record: Record) -> None:
    """``--burst``: the current simulator and its reference mode on one long queue: each side
    warmed up on a shorter burst, then ``repeats`` runs of each, the order alternating (current
    first, then reference first), and the median CPU time of each side."""
    from dataclasses import replace
    from statistics import median

    from deepshare.core.contention import make_contention
    from deepshare.core.reference import ReferenceSimulator
    from deepshare.core.simulator import Simulator
    from deepshare.core.topology import uniform
    from deepshare.core.traces import generate, mix_preset
    from deepshare.policies import make_policy

    topo = uniform(64, 8)

    def trace(count: int):  # every job at t = 0
        return generate(count, mix=mix_preset("random"), duration_sigma=1.0, seed=1).jobs

    def once(label: str, jobs) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
        reference = label == "reference"
        policy = make_policy("fifo+consolidated")
        if reference:
            policy = replace(policy, use_index=False)
        sim = (ReferenceSimulator if reference else Simulator)(topo, jobs, make_contention("profiled"), keep_records=False)
        cpu = time.process_time()
        report = sim.run(policy)
        return time.process_time() - cpu, report.to_dict()

    sides = ("current", "reference")
    warm = trace(min(n, BURST_WARMUP))
    for label in sides:
        once(label, warm)
    jobs = trace(n)
    times: dict[str, list[float]] = {label: [] for label in sides}
    reports: dict[str, dict] = {}
    for i in range(repeats):
        for label in (sides if i % 2 == 0 else sides[::-1]):
            cpu, report = once(label, jobs)
            times[label].append(cpu)
            if reports.setdefault(label, report) != report:
                raise SystemExit(f"the {label} simulator's report differs between two runs of the same burst")
    if reports["current"] != reports["reference"]:
        raise SystemExit("the reports differ: the current simulator does not decide as the reference does")
    best = {label: median(times[label]) for label in sides}
    for label in sides:
        print(f"burst of {n:,} jobs at t=0 on 64 x 8 GPUs, fifo+consolidated, {label:9s}: "
              f"{best[label]:7.2f} s CPU (median of {repeats}: {', '.join(f'{t:.2f}' for t in times[label])})  "
              f"decisions {reports[label]['decisions']:,}", flush=True)
    ratio = best["reference"] / best["current"]
    print(f"  -> same report; the reference takes {ratio:.1f}x the CPU time (both warmed up on {len(warm):,} jobs, "
          f"{repeats} runs each, the order alternating)")
    note = f"median of {repeats}, after a warm-up; the order alternating"
    record.add(f"{n:,} jobs queued at t = 0 on 64 x 8 GPUs, fifo+consolidated", best["current"], "s CPU", note=note)
    record.add("the same in the reference mode (no queue index, views copied)", best["reference"], "s CPU", note=note)
    record.add("the reference mode over the current simulator, CPU", ratio, "x", note=note)


FABRIC_TARGET = 2.0
"""Issue 36: a fabric preset's simulation within 2x of the flat cluster's (CPU time)."""


def side_by_side(cluster: str, sizes: list[int], policies: list[str], record: Record) -> None:
    """``--cluster``: every point on the fabric and on the flat cluster of the same size (see above)."""
    for policy in policies:
        for n in sizes:
            fab, flat = measure(n, policy, cluster), measure(n, policy, cluster, flat=True)
            ratio = fab["cpu_s"] / max(flat["cpu_s"], 1e-9)
            for label, p in ((cluster, fab), (f"{cluster} flat", flat)):
                print(f"{policy:22s} {n:>9,} jobs  {label:28s} sim {p['wall_s']:8.1f} s (CPU {p['cpu_s']:7.1f} s)  "
                      f"decisions {p['decisions']:,}  util {p['gpu_util']:.3f}  avg JCT {p['avg_jct_s']:,.0f} s",
                      flush=True)
            print(f"  -> {policy}, {n:,} jobs: the fabric takes {ratio:.2f}x the flat cluster's CPU time "
                  f"(target <= {FABRIC_TARGET:g}x)", flush=True)
            record.add(f"{policy}, {n:,} jobs on {cluster}, over the flat cluster of the same size", ratio, "x",
                       at_most=FABRIC_TARGET, note=f"fabric {fab['cpu_s']:.1f} s CPU, flat {flat['cpu_s']:.1f} s CPU")


def exponent(points: list[dict], key: str = "wall_s") -> float | None:
    import numpy as np

    if len(points) < 2:
        return None
    n = np.log([p["jobs"] for p in points])
    w = np.log([p[key] for p in points])
    return float(np.polyfit(n, w, 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="25000,100000,400000,1000000", help="comma-separated job counts")
    parser.add_argument("--policies", default="las+consolidated", help="comma-separated policy names")
    parser.add_argument("--quick", action="store_true", help="25,000 and 100,000 jobs only")
    parser.add_argument("--target-s", type=float, metavar="S",
                        help="a wall-time target for every size measured (default: <= 600 s at 1,000,000 jobs only)")
    parser.add_argument("--burst", type=int, metavar="N", help="N jobs at t=0: current vs reference (see above)")
    parser.add_argument("--repeats", type=int, default=None, metavar="K",
                        help="with --burst: K runs of each side, the order alternating, the median (default 3)")
    parser.add_argument("--cluster", metavar="PRESET_OR_SPEC",
                        help="a fabric preset or spec: each point on it and on the flat cluster of the same size")
    parser.add_argument("--child", nargs=2, metavar=("JOBS", "POLICY"), help=argparse.SUPPRESS)
    parser.add_argument("--child-cluster", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-flat", action="store_true", help=argparse.SUPPRESS)
    add_json_flag(parser)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1], args.child_cluster, args.child_flat)
        return
    if args.repeats is not None and args.burst is None:
        parser.error("--repeats goes with --burst (the sizes run once each)")
    if args.burst is not None:
        repeats = 3 if args.repeats is None else args.repeats
        if args.burst <= 0:
            parser.error(f"--burst {args.burst}: expected a positive job count")
        if repeats <= 0:
            parser.error(f"--repeats {repeats}: expected a positive count")
        record = Record("scale-burst", args.json)
        burst(args.burst, repeats, record)
        record.write()
        return
    sizes = [25000, 100000] if args.quick else [int(float(s)) for s in args.sizes.split(",") if s.strip()]
    if not sizes or any(n <= 0 for n in sizes):
        parser.error(f"--sizes {args.sizes!r}: expected positive job counts")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.cluster:
        from deepshare.core.topology import load_topology

        load_topology(args.cluster)  # a bad name or spec fails here, before any point runs
        record = Record(f"scale-fabric ({Path(args.cluster).stem})", args.json)  # one section per cluster
        side_by_side(args.cluster, sizes, policies, record)
        record.write()
        return
    record = Record("scale", args.json)
    print(f"generated traces, load {LOAD} on {NODES} x {GPUS_PER_NODE} = {NODES * GPUS_PER_NODE:,} GPUs "
          "(each point in its own process)")
    for policy in policies:
        points = []
        for n in sizes:
            p = measure(n, policy)
            points.append(p)
            per_job_kb = (p["peak_rss_mb"] - p["rss_trace_mb"]) * 1024 / n
            print(
                f"{policy:22s} {n:>9,} jobs  sim {p['wall_s']:8.1f} s (CPU {p['cpu_s']:7.1f} s)  {n / p['wall_s']:7,.0f} jobs/s  "
                f"peak RSS {p['peak_rss_mb']:7,.0f} MB (trace {p['rss_trace_mb']:,.0f} MB; sim +{per_job_kb:.2f} KB/job)  "
                f"gen {p['gen_s']:.1f} s  policy built in {p['policy_s']:.1f} s  decisions {p['decisions']:,}  "
                f"util {p['gpu_util']:.3f}",
                flush=True,
            )
        k, k_cpu = exponent(points), exponent(points, "cpu_s")
        big = max(points, key=lambda q: q["jobs"])
        for p in points:
            target = args.target_s if args.target_s is not None else TARGET_1M_S if p["jobs"] >= 1_000_000 else None
            record.add(f"{policy}, {p['jobs']:,} jobs on {NODES} x {GPUS_PER_NODE} GPUs", p["wall_s"], "s wall",
                       at_most=target, note=f"CPU {p['cpu_s']:.1f} s, peak RSS {p['peak_rss_mb']:,.0f} MB")
            if args.target_s is not None:
                print(f"  -> {policy}: {p['jobs']:,} jobs in {p['wall_s']:.1f} s (target <= {args.target_s:g} s: "
                      f"{'met' if p['wall_s'] <= args.target_s else 'NOT met'})")
        if k_cpu is not None:
            record.add(f"{policy}: growth exponent of CPU time over job counts", k_cpu, "", at_most=TARGET_EXPONENT)
        if k is not None:
            over = ", ".join(f"{q['jobs']:,}" for q in points)
            print(f"  -> {policy}: cost ~ jobs^{k:.2f} in wall time, jobs^{k_cpu:.2f} in CPU time, over {over} "
                  f"(target <= {TARGET_EXPONENT}; on a shared machine the CPU-time fit is the steadier one)")
        if big["jobs"] >= 1_000_000:
            print(f"  -> {policy}: 1,000,000 jobs in {big['wall_s']:.0f} s (target <= {TARGET_1M_S:.0f} s)")
        elif k is not None:
            est = big["wall_s"] * (1_000_000 / big["jobs"]) ** k
            print(f"  -> {policy}: 1,000,000 jobs extrapolated from {big['jobs']:,} at k={k:.2f}: {est:.0f} s "
                  f"(target <= {TARGET_1M_S:.0f} s; not measured)")
    record.write()


if __name__ == "__main__":
    main()
