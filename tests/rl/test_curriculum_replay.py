"""Replay groups under the curriculum: the job cap is part of what a group replays, so its
``sequence`` tag carries it."""

from __future__ import annotations

from deepshare.rl.env import DeepShareEnv

ENV = {"generated_fraction": 1.0, "generated_jobs": 12, "generated_nodes": [2, 4], "generated_loads": [0.7, 0.9, 1.1]}


def test_envs_of_a_group_capped_differently_carry_different_sequence_tags():
    """The curriculum moves on between two envs of a group starting their k-th episodes: one
    replays 3 jobs, the other 12. Their tags must differ, or the group baseline compares returns
    of different inputs; envs under the same cap still share the tag."""
    a, b, c = DeepShareEnv(ENV), DeepShareEnv(ENV), DeepShareEnv(ENV)
    for env in (a, b, c):
        env.set_replay_group(0, 1, 0)
        env.set_max_jobs(3)
    for env in (a, b, c):
        env.reset()
    _, ia = a.reset()
    _, ic = c.reset()
    assert ia == ic  # same cap, same input, same tag
    for env in (a, b, c):
        env.set_max_jobs(12)
    _, ib = b.reset()
    assert (ia["jobs"], ib["jobs"]) == (3, 12)
    assert ia["sequence"] != ib["sequence"]
    a2, c2 = a.reset()[1], c.reset()[1]
    assert a2["sequence"] == c2["sequence"] != ib["sequence"]  # episode 2 at cap 12: the group replays it together


def test_without_a_cap_a_groups_tags_are_as_before():
    env = DeepShareEnv(ENV)
    env.set_replay_group(0, 1, 2)
    assert env.reset()[1]["sequence"] == ((1 * 10_000 + 2) << 32) + 0
