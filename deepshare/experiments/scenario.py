"""Run policies on traces: the one code path behind ``simulate``, ``compare`` and the benches.

A :class:`Scenario` is everything but the policy. Its cluster is either fixed (``topology``) or
autoscaled (``autoscale``: node pools that grow and shrink, run by
:func:`deepshare.experiments.autoscale.run_autoscalers`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from deepshare.core.contention import ContentionModel, ProfiledContention
from deepshare.core.errors import DeepShareError
from deepshare.core.history import JobHistory
from deepshare.core.information import EXACT, InformationModel
from deepshare.core.jobs_csv import JobsCsvStream
from deepshare.core.metrics import JobRecord, MetricsReport
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import Topology
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog, default_catalog
from deepshare.policies import make_policy

if TYPE_CHECKING:  # an annotation only: the autoscaling package brings pydantic, which `simulate` never needs
    from deepshare.core.autoscaling import AutoscaleSpec

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Scenario:
    """Everything but the policy: cluster, jobs, contention model and simulation knobs."""

    topology: Topology | None
    """A fixed cluster; None for an autoscaled one."""
    jobs: Sequence[JobSpec]
    contention: ContentionModel = ProfiledContention()
    config: SimConfig = SimConfig()
    catalog: Catalog | None = None
    autoscale: AutoscaleSpec | None = None
    """An autoscaled cluster's node pools (with ``topology=None``)."""
    information: InformationModel = EXACT
    """What the policies' views carry of job lengths (:mod:`deepshare.core.information`)."""
    history: JobHistory | None = None
    """Past finished jobs the run starts with (``--history``)."""

    def __post_init__(self) -> None:
        if (self.topology is None) == (self.autoscale is None):
            raise DeepShareError("a scenario has either a fixed topology or an autoscaling spec, not both or neither")

    @property
    def fixed_topology(self) -> Topology:
        """The fixed cluster; an autoscaled scenario (``topology`` None, so ``autoscale`` set) is an error."""
        if self.topology is None:
            raise DeepShareError(f"scenario {self.autoscale.name}: autoscaled; run it with run_autoscalers")  # type: ignore[union-attr]
        return self.topology


def simulate(
    scenario: Scenario,
    policy: str,
    progress: Progress | None = None,
    *,
    jobs_csv: str | os.PathLike[str] | None = None,
    keep_records: bool = True,
) -> tuple[MetricsReport, Simulator]:
    """Run ``policy`` (a registry name) on ``scenario``; the report and the finished simulator.

    ``jobs_csv``: stream the per-job table to this file as jobs finish (put in place when the
    run ends; the report then keeps no per-job records). ``keep_records=False`` also drops them
    (a million-job run needs only the report's numbers)."""
    if jobs_csv is not None:
        with JobsCsvStream(jobs_csv) as out:
            return _simulate(scenario, policy, progress, False, out.add)
    return _simulate(scenario, policy, progress, keep_records, None)


def _simulate(
    scenario: Scenario, policy: str, progress: Progress | None, keep_records: bool,
    on_record: Callable[[int, JobRecord], None] | None,
) -> tuple[MetricsReport, Simulator]:
    sim = Simulator(
        scenario.fixed_topology,
        scenario.jobs,
        scenario.contention,
        catalog=scenario.catalog or default_catalog(),
        config=scenario.config,
        keep_records=keep_records,
        on_record=on_record,
        information=scenario.information,
        history=scenario.history,
    )
    report = sim.run(make_policy(policy), progress=progress)
    return report, sim


def compare(scenario: Scenario, policies: Sequence[str], progress: Progress | None = None) -> list[MetricsReport]:
    """One report per policy, in the given order, on the same scenario."""
    for name in policies:  # fail on a bad name before spending time on the good ones
        make_policy(name)
    return [simulate(scenario, name, progress)[0] for name in policies]
