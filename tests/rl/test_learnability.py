"""The learnability check's scenario family (deepshare.rl.scenarios, bench/learnability.py): seeded
and deterministic, built as its docstring says, and the teacher (srsf+packed) loses to the
reservation rule by exactly the constructed margin, in the simulator and through the env's own
actions; "always wait" fails the check's pass mark while the better rule meets the room mark; the
bench's flags are checked and its verdicts written to learnability.json. No training."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.information import InformationModel
from deepshare.core.simulator import Simulator
from deepshare.core.topology import parse_topology
from deepshare.core.traces.canonical import write_canonical
from deepshare.policies import make_policy
from deepshare.rl.env import DeepShareEnv
from deepshare.rl.scenarios import CLUSTER_YAML, NODE_GPUS, ROUND_GAP_S, GangFamily, round_jcts_h

TEACHER = "srsf+packed"
BETTER = "srsf+consolidated+backfill"
ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    spec = importlib.util.spec_from_file_location("learnability_bench", ROOT / "bench" / "learnability.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return load_bench()


def total_jct_s(policy: str, jobs) -> float:
    sim = Simulator(parse_topology(CLUSTER_YAML), jobs, make_contention("none"), information=InformationModel("exact"))
    report = sim.run(make_policy(policy))
    assert report.finished == len(jobs)
    return report.avg_jct_s * len(jobs)


def rounds(jobs):
    by_round: dict[str, dict[str, object]] = {}
    for job in jobs:
        r, role = job.job_id.split("-")
        by_round.setdefault(r, {})[role] = job
    return list(by_round.values())


def test_family_is_deterministic_under_a_seed():
    family = GangFamily()
    assert family.jobs(7) == family.jobs(7) == GangFamily().jobs(7)
    assert family.jobs(7) != family.jobs(8)
    assert len(GangFamily(rounds=2).jobs(3)) == 6


def test_family_is_built_as_documented():
    family = GangFamily(rounds=6)
    longs = shorts = 0
    for seed in range(20):
        for r, parts in enumerate(rounds(family.jobs(seed))):
            a, b, c = parts["blocker"], parts["gang"], parts["filler"]
            assert (a.submit_time, b.submit_time, c.submit_time) == (r * ROUND_GAP_S, r * ROUND_GAP_S + 60, r * ROUND_GAP_S + 120)
            assert a.gpus in (2, 4, 6) and c.gpus == NODE_GPUS - a.gpus and b.gpus == NODE_GPUS
            assert 1800 <= a.duration_s <= 5400 and 1800 <= b.duration_s <= 5400
            if c.duration_s >= 6 * 3600:  # long filler: srsf puts the gang first once the blocker ends
                longs += 1
                assert c.duration_s <= 12 * 3600 and c.gpus * c.duration_s >= b.gpus * b.duration_s
                greedy, waiting = round_jcts_h(a.duration_s / 3600, b.duration_s / 3600, c.duration_s / 3600)
                assert waiting < greedy
            else:  # short filler: it ends before the blocker does
                shorts += 1
                assert 360 <= c.duration_s <= 1440 and 120 + c.duration_s < a.duration_s
    assert longs > 0 and shorts > 0
    assert GangFamily.short_filler_p == 0.8 and 0.7 <= shorts / (longs + shorts) <= 0.9  # mostly short


def test_teacher_loses_one_round_by_the_constructed_margin():
    family = GangFamily(rounds=1)
    seed = next(s for s in range(100) if family.jobs(s)[2].duration_s > 3600)  # a long-filler round
    a, b, c = (job.duration_s for job in family.jobs(seed))
    # teacher: the filler starts at 120 s, the gang (submitted at 60 s) after it
    assert total_jct_s(TEACHER, family.jobs(seed)) == pytest.approx(a + (60 + c + b) + c)
    # reservation: the gang starts when the blocker ends, the filler (submitted at 120 s) after it
    assert total_jct_s(BETTER, family.jobs(seed)) == pytest.approx(a + (a + b - 60) + (a + b + c - 120))


@pytest.mark.parametrize("start", [0, 10, 20])
def test_reservation_rule_beats_the_teacher_by_the_margin(start):
    family = GangFamily()  # most fillers are short: take an instance with a long one
    seed = next(s for s in range(start, start + 100) if any(c.duration_s >= 6 * 3600 for c in family.jobs(s)[2::3]))
    jobs = family.jobs(seed)
    margin = 0.0
    for parts in rounds(jobs):
        a, b, c = (parts[k].duration_s for k in ("blocker", "gang", "filler"))
        if c >= 6 * 3600:
            margin += c - 2 * a - b + 240  # the minutes between arrivals: +60 teacher, -180 waiting
    teacher, better = total_jct_s(TEACHER, jobs), total_jct_s(BETTER, jobs)
    assert teacher - better == pytest.approx(margin)
    assert margin > 0


def test_env_offers_the_better_action(tmp_path):
    """Played through DeepShareEnv, the anchor's row reproduces the teacher and waiting at the
    filler reproduces the reservation rule: the better rule is within the learner's actions."""
    family = GangFamily(rounds=2)
    seed = next(s for s in range(100) if all(job.duration_s > 3600 for job in family.jobs(s)[2::3]))
    jobs = family.jobs(seed)
    trace = write_canonical(jobs, tmp_path / "gang.csv")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    config = {"traces": [str(trace)], "cluster": str(cluster), "contention": "none", "durations": "exact",
              "anchor": ["srsf", "packed"], "max_candidates": 8, "jobs_considered": 4}
    for rule, policy in (("anchor", TEACHER), ("wait-for-gang", BETTER)):
        env = DeepShareEnv(config)
        obs, _ = env.reset(seed=0)
        done, info = False, {}
        while not done:
            _, rows = env.choice()
            filler = rows[1].job is not None and rows[1].job.job_id.endswith("filler")
            waits = rule == "wait-for-gang" and filler and obs["action_mask"][0] > 0 and len(env.choice()[0].view.queued) > 1
            obs, _, done, _, info = env.step(0 if waits else 1)
        assert info["report"]["avg_jct_s"] * len(jobs) == pytest.approx(total_jct_s(policy, jobs))


