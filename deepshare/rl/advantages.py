"""Learner-side advantages for long episodes (issue 37, item 2): differential returns and
input-dependent baselines, as one learner connector piece in place of RLlib's GAE.

**Average reward** (``ppo_extras.average_reward``): the episode is a semi-Markov process, its
decisions covering unequal simulated time (a launch offered the next choice at the same time
covers none and is paid 0; a wait covers the time to the next decision point). With ``per: time``
(the default) ``rho`` is a running estimate of the reward per simulated second, a batch's being
its real steps' summed rewards over their summed elapsed seconds (the env's ``info["elapsed_s"]``,
switched on by :class:`ReportElapsed`), and every real step's reward becomes ``r_t - rho * dt_t``,
``dt_t`` the seconds that step covered; a launch's stays 0. With ``per: decision`` ``rho`` is the
mean reward per step and the reward becomes ``r_t - rho``, which also charges ``-rho`` per decision
taken. Either way ``rho`` is updated from each training batch before it is used on it (the first
batch sets it; later ones move it by ``rate``; the curriculum restarts it when the episode length
changes, :meth:`DeepShareAdvantages.restart_rate`), GAE, the value targets and the value function then
see differential rewards, so a long episode's return no longer grows with its length, and RLlib's
artificial bootstrap step (``loss_mask`` false) keeps its reward of 0. ``rho`` is part of the
learner's state (:class:`DeepSharePPOLearner`), so it survives a checkpoint and its restore.

**Input-dependent baseline** (``ppo_extras.input_baseline``, Mao et al., ICLR'19): envs of an env
runner in groups of ``group_size`` replay the same arrival sequences (:class:`ReplayGroups`; the
env tags every step's info with ``sequence``). An action's advantage is its return
(``gamma``-discounted, ``lambda`` 1, bootstrapped by the value function where a chunk ends) minus
the baseline ``mix * (mean return of the OTHER episodes of the same sequence at the same step
index) + (1 - mix) * V(s_t)``; where no other episode of the sequence has that step in the batch,
the baseline is ``V(s_t)``. "Same time" is the step index since the episode's reset (the decision
count, ``t_started`` + row in the chunk), not the simulated clock: episodes of one sequence see the
same arrivals, and their decisions diverge only as their policies' choices do. The value targets
(the value function's loss) stay GAE's.

Advantages are standardised over the batch, as RLlib's GAE piece does.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import numpy as np
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.postprocessing.value_predictions import compute_value_targets

from deepshare.rl.env import ReplayClock

LEARNER_KEY = "deepshare_advantages"
"""The key of ``learner_config_dict`` holding :class:`DeepShareAdvantages`' keyword arguments."""


MATCHED_KEY = "baseline_matched"
"""The learner result's key (per module) of :attr:`DeepShareAdvantages.matched`, each batch's; the
``baseline_matched`` column of ``metrics.csv``."""


RATE_KEY = "reward_rate"
"""The learner result's key (per module) of :attr:`DeepShareAdvantages.rho` after each batch; the
``reward_rate`` column of ``metrics.csv`` (with several learners, RLlib's mean of theirs)."""


ELAPSED_KEY = "elapsed_s"
"""The info key under which the env reports the simulated seconds a step covered."""


def differential_rewards(rewards: np.ndarray, real: np.ndarray, rho: float | None,
                         elapsed: np.ndarray | None = None) -> np.ndarray:
    """``r_t - rho * dt_t`` on the real steps (``elapsed`` the ``dt_t``; None: ``r_t - rho``, rho
    per step); the artificial bootstrap steps (``real`` false) keep theirs. ``rho`` None: unchanged."""
    if rho is None:
        return np.asarray(rewards, dtype=np.float32)
    if elapsed is None:  # in float32, as it always was: per-decision runs train as before
        rewards = np.asarray(rewards, dtype=np.float32)
        return np.where(real, rewards - np.float32(rho), rewards).astype(np.float32)
    rewards = np.asarray(rewards, dtype=np.float64)
    charge = rho * np.asarray(elapsed, dtype=np.float64)
    return np.where(real, rewards - charge, rewards).astype(np.float32)


