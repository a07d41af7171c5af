"""PPO that learns (issue 37, item 2): differential returns, input-dependent baselines and the
episode-length curriculum (``ppo_extras``), on hand-checkable batches and one tiny real run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from deepshare.core.errors import DeepShareError
from deepshare.rl.advantages import (DeepShareAdvantages, ReportElapsed, differential_rewards, group_baseline,
                                     step_elapsed, step_keys, update_rho)
from deepshare.rl.curriculum import CurriculumStart, CurriculumStep, cap_for
from deepshare.rl.env import DeepShareEnv
from deepshare.rl.train import load_train_config, parse_train_config

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "rl" / "tiny.yaml"
ENV = {"generated_fraction": 1.0, "generated_jobs": 12, "generated_nodes": [2]}
EXTRAS = """ppo_extras:
  average_reward: {rate: 0.05}
  input_baseline: {group_size: 2, mix: 1.0}
  curriculum: {lengths: [4, 8], iterations_per_stage: 1}
"""
REAL = np.array([True, True, True, False])  # three real steps, then RLlib's artificial bootstrap step
TERMINATED = np.array([0, 0, 1, 0])
NOT_TRUNCATED = np.zeros(4)


# -- differential returns ----------------------------------------------------------------------
def test_rho_starts_at_the_first_batch_mean_then_moves_by_its_rate():
    assert update_rho(None, np.array([1.0, 2.0, 3.0, 0.0]), REAL, 0.1) == pytest.approx(2.0)  # the 0 is artificial
    assert update_rho(2.0, np.array([1.0, 1.0, 1.0, 0.0]), REAL, 0.1) == pytest.approx(0.9 * 2.0 + 0.1 * 1.0)
    assert differential_rewards(np.array([1.0, 2.0, 3.0, 0.0]), REAL, 0.5).tolist() == [0.5, 1.5, 2.5, 0.0]


def test_differential_returns_of_a_three_step_episode_per_decision():
    """per decision: rho 1.0 before, batch mean 2.0, rate 0.5: rho 1.5, rewards [-0.5, 0.5, 1.5]; values 0,
    lambda 1: the targets are the discounted sums (gamma 1: 1.5, 2.0, 1.5; gamma 0.5: 0.125, 1.25, 1.5)."""
    for gamma, expected in [(1.0, [1.5, 2.0, 1.5, 0.0]), (0.5, [0.125, 1.25, 1.5, 0.0])]:
        piece = DeepShareAdvantages(gamma=gamma, lambda_=1.0, average_reward_rate=0.5, average_reward_per="decision")
        piece.rho = 1.0
        adv, targets = piece.advantages(np.zeros(4), np.array([1.0, 2.0, 3.0, 0.0]), TERMINATED, NOT_TRUNCATED, REAL, None)
        assert piece.rho == pytest.approx(1.5)
        assert targets.tolist() == pytest.approx(expected) and adv.tolist() == pytest.approx(expected)
        assert piece.get_state() == {"rho": pytest.approx(1.5)}
    # with values: advantage = target - V (lambda 1, terminal: the bootstrap row's V is not used)
    piece = DeepShareAdvantages(gamma=1.0, lambda_=1.0, average_reward_rate=0.5, average_reward_per="decision")
    piece.set_state({"rho": 1.0})
    adv, _ = piece.advantages(np.array([1.0, 1.0, 1.0, 9.0]), np.array([1.0, 2.0, 3.0, 0.0]), TERMINATED, NOT_TRUNCATED, REAL, None)
    assert adv.tolist() == pytest.approx([0.5, 1.0, 0.5, -9.0])


# A launch (no simulated time, reward 0), then two waits of 1000 s and 3000 s (rewards -2, -4),
# then RLlib's artificial bootstrap row.
LAUNCH_WAIT_WAIT = np.array([0.0, -2.0, -4.0, 0.0])
ELAPSED = np.array([0.0, 1000.0, 3000.0, 0.0])


def test_rho_per_time_is_reward_over_elapsed_seconds():
    """The first batch sets rho to -6 / 4000 s = -0.0015 per s (the launch's step adds no time);
    later ones move it by rate; a batch without simulated time leaves it; the launch is charged 0."""
    assert update_rho(None, LAUNCH_WAIT_WAIT, REAL, 0.1, ELAPSED) == pytest.approx(-0.0015)
    assert update_rho(-0.0025, LAUNCH_WAIT_WAIT, REAL, 0.5, ELAPSED) == pytest.approx(-0.002)
    assert update_rho(-0.0025, np.zeros(4), REAL, 0.5, np.zeros(4)) == -0.0025
    assert update_rho(None, np.zeros(4), REAL, 0.5, np.zeros(4)) is None
    # the artificial row's time and reward do not count
    assert update_rho(None, np.array([0.0, -2.0, -4.0, -99.0]), REAL, 0.1, np.array([0.0, 1000.0, 3000.0, 9e9])) == pytest.approx(-0.0015)
    assert differential_rewards(LAUNCH_WAIT_WAIT, REAL, -0.001, ELAPSED).tolist() == pytest.approx([0.0, -1.0, -1.0, 0.0])
    assert differential_rewards(LAUNCH_WAIT_WAIT, REAL, None, ELAPSED).tolist() == LAUNCH_WAIT_WAIT.tolist()


def test_differential_returns_per_time_of_a_launch_and_two_waits():
    """rho -0.0005/s before, batch -0.0015/s, rate 0.5: rho -0.001/s; differential rewards
    [0 - 0, -2 + 1, -4 + 3] = [0, -1, -1]; values 0, lambda 1: gamma 1 returns [-2, -2, -1];
    gamma 0.5: [0.5 x -1.5, -1 + 0.5 x -1, -1] = [-0.75, -1.5, -1]. Per decision the same batch
    (rho -1/step from 0 and a mean of -2) would give [1, -1, -3]: the launch would be paid +1."""
    for gamma, expected in [(1.0, [-2.0, -2.0, -1.0, 0.0]), (0.5, [-0.75, -1.5, -1.0, 0.0])]:
        piece = DeepShareAdvantages(gamma=gamma, lambda_=1.0, average_reward_rate=0.5)
        assert piece.average_reward_per == "time"
        piece.set_state({"rho": -0.0005})
        adv, targets = piece.advantages(np.zeros(4), LAUNCH_WAIT_WAIT, TERMINATED, NOT_TRUNCATED, REAL, None, ELAPSED)
        assert piece.rho == pytest.approx(-0.001) and piece.get_state() == {"rho": pytest.approx(-0.001)}
        assert targets.tolist() == pytest.approx(expected) and adv.tolist() == pytest.approx(expected)
    per_step = DeepShareAdvantages(gamma=1.0, lambda_=1.0, average_reward_rate=0.5, average_reward_per="decision")
    per_step.set_state({"rho": 0.0})
    _, targets = per_step.advantages(np.zeros(4), LAUNCH_WAIT_WAIT, TERMINATED, NOT_TRUNCATED, REAL, None)
    assert targets.tolist() == pytest.approx([-3.0, -4.0, -3.0, 0.0])  # rewards [1, -1, -3]
    with pytest.raises(ValueError, match="elapsed"):
        DeepShareAdvantages(gamma=1.0, lambda_=1.0, average_reward_rate=0.5).advantages(
            np.zeros(4), LAUNCH_WAIT_WAIT, TERMINATED, NOT_TRUNCATED, REAL, None)
    with pytest.raises(ValueError, match="average_reward_per"):
        DeepShareAdvantages(gamma=1.0, lambda_=1.0, average_reward_rate=0.5, average_reward_per="hour")


def test_step_elapsed_reads_the_info_that_came_with_the_next_observation():
    """An episode's infos are observation-aligned (the reset's first); RLlib's elongation repeats
    the last. Row i's seconds are infos[i + 1]'s; the artificial row's are 0."""
    infos = [{"jobs": 3}, {"elapsed_s": 0.0}, {"elapsed_s": 1000.0}, {"elapsed_s": 3000.0}, {"elapsed_s": 3000.0}]
    episode = type("E", (), {"__len__": lambda self: 4, "t_started": 0, "get_infos": lambda self: infos})()
    chunk = type("E", (), {"__len__": lambda self: 2, "t_started": 7,
                           "get_infos": lambda self: [{"elapsed_s": 5.0}, {"elapsed_s": 60.0}, {"elapsed_s": 60.0}]})()
    assert step_elapsed([episode, chunk]).tolist() == [0.0, 1000.0, 3000.0, 0.0, 60.0, 0.0]
    bare = type("E", (), {"__len__": lambda self: 2, "t_started": 4, "get_infos": lambda self: [{}, {}, {}]})()
    with pytest.raises(RuntimeError, match="step 4 .*elapsed_s"):
        step_elapsed([bare])


