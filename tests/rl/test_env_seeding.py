"""Which episodes a training env draws: each sub-env its own stream keyed by (run seed, env
runner, env index), and a new epoch of streams for a resumed run. No Ray cluster: real SingleAgentEnvRunners in this process, or the hooks
called as RLlib calls them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from deepshare.rl.env import DeepShareEnv

ENV = {"generated_fraction": 1.0, "generated_jobs": 12, "generated_nodes": [2, 4], "generated_loads": [0.7, 0.9, 1.1]}
TEXT = """name: t
env: {generated_fraction: 1.0, generated_jobs: 12, generated_nodes: [2, 4], generated_loads: [0.7, 0.9, 1.1]}
model: {hidden: 16}
run: {num_env_runners: 2, envs_per_env_runner: 2, seed: %d}
"""


def first_episode(env: DeepShareEnv) -> tuple:
    g = env.generated_episode
    return g.seed, g.mix, g.load, len(g.topology.nodes)


def runner_episodes(seed: int, worker: int) -> list[tuple]:
    """The first episodes of env runner ``worker``'s two sub-envs in a run of ``seed``, as RLlib
    makes and seeds them (``seed + worker``, then gymnasium's ``+ j`` per sub-env)."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    from deepshare.rl.train import build_algorithm_config, parse_train_config

    config = parse_train_config(TEXT % seed, Path("/x/c.yaml"))
    runner = SingleAgentEnvRunner(config=build_algorithm_config(config, config.env_config(Path("/x")), 2, 2.0),
                                  worker_index=worker, num_workers=2)
    try:
        runner.sample(num_timesteps=1, random_actions=True)  # the first, seeded reset
        return [first_episode(sub.unwrapped) for sub in runner.env.unwrapped.envs]
    finally:
        runner.stop()


def test_sub_envs_of_other_runners_and_runs_of_the_next_seed_draw_other_episodes():
    """RLlib's integers collide: (runner 1, env 1) and (runner 2, env 0) both got seed + 2, and run
    S's runner 2 was run S+1's runner 1. The keyed streams give all of them their own episodes."""
    r1, r2, next_r1 = runner_episodes(0, 1), runner_episodes(0, 2), runner_episodes(1, 1)
    assert r1[1] != r2[0]
    assert r2 != next_r1
    assert len({*r1, *r2}) == 4
    assert runner_episodes(0, 1) == r1  # a seed still names the run's episodes


def streams(seed: int, worker: int, n: int = 2, epoch: tuple[int, ...] = ()) -> list[DeepShareEnv]:
    from deepshare.rl.seeding import SeedStreams, _set_streams

    envs = [DeepShareEnv(ENV) for _ in range(n)]
    runner = SimpleNamespace(worker_index=worker, env=SimpleNamespace(unwrapped=SimpleNamespace(envs=envs)))
    SeedStreams(seed)(env_runner=runner, env=runner.env)
    if epoch:
        _set_streams(seed, epoch, runner)
    for j, env in enumerate(envs):
        env.reset(seed=seed + worker + j)  # RLlib's first reset, seeded with its integer
    return envs


def test_the_stream_ignores_rllibs_integer_and_is_keyed_by_seed_worker_and_index():
    a, b = streams(0, 1), streams(0, 2)
    assert first_episode(a[1]) != first_episode(b[0])  # both were reset with seed 2
    assert [first_episode(e) for e in streams(0, 2)] != [first_episode(e) for e in streams(1, 1)]
    again = streams(0, 1)
    assert [first_episode(e) for e in again] == [first_episode(e) for e in a]
    a[0].reset(), again[0].reset()  # unseeded resets continue the stream
    assert first_episode(a[0]) == first_episode(again[0])


def test_a_resumed_run_draws_new_episodes_not_its_first_iterations_again():
    """Algorithm.from_checkpoint makes the env runners again, which reset with the run's seed:
    without the epoch they replayed the episodes of iteration 1. resume_streams adds (iteration,
    resumed) to every env's key."""
    from deepshare.rl.advantages import RESUMED
    from deepshare.rl.seeding import resume_streams

    first_run = [first_episode(e) for e in streams(0, 1)]
    envs = [DeepShareEnv(ENV) for _ in range(2)]
    runners = [SimpleNamespace(worker_index=1, env=SimpleNamespace(unwrapped=SimpleNamespace(envs=envs))),
               SimpleNamespace(worker_index=0, env=None)]  # the local env runner has no env
    group = SimpleNamespace(foreach_env_runner=lambda func, local_env_runner=True: [func(r) for r in runners])
    algo = SimpleNamespace(iteration=20, config=SimpleNamespace(seed=0), env_runner_group=group)
    assert resume_streams(algo) == 2
    for j, env in enumerate(envs):
        env.reset(seed=0 + 1 + j)  # the rebuilt runner's first reset
    resumed = [first_episode(e) for e in envs]
    assert resumed != first_run and resumed[0] != resumed[1]
    assert resumed == [first_episode(e) for e in streams(0, 1, epoch=(20, RESUMED))]
    assert [first_episode(e) for e in streams(0, 1, epoch=(25, RESUMED))] != resumed  # another resume, others


def test_every_training_run_installs_the_streams_with_the_runs_seed():
    from deepshare.rl.seeding import SeedStreams
    from deepshare.rl.train import build_algorithm_config, parse_train_config

    config = parse_train_config(TEXT % 7, Path("/x/c.yaml"))
    algo = build_algorithm_config(config, config.env_config(Path("/x")), 0, 2.0)
    [hook] = algo.callbacks_on_environment_created
    assert isinstance(hook, SeedStreams) and hook.seed == 7
    assert [h.__func__.__qualname__ for h in algo.callbacks_on_env_runners_recreated] == ["SeedStreams.recreated"]