def update_rho(rho: float | None, rewards: np.ndarray, real: np.ndarray, rate: float,
               elapsed: np.ndarray | None = None) -> float | None:
    """The running reward rate after one batch: the batch's own the first time, then an exponential
    average with weight ``rate`` on the batch's. Without ``elapsed`` a batch's rate is its mean real
    reward (per step); with it, its real rewards' sum over their elapsed seconds' sum (per second),
    and a batch that covered no simulated time leaves ``rho`` as it was."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if elapsed is None:
        batch = float(np.mean(rewards[real])) if real.any() else 0.0
    else:
        seconds = float(np.sum(np.asarray(elapsed, dtype=np.float64)[real]))
        if seconds <= 0.0:
            return rho
        batch = float(np.sum(rewards[real])) / seconds
    return batch if rho is None else (1.0 - rate) * rho + rate * batch


def group_baseline(returns: np.ndarray, values: np.ndarray, keys: list, mix: float) -> np.ndarray:
    """Per row: ``mix`` x the mean return of the other rows with its key, ``1 - mix`` x its value;
    its value alone where its key is None or no other row shares it. A key is
    ``(sequence, step index)``."""
    sums: dict[Any, float] = {}
    counts: dict[Any, int] = {}
    for key, ret in zip(keys, returns):
        if key is not None:
            sums[key] = sums.get(key, 0.0) + float(ret)
            counts[key] = counts.get(key, 0) + 1
    out = np.asarray(values, dtype=np.float64).copy()
    for i, key in enumerate(keys):
        if key is not None and counts[key] > 1:
            others = (sums[key] - float(returns[i])) / (counts[key] - 1)
            out[i] = mix * others + (1.0 - mix) * out[i]
    return out.astype(np.float32)


def step_keys(episodes: list) -> list:
    """``(sequence, step index)`` for every row of the episodes as the learner batch lays them out
    (each episode already elongated by RLlib's artificial step, whose row gets None)."""
    keys: list = []
    for episode in episodes:
        n = len(episode)
        infos = episode.get_infos()
        for i in range(n):
            sequence = infos[i].get("sequence") if i < n - 1 and i < len(infos) and isinstance(infos[i], dict) else None
            keys.append(None if sequence is None else (sequence, episode.t_started + i))
    return keys


def step_elapsed(episodes: list) -> np.ndarray:
    """The simulated seconds every row's step covered, as the learner batch lays the rows out
    (each episode already elongated by RLlib's artificial step, whose row gets 0): row ``i``'s is
    ``info["elapsed_s"]`` of the step it took, the info that came with observation ``i + 1``."""
    out: list[float] = []
    for episode in episodes:
        n = len(episode)
        infos = episode.get_infos()
        for i in range(n - 1):
            info = infos[i + 1] if i + 1 < len(infos) else None
            if not isinstance(info, dict) or ELAPSED_KEY not in info:
                raise RuntimeError(
                    f"average_reward per time: step {episode.t_started + i} of an episode has no info[{ELAPSED_KEY!r}] "
                    "(the env runners' envs need ReportElapsed, which ppo_extras installs)")
            out.append(float(info[ELAPSED_KEY]))
        out.append(0.0)
    return np.asarray(out, dtype=np.float64)


class DeepShareAdvantages(ConnectorV2):
    """RLlib's :class:`GeneralAdvantageEstimation` with differential rewards and/or the group
    baseline (see the module docstring); a stateless, single-agent module's batch."""

    def __init__(self, input_observation_space: Any = None, input_action_space: Any = None, *, gamma: float,
                 lambda_: float, average_reward_rate: float | None = None, average_reward_per: str = "time",
                 group_mix: float | None = None) -> None:
        super().__init__(input_observation_space, input_action_space)
        if average_reward_per not in ("time", "decision"):
            raise ValueError(f"average_reward_per must be 'time' or 'decision', got {average_reward_per!r}")
        self.gamma, self.lambda_ = gamma, lambda_
        self.average_reward_rate, self.group_mix = average_reward_rate, group_mix
        self.average_reward_per = average_reward_per
        self.rho: float | None = None
        """Reward per simulated second (``per`` time) or per step (``per`` decision); None before the first batch."""
        self.matched: float | None = None
        """Share of the last batch's real rows whose baseline had another episode of their sequence."""
        self._to_tensor: NumpyToTensor | None = None

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"rho": self.rho}

    def set_state(self, state: dict[str, Any]) -> None:
        self.rho = state.get("rho")

    def restart_rate(self) -> None:
        """Forget ``rho``: the next batch sets it afresh. For when the episodes change what a
        second or a decision is worth (the curriculum's next length: a 1-round episode's reward per
        second is many times a 4-round one's, whose idle gaps between rounds pay nothing). Moving by
        ``rate`` per iteration, a stale ``rho`` took tens of iterations to follow, and meanwhile
        charged every step's elapsed time at the old rate: a bias larger than the returns."""
        self.rho = None

    def advantages(self, values: np.ndarray, rewards: np.ndarray, terminateds: np.ndarray, truncateds: np.ndarray,
                   real: np.ndarray, keys: list | None, elapsed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(unstandardised advantages, value targets) of one module's rows; updates ``rho``.
        ``elapsed``: each row's simulated seconds, needed with ``per`` time."""
        values = np.asarray(values, dtype=np.float32)
        rewards = np.asarray(rewards, dtype=np.float32)
        terminateds = np.asarray(terminateds, dtype=np.float32)
        truncateds = np.asarray(truncateds, dtype=np.float32)
        if self.average_reward_rate is not None:
            if self.average_reward_per == "time" and elapsed is None:
                raise ValueError("average_reward per time needs each row's elapsed seconds")
            per_time = elapsed if self.average_reward_per == "time" else None
            self.rho = update_rho(self.rho, rewards, real, self.average_reward_rate, per_time)
            rewards = differential_rewards(rewards, real, self.rho, per_time)
        targets = compute_value_targets(values, rewards, terminateds, truncateds, gamma=self.gamma, lambda_=self.lambda_)
        if self.group_mix is None or keys is None:
            return targets - values, targets
        returns = compute_value_targets(values, rewards, terminateds, truncateds, gamma=self.gamma, lambda_=1.0)
        counts: dict[Any, int] = {}
        for key in keys:
            counts[key] = counts.get(key, 0) + 1
        self.matched = sum(1 for k in keys if k is not None and counts[k] > 1) / max(1, int(real.sum()))
        return returns - group_baseline(returns, values, keys, self.group_mix), targets

    def __call__(self, *, rl_module: Any, episodes: list, batch: dict[str, Any], metrics: Any = None,
                 **kwargs: Any) -> Any:
        sa_episodes = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        device = None
        done = []
        for module_id, module_batch in batch.items():
            module = rl_module[module_id]
            if not isinstance(module, ValueFunctionAPI):
                continue
            if module.is_stateful():
                raise NotImplementedError("DeepShareAdvantages: stateful modules (zero-padded batches) are not supported")
            preds = module.compute_values(module_batch)
            device = preds.device
            mine = [e for e in sa_episodes if e.module_id in (None, module_id)]
            real = convert_to_numpy(module_batch[Columns.LOSS_MASK]).astype(bool)
            advantages, targets = self.advantages(
                convert_to_numpy(preds), convert_to_numpy(module_batch[Columns.REWARDS]),
                convert_to_numpy(module_batch[Columns.TERMINATEDS]), convert_to_numpy(module_batch[Columns.TRUNCATEDS]),
                real, step_keys(mine) if self.group_mix is not None else None,
                step_elapsed(mine) if self.average_reward_rate is not None and self.average_reward_per == "time" else None)
            assert advantages.shape[0] == sum(len(e) for e in mine)
            advantages = (advantages - advantages.mean()) / max(1e-4, advantages.std())
            module_batch[Postprocessing.ADVANTAGES] = advantages.astype(np.float32)
            module_batch[Postprocessing.VALUE_TARGETS] = targets
            done.append(module_id)
            if metrics is not None and self.group_mix is not None and self.matched is not None:
                metrics.log_value((module_id, MATCHED_KEY), float(self.matched), window=1)
            if metrics is not None and self.rho is not None:
                metrics.log_value((module_id, RATE_KEY), float(self.rho), window=1)
        if self._to_tensor is None:
            self._to_tensor = NumpyToTensor(as_learner_connector=True, device=device)
        tensors = self._to_tensor(
            rl_module=rl_module, episodes=episodes,
            batch={mid: {k: batch[mid][k] for k in (Postprocessing.ADVANTAGES, Postprocessing.VALUE_TARGETS)} for mid in done},
        )
        for mid, module_batch in tensors.items():
            batch[mid].update(module_batch)
        return batch


class DeepSharePPOLearner(PPOTorchLearner):
    """PPO's torch learner with RLlib's GAE piece replaced by :class:`DeepShareAdvantages`,
    configured from ``learner_config_dict[LEARNER_KEY]``. The piece's state (``rho``) is part of
    the learner's, under ``LEARNER_KEY``: RLlib's learner saves its module, optimizer and metrics
    but not its connector pipeline, so without this a restored run would start ``rho`` afresh."""

    def _advantages_piece(self) -> "DeepShareAdvantages | None":
        pipeline = self._learner_connector
        if pipeline is None:
            return None
        return next((p for p in pipeline.connectors if isinstance(p, DeepShareAdvantages)), None)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        piece = self._advantages_piece()
        if piece is not None and self._check_component(LEARNER_KEY, components, not_components):
            state[LEARNER_KEY] = piece.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        piece = self._advantages_piece()
        if piece is not None and LEARNER_KEY in state:
            piece.set_state(state[LEARNER_KEY])

    def restart_reward_rate(self) -> bool:
        """:meth:`DeepShareAdvantages.restart_rate` on this learner's piece; whether it keeps a
        reward rate (``average_reward`` set) to restart."""
        piece = self._advantages_piece()
        if piece is None or piece.average_reward_rate is None:
            return False
        piece.restart_rate()
        return True

    def build(self) -> None:
        super().build()
        options = (self.config.learner_config_dict or {}).get(LEARNER_KEY)
        if options and self._learner_connector is not None:
            self._learner_connector.remove("GeneralAdvantageEstimation")
            self._learner_connector.append(
                DeepShareAdvantages(gamma=self.config.gamma, lambda_=self.config.lambda_, **options))


class ReplayGroups:
    """``on_environment_created`` hook: sub-env ``i`` of an env runner replays the sequences of
    group ``i // group_size`` (:meth:`DeepShareEnv.set_replay_group`), seeded by the run's seed
    and the runner's index, so a group's episodes replay arrival sequences together. The group's
    envs share one :class:`~deepshare.rl.env.ReplayClock`, made here for this vector env alone:
    an env starts a sequence only once all of its group have started the one before (it plays
    untagged filler episodes meanwhile), so the group's envs stay within about an episode of each
    other and their returns at one step index keep landing in the same training batch."""

    def __init__(self, group_size: int, seed: int) -> None:
        self.group_size, self.seed = group_size, seed

    def __call__(self, *, env_runner: Any = None, env: Any = None, **kwargs: Any) -> None:
        worker = int(getattr(env_runner, "worker_index", 0) or 0)
        clocks: dict[int, ReplayClock] = {}
        for i, sub in enumerate(sub_envs(env)):
            group = i // self.group_size
            sub.set_replay_group(self.seed, worker, group, clocks.setdefault(group, ReplayClock()))

    def recreated(self, *, algorithm: Any, env_runner_group: Any, env_runner_indices: Sequence[int],
                  is_evaluation: bool = False, **kwargs: Any) -> None:
        """``on_env_runners_recreated``: a restarted env runner's envs (which count their
        episodes from 0 again) draw new sequences, not the run's first ones a second time
        (:meth:`~deepshare.rl.env.DeepShareEnv.set_replay_epoch`)."""
        if is_evaluation or not env_runner_indices:
            return
        env_runner_group.foreach_env_runner(partial(_set_epoch, int(algorithm.iteration), RECREATED),
                                            remote_worker_ids=list(env_runner_indices), local_env_runner=False)


RESUMED, RECREATED = 1, 2
"""Why an env runner's replay groups start a new epoch (:meth:`DeepShareEnv.set_replay_epoch`)."""


def _set_epoch(iteration: int, restart: int, env_runner: Any) -> int:
    envs = sub_envs(getattr(env_runner, "env", None))
    for env in envs:
        env.set_replay_epoch(iteration, restart)
    return len(envs)


def resume_replay(algorithm: Any) -> bool:
    """After ``Algorithm.from_checkpoint``: every env runner's replay groups start the epoch of
    the iteration the restored run is at, so the resumed run draws new arrival sequences instead
    of replaying the ones its first iterations saw. Whether the run replays groups at all."""
    if not any(isinstance(hook, ReplayGroups) for hook in hooks_of(algorithm.config.callbacks_on_environment_created)):
        return False
    algorithm.env_runner_group.foreach_env_runner(partial(_set_epoch, int(algorithm.iteration), RESUMED),
                                                  local_env_runner=True)
    return True


class ReportElapsed:
    """``on_environment_created`` hook: every sub-env reports each step's simulated seconds in its
    info (:meth:`DeepShareEnv.set_report_elapsed`), what ``average_reward`` per time reads."""

    def __call__(self, *, env_runner: Any = None, env: Any = None, **kwargs: Any) -> None:
        for sub in sub_envs(env):
            sub.set_report_elapsed(True)


def hooks_of(callbacks: Any) -> list:
    """An algorithm config's ``callbacks_on_*`` value (None, one callable or a list) as a list."""
    if callbacks is None:
        return []
    return list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]


def sub_envs(env: Any) -> list:
    """The :class:`DeepShareEnv` instances of a (vector) env, unwrapped; none for a runner without one."""
    if env is None:
        return []
    env = getattr(env, "unwrapped", env)
    subs = getattr(env, "envs", None)
    found = [s.unwrapped for s in subs] if subs is not None else [env]
    return [s for s in found if hasattr(s, "set_replay_group")]
