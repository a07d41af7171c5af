"""A curriculum of episode lengths (``ppo_extras.curriculum``, issue 37, item 2).

Episodes hold at most ``lengths[s]`` jobs (the first ones by submission; the rest of the trace is
dropped) during stage ``s``; the stage moves on every ``iterations_per_stage`` training
iterations and stays at the last length. Short episodes first give PPO credit assignment it can
solve, then the cap grows to the real episode length. :class:`CurriculumStart` sets the first
cap on every env as it is created; :class:`CurriculumStep`, an ``on_train_result`` callback, sets
the cap for the next iteration on every env runner's envs after each iteration (every time, so an
env runner restarted mid-run catches up).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

from deepshare.rl.advantages import sub_envs


def cap_for(lengths: Sequence[int], iterations_per_stage: int, completed: int) -> int:
    """The job cap of the iteration after ``completed`` iterations."""
    return int(lengths[min(completed // iterations_per_stage, len(lengths) - 1)])


def _set_cap(max_jobs: int, env_runner: Any) -> list[int]:
    envs = sub_envs(getattr(env_runner, "env", None))
    for env in envs:
        env.set_max_jobs(max_jobs)
    return [max_jobs] * len(envs)


class CurriculumStart:
    """``on_environment_created``: the first stage's cap on each new env."""

    def __init__(self, lengths: Sequence[int]) -> None:
        self.first = int(lengths[0])

    def __call__(self, *, env: Any = None, **kwargs: Any) -> None:
        for sub in sub_envs(env):
            sub.set_max_jobs(self.first)


class CurriculumStep:
    """``on_train_result``: every env runner's envs get the cap of the coming iteration
    (``algorithm.iteration`` counts the iterations completed); the result records it as
    ``curriculum_max_jobs``."""

    def __init__(self, lengths: Sequence[int], iterations_per_stage: int) -> None:
        self.lengths, self.iterations_per_stage = list(lengths), iterations_per_stage

    def __call__(self, *, algorithm: Any, result: dict[str, Any] | None = None, **kwargs: Any) -> None:
        cap = cap_for(self.lengths, self.iterations_per_stage, int(algorithm.iteration))
        algorithm.env_runner_group.foreach_env_runner(partial(_set_cap, cap), local_env_runner=True)
        if result is not None:
            result["curriculum_max_jobs"] = cap
