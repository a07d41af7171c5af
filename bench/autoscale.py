"""Autoscalers side by side on a bursty two-day trace (prints a table; no assertions).

    .venv/bin/python bench/autoscale.py [--jobs 150] [--seed 1] [--repeats 3] [--write-trace PATH]

The trace: jobs arrive as a Poisson process at 6x the night rate during an 8-hour working day
(09:00-17:00), on two days; GPUs from {1, 2, 4, 8, 16}, isolated durations log-uniform between
10 minutes and 4 hours, models drawn from the catalog. The cluster model is
``deepshare/data/autoscale/aws-mixed.yaml`` (AWS g5.12xlarge and p4d.24xlarge pools). The
bundled ``deepshare/data/autoscale/diurnal-150.csv`` is this script's trace at its defaults.

``sim s``: each autoscaler's own simulation wall time under that policy, the median of
``--repeats`` timed runs (default 3) after an untimed one, the autoscalers' order rotated from one
repeat to the next.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import numpy as np

from deepshare.experiments.autoscale import load_config, run_autoscalers
from deepshare.experiments.scenario import Scenario
from deepshare.core.autoscaling import AUTOSCALERS
from deepshare.core.contention import make_contention
from deepshare.core.traces import write_canonical
from deepshare.core.types import JobSpec

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("MoE", "FSDP", "DLRM", "GraphSage", "MobileNetV3", "Transformer-XL")


def diurnal_trace(jobs: int, seed: int) -> list[JobSpec]:
    """``jobs`` jobs over two days, six times denser during 09:00-17:00 than at night."""
    rng = np.random.default_rng(seed)
    day_weight = 6.0
    # arrival times by thinning: draw uniformly over 48 h, accept with the relative rate
    times: list[float] = []
    while len(times) < jobs:
        t = float(rng.uniform(0, 48 * 3600))
        hour = (t / 3600) % 24
        rate = day_weight if 9 <= hour < 17 else 1.0
        if rng.uniform(0, day_weight) < rate:
            times.append(round(t))
    times.sort()
    out = []
    for i, t in enumerate(times):
        gpus = int(rng.choice([1, 2, 4, 8, 16], p=[0.25, 0.25, 0.25, 0.2, 0.05]))
        duration = round(math.exp(rng.uniform(math.log(600), math.log(4 * 3600))))
        out.append(JobSpec(f"d{i}", MODELS[int(rng.integers(len(MODELS)))], gpus, submit_time=float(t), duration_s=float(duration)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--config", default=str(ROOT / "deepshare" / "data" / "autoscale" / "aws-mixed.yaml"))
    ap.add_argument("--policies", default="las+consolidated,las+spread,las+contention-aware")
    ap.add_argument("--write-trace", metavar="PATH", help="also write the trace as canonical CSV")
    ap.add_argument("--repeats", type=int, default=3, metavar="K",
                    help="'sim s': each autoscaler's median wall time over K timed runs, after one untimed (default 3)")
    args = ap.parse_args()
    if args.repeats <= 0:
        ap.error(f"--repeats {args.repeats}: expected a positive count")
    jobs = diurnal_trace(args.jobs, args.seed)
    if args.write_trace:
        write_canonical(jobs, args.write_trace)
    spec = load_config(args.config)
    scenario = Scenario(None, jobs, make_contention("profiled"), autoscale=spec)
    print(f"{len(jobs)} jobs over 48 h (seed {args.seed}) on {spec.name}; contention profiled")
    header = ("policy", "autoscaler", "avg JCT h", "p99 JCT h", "queue h", "slowdown", "cost $", "GPU-h", "idle GPU-h", "up/down", "sim s")
    print(" | ".join(header))
    names = list(AUTOSCALERS)
    for policy in args.policies.split(","):
        reports = {name: run_autoscalers(scenario, policy, [name])[0] for name in names}  # also each one's warm-up
        walls: dict[str, list[float]] = {name: [] for name in names}
        for i in range(args.repeats):
            for name in names[i % len(names):] + names[:i % len(names)]:  # the order rotated
                began = time.perf_counter()
                run_autoscalers(scenario, policy, [name])
                walls[name].append(time.perf_counter() - began)
        for name in names:
            r, m, wall = reports[name], reports[name].metrics, statistics.median(walls[name])
            print(" | ".join([
                policy, r.autoscaler, f"{m.avg_jct_s / 3600:.2f}", f"{m.p99_jct_s / 3600:.2f}", f"{m.avg_queue_s / 3600:.2f}",
                f"{m.avg_slowdown:.3f}", f"{r.cost_usd:,.0f}", f"{r.gpu_hours:,.0f}", f"{r.idle_gpu_hours:,.0f}",
                f"{r.scale_ups}/{r.scale_downs}", f"{wall:.2f}",
            ]))


if __name__ == "__main__":
    main()