def test_always_wait_loses_a_short_round_by_its_blocker_and_filler(tmp_path):
    """Waiting whenever offered, played through the env, in a short-filler round: the filler
    starts when the blocker ends and the gang waits for it, d_A + d_C (less the 2 minutes between
    the blocker's and the filler's arrivals) more than the teacher, which starts the filler at once."""
    family = GangFamily(rounds=1)
    seed = next(s for s in range(100) if family.jobs(s)[2].duration_s < 3600)
    jobs = family.jobs(seed)
    a, _, c = (job.duration_s for job in jobs)
    trace = write_canonical(jobs, tmp_path / "gang.csv")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    env = DeepShareEnv({"traces": [str(trace)], "cluster": str(cluster), "contention": "none", "durations": "exact",
                        "anchor": ["srsf", "packed"], "max_candidates": 8, "jobs_considered": 4})
    obs, _ = env.reset(seed=0)
    done, info = False, {}
    while not done:
        obs, _, done, _, info = env.step(0 if obs["action_mask"][0] > 0 else 1)
    assert info["report"]["avg_jct_s"] * len(jobs) == pytest.approx(total_jct_s(TEACHER, jobs) + a - 120 + c)


@pytest.mark.parametrize("base", [100_000, 0])  # the bench's held-out instances, and its first training ones
def test_always_wait_fails_the_mark_and_the_better_rule_passes(bench, tmp_path, base):
    """On the family as built (the default short_filler_p), 32 instances: "always wait" through the
    env is more than the pass mark (0.90) of the teacher, the better rule (and the hand rule through
    the env) within the room mark (0.85), so the bench's room check lets it train."""
    family, seeds = GangFamily(), range(base, base + 32)
    config = bench.write_family(tmp_path, family, range(1))
    r = {"teacher": bench.avg_jct_h(TEACHER, family, seeds), "better": bench.avg_jct_h(BETTER, family, seeds)}
    played = bench.rules_in_env(config, family, seeds)
    r["always_wait_env"] = played["always_wait"]
    assert played["anchor"] == pytest.approx(r["teacher"]) and played["hand"] == pytest.approx(r["better"])
    assert r["always_wait_env"] / r["teacher"] > bench.PASS_RATIO + 0.03
    assert r["better"] / r["teacher"] <= bench.ROOM_RATIO
    assert bench.room_check(r)["ok"]
    assert not bench.room_check({**r, "always_wait_env": 0.89 * r["teacher"]})["ok"]


