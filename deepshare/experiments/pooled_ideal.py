"""The pooled ideal: what the best order would reach with no placement to get wrong.

The suite's lower bound (:mod:`deepshare.core.jct_bound`) lets every job start the moment it
arrives, so on a loaded trace it mostly measures queueing that no scheduler can avoid and says
little about how much a better *placement* policy could still gain. The pooled ideal keeps the
queueing and removes what placement fights: the trace runs on one node holding all the cluster's
GPUs (no fragmentation, no cross-node slowdown), under contention model ``none``, with free
preemption (``preempt_overhead_s`` 0), scheduled by :data:`POOLED_POLICY` (shortest remaining
GPU-service first, preemptive). Its average JCT is a *reference, not a bound*: another order could
beat it. But every real placement pays for nodes, contention and restores on top of its order's
queueing, so a policy far below it would need an order much better than SRSF, and a heuristic
within a few percent of it leaves little for any policy to win by placing jobs better.

Each job runs at the catalog's one-node throughput for its GPU count: the fastest isolated
placement of any job that fits on one of the cluster's nodes (as the bound assumes); a job wider
than a node gets the catalog's one-node figure extrapolated, which no real placement reaches (so on
gang-heavy fabric cells the pooled ideal can be below the lower bound). Jobs' topology requests
are dropped: one node is one domain of every level, so every request is met there. The order
reads the true sizes whatever information model the cell runs under.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from deepshare.core.contention import make_contention
from deepshare.core.fabric import NO_TOPOLOGY
from deepshare.core.metrics import MetricsReport
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec

POOLED_POLICY = "srsf+consolidated+preempt"
"""The order the pooled ideal schedules by (placement is moot on one node)."""


def pooled_ideal_report(jobs: Sequence[JobSpec], total_gpus: int) -> MetricsReport:
    """The simulator's report for ``jobs`` on one pooled node of ``total_gpus`` GPUs (see above)."""
    from deepshare.policies import make_policy

    pooled = [job if job.topology is NO_TOPOLOGY else replace(job, topology=NO_TOPOLOGY) for job in jobs]
    sim = Simulator(uniform(1, total_gpus), pooled, make_contention("none"), config=SimConfig(preempt_overhead_s=0.0))
    return sim.run(make_policy(POOLED_POLICY))


def pooled_ideal_avg_jct(jobs: Sequence[JobSpec], total_gpus: int) -> float | None:
    """Average JCT of :func:`pooled_ideal_report` (None when no job can run)."""
    return pooled_ideal_report(jobs, total_gpus).avg_jct_s
