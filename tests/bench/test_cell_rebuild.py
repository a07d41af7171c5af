"""bench/distill_tree.py and bench/learned_contention.py re-run suite cells themselves: they must
run them as the suite does (``run_one``: the cell's own cluster, its perturbed contention, its
tenants' admission). They built uniform nodes, the unperturbed model (distill_tree) and no
admission, so on a fabric or tenants suite their runs were not the suite's cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepshare.experiments.suite import cells, load_suite, run_one
from deepshare.policies import make_policy

BENCH = Path(__file__).resolve().parents[2] / "bench"

SUITE = """name: fabric-learned-mini
jobs_per_node: 1
loads: [1.0]
mixes: [llm]
clusters: []
fabrics: [gb200-nvl72-4]
contention: [link]
seeds: 1
duration_sigma: 1.0
durations: [exact]
contention_knowledge: [learned]
perturb_contention: 0.5
heuristics: [srsf+topo-bestfit, srsf+consolidated]
"""


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their helpers from their own folder


@pytest.mark.parametrize("suite", ["tenants", "fabric"])
def test_distill_tree_runs_a_cell_as_the_suite_does(bench, suite):
    import distill_tree

    spec = load_suite(suite)
    cell = cells(spec)[0]
    policy = spec.heuristics[0]
    assert distill_tree.run(spec, cell, make_policy(policy)) == pytest.approx(run_one(spec, cell, policy)["avg_jct_s"])


def test_learned_contention_runs_a_cell_as_the_suite_does(bench, tmp_path):
    import learned_contention

    path = tmp_path / "suite.yaml"
    path.write_text(SUITE)
    spec = load_suite(str(path))
    cell = cells(spec)[0]
    got = learned_contention.run((str(path), cell, "srsf+topo-bestfit"))
    assert got["avg_jct_s"] == pytest.approx(run_one(spec, cell, "srsf+topo-bestfit")["avg_jct_s"])
