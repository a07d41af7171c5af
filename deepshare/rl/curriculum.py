"""A curriculum of episode lengths (``ppo_extras.curriculum``, issue 37, item 2).

Episodes hold at most ``lengths[s]`` jobs (the first ones by submission; the rest of the trace is
dropped) during stage ``s``; the stage moves on every ``iterations_per_stage`` training
iterations and stays at the last length. Short episodes first give PPO credit assignment it can
solve, then the cap grows to the real episode length. :class:`CurriculumStart` sets the first
cap on every env as it is created; :class:`CurriculumStep`, an ``on_train_result`` callback, sets
the cap for the next iteration on every env runner's envs after each iteration. The stage follows
the run, not the env runner: an env runner RLlib restarts mid-run gets the current iteration's cap
before it samples (:meth:`CurriculumStep.recreated`, an ``on_env_runners_recreated`` callback),
and a run resumed from a checkpoint sets it on all of them before its first iteration
(:func:`resume_stage`, called by ``deepshare.rl.train.train``); otherwise both would sample their
first iteration at ``lengths[0]``.

A new length also restarts the learner's average reward rate (``ppo_extras.average_reward``,
:meth:`~deepshare.rl.advantages.DeepShareAdvantages.restart_rate`): the reward per simulated second
of a capped episode is not the full episode's (idle time between its parts pays nothing), and a
rate carried over from the last stage biased every step's differential reward for tens of
iterations.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

from deepshare.rl.advantages import hooks_of, sub_envs


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


def _restart_rate(learner: Any) -> bool:
    restart = getattr(learner, "restart_reward_rate", None)
    return bool(restart()) if restart is not None else False


class CurriculumStep:
    """``on_train_result``: every env runner's envs get the cap of the coming iteration
    (``algorithm.iteration`` counts the iterations completed); the result records it as
    ``curriculum_max_jobs``. When the cap differs from the completed iteration's, every learner's
    average reward rate restarts. :meth:`recreated` is its ``on_env_runners_recreated`` twin."""

    def __init__(self, lengths: Sequence[int], iterations_per_stage: int) -> None:
        self.lengths, self.iterations_per_stage = list(lengths), iterations_per_stage

    def cap(self, algorithm: Any) -> int:
        """The cap of the iteration after those ``algorithm`` has completed."""
        return cap_for(self.lengths, self.iterations_per_stage, int(algorithm.iteration))

    def __call__(self, *, algorithm: Any, result: dict[str, Any] | None = None, **kwargs: Any) -> None:
        cap = self.cap(algorithm)
        algorithm.env_runner_group.foreach_env_runner(partial(_set_cap, cap), local_env_runner=True)
        completed = int(algorithm.iteration)
        learners = getattr(algorithm, "learner_group", None)
        if completed > 0 and learners is not None and cap != cap_for(self.lengths, self.iterations_per_stage, completed - 1):
            for answer in learners.foreach_learner(_restart_rate):  # remote learners' errors come back as results
                if not answer.ok:
                    raise answer.get()
        if result is not None:
            result["curriculum_max_jobs"] = cap

    def recreated(self, *, algorithm: Any, env_runner_group: Any, env_runner_indices: Sequence[int],
                  is_evaluation: bool = False, **kwargs: Any) -> None:
        """``on_env_runners_recreated``: the restarted env runners' envs (created at
        :class:`CurriculumStart`'s first cap) get the current iteration's cap before they sample."""
        if is_evaluation or not env_runner_indices:
            return
        env_runner_group.foreach_env_runner(partial(_set_cap, self.cap(algorithm)),
                                            remote_worker_ids=list(env_runner_indices), local_env_runner=False)


def resume_stage(algorithm: Any) -> int | None:
    """After ``Algorithm.from_checkpoint``: every env runner's envs get the cap of the iteration
    the restored run is at (its env runners were just created at the first stage's); the
    curriculum is the checkpoint's own. At a stage boundary the learners' reward rate restarts
    too, as it did when the checkpoint was saved (a checkpoint of a deepshare before the restart
    existed kept the old stage's rate there); mid-stage the restored rate is kept. The cap set, or
    None for a run without a curriculum."""
    for hook in hooks_of(algorithm.config.callbacks_on_train_result):
        if isinstance(hook, CurriculumStep):
            hook(algorithm=algorithm)
            return hook.cap(algorithm)
    return None
