"""bench/learned_targets.py on a hand-made two-cell suite result: the learned policy is judged
against the best of every heuristic per cell (a challenger included), with hand-checked ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cell(seed: int, results: dict[str, tuple[float, float]]) -> dict:
    return {"mix": "heavy", "cluster": "clos3-256", "nodes": 256, "gpus_per_node": 8, "seed": 2**31 + seed,
            "durations": "estimated",
            "results": {name: {"avg_jct_s": avg, "p99_jct_s": p99} for name, (avg, p99) in results.items()}}


def _targets(tmp_path: Path, doc: dict, *flags: str, check: bool = True) -> subprocess.CompletedProcess:
    """bench/learned_targets.py run on ``doc`` written as a suite result."""
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(doc))
    return subprocess.run([sys.executable, str(ROOT / "bench" / "learned_targets.py"), str(path), *flags],
                          capture_output=True, text=True, check=check)


def test_ratios_are_over_the_best_of_all_heuristics(tmp_path):
    doc = {
        "suite": {"name": "hand", "learned": ["rl-x"]},
        "seed_base": 2**31,
        "provenance": {"date": "2026-12-05", "commit": {"sha": "abc", "dirty": False}},
        "cells": [
            # the challenger (b+preempt) is the best heuristic: 100 / 80 = 1.25, p99 90 / 100 = 0.9
            _cell(0, {"a": (100.0, 100.0), "b+preempt": (80.0, 100.0), "rl-x": (100.0, 90.0)}),
            # 40 / 50 = 0.8, p99 60 / 50 = 1.2
            _cell(1, {"a": (50.0, 50.0), "b+preempt": (60.0, 70.0), "rl-x": (40.0, 60.0)}),
        ],
    }
    out = _targets(tmp_path, doc, "--cells").stdout
    # geomean(1.25, 0.8) = 1.000; worst cell 1.250; worst p99 1.200; one cell at or below 1.0
    assert "| `rl-x` | 1.000 | 1.250 | 1.200 | 1/2 |" in out
    assert "heavy clos3-256 seed 0 estimated: 1.250 (p99 0.900), best heuristic b+preempt" in out


def test_a_run_without_learned_policies_says_so(tmp_path):
    run = _targets(tmp_path, {"suite": {"name": "hand", "learned": []}, "cells": []}, check=False)
    assert run.returncode != 0 and "ran no learned policies" in run.stderr


def test_a_cell_with_a_failed_run_is_left_out_and_said(tmp_path):
    """A failed heuristic run (no JCT) made the script raise a TypeError; a failed learned run too."""
    failed = {"avg_jct_s": None, "p99_jct_s": None, "error": "RuntimeError: boom"}
    doc = {
        "suite": {"name": "hand", "learned": ["rl-x"]},
        "seed_base": 2**31,
        "cells": [
            {**_cell(0, {"a": (100.0, 100.0), "rl-x": (100.0, 90.0)}), "load": 1.0, "contention": "link"},
            _cell(1, {"a": (50.0, 50.0), "rl-x": (40.0, 60.0)}),
            _cell(2, {"a": (50.0, 50.0), "rl-x": (40.0, 60.0)}),
        ],
    }
    doc["cells"][0]["results"]["a"] = failed
    doc["cells"][2]["results"]["rl-x"] = failed
    run = _targets(tmp_path, doc)
    # the failed learned cell counts against it (1 of 2 cells), it is not dropped
    assert "| `rl-x` | 0.800 | 0.800 | 1.200 | 1/2 | 1 | not met: 1 failed |" in run.stdout
    assert "left out: load 1 heavy clos3-256 link seed 0 estimated (failed: a)" in run.stderr
    assert "rl-x: failed in 1 cell(s)" in run.stderr and "heavy clos3-256 seed 2 estimated" in run.stderr


def test_a_learned_policy_with_a_failed_cell_does_not_meet_the_targets(tmp_path):
    """Judged on the cells it survived, a policy that failed one cell and beat the heuristics in
    the other read as meeting every target."""
    failed = {"avg_jct_s": None, "p99_jct_s": None, "error": "RuntimeError: boom"}
    doc = {
        "suite": {"name": "hand", "learned": ["rl-x", "rl-y"]},
        "seed_base": 2**31,
        "cells": [_cell(0, {"a": (100.0, 100.0), "rl-x": (90.0, 90.0), "rl-y": (90.0, 90.0)}),
                  _cell(1, {"a": (100.0, 100.0), "rl-x": (90.0, 90.0), "rl-y": (90.0, 90.0)})],
    }
    doc["cells"][1]["results"]["rl-x"] = failed
    run = _targets(tmp_path, doc)
    assert "failed cells" in run.stdout
    assert "| `rl-x` | 0.900 | 0.900 | 0.900 | 1/2 | 1 | not met: 1 failed |" in run.stdout
    assert "| `rl-y` | 0.900 | 0.900 | 0.900 | 2/2 | 0 | met |" in run.stdout
    assert "rl-x: failed in 1 cell(s)" in run.stderr and "rl-y" not in run.stderr
