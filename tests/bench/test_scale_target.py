"""bench/scale.py: ``--target-s`` is recorded for every size measured (rl-hybrid's "<= 60 s" of
``make bench`` was never recorded: only points of 10^6 jobs had a target), and the policy is built
before the clock starts (a learned one spent 1.4 s CPU importing torch inside the timed region)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_target_is_recorded_for_every_size(tmp_path):
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--sizes", "200,400", "--policies",
                           "fifo+consolidated", "--target-s", "60", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    walls = [m for m in json.loads(out.read_text())["measures"] if m["unit"] == "s wall"]
    assert len(walls) == 2 and all(m["target"] == "<= 60" and m["met"] is True for m in walls)


def test_the_policy_is_built_before_the_clock(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    import scale

    import deepshare.experiments.scenario as scenario

    clock = [0.0]
    fake = types.SimpleNamespace(perf_counter=lambda: clock[0], process_time=lambda: clock[0])
    monkeypatch.setattr(scale, "time", fake)
    build = scenario.scenario_policy

    def slow_build(*args, **kwargs):
        clock[0] += 100.0  # what building a learned policy costs, on the fake clock
        return build(*args, **kwargs)

    monkeypatch.setattr(scenario, "scenario_policy", slow_build)
    scale.child(100, "fifo+consolidated")
    point = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert point["wall_s"] < 100 and point["cpu_s"] < 100
