"""Run policies on traces: the one code path behind ``simulate``, ``compare`` and the benches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from deepshare.core.contention import ContentionModel, ProfiledContention
from deepshare.core.metrics import MetricsReport
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import Topology
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog, default_catalog
from deepshare.policies import make_policy

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Scenario:
    """Everything but the policy: cluster, jobs, contention model and simulation knobs."""

    topology: Topology
    jobs: Sequence[JobSpec]
    contention: ContentionModel = ProfiledContention()
    config: SimConfig = SimConfig()
    catalog: Catalog | None = None


def simulate(scenario: Scenario, policy: str, progress: Progress | None = None) -> tuple[MetricsReport, Simulator]:
    """Run ``policy`` (a registry name) on ``scenario``; the report and the finished simulator."""
    sim = Simulator(
        scenario.topology,
        scenario.jobs,
        scenario.contention,
        catalog=scenario.catalog or default_catalog(),
        config=scenario.config,
    )
    report = sim.run(make_policy(policy), progress=progress)
    return report, sim


def compare(scenario: Scenario, policies: Sequence[str], progress: Progress | None = None) -> list[MetricsReport]:
    """One report per policy, in the given order, on the same scenario."""
    for name in policies:  # fail on a bad name before spending time on the good ones
        make_policy(name)
    return [simulate(scenario, name, progress)[0] for name in policies]
