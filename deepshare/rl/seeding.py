"""Each training env's own stream of episodes, keyed by (run seed, env runner, env index).

RLlib seeds env runner ``w`` with ``run.seed + w`` and gymnasium's vector env seeds its sub-env
``j`` with that ``+ j``; ``reset`` used the integer as it came, so within one run env runner 1's
env 1 and env runner 2's env 0 drew the same episodes (16 env runners of 4 envs: 19 distinct
streams out of 64), and run ``--seed S``'s env runner 2 was run ``--seed S+1``'s env runner 1.
:class:`SeedStreams`, an ``on_environment_created`` hook every training run has, gives each env
the key (seed, worker index, env index) instead (:meth:`DeepShareEnv.set_seed_stream`).

An env runner made again starts its envs' streams from their beginning, so it would replay the
run's first episodes: RLlib's recreated env runners (:meth:`SeedStreams.recreated`) and all env
runners of a run resumed from a checkpoint (:func:`resume_streams`) add an epoch, (iteration,
cause), to the key, as the replay groups do (:func:`deepshare.rl.advantages.resume_replay`).
Replay groups draw their scenarios from their own keys and are unaffected.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

from deepshare.rl.advantages import RECREATED, RESUMED, sub_envs


def _set_streams(seed: int, epoch: tuple[int, ...], env_runner: Any) -> int:
    worker = int(getattr(env_runner, "worker_index", 0) or 0)
    envs = sub_envs(getattr(env_runner, "env", None))
    for index, env in enumerate(envs):
        env.set_seed_stream(seed, worker, index, epoch)
    return len(envs)


class SeedStreams:
    """``on_environment_created``: sub-env ``i`` of env runner ``w`` draws from the stream
    (``seed``, ``w``, ``i``); :meth:`recreated` is its ``on_env_runners_recreated`` twin."""

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)

    def __call__(self, *, env_runner: Any = None, env: Any = None, **kwargs: Any) -> None:
        worker = int(getattr(env_runner, "worker_index", 0) or 0)
        for index, sub in enumerate(sub_envs(env)):
            sub.set_seed_stream(self.seed, worker, index)

    def recreated(self, *, algorithm: Any, env_runner_group: Any, env_runner_indices: Sequence[int],
                  is_evaluation: bool = False, **kwargs: Any) -> None:
        """A restarted env runner's envs draw the streams of the epoch (iteration, recreated)."""
        if is_evaluation or not env_runner_indices:
            return
        env_runner_group.foreach_env_runner(partial(_set_streams, self.seed, (int(algorithm.iteration), RECREATED)),
                                            remote_worker_ids=list(env_runner_indices), local_env_runner=False)


def resume_streams(algorithm: Any) -> int:
    """After ``Algorithm.from_checkpoint``: every env runner's envs draw the streams of the epoch
    (restored iteration, resumed), so the resumed run sees new episodes rather than those of its
    first iterations again (also for a checkpoint saved before the streams existed: the run's seed
    is its config's). The number of envs set."""
    seed = int(algorithm.config.seed or 0)
    done = algorithm.env_runner_group.foreach_env_runner(
        partial(_set_streams, seed, (int(algorithm.iteration), RESUMED)), local_env_runner=True)
    return sum(done or [])
