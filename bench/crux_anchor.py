"""The Crux sanity anchor: the share of jobs slowed by contention on a Lingjun-like fabric.

Crux (Cao et al., SIGCOMM'24) reports that on Alibaba's Lingjun cluster (a three-tier Clos of
about 800 hosts) 36% of the jobs, holding 51% of the GPUs, suffered communication contention.
This script asks the link contention model the same question on a cluster of today's shape:

* cluster: the ``clos3-256`` preset (256 x 8 H100 SXM, leaf 1:1, aggregation 4:1 to the core:
  the Lingjun shape, see ``deepshare/data/clusters/clos3-256.yaml``);
* trace: the generator with ``--mix llm`` (the LLM-era classes of
  ``deepshare.core.contention.link.llm``) and ``--demand gang-heavy`` (16 to 256 GPUs), Poisson
  arrivals at an offered load of 0.9, log-normal run times (median 1 h, sigma 1);
* placement: contention-blind, simulated with ``--contention link``: ``fifo+consolidated`` (the
  fewest nodes, wherever they are: whole nodes for these gangs, as production schedulers give
  them), ``fifo+topo-bestfit`` (the least-free fabric domain that fits, lowest level first, as
  Kueue / Slurm's tree do) and ``fifo+spread`` (as many nodes as possible: jobs share nodes'
  NICs and PCIe);
* a job is *slowed* when its time-averaged throughput ratio (its record's ``mean_ratio``) is
  at most 1 / 1.05 (0.952), i.e. its contention slowdown is at least 1.05; the GPU-weighted share
  counts each job by its GPUs.

Each policy runs in three worlds, one row each:

* hardware scaling off, ECMP ports off: ``LinkContention(hardware_scaling=False)`` (every GPU
  computing at the TITAN Xp reference speed, the model before ``deepshare.core.hardware``) on
  the preset with its levels' ``port_gbps`` set to 0 (each uplink one fat pipe): the issue's
  "1.000" problem;
* hardware scaling on, ECMP ports off: the model of the hardware table, fat-pipe uplinks;
* hardware scaling on, ECMP ports on: the preset as shipped (400G uplink ports, each crossing
  flow hashed onto one; ``deepshare.core.contention.link.model``).

All rows use the preset's node hardware as shipped (its PCIe figures included). Nothing is
tuned to hit Crux's figure.

Usage: python bench/crux_anchor.py [--jobs 400] [--seed 1]
                                   [--policies fifo+consolidated,fifo+topo-bestfit,fifo+spread]
                                   [--cluster clos3-256] [--load 0.9] [--json PATH]

``--json`` also writes each row's shares for the results page (``make bench``, ``make results``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys

from record import Record, add_json_flag

from deepshare.experiments.provenance import commit, commit_label

CRUX_JOBS, CRUX_GPUS = 0.36, 0.51
SLOWED_AT_MOST = 1 / 1.05
"""A job is slowed when its mean throughput ratio is at most this: a slowdown of 1.05x or more."""
ANY_AT_MOST = 1 / 1.01
"""A second, looser column: jobs slowed by 1% or more (Crux counts jobs that *suffered*
contention, without publishing a threshold)."""


def shares(records) -> tuple[float, float, float, int, float]:
    """(share of jobs slowed, GPU-weighted share, mean slowdown, jobs counted, share of jobs with any
    slowdown of 1% or more) over finished jobs."""
    done = [r for r in records if r.finish_s is not None and r.productive_s > 0]
    if not done:
        return 0.0, 0.0, 1.0, 0, 0.0
    slowed = [r for r in done if r.mean_ratio <= SLOWED_AT_MOST]
    gpus = sum(r.gpus for r in done)
    mean_slowdown = sum(1.0 / r.mean_ratio for r in done) / len(done)
    touched = sum(1 for r in done if r.mean_ratio <= ANY_AT_MOST) / len(done)
    return len(slowed) / len(done), sum(r.gpus for r in slowed) / gpus, mean_slowdown, len(done), touched


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--policies", default="fifo+consolidated,fifo+topo-bestfit,fifo+spread")
    parser.add_argument("--cluster", default="clos3-256")
    add_json_flag(parser)
    args = parser.parse_args(argv)
    record = Record("crux_anchor", args.json)

    from deepshare.core.contention.link import LinkContention
    from deepshare.core.topology import load_topology
    from deepshare.core.traces import generate, mix_preset
    from deepshare.core.traces.generator import DEMAND_PRESETS
    from deepshare.experiments.scenario import Scenario, simulate

    topo = load_topology(args.cluster)
    jobs = generate(args.jobs, load=args.load, total_gpus=topo.total_gpus, demand=DEMAND_PRESETS["gang-heavy"],
                    mix=mix_preset("llm"), duration_sigma=1.0, seed=args.seed).jobs
    print(f"date {datetime.date.today().isoformat()}, commit {commit_label(commit())}, python {sys.version.split()[0]}")
    print(f"cluster {args.cluster} ({len(topo.nodes)} nodes, {topo.total_gpus} GPUs), {args.jobs} jobs "
          f"(mix llm, demand gang-heavy, load {args.load:g}, seed {args.seed}), contention link; "
          f"slowed: mean throughput ratio <= 1/1.05 (slowdown >= 1.05x)")
    fat = without_ports(topo)
    print(f"{'policy':<20} {'hardware':<9} {'ECMP ports':<11} {'jobs slowed':>12} {'GPU-weighted':>13} "
          f"{'mean slowdown':>14} {'finished':>9} {'slowed >=1%':>12}")
    worlds = (("off", False, "off", fat), ("on", True, "off", fat), ("on", True, "on", topo))
    for policy in [p.strip() for p in args.policies.split(",") if p.strip()]:
        for hw_label, scaling, port_label, cluster in worlds:
            report, _ = simulate(Scenario(cluster, jobs, LinkContention(hardware_scaling=scaling)), policy)
            job_share, gpu_share, slowdown, n, touched = shares(report.records)
            print(f"{policy:<20} {hw_label:<9} {port_label:<11} {job_share:>12.1%} {gpu_share:>13.1%} "
                  f"{slowdown:>14.3f} {n:>9} {touched:>12.1%}")
            world = f"{policy}, hardware scaling {hw_label}, ECMP ports {port_label}"
            record.add(f"{world}: jobs slowed >= 1.05x (Crux: {CRUX_JOBS:.0%})", 100 * job_share, "%")
            record.add(f"{world}: GPU-weighted share slowed (Crux: {CRUX_GPUS:.0%})", 100 * gpu_share, "%")
            record.add(f"{world}: mean slowdown", slowdown, "x")
            record.add(f"{world}: jobs slowed >= 1.01x", 100 * touched, "%")
    print(f"{'Crux (Lingjun)':<41} {CRUX_JOBS:>12.0%} {CRUX_GPUS:>13.0%}")
    record.write()


def without_ports(topo):
    """``topo`` with every level's ``port_gbps`` 0: each uplink one fat pipe (the model before ports)."""
    levels = tuple(dataclasses.replace(level, port_gbps=0.0) for level in topo.levels)
    return dataclasses.replace(topo, levels=levels) if levels else topo


if __name__ == "__main__":
    main()