def test_step_elapsed_on_rllib_episodes_lines_up_with_the_rewards():
    """On RLlib's own episodes (numpy'd, elongated by its artificial step, and a chunk cut with a
    lookback buffer, as env runners hand them over): row i gets the seconds of the step that paid
    rewards[i]."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.postprocessing.episodes import add_one_ts_to_episodes_and_truncate

    env = DeepShareEnv(ENV)
    env.set_report_elapsed(True)
    obs, info = env.reset(seed=5)
    first = SingleAgentEpisode()
    first.add_env_reset(obs, info)
    episode, chunks, steps, rng, done = first, [first], [], np.random.default_rng(1), False
    while not done:
        action = int(rng.choice(np.flatnonzero(env._episode.mask)))
        obs, reward, terminated, truncated, info = env.step(action)
        episode.add_env_step(obs, action, reward, info, terminated=terminated, truncated=truncated)
        steps.append((reward, info["elapsed_s"]))
        done = terminated or truncated
        if len(steps) == 6 and not done:  # the env runner's cut: the rest goes to a successor chunk
            episode = episode.cut(len_lookback_buffer=2)
            chunks.append(episode)
    assert len(chunks) == 2 and len(steps) > 8
    for chunk in chunks:
        chunk.to_numpy()
    add_one_ts_to_episodes_and_truncate(chunks)
    elapsed = step_elapsed(chunks)
    real = np.array([i != 6 and i != len(steps) + 1 for i in range(len(steps) + 2)])  # each chunk's artificial row
    assert elapsed[~real].tolist() == [0.0, 0.0]
    assert elapsed[real].tolist() == [e for _, e in steps]
    rewards = np.concatenate([chunk.get_rewards() for chunk in chunks])
    assert rewards[real].tolist() == pytest.approx([r for r, _ in steps])
    assert all(r == 0.0 for r, e in steps if e == 0.0) and any(e == 0.0 for _, e in steps)


def test_the_env_reports_each_steps_simulated_seconds_when_asked():
    """Launches offered the next choice at the same time cover 0 s and are paid 0; the steps'
    seconds add up to the time from the first decision to the end; off, infos are as before."""
    env = DeepShareEnv(ENV)
    ReportElapsed()(env=SimpleNamespace(unwrapped=SimpleNamespace(envs=[env])))
    env.reset(seed=5)
    start, total, launches, rng = env._episode.sim.now, 0.0, 0, np.random.default_rng(0)
    done = False
    while not done:
        mask = env._episode.mask
        action = int(rng.choice(np.flatnonzero(mask)))
        _, reward, done, truncated, info = env.step(action)
        assert info["elapsed_s"] >= 0.0
        if info["elapsed_s"] == 0.0:
            assert reward == 0.0
            launches += 1
        total += info["elapsed_s"]
        done = done or truncated
    assert launches > 0 and total == pytest.approx(env._episode.sim.now - start)
    plain = DeepShareEnv(ENV)
    plain.reset(seed=5)
    assert "elapsed_s" not in plain.step(1)[-1]


def test_without_options_the_piece_is_rllibs_gae():
    from ray.rllib.utils.postprocessing.value_predictions import compute_value_targets

    values, rewards = np.array([0.3, -0.2, 0.7, 0.1]), np.array([1.0, -2.0, 0.5, 0.0])
    adv, targets = DeepShareAdvantages(gamma=0.9, lambda_=0.8).advantages(values, rewards, TERMINATED, NOT_TRUNCATED, REAL, None)
    expected = compute_value_targets(values.astype(np.float32), rewards.astype(np.float32), TERMINATED.astype(np.float32),
                                     NOT_TRUNCATED.astype(np.float32), gamma=0.9, lambda_=0.8)
    assert targets.tolist() == pytest.approx(expected.tolist()) and adv.tolist() == pytest.approx((expected - values).tolist())


# -- input-dependent baseline ------------------------------------------------------------------
def test_group_baseline_of_two_episodes_of_one_sequence():
    """Episodes A (rewards 1, 2) and B (3, 4) of sequence 7, gamma 1: returns A (3, 2), B (7, 4);
    each one's baseline is the other's return at the same step; the bootstrap rows, and an
    episode C of another sequence, keep V (0.5)."""
    returns = np.array([3.0, 2.0, 0.0, 7.0, 4.0, 0.0, 5.0, 0.0])
    values = np.full(8, 0.5)
    keys = [(7, 0), (7, 1), None, (7, 0), (7, 1), None, (8, 0), None]
    assert group_baseline(returns, values, keys, 1.0).tolist() == [7.0, 4.0, 0.5, 3.0, 2.0, 0.5, 0.5, 0.5]
    assert group_baseline(returns, values, keys, 0.5)[:2].tolist() == [3.75, 2.25]

    piece = DeepShareAdvantages(gamma=1.0, lambda_=0.95, group_mix=1.0)
    terminated = np.array([0, 1, 0, 0, 1, 0, 1, 0])
    adv, targets = piece.advantages(values, np.array([1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 5.0, 0.0]), terminated, np.zeros(8),
                                    np.array([k is not None for k in keys]), keys)
    real = [0, 1, 3, 4, 6]  # the bootstrap rows carry RLlib's masked-out values, as in its GAE
    assert adv[real].tolist() == pytest.approx([-4.0, -2.0, 4.0, 2.0, 4.5])
    assert targets[1] == pytest.approx(2.0)  # the value targets stay GAE's


def test_step_keys_use_the_sequence_and_the_step_index_since_reset():
    """A chunk that starts at step 5 keys its rows 5, 6, ...; the artificial last row has none."""
    episode = type("E", (), {"__len__": lambda self: 3, "t_started": 5,
                             "get_infos": lambda self: [{"sequence": 3}] * 3})()
    plain = type("E", (), {"__len__": lambda self: 2, "t_started": 0, "get_infos": lambda self: [{}, {}]})()
    assert step_keys([episode, plain]) == [(3, 5), (3, 6), None, None, None]


def test_envs_of_a_replay_group_replay_the_same_sequences():
    a, b, c = DeepShareEnv(ENV), DeepShareEnv(ENV), DeepShareEnv(ENV)
    a.set_replay_group(0, 1, 0)
    b.set_replay_group(0, 1, 0)
    c.set_replay_group(0, 1, 1)
    for episode in range(2):
        runs = []
        for env, seed in ((a, 11), (b, 22), (c, 11)):  # the env's own seed no longer picks the scenario
            obs, info = env.reset(seed=seed)
            _, reward, _, _, step_info = env.step(0)
            assert step_info["sequence"] == info["sequence"]
            runs.append((info["sequence"], info["jobs"], info["nodes"], obs["observations"].tobytes(), reward))
        assert runs[0] == runs[1] and runs[0][0] != runs[2][0]
    plain = DeepShareEnv(ENV)
    assert "sequence" not in plain.reset(seed=3)[1] and "sequence" not in plain.step(0)[-1]


def test_an_env_of_a_group_leads_its_slowest_partner_by_one_sequence_at_most():
    """With the group's shared clock an env starts sequence k only once every env of its group
    has started k - 1; meanwhile it plays untagged filler episodes from its own stream. Every env
    plays every sequence (whether an episode has partners never depends on its own length), and
    the group cannot drift apart as envs counting alone did."""
    from deepshare.rl.env import ReplayClock

    a, b = DeepShareEnv(ENV), DeepShareEnv(ENV)
    clock = ReplayClock()
    a.set_replay_group(0, 1, 0, clock)
    b.set_replay_group(0, 1, 0, clock)
    base = (1 * 10_000 + 0) << 32

    def start(env):
        obs, info = env.reset()
        _, _, _, _, step_info = env.step(0)
        assert step_info.get("sequence") == info.get("sequence")
        return (None if "sequence" not in info else info["sequence"] - base), info["jobs"], obs["observations"].tobytes()

    a0 = start(a)
    assert a0[0] == 0 and clock.started == [0, -1]
    assert [start(a)[0] for _ in range(3)] == [None, None, None]  # b has not started 0: a plays fillers
    assert start(b) == a0  # b replays sequence 0 as a did
    assert start(a)[0] == 1 and start(a)[0] is None and start(b)[0] == 1 and start(b)[0] == 2
    assert start(b)[0] is None and start(a)[0] == 2 and start(b)[0] == 3
    a.set_replay_epoch(5, 2)
    b.set_replay_epoch(5, 2)
    assert clock.started == [-1, -1]
    first_b, first_a = start(b), start(a)
    assert first_a == first_b and first_a[0] is not None  # a new epoch: both on its first sequence


# -- curriculum --------------------------------------------------------------------------------
def test_the_curriculum_caps_episodes_and_grows_at_the_stage_boundaries():
    envs = [DeepShareEnv(ENV), DeepShareEnv(ENV)]
    vector = SimpleNamespace(unwrapped=SimpleNamespace(envs=envs))
    runner = SimpleNamespace(env=vector)
    group = SimpleNamespace(foreach_env_runner=lambda func, local_env_runner: [func(runner)])
    algorithm = SimpleNamespace(iteration=0, env_runner_group=group)

    CurriculumStart([3, 6, 12])(env=vector)
    assert [e.reset(seed=1)[1]["jobs"] for e in envs] == [3, 3]
    step, seen = CurriculumStep([3, 6, 12], 2), []
    for completed in range(1, 7):
        algorithm.iteration = completed
        result: dict = {}
        step(algorithm=algorithm, result=result)
        seen.append((result["curriculum_max_jobs"], envs[0].reset(seed=1)[1]["jobs"], envs[1].reset(seed=2)[1]["jobs"]))
    assert seen == [(3, 3, 3), (6, 6, 6), (6, 6, 6), (12, 12, 12), (12, 12, 12), (12, 12, 12)]
    assert cap_for([3, 6, 12], 2, 100) == 12
    envs[0].set_max_jobs(None)
    assert envs[0].reset(seed=1)[1]["jobs"] == 12


def test_a_new_stage_restarts_the_learners_reward_rate_and_only_then():
    """lengths [3, 6, 12], 2 iterations each: the caps after iterations 1..6 are 3, 6, 6, 12, 12,
    12, so the learners' rate restarts after iterations 2 and 4 (a stale rate charged every
    elapsed second of the longer episodes at the shorter ones' rate), and never within a stage."""
    from deepshare.rl.advantages import DeepSharePPOLearner

    piece = DeepShareAdvantages(gamma=1.0, lambda_=1.0, average_reward_rate=0.05)
    learner = SimpleNamespace(restart_reward_rate=lambda: DeepSharePPOLearner.restart_reward_rate(learner),
                              _advantages_piece=lambda: piece)
    restarted = []

    def foreach_learner(func):
        restarted.append(func(learner))
        return [SimpleNamespace(ok=True, get=lambda: restarted[-1])]

    group = SimpleNamespace(foreach_env_runner=lambda func, local_env_runner: [])
    algorithm = SimpleNamespace(iteration=0, env_runner_group=group, learner_group=SimpleNamespace(foreach_learner=foreach_learner))
    step, when = CurriculumStep([3, 6, 12], 2), []
    for completed in range(1, 7):
        algorithm.iteration = completed
        piece.rho = -0.5
        step(algorithm=algorithm, result={})
        if piece.rho is None:
            when.append(completed)
    assert when == [2, 4] and restarted == [True, True]
    plain = SimpleNamespace(_advantages_piece=lambda: None)  # PPO's own learner: no piece
    assert DeepSharePPOLearner.restart_reward_rate(plain) is False
    baseline_only = DeepShareAdvantages(gamma=1.0, lambda_=1.0, group_mix=1.0)  # no rate to restart
    assert DeepSharePPOLearner.restart_reward_rate(SimpleNamespace(_advantages_piece=lambda: baseline_only)) is False
    piece.rho = 3.0
    piece.restart_rate()
    assert piece.rho is None and piece.get_state() == {"rho": None}

    def failing(func):  # a remote learner's error comes back as a result, not raised
        return [SimpleNamespace(ok=False, get=lambda: RuntimeError("learner 1 died"))]

    algorithm.learner_group, algorithm.iteration = SimpleNamespace(foreach_learner=failing), 2
    with pytest.raises(RuntimeError, match="learner 1 died"):
        step(algorithm=algorithm, result={})


