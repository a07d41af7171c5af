"""Autoscaled simulations for the CLI and the benches: load a config, run autoscalers side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from deepshare.core.autoscaling import AUTOSCALERS, AutoscaleReport, AutoscaleSpec, parse_autoscale_spec, simulate_autoscaled
from deepshare.core.documents import load_yaml
from deepshare.core.errors import DeepShareError
from deepshare.core.yamlspec import read_config_text
from deepshare.experiments.scenario import Scenario, scenario_policy
from deepshare.policies import make_policy


def load_config(path: str | Path) -> AutoscaleSpec:
    """An autoscaling spec, or a Ray cluster YAML / KubeRay manifest turned into one."""
    p = Path(path)
    text = read_config_text(p, "file", label=f"--config {p}")
    raw = load_yaml(text, f"--config {p}", "an autoscaling spec, a Ray cluster YAML or a RayCluster manifest")
    if isinstance(raw, dict) and ("provider" in raw or "kind" in raw or "apiVersion" in raw):
        from deepshare.raycluster.cluster_yaml import parse_cluster_yaml, to_autoscale_spec

        return to_autoscale_spec(parse_cluster_yaml(text, str(p)))
    return parse_autoscale_spec(text, str(p))


def parse_autoscalers(text: str) -> list[str]:
    """``--autoscaler A,B`` as checked names."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise DeepShareError(f"--autoscaler {text!r}: expected comma-separated names ({', '.join(AUTOSCALERS)})")
    for name in names:
        if name not in AUTOSCALERS:
            raise DeepShareError(f"--autoscaler: unknown autoscaler {name!r}; expected one of {', '.join(AUTOSCALERS)}")
    if len(set(names)) != len(names):
        raise DeepShareError(f"--autoscaler {text!r}: a name is repeated")
    return names


def run_autoscalers(scenario: Scenario, policy: str, autoscalers: Sequence[str]) -> list[AutoscaleReport]:
    """One report per autoscaler, in the given order, same trace, policy and cluster model
    (``scenario.autoscale`` gives the node pools), with the scenario's catalog, information model,
    history and tenants (the policy behind their admission, as on a fixed cluster)."""
    if scenario.autoscale is None:
        raise DeepShareError("run_autoscalers needs a scenario with an autoscaling spec (Scenario(None, jobs, autoscale=spec))")
    make_policy(policy)  # a bad name fails before any run
    reports = []
    for name in autoscalers:
        report, _ = simulate_autoscaled(
            scenario.autoscale, scenario.jobs, scenario_policy(scenario, policy), name, scenario.contention,
            catalog=scenario.catalog, config=scenario.config, information=scenario.information, history=scenario.history,
        )
        reports.append(report)
    return reports
