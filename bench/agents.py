"""What a node agent costs and how fast and fresh its data reaches the monitor.

Starts a private single-node Ray instance, then for each setting runs one
``ContentionMonitor`` with one ``NodeAgent`` sampling this machine's real probes and prints:

- the agent process's CPU time over wall time (user + system, every thread of the Ray worker,
  so Ray's own background work is included), next to an agent that never samples (the floor
  any Ray actor process costs) measured over the same window, side by side;
- report call latency: the agent's sample time to the monitor's receipt (median and p99); a
  report is sent right after its sample, so this is the Ray call;
- data age at the monitor: how old the newest sample the monitor holds is, at random instants
  (polled from the driver), which adds the wait for the next report (up to one report period);
- the cost of one sampling step measured in-process, without Ray.

Default report interval (``max(2 s, interval)``) at 1 Hz and 10 Hz, plus 1 Hz reporting every
sample (the behaviour before report intervals) for comparison. Target: an agent under 1% of one
core at 1 Hz. Usage: ``python bench/agents.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import statistics
import tempfile
import time
from typing import Any

import ray

from deepshare.agents import AgentConfig, Sampler, local_probes
from deepshare.agents.monitor import ContentionMonitor
from deepshare.agents.probes.detect import default_probes


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


def start_agent(config: AgentConfig, prefix: str) -> tuple[Any, Any]:
    """A monitor and its one agent on this node (agents of different ``prefix`` never share)."""
    monitor = ContentionMonitor.remote(config, default_probes, None, None, False, None, prefix)
    ray.get(monitor.reconcile.remote())
    (agent,) = ray.get(monitor.agents.remote()).values()
    ray.get(agent.info.remote())
    return monitor, agent


def stop_agent(monitor: Any) -> None:
    ray.get(monitor.shutdown.remote())
    ray.kill(monitor)


def run_agent(
    interval_s: float, seconds: float, idle: Any, report_interval_s: float | None = None, warmup_s: float = 2.0
) -> tuple[float, float, list[float], list[float], float]:
    """One monitor + one agent: (agent CPU fraction of one core, the ``idle`` agent's over the same
    window, report call latencies in s, ages in s of the monitor's newest sample at random
    instants, report period in s)."""
    config = AgentConfig(interval_s=interval_s, report_interval_s=report_interval_s, reconcile_interval_s=0)
    monitor, agent = start_agent(config, "bench-agent")
    time.sleep(warmup_s)
    skip = len(ray.get(monitor.latencies.remote()))
    rng = random.Random(0)
    ages: list[float] = []
    cpu0, idle0, t0 = *ray.get([agent.cpu_seconds.remote(), idle.cpu_seconds.remote()]), time.monotonic()
    end = t0 + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, rng.uniform(0.05, 0.35)))  # random instants: not phase-locked to reports
        before = time.time()
        state = ray.get(monitor.view.remote()).nodes[0]
        if state.report is not None:
            ages.append((before + time.time()) / 2 - state.report.sampled_at)  # one machine: one wall clock
    cpu1, idle1, t1 = *ray.get([agent.cpu_seconds.remote(), idle.cpu_seconds.remote()]), time.monotonic()
    latencies = ray.get(monitor.latencies.remote())[skip:]
    stop_agent(monitor)
    return (cpu1 - cpu0) / (t1 - t0), (idle1 - idle0) / (t1 - t0), latencies, ages, config.report_period


def ms(values: list[float], q: float | None) -> str:
    """Median (q None), percentile q or max (q 1) of ``values`` in ms, or '-'."""
    if not values:
        return "-"
    value = statistics.median(values) if q is None else percentile(values, q)
    return f"{value * 1e3:.1f}"


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
        idle_monitor, idle = start_agent(AgentConfig(interval_s=1e6, reconcile_interval_s=0), "bench-idle")  # samples once
        head = (f"{'agent':>18} {'report every s':>14} {'CPU %':>6} {'idle CPU %':>10} {'reports':>8}"
                f" {'call p50 ms':>11} {'p99 ms':>7} {'data age p50 ms':>15} {'max ms':>7}")
        print("\n" + head)
        for label, hz, report_s in (("1 Hz", 1, None), ("10 Hz", 10, None), ("1 Hz, report each", 1, 1.0)):
            frac, idle_frac, lat, ages, period = run_agent(1.0 / hz, args.seconds, idle, report_s)
            print(f"{label:>18} {period:14g} {frac * 100:6.3f} {idle_frac * 100:10.3f} {len(lat):8d}"
                  f" {ms(lat, None):>11} {ms(lat, 0.99):>7} {ms(ages, None):>15} {ms(ages, 1.0):>7}")
        stop_agent(idle_monitor)
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nCPU %: of one core, the agent's whole Ray worker process; idle CPU %: an agent that never samples,"
          " over the same window")
    print("target: < 1% of a core at 1 Hz")


if __name__ == "__main__":
    main()