def test_a_run_resumed_at_a_stage_boundary_restarts_the_rate_and_mid_stage_keeps_it():
    """resume_stage sets the cap of the restored iteration; at a boundary (iteration 2 of
    lengths [3, 6], 2 per stage) the rate restarts as it did before the checkpoint was saved,
    mid-stage (iteration 3) the restored rate is kept."""
    from deepshare.rl.advantages import DeepSharePPOLearner
    from deepshare.rl.curriculum import resume_stage

    piece = DeepShareAdvantages(gamma=1.0, lambda_=1.0, average_reward_rate=0.05)
    learner = SimpleNamespace(_advantages_piece=lambda: piece)
    learner.restart_reward_rate = lambda: DeepSharePPOLearner.restart_reward_rate(learner)
    group = SimpleNamespace(foreach_env_runner=lambda func, local_env_runner: [])
    def foreach_learner(func):
        answer = func(learner)
        return [SimpleNamespace(ok=True, get=lambda: answer)]

    learners = SimpleNamespace(foreach_learner=foreach_learner)
    step = CurriculumStep([3, 6], 2)
    for iteration, kept in ((2, False), (3, True)):
        piece.set_state({"rho": -0.25})
        algorithm = SimpleNamespace(iteration=iteration, env_runner_group=group, learner_group=learners,
                                    config=SimpleNamespace(callbacks_on_train_result=step))
        assert resume_stage(algorithm) == 6
        assert (piece.rho == -0.25) is kept


