"""A suite run that failed is kept: its row, the JSON's ``"failed"``, and summaries that leave its
cell out instead of breaking (the local and the Ray paths share this code)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from deepshare.cli.suite_tables import cell_tables, summary_table
from deepshare.experiments.suite import METRICS, SuiteResult, SuiteSpec, cells, failed_run, run_suite

SPEC = SuiteSpec(name="f", jobs_per_node=3, loads=(0.7, 1.3), mixes=("heavy",), clusters=((2, 8),),
                 contention=("profiled",), seeds=1, heuristics=("srsf+packed", "las+consolidated"),
                 learned=("rl-hybrid",))


def with_failures(result: SuiteResult, *runs: tuple[int, str]) -> SuiteResult:
    grid = cells(result.spec)
    results = {cell: dict(by_policy) for cell, by_policy in result.results.items()}
    for i, policy in runs:
        results[grid[i]][policy] = failed_run("RuntimeError: boom")
    return SuiteResult(result.spec, results, result.bounds, result.pooled)


def text(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_failed_runs_are_rows_entries_and_holes_in_the_summary():
    ok = run_suite(SPEC)
    second = cells(SPEC)[1]
    # cell 0: the learned policy failed; cell 1: every heuristic failed (no best heuristic to compare with)
    result = with_failures(ok, (0, "rl-hybrid"), (1, "srsf+packed"), (1, "las+consolidated"))
    doc = result.to_json()
    assert [(f["load"], f["policy"], f["error"]) for f in doc["failed"]] == [
        (0.7, "rl-hybrid", "RuntimeError: boom"), (1.3, "srsf+packed", "RuntimeError: boom"),
        (1.3, "las+consolidated", "RuntimeError: boom")]  # cell by cell, the suite's policy order
    assert doc["cells"][0]["results"]["rl-hybrid"] == {**dict.fromkeys(METRICS), "error": "RuntimeError: boom"}
    assert doc["cells"][0]["ratios"]["rl-hybrid"] is None and doc["cells"][1]["ratios"]["rl-hybrid"] is None
    assert sum(doc["heuristic_wins"].values()) == len(ok.tied_best(cells(SPEC)[0]))  # only cell 0 has a best that ran
    summary = doc["summary"]["rl-hybrid"]
    assert summary["cells"] == 0 and summary["failed_cells"] == 2 and summary["geomean_avg_jct_ratio"] is None
    assert "0/0 (2 failed)" in text(summary_table(result))
    assert "failed: RuntimeError: boom" in text(cell_tables(result)[0])
    assert ok.to_json()["failed"] == [] and ok.summary("rl-hybrid")["failed_cells"] == 0
    partly = with_failures(ok, (0, "rl-hybrid")).summary("rl-hybrid")
    assert partly["cells"] == 1 and partly["failed_cells"] == 1
    assert partly["geomean_avg_jct_ratio"] == ok.ratios(second, "rl-hybrid")[0]


def test_a_run_the_cluster_lost_is_a_failed_run_and_the_others_are_the_local_numbers(monkeypatch, tmp_path):
    """``on_ray``'s plumbing without Ray: a stand-in for ``run_tasks`` runs each task here, with its
    shared values unwrapped, except one it reports lost (a node that kept dying)."""
    from deepshare.experiments import ray_runs
    from deepshare.experiments.ray_runs import Lost, Once

    own = tmp_path / "policy.pt"
    own.write_bytes((Path(__file__).resolve().parents[2] / "deepshare" / "data" / "policies" / "rl_base.pt").read_bytes())
    spec = SPEC.model_copy(update={"learned": (f"rl-hybrid={own}",)})
    shipped = []

    def here(fn, calls, max_retries=ray_runs.MAX_RETRIES, waiting=None):
        for i, call in enumerate(calls):
            args = [a.value if isinstance(a, Once) else a for a in call]
            shipped.append(args[3])  # the policy file's bytes, or None
            yield i, Lost("lost after 3 retries: NodeDiedError") if i == 0 else fn(*args)

    monkeypatch.setattr(ray_runs, "run_tasks", here)
    doc = run_suite(spec, on_ray=True).to_json()
    local = run_suite(spec).to_json()
    [lost] = doc["failed"]
    assert lost["policy"] == f"rl-hybrid={own}" and lost["error"] == "lost after 3 retries: NodeDiedError"
    assert shipped.count(own.read_bytes()) == 2 and shipped.count(None) == 4  # the learned runs got the file's bytes
    cell = next(c for c in doc["cells"] if c["load"] == lost["load"])
    assert cell["results"][lost["policy"]]["avg_jct_s"] is None
    doc["cells"] = [c for c in doc["cells"] if c is not cell]
    local["cells"] = [c for c in local["cells"] if c["load"] != lost["load"]]
    assert doc["cells"] == local["cells"]  # every other cell: the local numbers


def test_a_cell_whose_best_anchor_failed_is_left_out_not_judged_against_a_weaker_one():
    """The best anchor's failure made the next best the cell's yardstick: a loss read as a win,
    and nothing said so. Such a cell is a failed cell for every policy judged in it."""
    ok = run_suite(SPEC)
    first, second = cells(SPEC)
    best = ok.best_heuristic(first)
    result = with_failures(ok, (0, best))
    assert result.ratios(first, "rl-hybrid") is None and result.best_avg_jct(first) is None
    summary = result.summary("rl-hybrid")
    assert summary["cells"] == 1 and summary["failed_cells"] == 1
    assert summary["geomean_avg_jct_ratio"] == ok.ratios(second, "rl-hybrid")[0]
    assert sum(result.heuristic_wins().values()) == len(ok.tied_best(second))  # the other cell's best (and ties) only


def test_the_results_page_shows_a_suite_with_failed_runs():
    """A failed run made the page generator divide None, and refuse the whole page."""
    from deepshare.experiments.results_page import policy_rows, render_headline, suite_section

    ok = run_suite(SPEC)
    result = with_failures(ok, (0, "rl-hybrid"), (1, "srsf+packed"))
    doc = result.to_json()
    rows = {r["policy"]: r for r in policy_rows(doc)}
    assert rows["rl-hybrid"]["geomean"] is None and rows["rl-hybrid"]["failed"] == 2  # cell 1: an anchor failed
    assert rows["las+consolidated"]["failed"] == 1 and rows["las+consolidated"]["won"] == 1
    page = suite_section("f", doc)
    assert "| `rl-hybrid` | learned | - | - | 0 (2 failed) |" in page
    assert "rl-hybrid" in render_headline({"f": doc})
