"""A local pool whose worker process dies (``os._exit``, the OOM killer) keeps every finished run:
the run that kept killing its process is a failed run, and the others have the numbers they have
with one worker."""

from __future__ import annotations

import os
from pathlib import Path

from deepshare.experiments.pool_runs import pool_tasks
from deepshare.experiments.ray_runs import Lost
from deepshare.experiments.suite import SuiteSpec, cells, run_policies

SPEC = SuiteSpec(name="p", jobs_per_node=2, loads=(0.7, 1.3), mixes=("heavy",), clusters=((2, 4),),
                 contention=("profiled",), seeds=1, durations=("exact",), heuristics=("srsf+packed",))

CRASH = '''
import os


class Crash:
    """A policy whose process dies at its first decision."""

    name = "crash"

    def decide(self, view):
        os._exit(3)
'''


def test_a_run_whose_process_dies_is_a_failed_run_and_the_others_are_kept(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "crash_policy.py").write_text(CRASH)
    monkeypatch.syspath_prepend(str(tmp_path))  # workers inherit it
    grid = cells(SPEC)
    alone = run_policies(SPEC, grid, ("srsf+packed", "las+packed"))
    pooled = run_policies(SPEC, grid, ("srsf+packed", "crash_policy:Crash", "las+packed"), workers=2)
    for cell in grid:
        assert pooled[cell]["srsf+packed"] == alone[cell]["srsf+packed"]
        assert pooled[cell]["las+packed"] == alone[cell]["las+packed"]
        crashed = pooled[cell]["crash_policy:Crash"]
        assert crashed["avg_jct_s"] is None and str(crashed["error"]).startswith("worker process died: ")


def die_once(marker: str, value: int) -> int:
    """``value``, after the first call with ``marker`` ended its process (as a transient OOM kill would)."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(9)
    return value


def test_a_run_whose_process_died_once_is_rerun_and_a_run_that_always_dies_is_lost(tmp_path: Path) -> None:
    calls = [(str(tmp_path / f"m{i}"), i) for i in range(4)]
    assert sorted(pool_tasks(die_once, calls, 2)) == [(i, i) for i in range(4)]
    out = list(pool_tasks(os._exit, [(5,)], 1, max_retries=2))
    assert len(out) == 1 and isinstance(out[0][1], Lost) and "2 reruns" in out[0][1].error