def test_an_env_runner_restarted_mid_run_gets_the_current_stage_before_it_samples():
    """RLlib creates a restarted env runner's envs anew (CurriculumStart: the first stage's cap) and
    fires ``on_env_runners_recreated`` before the next training step: the run's stage, not 3."""
    from deepshare.rl.train import build_algorithm_config

    fresh, kept = DeepShareEnv(ENV), DeepShareEnv(ENV)
    CurriculumStart([3, 6, 12])(env=fresh)
    kept.set_max_jobs(5)  # a healthy runner: left alone
    runners = {1: SimpleNamespace(env=kept), 2: SimpleNamespace(env=fresh)}
    calls = []

    def foreach_env_runner(func, *, remote_worker_ids=None, local_env_runner=True):
        calls.append((remote_worker_ids, local_env_runner))
        return [func(runners[i]) for i in remote_worker_ids]

    group = SimpleNamespace(foreach_env_runner=foreach_env_runner)
    step = CurriculumStep([3, 6, 12], 2)
    algorithm = SimpleNamespace(iteration=5, env_runner_group=group)
    step.recreated(algorithm=algorithm, env_runner_group=group, env_runner_indices=[2], is_evaluation=False)
    assert calls == [([2], False)]
    assert fresh.reset(seed=1)[1]["jobs"] == 12 and kept._max_jobs == 5
    config = parse_train_config("name: x\nppo_extras: {curriculum: {lengths: [3, 6, 12], iterations_per_stage: 2}}\n",
                                Path("c.yaml"))
    algo = build_algorithm_config(config, config.env_config(Path(".")), 0, 2)
    streams, hook = algo.callbacks_on_env_runners_recreated  # every run's seed streams first (deepshare.rl.seeding)
    assert streams.__func__.__qualname__ == "SeedStreams.recreated"
    assert getattr(hook, "__self__", None) is algo.callbacks_on_train_result and hook.__func__ is CurriculumStep.recreated


