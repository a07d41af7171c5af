"""A local pool whose worker process dies (``os._exit``, the OOM killer) keeps every finished run:
the run that kept killing its process is a failed run, and the others have the numbers they have
with one worker."""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from deepshare.experiments import pool_runs
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



class Pools(ProcessPoolExecutor):
    """The pool :func:`pool_tasks` makes, each one recorded (with its worker count)."""

    made: list[Pools] = []

    def __init__(self, max_workers: int, **options) -> None:  # type: ignore[no-untyped-def]
        super().__init__(max_workers=max_workers, **options)
        self.workers = max_workers
        Pools.made.append(self)


@pytest.fixture
def pools(monkeypatch) -> list[Pools]:
    Pools.made = []
    monkeypatch.setattr(pool_runs, "ProcessPoolExecutor", Pools)
    return Pools.made


class HandedOverLate(list):
    """Calls whose first is handed over, and the rest only once the first pool is broken: a worker
    that died while the runs were still being submitted (``submit`` then raises ``BrokenProcessPool``)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        items = list.__iter__(self)
        yield next(items)
        deadline = time.monotonic() + 60
        while not Pools.made[0]._broken and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.01)
        yield from items


def value_or_exit(value: int) -> int:
    """``value``; a negative one ends its process (every time)."""
    if value < 0:
        os._exit(3)
    return value


def test_a_death_while_runs_are_submitted_keeps_every_run(pools: list[Pools]) -> None:
    calls = HandedOverLate([(-1,)] + [(i,) for i in range(40)])
    out = dict(pool_tasks(value_or_exit, calls, 2, max_retries=1))
    assert Pools.made[0]._broken  # type: ignore[attr-defined]  # the rest were handed to a broken pool
    assert {i: out[i] for i in range(1, 41)} == {i + 1: i for i in range(40)}
    assert isinstance(out[0], Lost)


def attempts_then(log: str, value: int) -> int:
    """``value``, recording the attempt in ``log``; a negative value ends its process every time."""
    with open(log, "a") as f:
        f.write(f"{value}\n")
    if value < 0:
        os._exit(3)
    return value


def test_after_one_death_the_rest_rerun_in_a_pool_of_the_same_size(tmp_path: Path, pools: list[Pools]) -> None:
    """A run whose process died once: the runs left rerun together on as many workers, none alone."""
    calls = [(str(tmp_path / "m"), 100)] + [(str(tmp_path / "ok"), i) for i in range(20)]
    out = sorted(pool_tasks(die_once_unless_ok, calls, 3))
    assert out == [(0, 100)] + [(i + 1, i) for i in range(20)]
    assert [p.workers for p in pools] == [3, 3]


def die_once_unless_ok(marker: str, value: int) -> int:
    """``value``; the first call with a marker not named ``ok`` ends its process (a transient kill)."""
    if not marker.endswith("ok"):
        return die_once(marker, value)
    return value


def test_a_run_that_always_dies_is_isolated_after_the_second_break_and_lost(tmp_path: Path, pools: list[Pools]) -> None:
    log = str(tmp_path / "log")
    calls = [(log, -1)] + [(log, i) for i in range(12)]
    out = dict(pool_tasks(attempts_then, calls, 2, max_retries=2))
    assert {i: out[i] for i in range(1, 13)} == {i + 1: i for i in range(12)}
    assert isinstance(out[0], Lost) and "2 reruns alone" in out[0].error
    assert Path(log).read_text().split().count("-1") == 2 + 2  # the first pool, the second, then twice alone
    assert [p.workers for p in pools[:2]] == [2, 2] and all(p.workers == 1 for p in pools[2:])
    assert len(pools) >= 4  # each death alone takes its one-worker pool with it
