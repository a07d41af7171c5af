"""bench/estimate_robustness.py --from-json on a suite run where a learned policy failed a cell:
the cell is left out and said (it raised a TypeError, None / int)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _cell(seed: int, durations: str, results: dict, **other: object) -> dict:
    return {"load": 1.0, "mix": "llm", "nodes": 4, "gpus_per_node": 8, "contention": "link", "seed": 2**31 + seed,
            "durations": durations, "contention_knowledge": "exact", **other, "results": results,
            "best_avg_jct_s": min(r["avg_jct_s"] for r in results.values() if r["avg_jct_s"])}


def test_a_failed_learned_run_is_left_out_and_said(tmp_path):
    def r(avg: float | None) -> dict:
        return {"avg_jct_s": avg, "p99_jct_s": None if avg is None else 2 * avg}

    doc = {"suite": {"name": "loaded", "heuristics": ["srsf+packed", "bsrsf+packed"], "learned": ["rl-hybrid"],
                     "durations": ["exact", "estimated"]},
           "cells": [_cell(0, "exact", {"srsf+packed": r(80), "bsrsf+packed": r(80), "rl-hybrid": r(80)}),
                     _cell(1, "exact", {"srsf+packed": r(80), "bsrsf+packed": r(80), "rl-hybrid": r(80)}),
                     _cell(0, "estimated", {"srsf+packed": r(100), "bsrsf+packed": r(95), "rl-hybrid": r(90)}),
                     _cell(1, "estimated", {"srsf+packed": r(100), "bsrsf+packed": r(95), "rl-hybrid": r(None)})]}
    doc["cells"][3]["results"]["rl-hybrid"]["error"] = "boom"
    path = tmp_path / "loaded.json"
    path.write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, str(BENCH / "estimate_robustness.py"), "--from-json", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "rl-hybrid: 1 of 2 estimated cells left out" in done.stdout
    # 90 / 100; the gap (100 over 80, >= 5%) closed by (100 - 90) / (100 - 80) = 0.5, on the cell that ran
    assert "rl-hybrid            0.900 0.900 0.900; gap closed on 1 cells with a gap >= 5%: min 0.50" in done.stdout


def test_cells_that_differ_only_by_cluster_or_contention_knowledge_are_all_counted(tmp_path):
    """Cells were keyed by (load, mix, contention, seed, durations) alone: cells on two clusters, or
    under exact and learned contention, collided and all but one were dropped, silently (the learned
    suite's report said 8 cells of 16, the fabric suite's 4 of 16)."""
    def r(avg: float) -> dict:
        return {"avg_jct_s": avg, "p99_jct_s": 2 * avg}

    cells = []
    for cluster, nodes in (("", 4), ("gb200-nvl72-4", 4), ("", 8)):
        for knowledge, policy_jct in (("exact", 90), ("learned", 120)):
            extra = {"cluster": cluster} if cluster else {}
            cells.append(_cell(0, "estimated", {"srsf+packed": r(100), "rl-hybrid": r(policy_jct)}, nodes=nodes,
                               contention_knowledge=knowledge, **extra))
    doc = {"suite": {"name": "mixed", "heuristics": ["srsf+packed"], "learned": ["rl-hybrid"],
                     "durations": ["estimated"]}, "cells": cells}
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, str(BENCH / "estimate_robustness.py"), "--from-json", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("estimated (3 cells)") and lines[1].startswith("  rl-hybrid            0.900 0.900")
    assert lines[2].startswith("estimated+learned (3 cells)") and lines[3].startswith("  rl-hybrid            1.200 1.200")


def test_a_failed_learned_run_counts_as_one_failed_cell(tmp_path, monkeypatch, capsys):
    """The learned run that failed leaves its cell out of the best-heuristic figures (the summary's
    failed_cells) and of the field figures: still one cell, not two."""
    import deepshare.experiments.suite_runs as suite_runs

    original = suite_runs.run_one

    def failing(spec, cell, policy, tenants=suite_runs.SPEC_TENANTS):  # type: ignore[no-untyped-def]
        if policy == "rl-hybrid" and cell.load == 1.0:
            raise RuntimeError("injected failure")
        return original(spec, cell, policy, tenants)

    monkeypatch.setattr(suite_runs, "run_one", failing)
    monkeypatch.syspath_prepend(str(BENCH))
    import estimate_robustness

    suite = tmp_path / "er.yaml"
    suite.write_text("name: er\njobs_per_node: 2\nloads: [1.0, 1.3]\nmixes: [heavy]\nclusters: [[2, 4]]\n"
                     "contention: [profiled]\nseeds: 1\nheuristics: [srsf+packed]\nlearned: [rl-hybrid]\n")
    out = tmp_path / "er.json"
    monkeypatch.setattr(sys, "argv", ["estimate_robustness.py", "--suite", str(suite), "--sigmas", "1.0",
                                      "--workers", "1", "--json", str(out)])
    estimate_robustness.main()
    notes = {m["name"]: m["note"] for m in json.loads(out.read_text())["measures"]}
    assert notes["rl-hybrid at sigma 1: avg JCT / best heuristic, worst cell"].endswith(
        "; 1 failed cell(s) left out, so not judged")
    # the wins count a tie for each tied heuristic (SuiteResult.heuristic_wins), as the CLI's caption says
    assert "(2 cells; best heuristic of a cell, a tie counting for each tied heuristic: {'srsf+packed': 2})" \
        in capsys.readouterr().out
