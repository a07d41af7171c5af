"""An autoscaled scenario runs with everything its fixed twin runs with: on pools held at a fixed
size (min = max, no provisioning time), the autoscaled run of a scenario with tenants gives the
fixed cluster's average JCT, which differs from the run without them (so they were not ignored);
the scenario's catalog is the simulator's."""

from __future__ import annotations

import pytest

from deepshare.core.autoscaling import parse_autoscale_spec
from deepshare.core.topology import uniform
from deepshare.core.traces import RecurrenceModel, generate, mix_preset
from deepshare.core.workloads import default_catalog
from deepshare.experiments.autoscale import run_autoscalers
from deepshare.experiments.scenario import Scenario, simulate
from deepshare.experiments.suite_spec import SuiteSpec, suite_tenants

HELD = parse_autoscale_spec("""
name: held
idle_timeout_s: 600
node_types:
  g8: {gpus: 8, gpu_model: A100, fabric: nvlink, nic_gbps: 100, price_usd_per_hour: 30, min_nodes: 2, max_nodes: 2, provisioning_s: 0}
""", "spec")
POLICY = "srsf+packed+preempt"


def avg_jcts(**kw) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    jobs = generate(30, load=1.5, total_gpus=16, mix=mix_preset("heavy"), seed=3, recurrence=RecurrenceModel(users=8)).jobs
    auto = run_autoscalers(Scenario(None, jobs, autoscale=HELD, **kw), POLICY, ["fixed"])[0].metrics.avg_jct_s
    fixed = simulate(Scenario(uniform(2, 8), jobs, **kw), POLICY)[0].avg_jct_s
    return auto, fixed


def test_tenants_reach_an_autoscaled_run() -> None:
    plain_auto, plain_fixed = avg_jcts()
    assert plain_auto == pytest.approx(plain_fixed)
    tenants = suite_tenants(SuiteSpec(heuristics=("srsf+packed",), tenants="four-teams"))
    auto, fixed = avg_jcts(tenants=tenants)
    assert auto == pytest.approx(fixed) and fixed != pytest.approx(plain_fixed)


def test_the_scenarios_catalog_reaches_an_autoscaled_run(monkeypatch) -> None:
    from deepshare.experiments import autoscale

    real, seen = autoscale.simulate_autoscaled, []

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs.get("catalog"))
        return real(*args, **kwargs)

    monkeypatch.setattr(autoscale, "simulate_autoscaled", spy)
    catalog = default_catalog()
    jobs = generate(5, load=1.0, total_gpus=16, mix=mix_preset("heavy"), seed=3).jobs
    run_autoscalers(Scenario(None, jobs, autoscale=HELD, catalog=catalog), POLICY, ["fixed"])
    assert seen == [catalog]