def test_replay_groups_of_a_restarted_env_runner_draw_new_sequences_not_the_first_ones_again():
    """An env runner RLlib recreates (and every env runner of a resumed run) counts its episodes
    from 0 again: without a new epoch its groups replayed the run's first arrival sequences. The
    epoch gives new sequences, still shared within a group, with tags no earlier episode had."""
    from deepshare.rl.advantages import RECREATED, ReplayGroups
    from deepshare.rl.train import build_algorithm_config

    def first(env):
        obs, info = env.reset(seed=1)
        return info["sequence"], info["jobs"], obs["observations"].tobytes()

    before = DeepShareEnv(ENV)
    before.set_replay_group(0, 2, 0)
    seen = [first(before) for _ in range(3)]
    fresh, partner, kept = DeepShareEnv(ENV), DeepShareEnv(ENV), DeepShareEnv(ENV)
    replay = ReplayGroups(group_size=2, seed=0)
    replay(env_runner=SimpleNamespace(worker_index=2), env=SimpleNamespace(unwrapped=SimpleNamespace(envs=[fresh, partner])))
    replay(env_runner=SimpleNamespace(worker_index=1), env=kept)
    assert first(fresh) == seen[0]  # made again, it would replay the run's first sequence
    runners = {1: SimpleNamespace(env=kept), 2: SimpleNamespace(env=SimpleNamespace(unwrapped=SimpleNamespace(envs=[fresh, partner])))}
    calls = []

    def foreach_env_runner(func, *, remote_worker_ids=None, local_env_runner=True):
        calls.append((remote_worker_ids, local_env_runner))
        return [func(runners[i]) for i in remote_worker_ids]

    group = SimpleNamespace(foreach_env_runner=foreach_env_runner)
    replay.recreated(algorithm=SimpleNamespace(iteration=7), env_runner_group=group, env_runner_indices=[2])
    assert calls == [([2], False)]
    assert fresh._epoch == partner._epoch == (7, RECREATED) and kept._epoch == ()
    after = []
    for _ in range(3):  # the group still replays one sequence
        after.append(first(fresh))
        assert first(partner) == after[-1]
    assert not {s[0] for s in seen} & {a[0] for a in after}  # no tag of the earlier episodes
    assert [s[1:] for s in seen] != [a[1:] for a in after]
    config = parse_train_config("name: x\nrun: {envs_per_env_runner: 2}\nppo_extras: {input_baseline: {group_size: 2},"
                                " curriculum: {lengths: [3, 6], iterations_per_stage: 2}}\n", Path("c.yaml"))
    hooks = build_algorithm_config(config, config.env_config(Path(".")), 0, 2).callbacks_on_env_runners_recreated
    assert [h.__func__.__qualname__ for h in hooks] == ["SeedStreams.recreated", "ReplayGroups.recreated", "CurriculumStep.recreated"]


