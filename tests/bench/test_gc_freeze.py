"""bench/gc_freeze.py runs its modes interleaved, round by round (it ran every subprocess of one
mode, then the next mode's, so a change of the machine's load went into the comparison)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_modes_are_interleaved_round_by_round(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    import gc_freeze

    order: list[str] = []

    def fake_run(command, **kwargs):  # type: ignore[no-untyped-def]
        mode = command[command.index("--child") + 1]
        order.append(mode)
        figures = {"mode": mode, "cpu_s": 1.0, "cpu_min_s": 0.9, "gc_s": 0.1, "gc_full_s": 0.05, "gc_full_runs": 1.0,
                   "objects": 1000}
        return SimpleNamespace(returncode=0, stdout=json.dumps(figures) + "\n", stderr="")

    monkeypatch.setattr(gc_freeze.subprocess, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["gc_freeze.py", "--pending", "100", "--jobs", "0", "--rounds", "3"])
    gc_freeze.main()
    assert order == ["none", "per-decision", "startup", "per-decision", "startup", "none", "startup", "none",
                     "per-decision"]
    assert "interleaved" in capsys.readouterr().out
