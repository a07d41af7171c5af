"""bench/journal_scale.py runs on a small journal and writes its figures with provenance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_journal_scale_prints_both_columns_and_writes_json(tmp_path):
    out = tmp_path / "journal_scale.json"
    done = subprocess.run([sys.executable, "journal_scale.py", "--jobs", "1500", "--repeats", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=240, cwd=BENCH)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "journal of 1,500 ended jobs; median of 1 reads, ms"
    assert lines[-1] == f"wrote {out}"
    assert [line.split("  ")[0] for line in lines[2:-1]] == [
        "history read per tick", "refit read (2,000 newest runs)", "a job's transitions", "metrics counts",
        "prune one batch"]
    doc = json.loads(out.read_text())
    assert doc["bench"] == "journal_scale" and doc["provenance"]["date"]
    assert len(doc["measures"]) == 10 and all(m["unit"] == "ms" and m["value"] >= 0 for m in doc["measures"])