# -- the options in the YAML -------------------------------------------------------------------
@pytest.mark.parametrize(
    "extras, needle",
    [
        ("{average_reward: {rate: 0}}", r"ppo_extras\.average_reward\.rate"),
        ("{average_reward: {rate: 1.5}}", r"ppo_extras\.average_reward\.rate"),
        ("{average_reward: true}", r"ppo_extras\.average_reward"),
        ("{average_reward: {rate: 0.1, per: step}}", r"ppo_extras\.average_reward\.per"),
        ("{input_baseline: {group_size: 1}}", r"ppo_extras\.input_baseline\.group_size"),
        ("{input_baseline: {group_size: 2, mix: 2}}", r"ppo_extras\.input_baseline\.mix"),
        ("{input_baseline: {group_size: 9}}", r"ppo_extras\.input_baseline\.group_size \(9\) exceeds run\.envs_per_env_runner"),
        ("{input_baseline: {group_size: 3}}", r"ppo_extras\.input_baseline\.group_size \(3\) must divide run\.envs_per_env_runner \(4\)"),
        ("{curriculum: {lengths: [8, 4], iterations_per_stage: 2}}", r"ppo_extras\.curriculum\.lengths.*must not decrease"),
        ("{curriculum: {lengths: [0], iterations_per_stage: 2}}", r"ppo_extras\.curriculum\.lengths"),
        ("{curriculum: {lengths: [], iterations_per_stage: 2}}", r"ppo_extras\.curriculum\.lengths"),
        ("{curriculum: {lengths: [4], iterations_per_stage: 0}}", r"ppo_extras\.curriculum\.iterations_per_stage"),
        ("{curriculm: {}}", r"ppo_extras\.curriculm"),
    ],
)
def test_bad_options_name_the_field(extras, needle):
    with pytest.raises(DeepShareError, match=needle):
        parse_train_config(f"name: x\nppo_extras: {extras}\n", Path("c.yaml"))


