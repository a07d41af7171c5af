"""bench/suite_cpu.py --json writes a benchmark report that ``make results`` takes: figures under
``measures``, the run's date and commit, written whole (it wrote its own document, which
``results_page`` refused for want of ``measures``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deepshare.experiments.results_page import bench_section, load_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="suite_cpu reads Linux's /proc")
def test_its_json_is_a_benchmark_report_with_provenance(tmp_path):
    out = tmp_path / "bench" / "suite_cpu.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "suite_cpu.py"), "--json", str(out), "--",
                           sys.executable, "-c", "pass"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = load_folder(out.parent, "measures")["suite_cpu"]  # what `make results` reads
    assert doc["bench"] == "suite_cpu"
    assert doc["provenance"]["date"] and "commit" in doc["provenance"]
    names = [m["name"] for m in doc["measures"]]
    assert names[:3] == ["wall time", "machine busy", "floor (busy CPU-s / cores)"]
    assert "suite_cpu" in bench_section("suite_cpu", doc)
    assert [p.name for p in out.parent.iterdir()] == ["suite_cpu.json"]  # no temporary file left
