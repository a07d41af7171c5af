"""Small builders the tenants tests share: a one-node cluster, jobs in queues, a run."""

from __future__ import annotations

from deepshare.core.contention import ProfiledContention
from deepshare.core.metrics import MetricsReport
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.tenants import Admitted, Tenants, parse_tenants

MODEL = "resnet50"

TWO_TEAMS = """
queues:
  - {name: a, cohort: main, nominal_gpus: 4, borrowing_limit_gpus: 4}
  - {name: b, cohort: main, nominal_gpus: 4, borrowing_limit_gpus: 4}
"""


def job(job_id: str, queue: str, gpus: int, at: float = 0.0, duration: float = 100.0, priority: str | None = None) -> JobSpec:
    return JobSpec(job_id, MODEL, gpus, at, duration_s=duration, queue=queue, priority=priority)


def run(tenants: Tenants | str, jobs: list[JobSpec], policy: str = "fifo+consolidated", nodes: int = 1, gpus: int = 8,
        reclaim: bool = True, observe=None) -> MetricsReport:  # type: ignore[no-untyped-def]
    """``jobs`` behind ``tenants``' admission on ``nodes`` x ``gpus``; ``observe(view, decision)`` sees every decision."""
    if isinstance(tenants, str):
        tenants = parse_tenants(tenants)
    inner = Admitted(make_policy(policy), tenants, reclaim=reclaim)

    class Watched:
        name = inner.name

        def decide(self, view):  # type: ignore[no-untyped-def]
            decision = inner.decide(view)
            if observe is not None:
                observe(view, decision)
            return decision

    sim = Simulator(uniform(nodes, gpus), jobs, ProfiledContention(), default_catalog(), SimConfig())
    return sim.run(Watched())