def test_off_by_default_leaves_the_algorithm_config_as_it_was(tmp_path):
    from deepshare.rl.train import build_algorithm_config, run_metadata

    config = load_train_config(TINY)
    assert not config.ppo_extras.any and "ppo_extras" not in run_metadata(config, TINY, config.env_config(TINY.parent))
    algo = build_algorithm_config(config, config.env_config(TINY.parent), 0, 2)
    assert algo.learner_class.__name__ == "PPOTorchLearner" and algo.learner_config_dict == {}
    # the only hook: every env's own seed stream, which every run has (deepshare.rl.seeding)
    assert algo.callbacks_on_train_result is None
    assert [type(h).__name__ for h in algo.callbacks_on_environment_created] == ["SeedStreams"]


def test_average_reward_per_defaults_to_time_and_installs_the_env_hook():
    from deepshare.rl.advantages import LEARNER_KEY
    from deepshare.rl.train import build_algorithm_config

    for extras, per, hooked in [("{rate: 0.1}", "time", True), ("{rate: 0.1, per: decision}", "decision", False)]:
        config = parse_train_config(f"name: x\nppo_extras: {{average_reward: {extras}}}\n", Path("c.yaml"))
        assert config.ppo_extras.average_reward.per == per
        algo = build_algorithm_config(config, config.env_config(Path(".")), 0, 2)
        assert algo.learner_config_dict[LEARNER_KEY]["average_reward_per"] == per
        hooks = algo.callbacks_on_environment_created or []
        assert any(isinstance(h, ReportElapsed) for h in hooks) == hooked


# -- a real run --------------------------------------------------------------------------------
def _config(tmp_path: Path) -> Path:
    text = TINY.read_text().replace("num_env_runners: 1", "num_env_runners: 0").replace("envs_per_env_runner: 1", "envs_per_env_runner: 2")
    path = tmp_path / "tiny_extras.yaml"
    path.write_text(text + EXTRAS)
    return path


