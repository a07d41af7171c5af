"""Suites with tenants: fairness kept beside the JCTs (hand-checked on a two-queue case), the
Pareto fronts, the tables and the plot, and the JSON of a suite without tenants unchanged; the
recurrence model's bursts."""

from __future__ import annotations

import collections

import pytest
from rich.console import Console

from deepshare.cli.suite_tables import fairness_tables, tradeoff_table
from deepshare.core.errors import DeepShareError
from deepshare.core.traces import RecurrenceModel, generate
from deepshare.core.types import JobSpec
from deepshare.experiments import suite_cells, suite_runs
from deepshare.experiments.suite import METRICS, cells, load_suite, run_suite
from deepshare.experiments.suite_results import pareto_front

TWO_QUEUES = "queues:\n  - {name: a, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2}\n" \
             "  - {name: b, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2}\n"
HAND = [JobSpec("a1", "resnet50", 4, 0.0, duration_s=100.0, queue="a"),
        JobSpec("b1", "resnet50", 4, 0.0, duration_s=100.0, queue="b")]
SUITE = """
name: hand
jobs_per_node: 2
loads: [1.0]
mixes: [heavy]
clusters: [[1, 4]]
contention: [profiled]
seeds: 1
durations: [exact]
heuristics: [fifo+consolidated, srsf+consolidated]
"""


@pytest.fixture()
def hand_trace(monkeypatch):
    """Every cell runs the two hand-made jobs."""
    monkeypatch.setattr(suite_runs, "cell_trace", lambda spec, cell: list(HAND))
    monkeypatch.setattr(suite_cells, "cell_trace", lambda spec, cell: list(HAND))


def _suite(tmp_path, tenants: bool):  # type: ignore[no-untyped-def]
    text = SUITE
    if tenants:
        (tmp_path / "t.yaml").write_text(TWO_QUEUES)
        text += f"tenants: {tmp_path / 't.yaml'}\n"
    (tmp_path / "s.yaml").write_text(text)
    return load_suite(str(tmp_path / "s.yaml"))


def test_a_two_queue_cell_keeps_hand_checked_fairness(tmp_path, hand_trace):
    # One node of 4 GPUs, queues a and b (weight 1), a 4-GPU job of 100 s each at t = 0, run FIFO:
    # a1 0-100, b1 100-200. Fair part 4 / 2 = 2 GPUs, alone 200 s: rho 0.5 and 1.0.
    # Shares at 200 samples over [0, 200]: a holds the cluster while active (t < 100, 100 samples)
    # and deserves half: gap 0.5; b deserves half and holds nothing for those 100 samples, then
    # holds what it deserves until t < 200 (199 samples active): gap 0.5 x 100 / 199.
    spec = _suite(tmp_path, tenants=True)
    result = run_suite(spec)
    (cell,) = result.results
    m = result.results[cell]["fifo+consolidated"]
    assert m["avg_jct_s"] == 150.0
    assert (m["worst_rho"], m["share_rho_above_1"], m["max_share_gap"], m["worst_queue_avg_queue_s"]) == (1.0, 0.0, 0.5, 100.0)
    assert m["queues"]["a"] == {"jobs": 1, "avg_share": 1.0, "avg_deserved": 0.5, "share_gap": 0.5, "worst_rho": 0.5,
                                "share_rho_above_1": 0.0, "avg_queue_s": 0.0, "p95_queue_s": 0.0}
    b = m["queues"]["b"]
    assert b["share_gap"] == pytest.approx(0.5 * 100 / 199) and (b["avg_queue_s"], b["p95_queue_s"], b["worst_rho"]) == (100.0, 100.0, 1.0)
    doc = result.to_json()
    (entry,) = doc["cells"]
    assert entry["pareto"] == {"worst_rho": ["fifo+consolidated", "srsf+consolidated"],
                               "share_rho_above_1": ["fifo+consolidated", "srsf+consolidated"]}
    assert doc["tradeoff"]["policies"]["fifo+consolidated"] == {
        "jct_ratio": 1.0, "worst_rho": 1.0, "share_rho_above_1": 0.0, "max_share_gap": 0.5, "worst_queue_avg_queue_s": 100.0}
    assert doc["suite"]["tenants"] == str(tmp_path / "t.yaml")
    console = Console(width=250, record=True)
    for table in (*fairness_tables(result), tradeoff_table(result)):
        console.print(table)
    text = console.export_text()
    assert "worst rho" in text and "a avg wait (s)" in text and "Pareto front, avg JCT vs worst rho" in text


