"""Evaluate policies side by side over seeds: the table, the JSON and the data for the plots.

A seed changes what is random in the inputs: the models drawn for traces that name none
(Helios, Philly) and, under ``--durations estimated``, the estimates drawn for jobs without a
``requested_s``. Policies and the simulator are deterministic, so on a fully specified trace
run ``exact`` every seed gives the same numbers (min = max in the table).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from deepshare.core.contention import ContentionModel, ProfiledContention
from deepshare.core.history import JobHistory
from deepshare.core.information import EXACT, InformationModel
from deepshare.core.metrics import REPORT_KEYS, MetricsReport
from deepshare.core.simulator import SimConfig
from deepshare.core.topology import Topology
from deepshare.core.traces import Trace
from deepshare.experiments.scenario import Scenario, simulate, simulate_on_ray
from deepshare.policies import make_policy
from deepshare.tenants import Tenants

SUMMARY_KEYS = tuple(k for k in REPORT_KEYS if k not in ("jobs",))
FAIRNESS_KEYS = ("worst_rho", "share_rho_above_1", "max_share_gap", "worst_queue_avg_queue_s")
"""What a run under tenants adds to the summary (:data:`deepshare.tenants.fairness.FAIRNESS_METRICS`)."""


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "min", "max"}`` of ``values``, the mean kept within [min, max]: NumPy's mean of
    identical floats can land an ulp outside them (the mean of three 0.1s is above 0.1), and a
    negative mean - min is an error bar matplotlib refuses."""
    lo, hi = float(min(values)), float(max(values))
    return {"mean": min(max(float(np.mean(values)), lo), hi), "min": lo, "max": hi}


@dataclass(frozen=True)
class Run:
    policy: str
    seed: int
    report: MetricsReport
    util_timeline: tuple[tuple[float, int], ...]
    total_gpus: int
    fairness: dict | None = None
    """Under tenants: :meth:`~deepshare.tenants.fairness.FairnessReport.metrics` of the run; else None."""


@dataclass(frozen=True)
class Evaluation:
    runs: tuple[Run, ...]

    @property
    def policies(self) -> list[str]:
        return list(dict.fromkeys(r.policy for r in self.runs))

    def of(self, policy: str) -> list[Run]:
        return [r for r in self.runs if r.policy == policy]

    def summary(self) -> dict[str, dict[str, dict[str, float | None]]]:
        """``{policy: {metric: {"mean", "min", "max"}}}`` over seeds; runs under tenants add
        :data:`FAIRNESS_KEYS`."""
        out: dict[str, dict[str, dict[str, float | None]]] = {}
        fair = any(r.fairness is not None for r in self.runs)
        for policy in self.policies:
            out[policy] = {}
            for key in SUMMARY_KEYS + (FAIRNESS_KEYS if fair else ()):
                values = [getattr(r.report, key) if key in SUMMARY_KEYS else (r.fairness or {}).get(key)
                          for r in self.of(policy)]
                if any(v is None for v in values):
                    out[policy][key] = {"mean": None, "min": None, "max": None}
                else:
                    out[policy][key] = spread(values)
        return out

    def to_json(self) -> dict[str, object]:
        """``{"results": {POLICY: {METRIC: mean}}, "spread": {POLICY: {METRIC: [min, max]}}}``;
        under tenants also ``"fairness": {POLICY: {SEED: metrics}}``."""
        summary = self.summary()
        doc: dict[str, object] = {
            "results": {p: {k: v["mean"] for k, v in m.items()} for p, m in summary.items()},
            "spread": {p: {k: [v["min"], v["max"]] for k, v in m.items()} for p, m in summary.items()},
            "seeds": sorted({r.seed for r in self.runs}),
        }
        if any(r.fairness is not None for r in self.runs):  # under tenants: each run's, per queue too
            doc["fairness"] = {p: {str(r.seed): r.fairness for r in self.of(p)} for p in self.policies}
        return doc


def evaluate(
    load_trace: Callable[[int], Trace],
    topology: Topology,
    policies: Sequence[str],
    seeds: Sequence[int],
    contention: ContentionModel = ProfiledContention(),
    config: SimConfig = SimConfig(),
    progress: Callable[[str], None] | None = None,
    information: InformationModel = EXACT,
    history: JobHistory | None = None,
    on_ray: bool = False,
    tenants: Tenants | None = None,
) -> Evaluation:
    """Every policy on the trace of every seed; a seed also draws the run's estimates
    (``information``'s ``estimate_seed`` is replaced by it). ``progress`` gets "POLICY (seed S)"
    as each run starts, or with ``on_ray`` (one Ray task per run on the cluster this process is
    connected to, the same numbers) as each run ends. ``tenants``: every run behind their
    admission (``--tenants``)."""

    def scenario(seed: int) -> Scenario:
        return Scenario(topology, load_trace(seed).jobs, contention, config,
                        information=replace(information, estimate_seed=seed), history=history, tenants=tenants)

    if on_ray:
        return _evaluate_on_ray({seed: scenario(seed) for seed in seeds}, policies, topology.total_gpus, progress)
    runs = []
    for seed in seeds:
        seeded = scenario(seed)
        for policy in policies:
            if progress is not None:
                progress(f"{policy} (seed {seed})")
            report, sim = simulate(seeded, policy)
            runs.append(Run(policy, seed, report, tuple(sim.util_timeline), topology.total_gpus,
                            _fairness(report, seeded)))
    return Evaluation(tuple(runs))


def _fairness(report: MetricsReport, scenario: Scenario) -> dict | None:
    """The run's fairness metrics under the scenario's tenants; None without tenants."""
    if scenario.tenants is None:
        return None
    from deepshare.core.workloads import default_catalog
    from deepshare.tenants.fairness import fairness_report

    return fairness_report(report.records, scenario.jobs, scenario.tenants, scenario.fixed_topology.total_gpus,
                           scenario.catalog or default_catalog()).metrics()


def _evaluate_on_ray(scenarios: dict[int, Scenario], policies: Sequence[str], total_gpus: int,
                     progress: Callable[[str], None] | None) -> Evaluation:
    """:func:`evaluate`'s runs as Ray tasks: the traces were read here (the files are the driver's),
    each seed's scenario travels once, and the runs come back in the local order."""
    for name in policies:  # a bad name or policy file fails before any run
        make_policy(name)
    pairs = [(seed, policy) for seed in scenarios for policy in policies]
    ended = 0

    def finished(i: int) -> None:
        nonlocal ended
        ended += 1
        if progress is not None:
            progress(f"{pairs[i][1]} (seed {pairs[i][0]}) [{ended}/{len(pairs)}]")

    outputs = simulate_on_ray([(scenarios[seed], policy) for seed, policy in pairs], finished, progress)
    return Evaluation(tuple(Run(policy, seed, report, timeline, total_gpus, _fairness(report, scenarios[seed]))
                            for (seed, policy), (report, timeline) in zip(pairs, outputs)))
