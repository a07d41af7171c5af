"""bench/room.py on the tiny suite: with a horizon past the trace's end the clairvoyant ceiling is
exact one-step rollout improvement of the base heuristic, a real run that is never worse than the
base; bad cell indices are refused on one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FULL = ["--horizon", "31536000", "--max-steps", "1000000"]


def _room(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "room.py"), "--suite", "tiny", *args],
                          capture_output=True, text=True, timeout=300)


def _rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("| load")]


def test_the_full_horizon_ceiling_is_never_worse_than_its_base(tmp_path):
    done = _room("--only", "0,3", "--futures", "2", "--no-arrivals", *FULL, "--json", str(tmp_path / "room.json"))
    assert done.returncode == 0, done.stderr
    rows = _rows(done.stdout)
    assert [r[0].rsplit("(#", 1)[1] for r in rows] == ["0)", "3)"]
    for row in rows:
        base, planner, ceiling = float(row[2]), float(row[3]), float(row[4])
        assert ceiling <= base  # rollout improvement with the true cost-to-go
        assert planner > 0
    assert "geometric mean over 2 cells: planner / best" in done.stdout and "ceiling / best" in done.stdout
    doc = json.loads((tmp_path / "room.json").read_text())  # what `make results` renders
    assert doc["bench"] == "room (tiny)" and doc["provenance"]["commit"]
    measures = {m["name"]: m for m in doc["measures"]}
    ceiling = measures["load 1.3 heavy 4x8 profiled seed 0 estimated: clairvoyant ceiling / best heuristic"]
    assert f"{ceiling['value']:.3f}" == rows[1][4] and ceiling["unit"] == "x"
    assert ceiling["note"].startswith("best heuristic srsf+consolidated, ")
    assert "no arrivals" in measures["clairvoyant ceiling / best heuristic, geometric mean over 2 cells"]["note"]


def test_the_ceiling_alone_and_the_planner_alone():
    ceiling = _rows(_room("--only", "1", "--no-planner", *FULL).stdout)
    assert ceiling[0][3] == "-" and float(ceiling[0][4]) <= float(ceiling[0][2])
    told_work = _room("--only", "2", "--no-planner", *FULL, "--ceiling-knows", "work")
    assert "the ceiling knows the true work, not the arrivals" in told_work.stdout
    assert float(_rows(told_work.stdout)[0][4]) > 0
    planner = _rows(_room("--only", "1", "--no-ceiling", "--futures", "2").stdout)
    assert planner[0][4] == "-" and float(planner[0][3]) > 0


def test_a_cell_out_of_range_is_one_line_and_exit_2():
    done = _room("--only", "0,9")
    assert done.returncode == 2
    assert "--only: [9] out of range: suite tiny has 4 cells (0..3)" in done.stderr  # the flag given, not --cells
    assert "Traceback" not in done.stderr


def test_on_a_suite_with_tenants_the_heuristics_run_behind_its_admission_as_the_suite_runs_them():
    from deepshare.experiments.suite import cells, load_suite
    from deepshare.experiments.suite_runs import run_one

    spec = load_suite("tenants")
    expected = run_one(spec, cells(spec)[0], "srsf+consolidated")["avg_jct_s"]
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "room.py"), "--suite", "tenants", "--only", "0",
                           "--heuristics", "srsf+consolidated", "--no-planner", "--max-steps", "50"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"`srsf+consolidated` ({expected:,.0f})" in _rows(done.stdout)[0][1]


def test_two_workers_print_the_same_rows_in_the_same_order():
    one = _room("--only", "3,0,2", "--futures", "2", "--max-steps", "50")
    two = _room("--only", "3,0,2", "--futures", "2", "--max-steps", "50", "--workers", "2")
    assert one.returncode == two.returncode == 0, two.stderr
    strip_cpu = lambda rows: [r[:-1] for r in rows]  # noqa: E731 - CPU seconds differ run to run
    assert strip_cpu(_rows(two.stdout)) == strip_cpu(_rows(one.stdout))
    assert [r[0].rsplit("(#", 1)[1] for r in _rows(two.stdout)] == ["3)", "0)", "2)"]
    assert _room("--only", "0", "--workers", "0").returncode == 2


# -- the ceiling's copies under estimated durations: in-process, on small generated traces -------
def _small(seed: int) -> list:
    from deepshare.core.traces import generate
    from deepshare.core.traces.generator import RecurrenceModel

    return generate(24, load=1.5, total_gpus=16, seed=seed, median_duration_s=1800.0, duration_sigma=1.0,
                    recurrence=RecurrenceModel(users=3, user_skew=1.5, burst_share=0.5, runs_per_group=6,
                                               recurring_share=0.7)).jobs


def _truth(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from room import TruthFutures

    return TruthFutures


TO_THE_END = dict(futures=1, horizon_s=31_536_000.0, max_steps=1_000_000, contention="profiled", arrivals=False)


def test_the_ceilings_copies_play_the_base_as_it_really_runs(monkeypatch):
    # bsrsf (the base) reads the history's forecasts: a copy whose base learned nothing from the
    # jobs the copy finishes decided otherwise than the real base, so the base's own rollout did
    # not predict the base's real run. From every decision point of the base's run, it must.
    from deepshare.core.contention import make_contention
    from deepshare.core.information import InformationModel
    from deepshare.core.simulator import Simulator
    from deepshare.core.topology import uniform
    from deepshare.policies import make_policy
    from deepshare.policies import planner as module

    truth_futures = _truth(monkeypatch)
    topology, config, base_name = uniform(2, 8), module.PlannerConfig(**TO_THE_END), "bsrsf+uncontended+preempt"
    for information in (InformationModel("estimated", 1.0, 0), InformationModel("unknown")):
        jobs = _small(21)
        world = Simulator(topology, jobs, make_contention("profiled"), information=information)
        real = world.run(make_policy(base_name))
        total = real.avg_jct_s * real.finished
        sim = Simulator(topology, jobs, make_contention("profiled"), information=information)
        truth = truth_futures(sim, jobs)
        planner, base = module.Planner(config, make_policy, futures_model=truth), make_policy(base_name)
        points = 0
        while (view := sim.advance()) is not None:
            decision = base.decide(view)
            future = truth.sample(view, view.now + config.horizon_s, None)
            cost, cut = planner._rollout(module._future_view(view, future), decision, future,
                                         view.now + config.horizon_s, base_name, view.durations)
            assert cut is None
            assert sim.jobs_in_system_area + cost == pytest.approx(total, rel=1e-6), (information.durations, view.now)
            sim.apply(decision)
            points += 1
        assert points > 30


def test_under_estimated_durations_the_full_horizon_ceiling_is_never_worse_than_its_base(monkeypatch):
    # seeds where the ceiling came out worse than its base while its copies' base did not learn
    # from the copies' completions
    from deepshare.core.contention import make_contention
    from deepshare.core.information import InformationModel
    from deepshare.core.simulator import Simulator
    from deepshare.core.topology import uniform
    from deepshare.policies import make_policy
    from deepshare.policies.planner import Planner, PlannerConfig

    truth_futures = _truth(monkeypatch)
    topology, information, config = uniform(2, 8), InformationModel("estimated", 1.0, 0), PlannerConfig(**TO_THE_END)
    changed = 0
    for seed in (21, 28):
        jobs = _small(seed)
        world = lambda: Simulator(topology, jobs, make_contention("profiled"), information=information)  # noqa: E731
        base = world().run(make_policy("bsrsf+uncontended+preempt")).avg_jct_s
        sim = world()
        ceiling = Planner(config, make_policy, name="clairvoyant", futures_model=truth_futures(sim, jobs))
        assert sim.run(ceiling).avg_jct_s <= base * (1 + 1e-9), seed
        changed += ceiling.stats.changed
    assert changed > 0  # it did decide otherwise than the base, and never for the worse


def test_on_a_perturbed_world_the_ceilings_copies_run_that_world(monkeypatch):
    """Review: the ceiling's copies ran the shipped model named by the cell, not the perturbed
    world the cell simulates (the `learned` suites'), so the base's own rollout missed its real
    run by up to 2%. Given the world, it matches it."""
    from deepshare.core.contention import make_contention
    from deepshare.core.contention.world import PerturbedContention
    from deepshare.core.simulator import Simulator
    from deepshare.core.topology import uniform
    from deepshare.core.traces import generate
    from deepshare.policies import make_policy
    from deepshare.policies import planner as module

    truth_futures = _truth(monkeypatch)
    world = PerturbedContention(make_contention("profiled"), 0.5, 0)
    topology, config, base_name = uniform(4, 4), module.PlannerConfig(**TO_THE_END), "srsf+packed"
    jobs = generate(40, load=1.5, total_gpus=16, seed=21, median_duration_s=1800.0, duration_sigma=1.0).jobs
    real = Simulator(topology, jobs, world).run(make_policy(base_name))
    total = real.avg_jct_s * real.finished
    sim = Simulator(topology, jobs, world)
    truth = truth_futures(sim, jobs)
    planner, base = module.Planner(config, make_policy, futures_model=truth, contention=world), make_policy(base_name)
    errors = []
    while (view := sim.advance()) is not None:
        decision = base.decide(view)
        future = truth.sample(view, view.now + config.horizon_s, None)
        cost, _ = planner._rollout(module._future_view(view, future), decision, future, view.now + config.horizon_s,
                                   base_name, view.durations)
        errors.append(abs(sim.jobs_in_system_area + cost - total) / total)
        sim.apply(decision)
    assert len(errors) > 10 and max(errors) < 1e-6