def test_the_runs_get_the_tenants_the_driver_read_not_the_file(tmp_path, hand_trace, monkeypatch):
    """A worker on another machine may lack the tenants file or hold another version of it: the
    runs take what the driver read. A stand-in for ``run_tasks`` runs each task here, on a
    "machine" without the file (and nothing cached), then puts the file back for the driver."""
    from deepshare.experiments import ray_runs, suite_spec
    from deepshare.experiments.ray_runs import Once

    spec = _suite(tmp_path, tenants=True)
    local = run_suite(spec).to_json()
    assert local["failed"] == []

    def elsewhere(fn, calls, max_retries=ray_runs.MAX_RETRIES, waiting=None):
        (tmp_path / "t.yaml").unlink()
        suite_spec._tenants.cache_clear()
        for i, call in enumerate(calls):
            yield i, fn(*(a.value if isinstance(a, Once) else a for a in call))
        (tmp_path / "t.yaml").write_text(TWO_QUEUES)

    monkeypatch.setattr(ray_runs, "run_tasks", elsewhere)
    assert run_suite(spec, on_ray=True).to_json() == local


def test_without_tenants_the_json_keys_are_unchanged(tmp_path, hand_trace):
    result = run_suite(_suite(tmp_path, tenants=False))
    doc = result.to_json()
    assert set(doc) == {"suite", "seed_base", "cells", "failed", "summary", "summary_by_durations", "heuristic_wins",
                        "heuristic_wins_by_durations", "summary_by_contention_knowledge",
                        "heuristic_wins_by_contention_knowledge", "cost_of_not_knowing", "learned_over_exact", "room"}
    assert "tenants" not in doc["suite"]
    (entry,) = doc["cells"]
    assert set(entry) == {"load", "mix", "nodes", "gpus_per_node", "contention", "seed", "durations",
                          "contention_knowledge", "best_heuristic", "best_avg_jct_s", "cost_of_not_knowing",
                          "learned_over_exact", "jct_bound_s", "best_over_bound", "room", "pooled_ideal_s",
                          "best_over_pooled", "results", "ratios"}
    assert all(set(m) == set(METRICS) for m in entry["results"].values())
    assert fairness_tables(result) == [] and tradeoff_table(result) is None


def test_pareto_front_on_hand_made_points():
    points = {"fast": (1.0, 9.0), "fair": (3.0, 1.0), "both": (2.0, 2.0), "worse": (2.5, 2.5), "tie": (2.0, 2.0),
              "same-jct": (1.0, 10.0), "failed": (None, 0.5)}
    # worse is dominated by both; same-jct by fast (equal JCT, less fair); failed has no JCT
    assert pareto_front(points) == ["fast", "fair", "both", "tie"]
    assert pareto_front({"only": (5.0, 5.0)}) == ["only"]
    assert pareto_front({}) == []


def test_the_bundled_tenants_suite_and_a_bad_tenants_file(tmp_path):
    spec = load_suite("tenants")
    assert spec.tenants == "four-teams" and spec.recurrence["burst_share"] > 0
    assert {"drf+consolidated", "themis+consolidated+preempt", "srsf+consolidated"} <= set(spec.heuristics)
    assert len(cells(spec)) * len(spec.heuristics) <= 100
    (tmp_path / "t.yaml").write_text("queues: [{name: a, nominal_gpus: -1}]\n")
    (tmp_path / "s.yaml").write_text(SUITE + f"tenants: {tmp_path / 't.yaml'}\n")
    with pytest.raises(DeepShareError, match="tenants: .*queues.0.nominal_gpus"):
        load_suite(str(tmp_path / "s.yaml"))


def test_bursts_put_a_groups_runs_back_to_back_and_zero_changes_nothing():
    def trace(**kw):  # type: ignore[no-untyped-def]
        return generate(120, load=1.0, total_gpus=32, seed=5, recurrence=RecurrenceModel(users=5, **kw)).jobs

    assert trace() == trace(burst_share=0.0)
    jobs = trace(burst_share=1.0)
    sizes = collections.Counter(j.group for j in jobs)
    recurring = [j.group for j in jobs if sizes[j.group] > 1]
    # among the recurring jobs, each group's runs are consecutive
    changes = sum(1 for x, y in zip(recurring, recurring[1:]) if x != y)
    assert changes == len({*recurring}) - 1
    plain = [j.group for j in trace() if collections.Counter(k.group for k in trace())[j.group] > 1]
    assert sum(1 for x, y in zip(plain, plain[1:]) if x != y) > len({*plain}) - 1  # spread without bursts
    with pytest.raises(DeepShareError, match="burst_share"):
        RecurrenceModel(burst_share=1.5)
