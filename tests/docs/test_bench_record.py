"""The benchmarks' ``--json`` (``bench/record.py``): figures with their targets and the run's
provenance, in the form the results page renders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from deepshare.experiments.results_page import bench_section

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_a_record_is_json_with_targets_and_provenance(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import it from their own folder
    from record import Record

    monkeypatch.setattr(sys, "argv", ["simulator.py", "--json", "x.json"])
    record = Record("simulator", str(tmp_path / "out" / "simulator.json"))
    record.add("256 jobs", np.float64(0.2), "s", at_most=0.3)  # NumPy values, as the scripts compute them
    record.add("steps/s per runner", 1500.0, "steps/s", at_least=2000)
    record.add("exponent", 0.99, "")
    record.write()
    doc = json.loads((tmp_path / "out" / "simulator.json").read_text())
    assert doc["bench"] == "simulator" and doc["provenance"]["command"] == ["python", "simulator.py", "--json", "x.json"]
    assert [(m["target"], m["met"]) for m in doc["measures"]] == [("<= 0.3", True), (">= 2000", False), (None, None)]
    section = bench_section("simulator", doc)
    assert "| 256 jobs | 0.2 s | <= 0.3 | met |" in section and "| steps/s per runner | 1,500 steps/s | >= 2000 | not met |" in section


def test_a_figure_that_is_not_finite_is_refused_naming_it(tmp_path: Path, monkeypatch) -> None:
    """A NaN was written as ``NaN`` (JSON allowed it), which the results page then called a corrupted
    or hand-edited report."""
    monkeypatch.syspath_prepend(str(BENCH))
    from record import Record

    record = Record("simulator", str(tmp_path / "simulator.json"))
    for value in (float("nan"), np.float64("inf"), -float("inf")):
        with pytest.raises(SystemExit, match=r"^error: simulator: measure '256 jobs' is -?(nan|inf), not a finite"):
            record.add("256 jobs", value, "s", at_most=0.3)
    assert record.measures == []


def test_a_record_reads_the_commit_again_when_it_writes(tmp_path: Path, monkeypatch) -> None:
    """The commit was read once, at the start: a checkout moved to another commit during the run
    was stamped with the start's, clean."""
    monkeypatch.syspath_prepend(str(BENCH))
    from record import Record

    from deepshare.experiments import provenance

    readings = iter([{"sha": "a" * 40, "dirty": False}, {"sha": "b" * 40, "dirty": False}])
    monkeypatch.setattr(provenance, "commit", lambda *args, **kwargs: next(readings))
    record = Record("simulator", str(tmp_path / "simulator.json"))
    record.add("256 jobs", 0.2, "s")
    record.write()
    doc = json.loads((tmp_path / "simulator.json").read_text())
    assert doc["provenance"]["commit"] == {"sha": "a" * 40, "dirty": True, "sha_at_write": "b" * 40}
    assert "with uncommitted changes (the checkout was at `bbbbbbbbbbbb` when the results were written)" in bench_section("simulator", doc)


def test_a_change_one_write_saw_stays_recorded_by_the_next(tmp_path: Path, monkeypatch) -> None:
    """Second read: each write compared a fresh reading with the start's, so a checkout edited and
    then restored during the run gave a dirty file, then a clean one again."""
    monkeypatch.syspath_prepend(str(BENCH))
    from record import Record

    from deepshare.experiments import provenance

    readings = iter([{"sha": "a" * 40, "dirty": False}, {"sha": "a" * 40, "dirty": True}, {"sha": "a" * 40, "dirty": False}])
    monkeypatch.setattr(provenance, "commit", lambda *args, **kwargs: next(readings))
    record = Record("simulator", str(tmp_path / "simulator.json"))
    record.add("256 jobs", 0.2, "s")
    record.write()
    record.write()
    doc = json.loads((tmp_path / "simulator.json").read_text())
    assert doc["provenance"]["commit"] == {"sha": "a" * 40, "dirty": True}
