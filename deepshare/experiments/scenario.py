"""Run policies on traces: the one code path behind ``simulate``, ``compare`` and the benches.

A :class:`Scenario` is everything but the policy. Its cluster is either fixed (``topology``) or
autoscaled (``autoscale``: node pools that grow and shrink, run by
:func:`deepshare.experiments.autoscale.run_autoscalers`).
"""

from __future__ import annotations

import os
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from deepshare.core.contention import ContentionModel, ProfiledContention
from deepshare.core.errors import DeepShareError, RuntimeFailure
from deepshare.core.history import JobHistory
from deepshare.core.information import EXACT, InformationModel
from deepshare.core.jobs_csv import JobsCsvStream
from deepshare.core.metrics import JobRecord, MetricsReport
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import Topology
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog, default_catalog
from deepshare.policies import make_policy
from deepshare.policies.base import Policy

if TYPE_CHECKING:  # an annotation only: the autoscaling package brings pydantic, which `simulate` never needs
    from deepshare.core.autoscaling import AutoscaleSpec
    from deepshare.tenants import Tenants

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
    tenants: Tenants | None = None
    """Queues and quotas (``--tenants``): every policy then runs behind their admission
    (:func:`~deepshare.tenants.admitted`: :class:`~deepshare.tenants.Admitted` around it, around
    each candidate for the planner); None: no tenancy."""

    def __post_init__(self) -> None:
        if (self.topology is None) == (self.autoscale is None):
            raise DeepShareError("a scenario has either a fixed topology or an autoscaling spec, not both or neither")
        if self.tenants is not None:
            self.tenants.check_jobs(self.jobs)  # a job no queue can ever hold would stall the run

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
    jobs_stream: JobsCsvStream | None = None,
    keep_records: bool = True,
) -> tuple[MetricsReport, Simulator]:
    """Run ``policy`` (a registry name) on ``scenario``; the report and the finished simulator.

    ``jobs_csv``: stream the per-job table to this file as jobs finish (put in place when the
    run ends; the report then keeps no per-job records). ``jobs_stream``: the same into a stream
    the caller opened and commits or discards itself (a command putting the table in place with
    its other outputs, :class:`~deepshare.core.output_set.OutputSet`). ``keep_records=False``
    also drops them (a million-job run needs only the report's numbers)."""
    if jobs_csv is not None and jobs_stream is not None:
        raise DeepShareError("simulate: give jobs_csv or jobs_stream, not both")
    if jobs_stream is not None:
        return _simulate(scenario, policy, progress, False, jobs_stream.add)
    if jobs_csv is not None:
        with JobsCsvStream(jobs_csv, levels=fabric_levels(scenario)) as out:
            return _simulate(scenario, policy, progress, False, out.add)
    return _simulate(scenario, policy, progress, keep_records, None)


def fabric_levels(scenario: Scenario) -> list[str]:
    """The names of the fixed cluster's fabric levels, lowest first: a per-job table's
    ``domains_<level>`` columns (:class:`~deepshare.core.jobs_csv.JobsCsvStream`'s ``levels``)."""
    return [level.name for level in scenario.fixed_topology.fabric.levels]


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
    return sim.run(scenario_policy(scenario, policy), progress=progress), sim


def scenario_policy(scenario: Scenario, policy: str) -> Policy:
    """The registry's ``policy``, behind the scenario's tenants' admission when it has tenants
    (quota preemption costs victims at the views' ``restore_s``, the config's ``preempt_overhead_s``)."""
    built = make_policy(policy)
    if scenario.tenants is None:
        return built
    from deepshare.tenants import admitted

    return admitted(built, scenario.tenants)


def compare(scenario: Scenario, policies: Sequence[str], progress: Progress | None = None,
            on_ray: bool = False, waiting: Callable[[str], None] | None = None) -> list[MetricsReport]:
    """One report per policy, in the given order, on the same scenario (``on_ray``: one Ray task
    per policy, :func:`simulate_on_ray`; ``progress`` then counts the jobs of the finished runs,
    and ``waiting`` is told when the runs wait for a CPU of the cluster)."""
    for name in policies:  # fail on a bad name before spending time on the good ones
        make_policy(name)
    if not on_ray:
        return [simulate(scenario, name, progress)[0] for name in policies]
    finished = 0

    def count(_: int) -> None:
        nonlocal finished
        finished += 1
        if progress is not None:
            progress(finished * len(scenario.jobs), len(policies) * len(scenario.jobs))

    return [report for report, _ in simulate_on_ray([(scenario, name) for name in policies], count, waiting)]


Timeline = tuple[tuple[float, int], ...]


def cluster_run(scenario: Scenario, policy: str, policy_file: bytes | None) -> tuple[MetricsReport, Timeline]:
    """:func:`simulate` on a Ray worker: the report and the GPU-use timeline (what a result carries
    back instead of the simulator); a policy file the driver sent is first copied to this machine."""
    from deepshare.experiments.policy_files import local_spec

    report, sim = simulate(scenario, policy if policy_file is None else local_spec(policy, policy_file))
    return report, tuple(sim.util_timeline)


def simulate_on_ray(runs: Sequence[tuple[Scenario, str]], finished: Callable[[int], None] | None = None,
                    waiting: Callable[[str], None] | None = None) -> list[tuple[MetricsReport, Timeline]]:
    """``(report, timeline)`` of each (scenario, policy) run, in order, as Ray tasks on the cluster
    this process is connected to (:mod:`deepshare.experiments.ray_runs`); each scenario and each
    driver-only policy file goes to the object store once; ``finished(i)`` as run ``i`` ends;
    ``waiting`` is told when the runs wait for a CPU (none in the cluster yet, or all busy). A
    run's own error is raised as it was; a run Ray lost more often than it reruns is a
    :class:`~deepshare.core.errors.RuntimeFailure`; either (or Ctrl-C) cancels the other runs."""
    from deepshare.experiments.policy_files import driver_files
    from deepshare.experiments.ray_runs import Lost, Once, run_tasks

    scenarios = {id(scenario): Once(scenario) for scenario, _ in runs}
    files = {name: Once(data) for name, data in driver_files({name for _, name in runs}).items()}
    calls = [(scenarios[id(scenario)], name, files.get(name)) for scenario, name in runs]
    results: list[tuple[MetricsReport, Timeline] | None] = [None] * len(runs)
    with closing(run_tasks(cluster_run, calls, waiting=waiting)) as outputs:
        for i, output in outputs:
            if isinstance(output, Lost):
                raise RuntimeFailure(f"{runs[i][1]}: {output.error}")
            results[i] = output
            if finished is not None:
                finished(i)
    return results  # type: ignore[return-value]
