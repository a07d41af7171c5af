"""`deepshare evaluate --suite`: the grid, its tables and JSON, determinism, bad suite files."""

from __future__ import annotations

import json
import math

import pytest

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.core.information import InformationModel
from deepshare.experiments.pooled_ideal import pooled_ideal_avg_jct
from deepshare.experiments.suite import (
    SUITE_SEED_BASE, Cell, SuiteSpec, cell_bound, cell_trace, cells, load_suite, run_one, run_suite,
)

SMALL = """
name: small
jobs_per_node: 4
loads: [0.7, 1.3]
mixes: [heavy]
clusters: [[2, 8], [3, 4]]
contention: [profiled, link]
seeds: 1
heuristics: [las+consolidated, srsf+consolidated, srsf+packed]
learned: [rl-hybrid]
"""


@pytest.fixture()
def small(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path


def test_grid_is_every_combination_with_seeds_above_training():
    spec = load_suite("standard")
    grid = cells(spec)
    assert len(grid) == 3 * 2 * 2 * 2 * 2 * 3 == len(set(grid))  # x 3 information models
    assert {c.load for c in grid} == {0.7, 1.0, 1.3} and {c.mix for c in grid} == {"random", "heavy"}
    assert {(c.nodes, c.gpus_per_node) for c in grid} == {(16, 8), (64, 8)}
    assert {c.contention for c in grid} == {"profiled", "link"}
    assert all(c.seed >= 2**31 == SUITE_SEED_BASE for c in grid)  # training draws seeds below 2**31
    assert "srsf+packed" in spec.heuristics and set(spec.learned) == {"rl-base", "rl-hybrid", "rl-hybrid-preempt"}
    # a cell's trace does not depend on its contention model; it has jobs_per_node x nodes jobs
    a, b = Cell(1.0, "heavy", 16, 8, "profiled", SUITE_SEED_BASE), Cell(1.0, "heavy", 16, 8, "link", SUITE_SEED_BASE)
    assert cell_trace(spec, a) == cell_trace(spec, b)
    assert len(cell_trace(spec, a)) == 16 * spec.jobs_per_node
    assert cell_trace(spec, a) != cell_trace(spec, Cell(1.0, "heavy", 16, 8, "link", SUITE_SEED_BASE + 1))


def test_small_suite_end_to_end_json_and_tables(capsys, small, tmp_path):
    out_json = tmp_path / "s.json"
    rc = main(["evaluate", "--suite", str(small), "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    assert doc["seed_base"] == SUITE_SEED_BASE and doc["suite"]["name"] == "small"
    assert len(doc["cells"]) == 2 * 1 * 2 * 2 * 1
    policies = {"las+consolidated", "srsf+consolidated", "srsf+packed", "rl-hybrid"}
    for cell in doc["cells"]:
        assert set(cell) == {"load", "mix", "nodes", "gpus_per_node", "contention", "seed", "durations",
                             "contention_knowledge", "learned_over_exact",
                             "best_heuristic", "best_avg_jct_s", "cost_of_not_knowing", "jct_bound_s",
                             "best_over_bound", "room", "pooled_ideal_s", "best_over_pooled", "results", "ratios"}
        assert cell["durations"] == "estimated" and cell["cost_of_not_knowing"] is None  # the default; no exact run
        assert set(cell["results"]) == policies
        for metrics in cell["results"].values():
            assert set(metrics) == {"avg_jct_s", "p99_jct_s", "gpu_util", "useful_util", "makespan_s", "finished"}
            assert metrics["finished"] == 4 * cell["nodes"]
            assert 0 < metrics["useful_util"] <= metrics["gpu_util"] + 1e-9 <= 1 + 1e-9
        heuristics = {p: m for p, m in cell["results"].items() if p != "rl-hybrid"}
        best = min(heuristics, key=lambda p: heuristics[p]["avg_jct_s"])
        assert cell["results"][cell["best_heuristic"]]["avg_jct_s"] == heuristics[best]["avg_jct_s"]
        # the lower bound: no policy beats it; room = bound / best, best_over_bound its inverse
        assert all(m["avg_jct_s"] >= cell["jct_bound_s"] * (1 - 1e-9) for m in cell["results"].values())
        assert cell["room"] == pytest.approx(cell["jct_bound_s"] / heuristics[best]["avg_jct_s"])
        assert cell["best_over_bound"] == pytest.approx(1 / cell["room"])
        # the pooled ideal: the trace's own run on one pool of GPUs, above the bound where every job
        # fits one node (2 x 8; the 3 x 4 cells' 8-GPU jobs get the one-node figure extrapolated)
        jobs = cell_trace(load_suite(str(small)), Cell(cell["load"], cell["mix"], cell["nodes"], cell["gpus_per_node"],
                                                       cell["contention"], cell["seed"], cell["durations"]))
        assert cell["pooled_ideal_s"] == pooled_ideal_avg_jct(jobs, cell["nodes"] * cell["gpus_per_node"])
        assert cell["best_over_pooled"] == pytest.approx(heuristics[best]["avg_jct_s"] / cell["pooled_ideal_s"])
        if cell["gpus_per_node"] == 8:
            assert cell["pooled_ideal_s"] >= cell["jct_bound_s"] * (1 - 1e-9)
        mine, ref = cell["results"]["rl-hybrid"], cell["results"][cell["best_heuristic"]]
        assert cell["ratios"]["rl-hybrid"]["avg_jct"] == pytest.approx(mine["avg_jct_s"] / ref["avg_jct_s"])
        assert cell["ratios"]["rl-hybrid"]["p99_jct"] == pytest.approx(mine["p99_jct_s"] / ref["p99_jct_s"])
    summary = doc["summary"]["rl-hybrid"]
    ratios = [c["ratios"]["rl-hybrid"]["avg_jct"] for c in doc["cells"]]
    assert summary["geomean_avg_jct_ratio"] == pytest.approx(math.exp(sum(map(math.log, ratios)) / len(ratios)))
    assert summary["worst_avg_jct_ratio"] == max(ratios)
    assert summary["cells"] == 8 and summary["cells_won"] == sum(r < 1 for r in ratios)
    anchors = ("las+consolidated", "srsf+consolidated", "srsf+packed")
    tied = [h for c in doc["cells"] for h in anchors if c["results"][h]["avg_jct_s"] == c["best_avg_jct_s"]]
    assert doc["heuristic_wins"] == {h: tied.count(h) for h in anchors}  # a tie counts for each tied heuristic
    assert sum(doc["heuristic_wins"].values()) >= 8
    over = [c["results"]["rl-hybrid"]["avg_jct_s"] / c["jct_bound_s"] for c in doc["cells"]]
    assert summary["geomean_avg_jct_over_bound"] == pytest.approx(math.exp(sum(map(math.log, over)) / len(over)))
    assert min(over) >= 1 - 1e-9
    over_pooled = [c["results"]["rl-hybrid"]["avg_jct_s"] / c["pooled_ideal_s"] for c in doc["cells"]]
    assert summary["geomean_avg_jct_over_pooled"] == pytest.approx(
        math.exp(sum(map(math.log, over_pooled)) / len(over_pooled)))
    rooms = [c["room"] for c in doc["cells"]]
    assert doc["room"]["geomean_room"] == pytest.approx(math.exp(sum(map(math.log, rooms)) / len(rooms)))
    assert doc["room"]["max_room"] == max(rooms) <= 1 and doc["room"]["min_room"] == min(rooms)
    pooled = [c["best_over_pooled"] for c in doc["cells"]]
    assert doc["room"]["geomean_best_over_pooled"] == pytest.approx(math.exp(sum(map(math.log, pooled)) / len(pooled)))
    assert doc["room"]["max_best_over_pooled"] == max(pooled)
    # a trace's profiled and link cells share one pooled ideal (it has no contention to model)
    by_trace = {}
    for c in doc["cells"]:
        by_trace.setdefault((c["load"], c["nodes"], c["gpus_per_node"]), set()).add(c["pooled_ideal_s"])
    assert all(len(values) == 1 for values in by_trace.values())
    # the tables (JSON went to a file): one per cell, then the summary
    assert "load 1.3 heavy 3x4 link seed 0 estimated" in out and "learned policies vs the best heuristic" in out
    assert "lower bound (no wait, no contention)" in out and "geometric-mean room" in out
    assert "pooled ideal (srsf, one GPU pool)" in out and "best / pooled" in out


def test_suite_is_deterministic_across_runs_and_workers():
    spec = SuiteSpec(name="d", jobs_per_node=3, loads=(1.2,), mixes=("heavy",), clusters=((2, 4),),
                     contention=("profiled", "link"), seeds=2, heuristics=("srsf+packed", "las+contention-aware"))
    one = run_suite(spec, workers=1)
    again = run_suite(spec, workers=1)
    two = run_suite(spec, workers=2)
    assert one.to_json() == again.to_json() == two.to_json()
    assert list(one.results) == cells(spec)


def test_cell_bound_is_the_mean_isolated_time_of_the_cells_jobs():
    # suite clusters have 8-GPU nodes and 2/4/8-GPU jobs: every job fits one node, its reference
    # placement, so the bound is exactly the mean duration of the cell's trace
    spec = load_suite("tiny")
    for cell in cells(spec):
        jobs = cell_trace(spec, cell)
        assert cell_bound(spec, cell) == pytest.approx(sum(j.duration_s for j in jobs) / len(jobs), rel=1e-12)


def test_run_one_matches_the_simulator():
    from deepshare.core.contention import make_contention
    from deepshare.core.simulator import Simulator
    from deepshare.core.topology import uniform
    from deepshare.policies import make_policy

    spec = load_suite("tiny")
    for cell in cells(spec)[:2]:
        information = InformationModel(cell.durations, spec.estimate_error, cell.seed)  # estimates drawn with the trace seed
        report = Simulator(uniform(cell.nodes, cell.gpus_per_node), cell_trace(spec, cell),
                           make_contention(cell.contention), information=information).run(make_policy("srsf+packed"))
        got = run_one(spec, cell, "srsf+packed")
        assert got["avg_jct_s"] == report.avg_jct_s and got["useful_util"] == report.useful_util


@pytest.mark.parametrize(
    "text, expected",
    [
        ("heuristics: [las+consolidated]\nloads: [0]", "loads"),
        ("heuristics: [las+consolidated]\nmixes: [weird]", "mixes"),
        ("heuristics: [las+consolidated]\nclusters: [[0, 8]]", "clusters"),
        ("heuristics: [las+consolidated]\ncontention: [magic]", "contention"),
        ("heuristics: [las+consolidated]\nseeds: 0", "seeds"),
        ("heuristics: [las+consolidated]\nbogus: 1", "bogus"),
        ("heuristics: []", "heuristics"),
        ("loads: [1.0]", "heuristics"),
        ("heuristics: [nope+nothing]", "heuristics: unknown policy 'nope+nothing'"),
        ("heuristics: [rl-hybrid]", "heuristics: 'rl-hybrid' is not a heuristic"),
        ("heuristics: [las+consolidated]\nlearned: [las+packed]", "learned: 'las+packed' is not a learned policy"),
        ("- just a list", "expected a mapping"),
        ("heuristics: [a\n", "not valid YAML"),
        ("heuristics: [las+consolidated]\ndurations: [exact, oracle]", "durations"),
        ("heuristics: [las+consolidated]\ndurations: [exact, exact]", "durations"),
        ("heuristics: [las+consolidated]\nestimate_error: 7", "estimate_error"),
        ("heuristics: [las+consolidated]\nloads: [1.0, 0.7, 1.0]", "loads: 1.0 listed more than once"),
        ("heuristics: [las+consolidated]\nclusters: [[2, 8], [2, 8]]", "clusters: [2, 8] listed more than once"),
        ("heuristics: [las+consolidated, las+consolidated]", "heuristics: las+consolidated listed more than once"),
        ("heuristics: [las+consolidated]\nlearned: [rl-hybrid, rl-hybrid]", "learned: rl-hybrid listed more than once"),
        ("heuristics: [las+consolidated]\nrecurrence: {usres: 5}", "unknown recurrence parameter"),
        ("heuristics: [las+consolidated]\nrecurrence: {recurring_share: 2}", "recurring_share"),
        ("heuristics: [las+consolidated]\nmedian_duration_s: 1e300", "median_duration_s: Input should be less than or equal to 31536000"),
        ("heuristics: [las+consolidated]\nloads: [1.0e-300]", "loads: Value error, expected one or more loads in [0.01, 10]"),
        # lax pydantic took true for 1: one seed, a one-node cluster, load 1, one user, seed 0
        ("heuristics: [las+consolidated]\nseeds: true", "seeds: Value error, got a boolean (true)"),
        ("heuristics: [las+consolidated]\njobs_per_node: yes", "jobs_per_node: Value error, got a boolean (true)"),
        ("heuristics: [las+consolidated]\nclusters: [[true, 8]]", "clusters: Value error, got a boolean ([[true, 8]])"),
        ("heuristics: [las+consolidated]\nloads: [true]", "loads: Value error, got a boolean ([true])"),
        ("heuristics: [las+consolidated]\nrecurrence: {users: true}", 'recurrence: Value error, got a boolean ({"users": true})'),
        ("heuristics: [las+consolidated]\nperturb_seed: false", "perturb_seed: Value error, got a boolean (false)"),
        # the `none` model's ratios are all 1: its cells ran unperturbed under a suite that said perturbed
        ("heuristics: [las+consolidated]\ncontention: [profiled, none]\nperturb_contention: 0.3",
         "perturb_contention: the 'none' contention model predicts no contention"),
        # a 400-digit integer made math.isfinite raise OverflowError: a traceback
        ("heuristics: [las+consolidated]\nrecurrence: {runs_per_group: " + "9" * 400 + "}",
         "recurrence: Value error, recurrence model: runs_per_group must be a number from 2 to 1e+06"),
        ("heuristics: [las+consolidated]\nrecurrence: {user_skew: -1" + "0" * 400 + "}", "user_skew must be a number"),
        # a data file naming module:Attr ran it (os:system ran a shell command) before anything was checked
        ("heuristics: [las+consolidated]\nlearned: ['os:system=true']",
         "learned: 'os:system' would import and run Python code named by the suite file; `evaluate --suite FILE "
         "--allow-imports` runs"),
        ("heuristics: [las+consolidated]\nseeds: 100\nloads: [" + ", ".join(f"0.{i:03d}" for i in range(10, 110)) + "]",
         "the grid has 80,000 cells (100 loads x 2 mixes x 2 clusters and fabrics x 2 contention x 100 seeds x 1 durations"),
    ],
)
def test_bad_suite_files_name_the_field(tmp_path, capsys, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DeepShareError) as info:
        load_suite(str(path))
    assert expected in str(info.value) and str(path) in str(info.value)
    assert main(["evaluate", "--suite", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepshare: error: ") and "Traceback" not in err
    assert err.count("\n") == 1  # a YAML syntax error too (the parser's message used to span lines)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--suite", "nope"], "neither a bundled suite"),
        (["--suite", "missing.yaml"], "not found"),
        (["--suite", "tiny", "--trace", "t.csv"], "drop --trace"),
        (["--suite", "tiny", "--policies", "las+spread"], "drop --policies"),
        ([], "--trace and --policies are required (or --suite NAME)"),
    ],
)
def test_bad_suite_flags_exit_2(capsys, argv, expected):
    assert main(["evaluate", *argv]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_workers_must_be_positive(capsys):
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--suite", "tiny", "--workers", "0"])
    assert info.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_loaded_is_a_bundled_suite_of_the_quick_grid_with_long_queues():
    from deepshare.experiments.suite import suite_names

    assert {"tiny", "quick", "standard", "loaded"} <= set(suite_names())
    spec, quick = load_suite("loaded"), load_suite("quick")
    grid = cells(spec)
    assert len(grid) == 2 * 2 * 2 * 3 == len(set(grid)) and {c.load for c in grid} == {1.0, 1.3}
    assert spec.jobs_per_node == 25 and spec.heuristics == quick.heuristics
    assert set(spec.learned) == {"rl-base", "rl-hybrid", "rl-hybrid-preempt"}
    assert {c.durations for c in grid} == {"exact", "estimated", "unknown"}
    # the field's baselines for unknown durations are there, with +preempt
    assert {"qssf+uncontended+preempt", "gittins+uncontended+preempt", "las+uncontended+preempt",
            "srsf+uncontended+preempt"} <= set(spec.heuristics)
    cell = Cell(1.0, "heavy", 16, 8, "link", SUITE_SEED_BASE)
    jobs = cell_trace(spec, cell)
    assert len(jobs) == 400 and all(j.user and j.group for j in jobs) and not any(j.requested_s for j in jobs)


@pytest.mark.parametrize("command", ["evaluate", "train"])
def test_help_names_every_bundled_suite(capsys, command):
    """`deepshare evaluate --help` (--suite) and `deepshare train --help` (--eval-suite) list
    exactly the suites a NAME may be."""
    from deepshare.experiments.suite import suite_names

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"a bundled one ({', '.join(suite_names())})" in text


def test_cells_run_under_each_information_model_on_one_trace_and_report_the_cost_of_not_knowing():
    spec = SuiteSpec(name="i", jobs_per_node=6, loads=(1.3,), mixes=("heavy",), clusters=((2, 8),),
                     contention=("profiled",), seeds=1, durations=("exact", "estimated", "unknown"),
                     recurrence={"users": 4, "requested_share": 0.5},
                     heuristics=("srsf+packed", "las+packed+preempt", "qssf+packed"), learned=("rl-hybrid",))
    grid = cells(spec)
    assert [c.durations for c in grid] == ["exact", "estimated", "unknown"]  # sorted most-known first
    traces = [cell_trace(spec, c) for c in grid]
    assert traces[0] == traces[1] == traces[2]
    assert all(j.user is not None and j.group is not None for j in traces[0])  # the recurrence model's features
    assert {j.requested_s is None for j in traces[0]} == {True, False}
    result = run_suite(spec)
    exact, estimated, unknown = grid
    for cell in grid:  # LAS never reads remaining time: the same run under every model
        assert result.results[cell]["las+packed+preempt"] == result.results[exact]["las+packed+preempt"]
    assert result.cost_of_not_knowing(exact) == 1.0
    for cell in (estimated, unknown):
        assert result.cost_of_not_knowing(cell) == pytest.approx(result.best_avg_jct(cell) / result.best_avg_jct(exact))
        assert result.summary("rl-hybrid", cell.durations)["cells"] == 1
    doc = result.to_json()
    assert set(doc["cost_of_not_knowing"]) == {"estimated", "unknown"}
    assert doc["cost_of_not_knowing"]["unknown"]["geomean"] == pytest.approx(result.cost_of_not_knowing(unknown))
    assert set(doc["summary_by_durations"]) == {"exact", "estimated", "unknown"}


def test_cells_run_under_each_contention_knowledge_on_one_trace_and_report_learned_over_exact():
    from deepshare.cli.suite_tables import learning_table

    spec = SuiteSpec(name="k", jobs_per_node=6, loads=(1.3,), mixes=("heavy",), clusters=((2, 8),),
                     contention=("profiled",), seeds=1, durations=("exact",), contention_knowledge=("exact", "learned"),
                     perturb_contention=0.5, heuristics=("las+consolidated", "las+contention-aware+migrate"))
    grid = cells(spec)
    assert [c.knowledge for c in grid] == ["exact", "learned"] and grid[1] == grid[0].with_knowledge("learned")
    assert grid[1].label == grid[0].label + "+learned" and grid[0].scenario_label == grid[1].scenario_label
    assert cell_trace(spec, grid[0]) == cell_trace(spec, grid[1])
    result = run_suite(spec)
    exact, learned = grid
    # las+consolidated never asks for a prediction: the same run whatever the policy knows
    assert result.results[learned]["las+consolidated"] == result.results[exact]["las+consolidated"]
    assert result.learned_over_exact(exact, "las+consolidated") == 1.0
    ratio = result.learned_over_exact(learned, "las+contention-aware+migrate")
    mine = result.results[learned]["las+contention-aware+migrate"]["avg_jct_s"]
    assert ratio == pytest.approx(mine / result.results[exact]["las+contention-aware+migrate"]["avg_jct_s"])
    doc = result.to_json()
    assert [c["contention_knowledge"] for c in doc["cells"]] == ["exact", "learned"]
    assert doc["cells"][0]["learned_over_exact"] is None
    assert doc["cells"][1]["learned_over_exact"]["las+contention-aware+migrate"] == pytest.approx(ratio)
    assert doc["learned_over_exact"]["las+consolidated"]["geomean"] == 1.0
    assert set(doc["heuristic_wins_by_contention_knowledge"]) == {"exact", "learned"}
    assert learning_table(result) is not None


def test_a_cell_is_found_again_from_its_json_key():
    """Readers of a suite's JSON (the results page, the benches) rebuild each cell from its key."""
    for name in ("quick", "learned"):  # every information model; both contention knowledges
        for cell in cells(load_suite(name)):
            assert Cell.from_key({**cell.key(), "best_heuristic": "x"}) == cell
    old = {"load": 1.0, "mix": "heavy", "nodes": 2, "gpus_per_node": 8, "contention": "profiled", "seed": 5}
    assert (Cell.from_key(old).durations, Cell.from_key(old).knowledge) == ("exact", "exact")


@pytest.mark.parametrize("field, value", [("duration_sigma", ".nan"), ("median_duration_s", ".inf"), ("loads", "[.nan]")])
def test_a_suite_number_that_is_not_finite_is_named_as_such(field, value, tmp_path):
    from deepshare.experiments.suite_spec import load_suite

    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nclusters: [[2, 8]]\nheuristics: [srsf+packed]\n{field}: {value}\n")
    with pytest.raises(DeepShareError) as info:
        load_suite(str(path))
    assert f"{field}" in str(info.value) and "Input should be a finite number" in str(info.value)


def test_allow_imports_lets_a_trusted_suite_name_module_policies_and_only_with_suite(tmp_path, capsys):
    path = tmp_path / "trusted.yaml"
    path.write_text("heuristics: [las+consolidated]\nlearned: ['deepshare.policies.hybrid_preempt:with_margin=0.5']\n")
    with pytest.raises(DeepShareError, match="would import and run Python code"):
        load_suite(str(path))
    assert load_suite(str(path), allow_imports=True).learned == ("deepshare.policies.hybrid_preempt:with_margin=0.5",)
    assert load_suite(str(path), check_learned=False).learned == ("deepshare.policies.hybrid_preempt:with_margin=0.5",)
    assert main(["evaluate", "--trace", "x.json", "--policies", "fifo+packed", "--allow-imports"]) == 2
    assert "--allow-imports: only with --suite" in capsys.readouterr().err