def test_a_tiny_run_with_every_option_trains_and_writes_its_policy(tmp_path, ray_local):
    from deepshare.rl.advantages import DeepShareAdvantages as Piece
    from deepshare.rl.train import build_algorithm_config, metrics_row, train

    path = _config(tmp_path)
    config = load_train_config(path)
    algo = build_algorithm_config(config, config.env_config(path.parent), 0, 2).build_algo()
    try:
        learner = algo.learner_group._learner
        pieces = [p for p in learner._learner_connector.connectors if isinstance(p, Piece)]
        caps, rates = [], []
        for _ in range(2):
            result = algo.train()
            caps.append(result["curriculum_max_jobs"])
            rates.append(pieces[0].rho)
            row = metrics_row(result, 0.0)
            assert row["baseline_matched"] > 0.5  # the share reaches metrics.csv
            assert row["reward_rate"] < 0  # ...and the rate the batch used (the jct reward is negative)
        assert rates[0] is None  # 4 jobs -> 8 after iteration 1: the rate restarted; iteration 2 set it again
        assert len(pieces) == 1 and pieces[0].rho is not None and pieces[0].group_mix == 1.0
        assert pieces[0].matched > 0.5  # most steps had the group partner's episode in the batch
        assert not any(type(p).__name__ == "GeneralAdvantageEstimation" for p in learner._learner_connector.connectors)
        envs = algo.env_runner_group.local_env_runner.env.unwrapped.envs
        assert caps == [8, 8] and [e.unwrapped._max_jobs for e in envs] == [8, 8]
        assert [e.unwrapped._replay for e in envs] == [(0, 0, 0), (0, 0, 0)]
        assert [e.unwrapped._report_elapsed for e in envs] == [True, True]  # average_reward per time
    finally:
        algo.stop()

    policy = train(path, tmp_path / "run", iterations=1, config=config)
    from deepshare.policies.checkpoint import load_policy_file

    assert load_policy_file(policy)["metadata"]["ppo_extras"]["curriculum"] == {"lengths": [4, 8], "iterations_per_stage": 1}


def test_a_resumed_run_samples_its_first_iteration_at_the_stage_it_is_at(tmp_path, ray_local, monkeypatch):
    """``resume`` rebuilds the env runners (Algorithm.from_checkpoint), whose envs CurriculumStart
    caps at lengths[0]: after 1 of [4, 8] at 1 iteration per stage, iteration 2 is at 8, from its start."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from deepshare.rl.train import train

    path = tmp_path / "tiny_curriculum.yaml"
    path.write_text(TINY.read_text().replace("num_env_runners: 1", "num_env_runners: 0").replace("envs_per_env_runner: 1", "envs_per_env_runner: 2")
                    + "ppo_extras:\n  curriculum: {lengths: [4, 8], iterations_per_stage: 1}\n  input_baseline: {group_size: 2}\n")
    run = tmp_path / "run"
    train(path, run, iterations=1)
    sampled_at = []
    original = Algorithm.train

    def recording(self):
        envs = [e.unwrapped for e in self.env_runner_group.local_env_runner.env.unwrapped.envs]
        sampled_at.append([(e._max_jobs, e._epoch) for e in envs])
        return original(self)

    monkeypatch.setattr(Algorithm, "train", recording)
    train(path, run, iterations=2, resume=run)
    assert sampled_at == [[(8, (1, 1)), (8, (1, 1))]]  # ...and its replay groups draw new sequences (resumed at 1)


def test_rho_survives_a_checkpoint_and_its_restore(tmp_path, ray_local):
    """RLlib's learner saves its module, optimizer and metrics, not its connector pipeline: rho
    rides in the learner's state, so Algorithm.from_checkpoint (what ``resume`` does) brings it back."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from deepshare.rl.advantages import LEARNER_KEY
    from deepshare.rl.train import build_algorithm_config

    text = TINY.read_text().replace("num_env_runners: 1", "num_env_runners: 0")
    path = tmp_path / "tiny_average.yaml"
    path.write_text(text + "ppo_extras:\n  average_reward: {rate: 0.05}\n")
    config = load_train_config(path)

    def piece(algo):
        connectors = algo.learner_group._learner._learner_connector.connectors
        return next(p for p in connectors if isinstance(p, DeepShareAdvantages))

    algo = build_algorithm_config(config, config.env_config(path.parent), 0, 2).build_algo()
    try:
        algo.train()
        rho = piece(algo).rho
        assert rho is not None and rho < 0  # the jct reward: minus the jobs in the system, per second
        assert algo.learner_group._learner.get_state(not_components="rl_module")[LEARNER_KEY] == {"rho": rho}
        algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    fresh = build_algorithm_config(config, config.env_config(path.parent), 0, 2).build_algo()
    try:
        assert piece(fresh).rho is None
        fresh.restore_from_path(str(tmp_path / "ckpt"))
        assert piece(fresh).rho == rho
    finally:
        fresh.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        assert piece(restored).rho == rho
    finally:
        restored.stop()
