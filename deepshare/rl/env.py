"""The scheduling environment: the simulator as a gymnasium env over candidate-action choices.

Observation
    ``{"observations": Box(K, F), "action_mask": Box(0, 1, (K,))}`` from
    :func:`deepshare.policies.encoding.encode`: K candidate rows (row 0 = wait, then (queued job,
    placement) launches), F features each, padding rows masked out.
Action
    ``Discrete(K)``: the row to take. A launch is added to the decision being built and the next
    choice is offered at the same simulated time; wait (or nothing feasible left) hands the whole
    decision to the simulator, which runs to the next decision point where a launch is feasible.
    A masked action counts as wait (or, where waiting would leave a wholly idle cluster idle while
    a job fits, as the first launch) and is flagged in ``info["invalid_action"]``. With ``hybrid`` set, a wait may be
    replaced by the RL-hybrid safety net's launch (``info["safety_net"]``), as at deployment.
Reward
    ``jct`` (default): minus the jobs in the system integrated over the simulated time the step
    covers, in hours per trace job, so an episode's return is minus the average JCT in hours
    (times ``reward_scale``).
    ``original``: the artifact's ``-w1 * mean(1 - ratio of running jobs) + w2 * EWMA(utilisation)``,
    paid once per 300 s round (rounds from time 0): both terms are the round's time averages
    (the simulator records the time a step runs), the EWMA moves once per round, and a step is
    paid for the rounds that end during it (0 for a launch, which covers no time), the last
    round pro rata at the episode's end; so a policy cannot collect it by taking more decisions.
Start
    ``reset(seed)`` picks a scenario with a generator seeded by ``seed``: a bundled or given trace,
    or a generated Poisson trace on one of the configured cluster sizes or presets (drawn like a
    suite's cells when given a suite's parameters, :mod:`deepshare.rl.generated`; trace seeds
    below 2**31, the suites' held-out ones above), and its information model
    (``durations`` and ``estimate_errors``, one of each per episode, and the seed of its drawn
    estimates), and runs to the first decision point with a feasible launch; a scenario that
    has none (every job rejected on arrival) is drawn again from the same generator, so a seed
    still names one episode (a DeepShareError after ``MAX_REDRAWS`` such draws). Training seeds
    each env from a stream keyed by (run seed, env runner, index in its vector env)
    (:meth:`DeepShareEnv.set_seed_stream`) rather than RLlib's integer. Training options
    may cap an episode's jobs (:meth:`DeepShareEnv.set_max_jobs`), replay a group's sequence
    of scenarios (:meth:`DeepShareEnv.set_replay_group`) or report each step's simulated time
    (:meth:`DeepShareEnv.set_report_elapsed`).
End
    ``terminated`` when every job has finished or been rejected; ``truncated`` after
    ``max_steps`` choices. The final ``info["report"]`` holds the simulator's metrics.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from deepshare.core.bounds import MAX_GRID_LOAD, MIN_OFFERED_LOAD, grid_load_ok
from deepshare.core.contention import CONTENTION_MODELS, ContentionModel, make_contention
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import Topology, load_topology
from deepshare.core.traces import RecurrenceModel, load
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.information import DEFAULT_DURATIONS, DEFAULT_ESTIMATE_ERROR, DURATIONS, MAX_ESTIMATE_ERROR, InformationModel
from deepshare.core.types import JobSpec
from deepshare.core.view import ClusterView
from deepshare.policies.encoding import WAIT_INDEX, Candidate, EncodingConfig, PartialDecision, encode
from deepshare.policies.anchor import check_anchor
from deepshare.policies.extra_features import check_extra_features
from deepshare.policies.learned import MAX_ANCHOR_STREAK, HybridRules, is_anchor_streak, take
from deepshare.policies.order import ORDERS
from deepshare.policies.placement import PLACEMENTS
from deepshare.rl.env_checks import check_env_numbers
from deepshare.rl.generated import GeneratedEpisode, check_generated, draw_generated, generated_presets

FEATURE_BOUND = 50.0
ORIGINAL_ROUND_S = 300.0
MAX_REDRAWS = 64
"""Scenarios ``reset`` draws in a row before giving up on finding one with a decision."""


@dataclass(frozen=True)
class EnvConfig:
    """Scenario, reward and encoding of the environment (RLlib passes it as a dict). :meth:`from_dict`
    checks every field; the ranges of the reward, simulation and safety-net numbers are in
    :mod:`deepshare.rl.env_checks`, those of the generated episodes' in :func:`~deepshare.rl.generated.check_generated`."""

    traces: tuple[str, ...] = ()
    """Trace files to draw episodes from (any supported format)."""
    cluster: str = "testbed"
    """Cluster preset or spec file for the trace episodes."""
    generated_fraction: float = 0.0
    """Share of episodes on generated Poisson traces instead of ``traces`` (1.0 when none given)."""
    generated_jobs: int = 128
    generated_loads: tuple[float, ...] = (0.7, 0.9, 1.1)
    generated_mixes: tuple[str, ...] = ("random", "heavy", "medium", "low")
    generated_nodes: tuple[int, ...] = (4, 8, 16)
    """Cluster sizes (nodes of 8 GPUs of the testbed's type) for generated episodes."""
    generated_recurrence: dict[str, Any] | None = None
    """Generate episodes with users, recurring groups and time limits: the parameters of
    :class:`~deepshare.core.traces.RecurrenceModel` (``{}`` for its defaults); null: none."""
    generated_clusters: tuple[str, ...] = ()
    """Cluster presets (or spec files) generated episodes draw from uniformly, in place of
    ``generated_nodes``: e.g. the ``fabric`` suite's multi-level fabrics (:mod:`deepshare.rl.generated`)."""
    generated_jobs_per_node: int | None = None
    """Jobs of a generated episode per node of its cluster (a suite's ``jobs_per_node``); null:
    ``generated_jobs`` whatever the cluster."""
    generated_demand: str | None = None
    """Generated jobs' GPU demand, ``gpus:weight,...`` or a preset (a suite's ``demand``); null:
    the generator's default (2, 4, 8 GPUs)."""
    generated_required_level: str | None = None
    """With ``generated_required_share``: that share of generated jobs require one domain of this
    fabric level (both or neither, as a suite's ``required_level`` / ``required_share``)."""
    generated_required_share: float | None = None
    generated_preferred_level: str | None = None
    """With ``generated_preferred_share``: that share of generated jobs prefer one domain of this level."""
    generated_preferred_share: float | None = None
    generated_duration_sigma: float = 1.0
    """Lognormal sigma of generated jobs' durations (a suite's ``duration_sigma``)."""
    contention: str = "profiled"
    reward: Literal["jct", "original"] = "jct"
    reward_scale: float = 1.0
    """Multiplies every reward (keeps returns in the value function's comfortable range)."""
    w1: float = 0.5
    w2: float = 0.5
    ewma_alpha: float = 0.1
    max_candidates: int = 16
    jobs_considered: int = 5
    round_s: float | None = None
    max_steps: int = 100_000
    hybrid: bool = False
    """RL-hybrid: when the agent waits, the safety net may launch the anchor heuristic's pick."""
    hybrid_min_ratio: float = 0.9
    hybrid_utilisation_floor: float = 0.5
    hybrid_anchor_streak: int = 1
    """With ``hybrid``: launches one choice of the anchor's row makes
    (:attr:`~deepshare.policies.learned.HybridRules.anchor_streak`), as at deployment."""
    anchor: tuple[str, ...] | None = ("srsf", "packed")
    """(order, placement) of the heuristic whose pick the encoding always offers and the safety
    net falls back to; null: not offered (and the safety net falls back to HybridRules' default,
    srsf+uncontended)."""
    contentions: tuple[str, ...] = ()
    """Contention models episodes draw from (one per episode); empty: ``contention`` only."""
    max_wait_s: float | None = None
    """Bounded waiting (:attr:`~deepshare.policies.encoding.EncodingConfig.max_wait_s`): wait is
    masked once a fitting offered job has been queued this long; null: no bound. Exported with
    the policy, so a network trained with a bound is served with the same one."""
    extra_features: tuple[str, ...] = ()
    """Optional observation columns (:mod:`deepshare.policies.extra_features`); exported with the
    policy like ``max_wait_s``."""
    offer_order: str = "srsf"
    """The order whose first jobs fill the offered rows beside the oldest
    (:attr:`~deepshare.policies.encoding.EncodingConfig.offer_order`); exported with the policy."""
    durations: tuple[str, ...] = (DEFAULT_DURATIONS,)
    """Information models episodes draw from (one per episode; a YAML may give one name): what the
    policy's views carry of job lengths (:mod:`deepshare.core.information`). The shipped configs
    that reproduce the artifact's checkpoints say ``exact``."""
    estimate_errors: tuple[float, ...] = (DEFAULT_ESTIMATE_ERROR,)
    """Lognormal sigmas of drawn estimates episodes draw from under ``estimated`` (a curriculum)."""
    generators: tuple[str, ...] | None = None
    """The encoding's placement generators (:attr:`~deepshare.policies.encoding.EncodingConfig.generators`,
    e.g. the topology-aware ``topo-bestfit``, ``topo-balanced``, ``topo-aware``); null: the
    encoding's default. Exported with the policy."""

    @staticmethod
    def from_dict(values: dict[str, Any] | None) -> "EnvConfig":
        values = dict(values or {})
        known = {f.name for f in fields(EnvConfig)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise DeepShareError(f"env config: unknown key(s) {unknown}; expected some of {sorted(known)}")
        for name in ("durations", "estimate_errors"):  # one value or a list
            if name in values and isinstance(values[name], (str, int, float)):
                values[name] = [values[name]]
        for name in ("generated_clusters", "generators"):  # a string is one name, not its letters
            value = values.get(name)
            if isinstance(value, str):
                values[name] = [value]
            elif value is not None and not isinstance(value, (list, tuple)):
                raise DeepShareError(f"env config: {name}: expected a list of names, got {value!r}")
        values = _typed(values)
        config = EnvConfig(**values)
        loads = config.generated_loads
        if not loads or not all(map(grid_load_ok, loads)):
            raise DeepShareError(f"env config: generated_loads: expected one or more loads in [{MIN_OFFERED_LOAD:g}, "
                                 f"{MAX_GRID_LOAD:g}] (a suite's loads), got {list(loads)[:8]}")
        if any(not 1 <= n <= MAX_GENERATED_NODES for n in config.generated_nodes):
            raise DeepShareError(f"env config: generated_nodes: expected node counts from 1 to {MAX_GENERATED_NODES:,}, "
                                 f"got {list(config.generated_nodes)[:8]}")
        try:
            config.encoding  # noqa: B018 - built to check max_candidates, jobs_considered and the rest
        except ValueError as exc:
            raise DeepShareError(f"env config: {exc}") from None
        streak = config.hybrid_anchor_streak
        if not is_anchor_streak(streak):
            raise DeepShareError(f"env config: hybrid_anchor_streak must be an integer in 1..{MAX_ANCHOR_STREAK}, "
                                 f"got {shown(streak)}")
        if streak > 1 and (not config.hybrid or config.anchor is None):
            raise DeepShareError("env config: hybrid_anchor_streak follows the anchor's row of RL-hybrid: it needs "
                                 f"hybrid: true and an anchor (got hybrid: {config.hybrid}, anchor: {config.anchor})")
        if config.reward not in ("jct", "original"):
            raise DeepShareError(f"env config: reward must be 'jct' or 'original', got {config.reward!r}")
        if not 0.0 <= config.generated_fraction <= 1.0:
            raise DeepShareError(f"env config: generated_fraction must be in [0, 1], got {config.generated_fraction}")
        if config.offer_order not in ORDERS:
            raise DeepShareError(f"env config: offer_order {config.offer_order!r} is unknown; expected one of {sorted(ORDERS)}")
        if config.generated_recurrence is not None:
            if not isinstance(config.generated_recurrence, dict):
                raise DeepShareError(f"env config: generated_recurrence must be a mapping of the recurrence model's "
                                     f"parameters or null, got {config.generated_recurrence!r}")
            try:
                RecurrenceModel(**config.generated_recurrence)
            except TypeError as exc:
                raise DeepShareError(f"env config: generated_recurrence: {exc}") from None
            except DeepShareError as exc:
                raise DeepShareError(f"env config: generated_recurrence: {exc}") from None
        if config.anchor is not None:
            try:
                check_anchor(config.anchor)
            except ValueError as exc:
                raise DeepShareError(f"env config: {exc}") from None
        if config.max_wait_s is not None and not (isinstance(config.max_wait_s, (int, float)) and config.max_wait_s >= 0):
            raise DeepShareError(f"env config: max_wait_s must be seconds >= 0 or null, got {config.max_wait_s!r}")
        try:
            check_extra_features(config.extra_features)
        except ValueError as exc:
            raise DeepShareError(f"env config: {exc}") from None
        bad = [c for c in config.contentions if c not in CONTENTION_MODELS]
        if bad:
            raise DeepShareError(f"env config: contentions: unknown model(s) {bad}; expected some of {sorted(CONTENTION_MODELS)}")
        if not config.durations or any(d not in DURATIONS for d in config.durations):
            raise DeepShareError(f"env config: durations: expected one or more of {list(DURATIONS)}, got {config.durations!r}")
        if not config.estimate_errors or not all(
            isinstance(e, (int, float)) and not isinstance(e, bool) and 0 <= e <= MAX_ESTIMATE_ERROR
            for e in config.estimate_errors
        ):
            raise DeepShareError(f"env config: estimate_errors: expected one or more lognormal sigmas from 0 to "
                                 f"{MAX_ESTIMATE_ERROR:g}, got {config.estimate_errors!r}")
        if config.generators is not None and (not config.generators or any(
                not isinstance(g, str) or g not in PLACEMENTS for g in config.generators)):
            raise DeepShareError(f"env config: generators: expected one or more placement strategies of "
                                 f"{sorted(PLACEMENTS)} or null, got {list(config.generators)!r}")
        if config.generated_clusters is None:
            raise DeepShareError("env config: generated_clusters: expected a list of cluster presets ([] for none)")
        check_env_numbers(config)
        check_generated(config)
        return config

    def information(self, rng: np.random.Generator) -> InformationModel:
        """An episode's information model, drawn from ``durations`` and ``estimate_errors`` (no draw
        where there is one choice, so configs of one model keep their episodes' seeds)."""
        durations = self.durations[int(rng.integers(len(self.durations)))] if len(self.durations) > 1 else self.durations[0]
        if durations != "estimated":
            return InformationModel(durations)
        errors = self.estimate_errors
        sigma = errors[int(rng.integers(len(errors)))] if len(errors) > 1 else errors[0]
        return InformationModel(durations, float(sigma), int(rng.integers(2**31)))

    @property
    def encoding(self) -> EncodingConfig:
        return EncodingConfig(
            max_candidates=self.max_candidates, jobs_considered=self.jobs_considered, anchor=self.anchor,
            max_wait_s=self.max_wait_s, extra_features=self.extra_features, offer_order=self.offer_order,
            **({} if self.generators is None else {"generators": self.generators}),
        )

    @property
    def hybrid_rules(self) -> HybridRules | None:
        if not self.hybrid:
            return None
        anchor = self.anchor if self.anchor is not None else HybridRules.anchor
        return HybridRules(self.hybrid_min_ratio, self.hybrid_utilisation_floor, anchor, self.hybrid_anchor_streak)


def _launch_may_fit(partial: PartialDecision) -> bool:
    """False when no queued job not yet launched fits in the free GPUs: then :func:`encode` offers
    wait only (no placement and no anchor pick can place it), so the env skips encoding a choice
    it would not offer. Half the env's encodes were such choices (issue 14, item 5)."""
    len(partial.view.running)  # encode reads it, and reading it syncs the running jobs' progress
    # at this time (core/simulator.py `_running_count`), which rounds later floats: keep it so
    # episodes stay bit-identical (tests/test_rollout_equivalence.py).
    return partial.state().launch_may_fit()  # the decision's indexed state, which encode() goes on to use


@dataclass
class _Episode:
    sim: Simulator
    partial: PartialDecision | None
    jobs: int
    steps: int = 0
    util_ewma: float = 0.0
    round_end: float = 0.0
    """``original``: the end of the 300 s round under way (rounds from time 0), and below the
    integrals of utilisation and of mean(1 - ratio) over its part so far."""
    round_util: float = 0.0
    round_contention: float = 0.0
    rows: list[Candidate] = field(default_factory=list)
    mask: np.ndarray | None = None


@dataclass
class ReplayClock:
    """Shared by the envs of one replay group (:meth:`DeepShareEnv.set_replay_group`): the
    newest sequence number each of them has started (-1: none yet), by member."""

    started: list[int] = field(default_factory=list)

    def join(self) -> int:
        """A new member's index."""
        self.started.append(-1)
        return len(self.started) - 1

    def may_start(self, sequence: int) -> bool:
        """Whether every member has started ``sequence - 1``: a member may lead the slowest by
        one sequence, no more."""
        return sequence == 0 or min(self.started) >= sequence - 1


MAX_GENERATED_NODES = 65_536
"""Largest generated cluster (``generated_nodes``): the bound ``--nodes`` has."""


def _typed(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` checked against :class:`EnvConfig`'s field types (pydantic; a number given as
    text, a list where a name belongs, a name where a list belongs are one line naming the key
    instead of a traceback once training starts), sequences made tuples."""
    from typing import get_type_hints

    from pydantic import TypeAdapter, ValidationError

    if not _HINTS:
        _HINTS.update(get_type_hints(EnvConfig))
    hints = _HINTS
    out = {}
    for name, value in values.items():
        if isinstance(value, bool) and hints[name] is not bool:
            raise DeepShareError(f"env config: {name}: expected {_kind(hints[name])}, got {value!r}")
        try:
            out[name] = TypeAdapter(hints[name]).validate_python(value)
        except ValidationError as exc:
            shown = repr(value) if isinstance(value, (str, int, float)) or value is None else type(value).__name__
            raise DeepShareError(f"env config: {name}: expected {_kind(hints[name])}, got {shown[:80]} "
                                 f"({exc.errors()[0]['msg']})") from None
    return out


_HINTS: dict[str, Any] = {}


def _kind(hint: Any) -> str:
    """A field type in words, for an error."""
    text = str(hint).replace("typing.", "")
    return {"str": "a name", "int": "an integer", "float": "a number"}.get(getattr(hint, "__name__", ""), text)


class DeepShareEnv(gym.Env):
    """See the module docstring for spaces, reward, start and end."""

    metadata = {"render_modes": []}

    def __init__(self, config: dict[str, Any] | EnvConfig | None = None) -> None:
        self.config = config if isinstance(config, EnvConfig) else EnvConfig.from_dict(config)
        k, f = self.config.max_candidates, len(self.config.encoding.features)
        self.observation_space = gym.spaces.Dict(
            {
                "observations": gym.spaces.Box(-FEATURE_BOUND, FEATURE_BOUND, shape=(k, f), dtype=np.float32),
                "action_mask": gym.spaces.Box(0.0, 1.0, shape=(k,), dtype=np.float32),
            }
        )
        self.action_space = gym.spaces.Discrete(k)
        self._topology = load_topology(self.config.cluster) if self.config.traces else None
        self._trace_jobs = [load(path).jobs for path in self.config.traces]
        self._presets = generated_presets(self.config)
        self._generated: GeneratedEpisode | None = None
        self._episode: _Episode | None = None
        # Built once (the config is frozen): both properties construct and validate on each read.
        self._encoding = self.config.encoding
        self._hybrid_rules = self.config.hybrid_rules
        # Set at run time by training options (deepshare.rl.curriculum, deepshare.rl.advantages);
        # unset, reset() draws as it always did.
        self._max_jobs: int | None = None
        self._replay: tuple[int, int, int] | None = None
        self._replayed = 0
        self._clock: ReplayClock | None = None
        self._member = -1
        self._epoch: tuple[int, ...] = ()
        self._sequence: int | None = None
        self._report_elapsed = False
        self._stream: tuple[int, ...] | None = None

    def set_max_jobs(self, max_jobs: int | None) -> None:
        """Cap later episodes at their first ``max_jobs`` jobs by submission (None: no cap): the
        curriculum of episode lengths."""
        self._max_jobs = None if max_jobs is None else int(max_jobs)

    def set_replay_group(self, seed: int, worker: int, group: int, clock: "ReplayClock | None" = None) -> None:
        """Draw every later episode's scenario from its own generator, seeded by (``seed``,
        ``worker``, ``group``, sequence number), not from the env's stream: envs given the same
        group replay the same sequences of episodes. Each step's info then carries
        ``sequence``, an int naming the episode's (group, sequence number, and the curriculum's
        job cap when one is set, :meth:`set_max_jobs`): what the input-dependent baseline
        (:mod:`deepshare.rl.advantages`) groups episodes by, so episodes capped differently are
        never compared.

        Every env of the group plays the sequences 0, 1, 2, ... in turn. Without ``clock`` each
        goes at its own pace, and envs whose episodes take different numbers of decisions drift
        apart by the sum of those differences, without bound: once that exceeds a training
        batch's share of an env, the baseline finds no partner at all. With the ``clock`` shared
        by the group's envs (one vector env's), an env may start sequence ``k`` only once every
        env of the group has started ``k - 1``; until then it plays *filler* episodes from its
        own stream, untagged (no ``sequence``: their baseline is the value function). The group
        stays within about an episode of each other, and which envs play a sequence is fixed
        in advance (all of them), so whether an episode has partners never depends on its own
        actions, as it would if a leader could skip ahead of a sequence its partner had not
        reached."""
        self._replay, self._replayed, self._epoch = (int(seed), int(worker), int(group)), 0, ()
        self._clock = clock
        self._member = clock.join() if clock is not None else -1

    def set_replay_epoch(self, iteration: int, restart: int) -> None:
        """Start the replay group's sequences afresh for an env runner made again mid-run
        (``restart`` 1: the run resumed from a checkpoint at ``iteration``; 2: RLlib recreated a
        failed env runner after ``iteration`` iterations): later episodes are drawn from generators
        seeded by the epoch too, so they are new arrival sequences rather than the run's first
        ones replayed again (a new env counts its sequences from 0), still the same for every env
        of the group. Their ``sequence`` tags carry the epoch, so they never equal a tag of
        the earlier env runner's episodes."""
        self._epoch, self._replayed = (int(iteration), int(restart)), 0
        if self._clock is not None:  # every env of the group is set so, before any of them resets
            self._clock.started[self._member] = -1

    def set_seed_stream(self, seed: int, worker: int, index: int, epoch: tuple[int, ...] = ()) -> None:
        """Draw episodes from a generator keyed by (run ``seed``, env runner ``worker``, the env's
        ``index`` in its vector env, ``epoch``): from now on, and afresh at every seeded ``reset``,
        whose integer is then ignored. RLlib seeds env runner ``w`` with ``seed + w`` and
        gymnasium's vector env sub-env ``j`` with that ``+ j``, so as integers (1, 1) and (2, 0)
        collide, and run ``seed`` S's runner 2 is run S+1's runner 1; a key of all three never
        does. ``epoch`` (the iteration and why, as in :meth:`set_replay_epoch`) gives an env
        runner made again mid-run, or a resumed run's, new episodes rather than the run's first
        ones again (:mod:`deepshare.rl.seeding`)."""
        self._stream = (int(seed), int(worker), int(index), *(int(e) for e in epoch))
        self.np_random = np.random.default_rng(list(self._stream))

    def set_report_elapsed(self, on: bool = True) -> None:
        """With ``on``, every step's info carries ``elapsed_s``: the simulated seconds the step
        covered (0.0 for a launch offered the next choice at the same time; for a wait, the time
        run to the next decision point), what the per-time average reward
        (:mod:`deepshare.rl.advantages`) divides by. Off by default, so infos stay as they were."""
        self._report_elapsed = bool(on)

    # -- gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None and self._stream is not None:  # the stream's key, not RLlib's seed + w + j
            seed, self.np_random = None, np.random.default_rng(list(self._stream))
        super().reset(seed=seed)
        rng = self.np_random
        self._sequence = None
        if self._replay is not None and (self._clock is None or self._clock.may_start(self._replayed)):
            if self._clock is not None:
                self._clock.started[self._member] = self._replayed
            rng = np.random.default_rng([*self._replay, self._replayed, *self._epoch])
            _, worker, group = self._replay
            self._sequence = ((worker * 10_000 + group) << 32) + self._replayed
            # The curriculum's cap is part of what the group replays: envs of a group that start
            # sequence k on either side of a stage change replay different inputs, so their tags
            # differ and the baseline does not compare their returns.
            capped = () if self._max_jobs is None else ("max_jobs", self._max_jobs)
            if self._epoch or capped:  # negative: never a plain tag; 56 bits: a vector env packs infos as int64
                key = (worker, group, self._replayed, *self._epoch, *capped)
                digest = hashlib.blake2b(repr(key).encode(), digest_size=7).digest()
                self._sequence = -1 - int.from_bytes(digest, "big")
            self._replayed += 1
        # A scenario without one feasible choice (every job rejected on arrival: e.g. a curriculum
        # cap that keeps only a job larger than the cluster) cannot be an episode: gymnasium's
        # reset cannot say "done", and the env runner's next step would fail. Draw again from the
        # same generator (so a seed still names its episode), at most MAX_REDRAWS times.
        for _ in range(MAX_REDRAWS):
            topology, jobs = self._scenario(rng)
            if self._max_jobs is not None and len(jobs) > self._max_jobs:
                jobs = sorted(jobs, key=lambda job: job.submit_time)[: self._max_jobs]
            kinds = self.config.contentions or (self.config.contention,)
            contention = make_contention(kinds[int(rng.integers(len(kinds)))] if len(kinds) > 1 else kinds[0])
            information = self.config.information(rng)
            sim = Simulator(topology, jobs, contention, config=SimConfig(round_s=self.config.round_s), information=information)
            self._episode = _Episode(sim, None, len(jobs), round_end=ORIGINAL_ROUND_S)
            if self.config.reward == "original":
                sim.track_signal()
            _, obs = self._advance()  # the reward for the time before the first decision is not paid
            if obs is not None:
                break
        else:
            cap = "" if self._max_jobs is None else f" (episodes capped at {self._max_jobs} jobs by the curriculum)"
            raise DeepShareError(f"env: {MAX_REDRAWS} scenarios drawn in a row offered no decision{cap}: every job "
                                 "was rejected without one launch to choose (jobs larger than the cluster?); check "
                                 "the traces, the cluster and the curriculum's lengths")
        info: dict[str, Any] = {"jobs": len(jobs), "nodes": len(topology.nodes)}
        if self._sequence is not None:
            info["sequence"] = self._sequence
        return obs, info

    def step(self, action: int):
        ep = self._episode
        if ep is None or ep.partial is None or ep.mask is None:
            raise RuntimeError("step() needs reset() first and cannot continue a finished episode")
        ep.steps += 1
        info: dict[str, Any] = {} if self._sequence is None else {"sequence": self._sequence}
        step = take(ep.partial, ep.rows, ep.mask, int(action), self._hybrid_rules, self._encoding)
        if step.invalid:
            info["invalid_action"] = True
        if step.safety_net:
            info["safety_net"] = True
        if step.launched is not None:
            ep.partial = step.partial
            if _launch_may_fit(ep.partial):
                obs = self._encode_current()
                if len(ep.rows) > 1:  # more launches are possible at the same time
                    if self._report_elapsed:
                        info["elapsed_s"] = 0.0
                    return obs, 0.0, False, self._truncated(), info
        ep.sim.apply(ep.partial.decision)
        start = ep.sim.now
        reward, obs = self._advance()
        if self._report_elapsed:
            info["elapsed_s"] = float(ep.sim.now - start)
        if obs is None:
            info["report"] = ep.sim.report("rl").to_dict()
            return self._terminal_obs(), reward, True, False, info
        return obs, reward, False, self._truncated(), info

    def choice(self) -> tuple[PartialDecision, list[Candidate]]:
        """The decision being built and the candidate rows of the observation last returned:
        what a demonstrator (:mod:`deepshare.rl.imitate`) reads to say which row a heuristic
        would take. Valid between ``reset``/``step`` calls of an episode that has not ended."""
        ep = self._episode
        if ep is None or ep.partial is None:
            raise RuntimeError("choice() needs an episode in progress (reset() first, not after the end)")
        return ep.partial, ep.rows

    @property
    def generated_episode(self) -> GeneratedEpisode | None:
        """The current episode's generated scenario and what it was drawn with (cluster, load,
        mix, trace seed); None for an episode on one of ``traces`` or before ``reset``."""
        return self._generated

    def episode_contention(self) -> ContentionModel:
        """The episode's contention model: what its views' predictions answer from (a labeller
        that rebuilds a view away from the simulator, :mod:`deepshare.rl.expert`, rebuilds the
        same predictor from it). Valid once ``reset`` has been called. The world's model is the
        policy's knowledge only when the episode's contention knowledge is ``exact`` (the only one
        the env draws); under another, views predict from what the scheduler has learned and a
        view rebuilt from the world's model would show a labeller the truth, so it is refused."""
        if self._episode is None:
            raise RuntimeError("episode_contention() needs reset() first")
        sim = self._episode.sim
        knowledge = sim.information.contention_knowledge
        if knowledge != "exact" or sim.knowledge is not None:
            raise DeepShareError(f"the episode's contention knowledge is {knowledge!r}: its views do not predict from the "
                                 "world's contention model, which would show a labeller the truth; only 'exact' can be labelled")
        return sim.contention

    # -- internals ---------------------------------------------------------------------------
    def _truncated(self) -> bool:
        assert self._episode is not None
        return self._episode.steps >= self.config.max_steps

    def _advance(self) -> tuple[float, dict[str, np.ndarray] | None]:
        """Run to the next decision point with a feasible launch: (reward for the time, its obs)."""
        ep = self._episode
        assert ep is not None
        area, start = ep.sim.jobs_in_system_area, ep.sim.now
        while True:
            view = ep.sim.advance()
            if view is None:
                ep.partial = None
                return self._reward(ep, area, start, None), None
            ep.partial = PartialDecision(view)
            if _launch_may_fit(ep.partial):
                obs = self._encode_current()
                if len(ep.rows) > 1:
                    return self._reward(ep, area, start, view), obs
            ep.sim.apply(ep.partial.decision)  # nothing fits: the only choice is to wait

    def _encode_current(self) -> dict[str, np.ndarray]:
        ep = self._episode
        assert ep is not None and ep.partial is not None
        obs, ep.rows = encode(ep.partial, self._encoding)
        ep.mask = obs["action_mask"]
        rows = obs["observations"]
        # In place, to the space's bounds: np.clip's result (NaN included) without its wrappers.
        np.maximum(rows, -FEATURE_BOUND, out=rows)
        np.minimum(rows, FEATURE_BOUND, out=rows)
        return obs

    def _terminal_obs(self) -> dict[str, np.ndarray]:
        mask = np.zeros(self.config.max_candidates, dtype=np.float32)
        mask[WAIT_INDEX] = 1.0
        return {"observations": np.zeros(self.observation_space["observations"].shape, dtype=np.float32), "action_mask": mask}

    def _reward(self, ep: _Episode, area_before: float, time_before: float, view: ClusterView | None) -> float:
        return self.config.reward_scale * self._raw_reward(ep, area_before, time_before, view)

    def _raw_reward(self, ep: _Episode, area_before: float, time_before: float, view: ClusterView | None) -> float:
        if self.config.reward == "jct":
            return -(ep.sim.jobs_in_system_area - area_before) / 3600.0 / max(1, ep.jobs)
        return self._original_reward(ep, final=view is None)

    def _original_reward(self, ep: _Episode, final: bool) -> float:
        """The artifact's reward for the rounds that ended in the time just run: utilisation and
        mean(1 - ratio) integrated over each 300 s round from the simulator's record of the
        time (:meth:`~deepshare.core.simulator.Simulator.track_signal`), the EWMA advanced once
        per round, and each round paid ``-w1 * contention + w2 * EWMA`` once, by the step in
        which it ends; at the episode's end the round under way is closed and paid pro rata."""
        total = ep.sim.topology.total_gpus
        paid = 0.0
        for start, end, busy, contention in ep.sim.take_signal():
            util = busy / total if total else 0.0
            while start < end:
                stop = min(end, ep.round_end)
                ep.round_util += util * (stop - start)
                ep.round_contention += contention * (stop - start)
                start = stop
                if stop >= ep.round_end:
                    paid += self._close_round(ep, ORIGINAL_ROUND_S)
        if final:
            covered = ep.sim.now - (ep.round_end - ORIGINAL_ROUND_S)
            if covered > 0:
                paid += self._close_round(ep, covered)
        return paid

    def _close_round(self, ep: _Episode, length: float) -> float:
        """Advance the EWMA by the round of ``length`` seconds just integrated; its reward."""
        util, contention = ep.round_util / length, ep.round_contention / length
        ep.round_util = ep.round_contention = 0.0
        ep.round_end += ORIGINAL_ROUND_S
        alpha = self.config.ewma_alpha
        ep.util_ewma = (1 - alpha) * ep.util_ewma + alpha * util
        return (-self.config.w1 * contention + self.config.w2 * ep.util_ewma) * (length / ORIGINAL_ROUND_S)

    def _scenario(self, rng: np.random.Generator) -> tuple[Topology, list[JobSpec]]:
        cfg = self.config
        use_generated = not self._trace_jobs or rng.random() < cfg.generated_fraction
        if not use_generated:
            assert self._topology is not None
            self._generated = None
            return self._topology, list(self._trace_jobs[int(rng.integers(len(self._trace_jobs)))])
        self._generated = draw_generated(cfg, rng, self._presets)
        return self._generated.topology, list(self._generated.jobs)