@pytest.mark.parametrize("argv, message", [
    (["--train-seeds", "0"], "--train-seeds must be at least 1, got 0"),
    (["--eval-seeds", "-1"], "--eval-seeds must be at least 1, got -1"),
    (["--rounds", "0"], "--rounds must be at least 1, got 0"),
    (["--iterations", "0"], "--iterations must be at least 1, got 0"),
    (["--eval-seed-base", "-5"], "--eval-seed-base must be at least 0, got -5"),
    (["--eval-seed-base", "10"], "--eval-seed-base 10 overlaps the training seeds 0..63"),
    (["--train-seeds", "8", "--eval-seed-base", "7"], "--eval-seed-base 7 overlaps the training seeds 0..7"),
    (["--runs", "scratch,hot"], "--runs names 'hot': the starts are scratch, warm"),
    (["--runs", ""], "--runs names '': the starts are scratch, warm"),
    (["--runs", "warm,warm"], "--runs names a start twice: 'warm,warm'"),
])
def test_bad_flags_are_one_usage_line(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        bench.parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_config_whose_anchor_is_not_the_teacher_is_refused(bench, capsys, tmp_path):
    config = tmp_path / "other.yaml"
    config.write_text((ROOT / "rllib_configs" / "learnability.yaml").read_text().replace("anchor: [srsf, packed]",
                                                                                           "anchor: [fifo, packed]"))
    with pytest.raises(SystemExit):
        bench.parse_args(["--config", str(config)])
    assert "env.anchor is fifo+packed, not the teacher srsf+packed" in capsys.readouterr().err
    assert bench.parse_args(["--runs", " warm , scratch"]).runs == ["warm", "scratch"]


@pytest.mark.parametrize("text, message", [
    ("env:\n  anchor: [srsf, packed\n", "line 3: not YAML ("),
    ("- env\n", "expected a training YAML (a mapping with env, ppo, ...), got list"),
])
def test_a_config_that_is_no_training_yaml_is_one_usage_line(bench, capsys, tmp_path, text, message):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(SystemExit):
        bench.parse_args(["--config", str(config)])
    err = capsys.readouterr().err
    assert message in err.strip().splitlines()[-1] and err.count("error:") == 1  # argparse's usage, then one line


@pytest.mark.parametrize("extras", ["oops", "{curriculum: true}", "{curriculum: {lengths: 5}}"])
def test_ppo_extras_of_another_shape_are_left_to_train_to_refuse(bench, capsys, tmp_path, extras):
    config = tmp_path / "odd.yaml"
    config.write_text(f"env: {{anchor: [srsf, packed]}}\nppo_extras: {extras}\n")
    assert bench.parse_args(["--config", str(config)]).config == config
    assert "warning" not in capsys.readouterr().err


def test_a_curriculum_for_other_rounds_is_warned(bench, capsys):
    config = str(ROOT / "rllib_configs" / "learnability_ppo.yaml")
    bench.parse_args(["--config", config])
    assert "warning" not in capsys.readouterr().err
    bench.parse_args(["--config", config, "--rounds", "6"])
    assert "the curriculum's lengths [3, 6, 12] end at 12 jobs, but --rounds 6 makes episodes of 18" in capsys.readouterr().err


def test_verdicts_go_into_the_json(bench, monkeypatch, tmp_path):
    """Training faked: each start's PASS/FAIL and why, and its ratio to the best non-preemptive
    heuristic, are in learnability.json; a room that fails refuses to train, in the JSON too."""
    finals = {"scratch": 0.85, "warm": 0.95}
    real_avg = bench.avg_jct_h

    def fake_ppo(config_path, out, family, eval_seeds, teacher, **kwargs):
        ratio = finals[out.name]
        return {"final_ratio": ratio, "final_avg_jct_h": ratio * teacher, "iterations": 1, "wall_s": 0.0,
                "curve": [{"iteration": 1, "return": -1.0, "ratio": ratio}]}

    monkeypatch.setattr(bench, "run_ppo", fake_ppo)
    monkeypatch.setattr(bench, "run_imitation", lambda *a: (tmp_path / "imitation.pt", 0.0))
    monkeypatch.setattr(bench, "avg_jct_h", lambda name, *a: 1.0 if name.startswith("rl-") else real_avg(name, *a))
    monkeypatch.setattr(bench, "policy_names", lambda **kw: ["srsf+packed", "fifo+consolidated+backfill",
                                                             "srtf+packed+preempt"])
    monkeypatch.setattr(sys, "argv", ["learnability.py", "--train-seeds", "2", "--out", str(tmp_path / "out")])
    bench.main()
    doc = json.loads((tmp_path / "out" / "learnability.json").read_text())
    assert doc["verdicts"] == {"scratch": "PASS", "warm": "FAIL"}
    assert doc["scratch"]["why"].startswith("final held-out ratio 0.850 <= 0.9")
    assert doc["warm"]["why"].startswith("final held-out ratio 0.950 > 0.9")
    best = doc["room"]["best_non_preemptive"]
    assert best[0] == "fifo+consolidated+backfill" and doc["room"]["non_preemptive_at_better"] == [best[0]]
    assert doc["scratch"]["ratio_to_best_non_preemptive"] == pytest.approx(0.85 * doc["room"]["teacher"] / best[1])
    assert doc["room"]["check"]["ok"] and "refused" not in doc and doc["imitation"]["ratio"] > 0

    # one held-out instance whose fillers are all long: "always wait" is the better rule there
    family = GangFamily()
    base = next(s for s in range(100_000, 101_000) if all(job.duration_s > 3600 for job in family.jobs(s)[2::3]))
    monkeypatch.setattr(sys, "argv", ["learnability.py", "--train-seeds", "2", "--eval-seeds", "1", "--eval-seed-base",
                                      str(base), "--no-all-heuristics", "--out", str(tmp_path / "bad")])
    with pytest.raises(SystemExit, match="not training: the room check failed: 'always wait'"):
        bench.main()
    doc = json.loads((tmp_path / "bad" / "learnability.json").read_text())
    assert not doc["room"]["check"]["ok"] and doc["refused"].startswith("the room check failed")
    assert "scratch" not in doc and "imitation" not in doc
    monkeypatch.setattr(sys, "argv", ["learnability.py", "--room-only", "--train-seeds", "2", "--eval-seeds", "1",
                                      "--eval-seed-base", str(base), "--no-all-heuristics", "--out", str(tmp_path / "gate")])
    with pytest.raises(SystemExit) as exited:  # --room-only as a gate: the failed room is its exit status
        bench.main()
    assert exited.value.code == 1
