"""What a node agent costs and how fast its reports reach the monitor.

Starts a private single-node Ray instance, then for each sampling rate runs one
``ContentionMonitor`` with one ``NodeAgent`` sampling this machine's real probes and prints:

- the agent process's CPU time over wall time (user + system, every thread of the Ray worker,
  so Ray's own background work is included), next to an agent that never samples (the floor
  any Ray actor process costs);
- report latency, the agent's sample time to the monitor's receipt (median and p99);
- the cost of one sampling step measured in-process, without Ray.

Target: an agent under 1% of one core at 1 Hz. Usage: ``python bench/agents.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time

import ray

from deepshare.agents import AgentConfig, Sampler, local_probes
from deepshare.agents.monitor import ContentionMonitor


def step_cost_us(steps: int = 200) -> tuple[float, list[str]]:
    """Mean wall time of one ``Sampler.step`` over the real local probes, and which are available."""
    probes = local_probes()
    sampler = Sampler("bench", probes)
    sampler.step()
    t0 = time.perf_counter()
    for _ in range(steps):
        sampler.step()
    cost = (time.perf_counter() - t0) / steps * 1e6
    sampler.close()
    return cost, [p.name for p in probes if p.available]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_agent(interval_s: float, seconds: float, warmup_s: float = 2.0) -> tuple[float, list[float]]:
    """(agent CPU fraction of one core, report latencies in s) for one monitor + one agent."""
    config = AgentConfig(interval_s=interval_s, stale_after_s=max(5.0, 3 * interval_s), reconcile_interval_s=0)
    monitor = ContentionMonitor.remote(config)
    ray.get(monitor.reconcile.remote())
    (agent,) = ray.get(monitor.agents.remote()).values()
    ray.get(agent.info.remote())
    time.sleep(warmup_s)
    skip = len(ray.get(monitor.latencies.remote()))
    cpu0, t0 = ray.get(agent.cpu_seconds.remote()), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = ray.get(agent.cpu_seconds.remote()), time.monotonic()
    latencies = ray.get(monitor.latencies.remote())[skip:]
    ray.get(monitor.shutdown.remote())
    ray.kill(monitor)
    return (cpu1 - cpu0) / (t1 - t0), latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window per rate (default 20)")
    args = parser.parse_args()

    cost, available = step_cost_us()
    print(f"available probes: {', '.join(available) or 'none'}")
    print(f"one sampling step, in-process: {cost:,.0f} us")

    tmp = tempfile.mkdtemp(prefix="ds-bench-")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2, _temp_dir=tmp,
             logging_level=logging.WARNING, log_to_driver=False)
    try:
        print(f"\n{'agent':>22} {'CPU % of a core':>16} {'reports':>8} {'latency p50 ms':>15} {'p99 ms':>8}")
        idle, _ = run_agent(1e6, args.seconds)  # samples once at start, then never again
        print(f"{'idle (never samples)':>22} {idle * 100:16.3f} {'-':>8} {'-':>15} {'-':>8}")
        for hz in (1, 10):
            frac, lat = run_agent(1.0 / hz, args.seconds)
            p50 = statistics.median(lat) * 1e3 if lat else float("nan")
            p99 = percentile(lat, 0.99) * 1e3 if lat else float("nan")
            print(f"{f'{hz} Hz':>22} {frac * 100:16.3f} {len(lat):8d} {p50:15.2f} {p99:8.2f}")
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\ntarget: < 1% of a core at 1 Hz (CPU includes the Ray worker's own background threads)")


if __name__ == "__main__":
    main()
