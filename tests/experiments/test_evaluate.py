"""`deepshare evaluate`: the table, the JSON and the figures, over seeds."""

from __future__ import annotations

import json
from pathlib import Path

from deepshare.cli import main
from deepshare.core.metrics import REPORT_KEYS

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
HELIOS = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "helios.csv"


def test_evaluate_writes_results_spread_and_figures(capsys, tmp_path):
    rc = main(["evaluate", "--trace", str(TRACE), "--policies", "las+spread,las+consolidated", "--seeds", "2",
               "--out", str(tmp_path / "figs"), "--json", str(tmp_path / "e.json")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "las+consolidated" in out and "over 2 seed(s)" in out
    assert "useful util" in out and "GPU util" in out
    doc = json.loads((tmp_path / "e.json").read_text())
    assert set(doc["results"]) == {"las+spread", "las+consolidated"}
    assert set(REPORT_KEYS) - {"jobs"} <= set(doc["results"]["las+spread"])
    assert doc["seeds"] == [0, 1]
    # a fully specified trace: every seed gives the same numbers
    lo, hi = doc["spread"]["las+spread"]["avg_jct_s"]
    assert lo == hi == doc["results"]["las+spread"]["avg_jct_s"]
    assert doc["results"]["las+consolidated"]["avg_jct_s"] < doc["results"]["las+spread"]["avg_jct_s"]
    figures = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert figures == ["jct_cdf.png", "jct_vs_util.png", "util_over_time.png"]
    assert all((tmp_path / "figs" / f).read_bytes()[:4] == b"\x89PNG" for f in figures)


def test_seeds_vary_models_of_traces_without_model_names(capsys, tmp_path):
    rc = main(["evaluate", "--trace", str(HELIOS), "--policies", "fifo+spread", "--seeds", "3",
               "--nodes", "2", "--json", str(tmp_path / "e.json")])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "e.json").read_text())
    assert doc["seeds"] == [0, 1, 2]
    lo, hi = doc["spread"]["fifo+spread"]["avg_slowdown"]
    assert lo <= doc["results"]["fifo+spread"]["avg_slowdown"] <= hi


def test_evaluate_rejects_bad_policy_lists(capsys):
    assert main(["evaluate", "--trace", str(TRACE), "--policies", ","]) == 2
    assert "expected comma-separated policy names" in capsys.readouterr().err
    assert main(["evaluate", "--trace", str(TRACE), "--policies", "las+spread,nope"]) == 2
    assert "--policies: unknown policy 'nope'" in capsys.readouterr().err


def test_evaluation_is_deterministic_including_the_learned_policies(capsys, tmp_path):
    args = ["evaluate", "--trace", str(TRACE), "--policies", "las+contention-aware,rl-base,rl-hybrid", "--seeds", "1"]
    assert main([*args, "--json", str(tmp_path / "a.json")]) == 0
    assert main([*args, "--json", str(tmp_path / "b.json")]) == 0
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    results = json.loads((tmp_path / "a.json").read_text())["results"]
    assert results["rl-hybrid"]["finished"] == results["rl-base"]["finished"] == 256


def test_json_may_go_inside_the_figures_folder(capsys, tmp_path):
    out = tmp_path / "eval"
    assert main(["evaluate", "--trace", str(TRACE), "--policies", "fifo+consolidated", "--seeds", "1",
                 "--out", str(out), "--json", str(out / "results.json")]) == 0
    assert (out / "results.json").exists() and (out / "jct_cdf.png").exists()
