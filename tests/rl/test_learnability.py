"""The learnability check's scenario family (deepshare.rl.scenarios, bench/learnability.py): seeded
and deterministic, built as its docstring says, and the teacher (srsf+packed) loses to the
reservation rule by exactly the constructed margin, in the simulator and through the env's own
actions. No training."""

from __future__ import annotations

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
