"""The JSON a few bench scripts write besides ``--json`` carries the run's date and commit and is
written whole (learnability.py's ``learnability.json``, distill_tree.py's ``--json``,
learned_contention.py's ``--raw``): they wrote bare figures with ``open(..., "w")``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from deepshare.experiments.provenance import commit
from deepshare.experiments.suite import cells, load_suite, run_one

BENCH = Path(__file__).resolve().parents[2] / "bench"

SUITE = """name: learned-mini
jobs_per_node: 1
loads: [1.0]
mixes: [llm]
clusters: [[4, 8]]
contention: [link]
seeds: 1
duration_sigma: 1.0
durations: [exact]
contention_knowledge: [learned]
perturb_contention: 0.5
heuristics: [srsf+packed, srsf+consolidated]
"""


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240, cwd=BENCH)


def _stamped(path: Path) -> dict:
    doc = json.loads(path.read_text())
    stamped = doc["provenance"]["commit"]
    assert doc["provenance"]["date"]
    assert "sha" in stamped if commit() is not None else stamped is None  # outside a checkout: no commit
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    return doc


def test_learnability_json_has_provenance(tmp_path):
    # the default held-out instances: on two, "always wait" can meet the pass mark, and --room-only then exits 1
    done = _bench("learnability.py", "--room-only", "--no-all-heuristics", "--train-seeds", "2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "teacher" in _stamped(tmp_path / "learnability.json")["room"]


def test_learned_contention_raw_has_provenance(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    raw = tmp_path / "out" / "raw.json"
    raw.parent.mkdir()
    done = _bench("learned_contention.py", "--suite", str(suite), "--policies", "srsf+packed", "--raw", str(raw))
    assert done.returncode == 0, done.stderr
    assert [r["policy"] for r in _stamped(raw)["results"]] == ["srsf+packed"]


def test_distill_tree_json_has_provenance(tmp_path):
    spec = load_suite("tiny")
    grid = [c for c in cells(spec) if c.durations == "estimated"]
    out = tmp_path / "out" / "tree.json"
    out.parent.mkdir()
    done = _bench("distill_tree.py", "--suite", "tiny", "--policy", "rl-hybrid", "--depth", "2", "--json", str(out))
    assert done.returncode == 0, done.stderr
    doc = _stamped(out)
    assert doc["cells"] == len(grid) and doc["suite"] == "tiny" and doc["field"] == list(spec.heuristics)
    # The field's baselines are run in the same process, at this commit (they were read from a suite
    # JSON made at another): the policy's ratio is its JCT over the least heuristic's, cell by cell.
    mine = [run_one(spec, c, "rl-hybrid")["avg_jct_s"] / min(run_one(spec, c, h)["avg_jct_s"] for h in spec.heuristics)
            for c in grid]
    assert doc["policy_ratio"] == pytest.approx(math.exp(sum(math.log(r) for r in mine) / len(mine)))
