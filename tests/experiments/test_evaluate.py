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


def test_identical_seeds_draw_error_bars(capsys, tmp_path):
    """Issue 29: three seeds of a fully specified trace give identical reports, and NumPy's mean of
    three identical floats can land an ulp above them (las+spread's GPU utilisation on this trace):
    the figure's error bar was then negative and matplotlib raised after the table."""
    rc = main(["evaluate", "--trace", str(TRACE), "--policies", "las+spread,srtf+spread", "--seeds", "3",
               "--durations", "exact",  # a seed also draws estimates: exact makes the seeds' runs identical
               "--out", str(tmp_path / "figs"), "--json", str(tmp_path / "e.json")])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err, err
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["jct_cdf.png", "jct_vs_util.png", "util_over_time.png"]
    doc = json.loads((tmp_path / "e.json").read_text())
    for policy, metrics in doc["results"].items():
        for key, mean in metrics.items():
            lo, hi = doc["spread"][policy][key]
            assert mean is None or lo == mean == hi, (policy, key, lo, mean, hi)


def test_a_mean_stays_within_its_min_and_max() -> None:
    from deepshare.experiments.evaluation import spread

    assert sum([0.1, 0.1, 0.1]) / 3 > 0.1  # the float trap itself
    assert spread([0.1, 0.1, 0.1]) == {"mean": 0.1, "min": 0.1, "max": 0.1}
    assert spread([1.0, 2.0, 6.0]) == {"mean": 3.0, "min": 1.0, "max": 6.0}
