"""Train RL-base / RL-hybrid with RLlib PPO (new API stack) from a YAML in ``rllib_configs/``.

The YAML holds the environment (:class:`deepshare.rl.env.EnvConfig` fields), PPO's
hyper-parameters under ``ppo:`` as RLlib's ``PPOConfig.training()`` names them (passed through
unchanged; :mod:`deepshare.rl.ppo_keys` checks them), optional additions to PPO under
``ppo_extras:`` (:class:`PPOExtras`: differential returns, the input-dependent baseline, an
episode-length curriculum; all off by default), the scorer's width under ``model:`` and the
run's defaults under ``run:``; no code. Env runners are the simulator rollout
workers; with ``address`` the run joins an existing (multi-node) Ray cluster. Every iteration
appends a row to ``OUT/metrics.csv`` and TensorBoard scalars to ``OUT/tb``; every
``checkpoint_every`` iterations and at the end an RLlib checkpoint goes to
``OUT/checkpoints/iter_NNNN`` and the scorer's weights to ``OUT/policy.pt`` (what ``rl-base=PATH``
and ``rl-hybrid=PATH`` load). ``resume`` continues from the newest checkpoint of a run folder; ``model.init_from`` (or
``deepshare train --init-from``) starts the scorer from a ``policy.pt``, e.g. ``deepshare imitate``'s.
``on_export`` sees every exported ``policy.pt``: ``deepshare train --eval-suite`` scores it on a
benchmark suite there (the learning curve, :mod:`deepshare.experiments.learning_curve`; this
layer does not import the experiments).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import time
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from deepshare.core.bounds import MAX_ENV_RUNNERS, MAX_ENVS_PER_RUNNER, MAX_TRAIN_ITERATIONS, MAX_TRAIN_SEED
from deepshare.core.topology import load_topology, preset_names
from deepshare.core.traces import load as load_trace
from deepshare.core.errors import DeepShareError, RuntimeFailure, first_line
from deepshare.core.files import open_append, remove_empty_folders
from deepshare.core.files import resolved as resolved_path
from deepshare.policies.checkpoint import MAX_HIDDEN
from deepshare.core.yamlspec import parse_yaml_model, read_config_text
from deepshare.rl.env import EnvConfig
from deepshare.rl.ppo_keys import check_ppo

Progress = Callable[[int, int, dict[str, float]], None]
OnExport = Callable[[int, Path, "dict[str, float] | None"], None]
"""Called with (iteration, policy.pt, that iteration's metrics row or None) after each export."""
METRIC_COLUMNS = (
    "iteration", "env_steps_lifetime", "episode_return_mean", "episode_len_mean", "episodes",
    "policy_loss", "vf_loss", "entropy", "sample_s", "learn_s", "wall_s", "baseline_matched", "reward_rate",
)
"""``baseline_matched``: with ``ppo_extras.input_baseline``, the share of the batch's steps whose
baseline had another episode of their sequence. ``reward_rate``: with ``ppo_extras.average_reward``,
the running reward rate (per simulated second, or per decision) the batch's differential rewards
used (with several learners, the mean of theirs). Each is ``nan`` without its option, as a column an iteration has no value for is."""


class ModelSettings(BaseModel):
    """The RLModule's ``model_config`` (the candidate scorer)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    hidden: int = Field(64, gt=0, le=MAX_HIDDEN, strict=True, description="width of the scorer MLP's hidden layers "
                        "(at most what a policy file may hold)")
    init_from: str | None = Field(None, description="a policy.pt (e.g. from `deepshare imitate`) whose scorer weights "
                                  "the module starts from; relative to the config's folder")


class RunSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # strict: a YAML true is no count (pydantic's lax ints read it as 1, false as 0 runners)
    iterations: int = Field(20, gt=0, le=MAX_TRAIN_ITERATIONS, strict=True)
    num_env_runners: int = Field(2, ge=0, le=MAX_ENV_RUNNERS, strict=True)
    envs_per_env_runner: int = Field(4, gt=0, le=MAX_ENVS_PER_RUNNER, strict=True)
    checkpoint_every: int = Field(5, gt=0, le=MAX_TRAIN_ITERATIONS, strict=True)
    seed: int = Field(0, ge=0, le=MAX_TRAIN_SEED, strict=True)


class AverageReward(BaseModel):
    """Differential returns: rewards ``r_t - rho * dt_t``, ``rho`` per simulated second, or
    ``r_t - rho``, ``rho`` per decision (:mod:`deepshare.rl.advantages`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rate: float = Field(0.01, gt=0, le=1, description="weight of each training batch's reward rate in rho")
    per: Literal["time", "decision"] = Field(
        "time", description="time: rho is reward per simulated second, charged for the seconds a step covers; "
        "decision: rho is reward per step, charged once per step")


class InputBaseline(BaseModel):
    """Input-dependent baseline: groups of envs replay one arrival sequence (:mod:`deepshare.rl.advantages`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    group_size: int = Field(ge=2, strict=True, description="envs per group (of one env runner) replaying the same sequences")
    mix: float = Field(1.0, ge=0, le=1, description="weight of the group's mean return in the baseline (the rest: V)")


class Curriculum(BaseModel):
    """Episode-length curriculum (:mod:`deepshare.rl.curriculum`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    lengths: list[PositiveInt] = Field(min_length=1, description="jobs per episode at each stage, growing")
    iterations_per_stage: int = Field(gt=0, le=MAX_TRAIN_ITERATIONS, strict=True)

    @field_validator("lengths")
    @classmethod
    def _growing(cls, lengths: list[int]) -> list[int]:
        if any(b < a for a, b in zip(lengths, lengths[1:])):
            raise ValueError(f"must not decrease, got {lengths}")
        return lengths


class PPOExtras(BaseModel):
    """DeepShare's options on top of RLlib's PPO; all off by default (training as without them)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    average_reward: AverageReward | None = None
    input_baseline: InputBaseline | None = None
    curriculum: Curriculum | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.average_reward, self.input_baseline, self.curriculum))


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description=(
        "the run's name: letters, digits, '.', '_' and '-', a letter or digit first (the default run folder "
        "is runs/NAME, which a '/' or '..' would put elsewhere)"))
    env: dict[str, Any] = Field(default_factory=dict)
    ppo: dict[str, Any] = Field(default_factory=dict)
    """RLlib's ``PPOConfig.training()`` keys as RLlib names them (:mod:`deepshare.rl.ppo_keys`)."""
    ppo_extras: PPOExtras = Field(default_factory=PPOExtras)
    model: ModelSettings = Field(default_factory=ModelSettings)
    run: RunSettings = Field(default_factory=RunSettings)

    @model_validator(mode="after")
    def _groups_fit(self) -> "TrainConfig":
        group = self.ppo_extras.input_baseline
        if group is not None and group.group_size > self.run.envs_per_env_runner:
            raise ValueError(f"ppo_extras.input_baseline.group_size ({group.group_size}) exceeds run.envs_per_env_runner "
                             f"({self.run.envs_per_env_runner}): a group is envs of one env runner")
        if group is not None and self.run.envs_per_env_runner % group.group_size:
            # the envs left over formed a smaller group, one env alone never had a baseline
            raise ValueError(f"ppo_extras.input_baseline.group_size ({group.group_size}) must divide run.envs_per_env_runner "
                             f"({self.run.envs_per_env_runner}): the envs of an env runner are split into whole groups")
        return self

    def env_config(self, base: Path) -> EnvConfig:
        """The env config with trace paths resolved (``bundled:NAME`` = a trace shipped in the
        package) and cluster spec files' paths too (``cluster``, ``generated_clusters``): all
        relative to the config's folder ``base``, whatever folder training runs from (a preset
        name stays a name)."""
        values = dict(self.env)
        traces = values.get("traces", [])
        if not isinstance(traces, list) or not all(isinstance(t, str) and t for t in traces):
            raise DeepShareError(f"env config: traces: expected a list of trace files (or bundled:NAME), got "
                                 f"{traces if isinstance(traces, str) else type(traces).__name__!r}")
        values["traces"] = [str(_resolve_trace(t, base)) for t in traces]
        presets = preset_names()

        def resolved(cluster: Any) -> Any:
            return str(_relative_to(cluster, base)) if isinstance(cluster, str) and cluster and cluster not in presets else cluster

        if "cluster" in values:
            values["cluster"] = resolved(values["cluster"])
        if isinstance(values.get("generated_clusters"), list):
            values["generated_clusters"] = [resolved(c) for c in values["generated_clusters"]]
        return EnvConfig.from_dict(values)


def _resolve_trace(name: str, base: Path) -> Path:
    if name.startswith("bundled:"):
        return Path(str(resources.files("deepshare.data") / "traces" / name.removeprefix("bundled:")))
    return _relative_to(name, base)


def load_train_config(path: str | Path) -> TrainConfig:
    source = Path(path)
    return parse_train_config(read_config_text(source, "training config"), source)


def parse_train_config(text: str, source: Path) -> TrainConfig:
    """A training config from YAML text; ``source`` names it in errors and anchors relative traces."""
    config = parse_yaml_model(text, TrainConfig, str(source), "name, env, ppo, ppo_extras, model and run")
    config = config.model_copy(update={"ppo": check_ppo(config.ppo, str(source))})
    if config.model.init_from:
        config = with_init_from(config, _relative_to(config.model.init_from, source.parent))
    try:
        env = config.env_config(source.parent)  # validate the env section now, not inside a worker
    except DeepShareError as exc:
        raise DeepShareError(f"{source}: {exc}") from None
    for trace in env.traces:
        load_trace(trace)  # a missing or malformed trace fails here with its name, not in a worker
    # Checked with traces or without: a config of generated episodes alone does not use it, and a
    # missing or malformed spec there was taken silently (then used once traces were added).
    load_topology(env.cluster, field=f"{source}: env config: cluster")
    return config


def _relative_to(name: str, base: Path) -> Path:
    path = Path(name)
    return path if path.is_absolute() else base / path


def with_init_from(config: TrainConfig, path: str | Path) -> TrainConfig:
    """``config`` whose module starts from the scorer weights in ``path`` (made absolute, for
    workers started elsewhere), checked now, so a bad file is one line naming it here rather than
    a traceback from every env runner and learner: a policy file that loads as a scorer (weights
    of the shapes its width and features declare, finite; :func:`scorer_from_file`), whose width
    is ``model.hidden`` and whose encoding is the config's env's in everything that makes the
    rows (:data:`INIT_FROM_ENCODING`: the extra columns, the anchor (row 1 and ``is_anchor``
    mark its pick), the offer order, the candidate and job counts, the placement generators).
    ``max_wait_s`` may differ: it masks rows, and a warm start may train under another bound."""
    from deepshare.policies.checkpoint import scorer_from_file

    resolved = resolved_path(path)
    try:
        scorer, encoding, _ = scorer_from_file(resolved)
    except DeepShareError as exc:
        raise DeepShareError(f"model.init_from: {exc}") from None
    hidden = scorer.net.hidden
    if hidden != config.model.hidden:
        raise DeepShareError(f"model.init_from {path}: its scorer is {hidden} wide, the config's model.hidden is "
                             f"{config.model.hidden}; set model.hidden: {hidden}")
    wanted = EnvConfig.from_dict(config.env).encoding
    extras, encoded = list(encoding.extra_features), list(wanted.extra_features)
    if extras != encoded:
        raise DeepShareError(f"model.init_from {path}: its scorer reads the extra columns {extras}, the config's env "
                             f"encodes {encoded}; set env.extra_features: {extras}")
    for name in INIT_FROM_ENCODING:
        theirs, ours = getattr(encoding, name), getattr(wanted, name)
        if theirs != ours:
            shown_theirs = list(theirs) if isinstance(theirs, tuple) else theirs
            shown_ours = list(ours) if isinstance(ours, tuple) else ours
            raise DeepShareError(f"model.init_from {path}: its scorer was trained with {name} {shown_theirs}, the "
                                 f"config's env encodes {shown_ours}; set env.{name}: {shown_theirs}")
    return config.model_copy(update={"model": config.model.model_copy(update={"init_from": str(resolved)})})


INIT_FROM_ENCODING = ("anchor", "offer_order", "max_candidates", "jobs_considered", "generators")
"""Encoding fields a ``model.init_from`` file must share with the config's env (besides the extra
columns): they decide which rows a choice offers and what row 1 and ``is_anchor`` mean."""


RESUME_KEYS = ("name", "seed", "env", "ppo", "model", "ppo_extras", "hybrid_rules")
"""What a resumed run's config must share with the run's own (its ``policy.pt`` metadata): the
restored algorithm keeps the run's encoding, network and PPO settings, and the export labels the
weights with the config's, so a changed one would ship weights under another run's description."""


CHECKPOINT_RUN_FILE = "deepshare_run.json"
"""The run's metadata as each checkpoint was saved with it (:func:`save_checkpoint`): what a resume
checks its config against when the run folder's ``policy.pt`` is gone."""


def check_resumed_config(run_dir: Path, metadata: dict[str, Any], checkpoint: Path | None = None) -> None:
    """Refuse to resume ``run_dir`` with a config whose run metadata differs from what the run's
    ``policy.pt`` records, or, without one (deleted, or a save cut short before its export),
    what ``checkpoint``'s :data:`CHECKPOINT_RUN_FILE` records (dotted paths of the first
    differences named). A run with neither (checkpoints of an earlier deepshare) is not checked."""
    from deepshare.policies.checkpoint import load_policy_file, plain

    file = run_dir / "policy.pt"
    if file.is_file():
        recorded = load_policy_file(file).get("metadata")
    else:
        recorded = _checkpoint_metadata(checkpoint)
    if not isinstance(recorded, dict):
        return
    ours = json.loads(json.dumps(plain({k: metadata.get(k) for k in RESUME_KEYS})))
    theirs = json.loads(json.dumps(plain({k: recorded.get(k) for k in RESUME_KEYS})))
    differ = _differences(ours, theirs, "")
    if differ:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise DeepShareError(f"--resume {run_dir}: CONFIG differs from the config this run was trained with "
                             f"(its {'policy.pt' if file.is_file() else 'checkpoint'} records {recorded.get('config')!s}) "
                             f"in {shown}; a resumed run keeps "
                             "its own config: give that one (only --iterations may change)")


def _checkpoint_metadata(checkpoint: Path | None) -> Any:
    """The run metadata a checkpoint was saved with, or None (none recorded, or unreadable)."""
    if checkpoint is None:
        return None
    try:
        return json.loads((checkpoint / CHECKPOINT_RUN_FILE).read_text())
    except (OSError, ValueError):
        return None


def _differences(ours: Any, theirs: Any, at: str) -> list[str]:
    """Dotted paths where two JSON documents differ."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found: list[str] = []
        for key in sorted(set(ours) | set(theirs)):
            found += _differences(ours.get(key), theirs.get(key), f"{at}.{key}" if at else key)
        return found
    return [] if ours == theirs else [at or "(the whole config)"]


CHECKPOINT_NAME = re.compile(r"iter_(\d+)")
"""A checkpoint folder's name: ``iter_`` and the iteration (four digits or more)."""
CHECKPOINT_STATE = ("algorithm_state.pkl", "algorithm_state.msgpack")
"""The algorithm's own state file (``Algorithm.STATE_FILE_NAME``, pickled or msgpack), which
RLlib's ``save_to_path`` writes last, after its components' folders: a folder without one is a
checkpoint whose save was cut short."""


def checkpoint_iteration(folder: Path) -> int | None:
    """The iteration of a complete checkpoint folder ``iter_NNNN``; None for any other name, a
    save still under way (``iter_NNNN.partial``) or a folder without the algorithm's state."""
    match = CHECKPOINT_NAME.fullmatch(folder.name)
    if match is None or not folder.is_dir() or not any((folder / name).is_file() for name in CHECKPOINT_STATE):
        return None
    return int(match.group(1))


def _latest_checkpoint(run_dir: Path) -> Path:
    """The newest complete checkpoint of ``run_dir``, by iteration as a number (``iter_10000``
    after ``iter_9999``, which text order would reverse); incomplete folders are passed over."""
    folder = run_dir / "checkpoints"
    found = [(it, p) for p in (folder.iterdir() if folder.is_dir() else ()) if (it := checkpoint_iteration(p)) is not None]
    if not found:
        raise DeepShareError(f"--resume {run_dir}: no complete checkpoints/iter_* in this folder")
    return max(found)[1]


def save_checkpoint(algo: Any, folder: Path, metadata: dict[str, Any] | None = None) -> None:
    """``algo`` saved to ``folder`` through ``folder.partial``, renamed once the save is whole, so
    an interrupted save never is the newest checkpoint a resume picks (an older half-written
    ``folder`` is replaced); ``metadata``, the run's, goes with it (:data:`CHECKPOINT_RUN_FILE`)."""
    import shutil

    from deepshare.policies.checkpoint import plain

    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    algo.save_to_path(str(partial))
    if metadata is not None:
        (partial / CHECKPOINT_RUN_FILE).write_text(json.dumps(plain(metadata), default=str, indent=1) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    partial.rename(folder)


METRICS_BYTES = 1 << 30
"""The largest ``metrics.csv`` a resume rewrites (a row is ~200 bytes: millions of iterations)."""


def trim_metrics(metrics_file: Path, iteration: int) -> int:
    """Drop the rows of ``metrics_file`` after ``iteration`` (the checkpoint a run resumes from),
    rewriting it atomically: the resumed run trains those iterations again and appends their rows,
    which would otherwise be in the file twice. The rows dropped (0: the file is left as it was)."""
    from deepshare.core.atomic import write_text_atomic
    from deepshare.core.files import read_input_text

    if not metrics_file.is_file():
        return 0
    lines = read_input_text(metrics_file, "metrics file", METRICS_BYTES).splitlines(keepends=True)
    if not lines:
        return 0
    kept = [lines[0]]
    for line in lines[1:]:
        first = next(csv.reader([line]), [""])
        try:
            after = float(first[0]) > iteration
        except (ValueError, IndexError):
            after = False  # not a row this run wrote: kept as it is
        if not after:
            kept.append(line)
    dropped = len(lines) - len(kept)
    if dropped:
        write_text_atomic(metrics_file, "".join(kept), "metrics file")
    return dropped


def upgrade_metrics_header(metrics_file: Path) -> bool:
    """Give a ``metrics.csv`` an earlier deepshare wrote the columns this one appends (older rows
    get them empty), rewriting it atomically, so a resumed run's rows line up with its header.
    Whether it was rewritten. A file with a column this deepshare does not write, a column
    twice, or a row longer than its header is refused in one line, and left as it was."""
    import io

    from deepshare.core.atomic import write_text_atomic
    from deepshare.core.errors import DeepShareError
    from deepshare.core.files import read_input_text

    if not metrics_file.is_file():
        return False
    with metrics_file.open(encoding="utf-8", errors="replace", newline="") as fh:
        first = fh.readline(1 << 16)  # the header alone: a current file is not read whole
    header = next(csv.reader([first]), [])
    if tuple(header) == METRIC_COLUMNS or not first:
        return False
    unknown = [name for name in header if name not in METRIC_COLUMNS]
    if unknown or not header or len(set(header)) != len(header):
        what = f"column(s) {', '.join(unknown)} are not" if unknown else "its header is not"
        raise DeepShareError(f"{metrics_file}: {what} metrics.csv's ({', '.join(METRIC_COLUMNS)}); "
                             "move the file away to start a new one")
    text = read_input_text(metrics_file, "metrics file", METRICS_BYTES)
    out = io.StringIO()
    rows = csv.DictWriter(out, fieldnames=METRIC_COLUMNS, restval="")
    rows.writeheader()
    reader = csv.DictReader(io.StringIO(text, newline=""))
    for row in reader:
        if None in row:
            raise DeepShareError(f"{metrics_file}: line {reader.line_num} has more values than the header's "
                                 f"{len(header)} columns; move the file away to start a new one")
        rows.writerow(row)
    write_text_atomic(metrics_file, out.getvalue(), "metrics file")
    return True


def metrics_row(result: dict[str, Any], wall: float) -> dict[str, float]:
    """One iteration of RLlib's result as the row of ``metrics.csv`` (and of a Tune trial's report)."""
    runners = result.get("env_runners", {})
    learner = result.get("learners", {}).get("default_policy", {})
    timers = result.get("timers", {})
    return {
        "iteration": result.get("training_iteration", 0),
        "env_steps_lifetime": result.get("num_env_steps_sampled_lifetime", 0),
        "episode_return_mean": runners.get("episode_return_mean", float("nan")),
        "episode_len_mean": runners.get("episode_len_mean", float("nan")),
        "episodes": runners.get("num_episodes", 0),
        "policy_loss": learner.get("policy_loss", float("nan")),
        "vf_loss": learner.get("vf_loss", float("nan")),
        "entropy": learner.get("entropy", float("nan")),
        "sample_s": timers.get("env_runner_sampling_timer", float("nan")),
        "learn_s": timers.get("learner_update_timer", float("nan")),
        "wall_s": wall,
        "baseline_matched": learner.get("baseline_matched", float("nan")),
        "reward_rate": learner.get("reward_rate", float("nan")),
    }


def tensorboard_scalars(row: dict[str, float]) -> dict[str, float]:
    """The values of a ``metrics.csv`` row that TensorBoard gets: all but the iteration (its step)
    and the missing ones (NaN: an iteration in which no episode finished has no return)."""
    return {k: v for k, v in row.items() if k != "iteration" and math.isfinite(v)}


def build_algorithm_config(
    config: TrainConfig, env: EnvConfig, num_env_runners: int, cpus: float, *, lean_connectors: bool = True
):
    """PPO on the env with the candidate module. ``lean_connectors``: the env runners use
    :mod:`deepshare.rl.connectors` (one fused piece each way instead of RLlib's eleven; same
    tensors, actions and extra model outputs); False: RLlib's defaults (for comparison)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from deepshare.rl import connectors
    from deepshare.rl.env import DeepShareEnv
    from deepshare.rl.module import CandidatePPOModule, NoCatalog

    per_runner = min(1.0, cpus / max(1, num_env_runners))
    lean: dict[str, Any] = {}
    if lean_connectors:
        lean = {
            "env_to_module_connector": connectors.env_to_module,
            "module_to_env_connector": connectors.module_to_env,
            "add_default_connectors_to_env_to_module_pipeline": False,
            "add_default_connectors_to_module_to_env_pipeline": False,
        }
    algo = (
        PPOConfig()
        .environment(DeepShareEnv, env_config=asdict(env))
        .env_runners(
            num_env_runners=num_env_runners,
            num_cpus_per_env_runner=per_runner,
            num_envs_per_env_runner=config.run.envs_per_env_runner,
            rollout_fragment_length="auto",
            **lean,
        )
        .learners(num_learners=0)
        .training(**config.ppo)  # RLlib's own keys, as the YAML wrote them
        .rl_module(
            rl_module_spec=RLModuleSpec(
                module_class=CandidatePPOModule, model_config=config.model.model_dump(exclude_none=True), catalog_class=NoCatalog
            )
        )
        .debugging(seed=config.run.seed)
    )
    return _with_hooks(algo, config)


def _with_hooks(algo: Any, config: TrainConfig) -> Any:
    """``algo`` with the env runners' hooks: every env's own seed stream (:mod:`deepshare.rl.seeding`)
    and, with ``ppo_extras``, the learner's advantage piece and the extras' hooks."""
    from deepshare.rl.advantages import LEARNER_KEY, DeepSharePPOLearner, ReplayGroups, ReportElapsed
    from deepshare.rl.curriculum import CurriculumStart, CurriculumStep
    from deepshare.rl.seeding import SeedStreams

    extras = config.ppo_extras
    streams = SeedStreams(config.run.seed)
    if extras.average_reward is not None or extras.input_baseline is not None:
        options = {
            "average_reward_rate": extras.average_reward.rate if extras.average_reward else None,
            "average_reward_per": extras.average_reward.per if extras.average_reward else "time",
            "group_mix": extras.input_baseline.mix if extras.input_baseline else None,
        }
        algo = algo.learners(learner_class=DeepSharePPOLearner, learner_config_dict={LEARNER_KEY: options})
    created: list[Any] = [streams]
    if extras.average_reward is not None and extras.average_reward.per == "time":
        created.append(ReportElapsed())
    recreated: list[Any] = [streams.recreated]
    if extras.input_baseline is not None:
        replay = ReplayGroups(extras.input_baseline.group_size, config.run.seed)
        created.append(replay)
        recreated.append(replay.recreated)
    if extras.curriculum is not None:
        created.append(CurriculumStart(extras.curriculum.lengths))
        step = CurriculumStep(extras.curriculum.lengths, extras.curriculum.iterations_per_stage)
        algo = algo.callbacks(on_train_result=step)
        recreated.append(step.recreated)
    return algo.callbacks(on_environment_created=created, on_env_runners_recreated=recreated)


def start_ray(address: str | None) -> None:
    """Join the cluster at ``address``, or start a private local Ray, unless Ray already runs here."""
    import ray

    if ray.is_initialized():
        return
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            from deepshare.infra.localray import init_local_ray  # a private instance: loopback only

            init_local_ray(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
                           object_store_memory=300 * 1024**2)
    except Exception as exc:  # noqa: BLE001 - Ray's start-up raises many types; all mean "no cluster"
        what = f"join Ray at {address}" if address else "start a local Ray instance"
        raise RuntimeFailure.could_not(what, exc) from None


def run_metadata(config: TrainConfig, config_path: str | Path, env: EnvConfig) -> dict[str, Any]:
    """What a ``policy.pt`` records about the run that produced it; a run trained with RL-hybrid's
    safety net in the loop (``env.hybrid``) also records that net's rules as ``hybrid_rules``, which
    ``rl-hybrid=FILE`` then applies, so the network is served with the rules it learned beside."""
    metadata = {
        "config": str(config_path), "name": config.name, "seed": config.run.seed, "env": asdict(env),
        "ppo": config.ppo, "model": config.model.model_dump(),
    }
    if config.ppo_extras.any:  # absent when off: a default run's file records what it always did
        metadata["ppo_extras"] = config.ppo_extras.model_dump(exclude_none=True)
    rules = env.hybrid_rules
    if rules is not None:
        metadata["hybrid_rules"] = {**asdict(rules), "anchor": list(rules.anchor)}
        if rules.anchor_streak == 1:  # absent when off, as a file trained before the streak existed
            del metadata["hybrid_rules"]["anchor_streak"]
    return metadata


def runner_metadata(algo_config: Any) -> dict[str, int]:
    """The env runners a run sampled with (``run`` in its ``policy.pt`` metadata): its envs draw
    episodes from streams keyed by (seed, env runner index, env index) (:mod:`deepshare.rl.seeding`),
    so the same seed with another runner count or envs per runner trains on other episodes, and the
    card's rebuilt command needs both. Read from the algorithm's config, not the CLI's arguments:
    a resumed run keeps its checkpoint's runners whatever ``--num-env-runners`` says."""
    return {"num_env_runners": int(algo_config.num_env_runners),
            "envs_per_env_runner": int(algo_config.num_envs_per_env_runner)}


RUN_ENTRIES = ("checkpoints", "policy.pt", "metrics.csv", "suite_curve.csv", "curves.png", "tb")
"""What a training run leaves in its folder: a new run refuses a folder holding any of them."""


def check_new_run_folder(folder: str | Path, flag: str = "--out") -> None:
    """:class:`DeepShareError` when ``folder`` holds a run already (:data:`RUN_ENTRIES`): a new
    run there appended its metrics to the old run's rows, replaced its policy.pt and some of its
    checkpoints and left the others, which a later ``--resume`` would pick (the newest). A missing
    or empty folder, or one holding other files, is fine."""
    base = Path(folder)
    try:
        found = [name for name in RUN_ENTRIES if os.path.lexists(base / name)]
    except OSError:  # a name too long: the folder's own checks say so
        return
    if not found:
        return
    try:
        _latest_checkpoint(base)
    except (DeepShareError, OSError):  # stopped before its first checkpoint: nothing to resume
        raise DeepShareError(f"{flag} {folder}: holds a training run already ({', '.join(found)}) with no checkpoint "
                             "to resume from; remove those files, or give a new run its own --out") from None
    raise DeepShareError(f"{flag} {folder}: holds a training run already ({', '.join(found)}); continue it with "
                         f"--resume {folder}, or give a new run its own --out")


def train(
    config_path: str | Path,
    out: str | Path,
    *,
    iterations: int | None = None,
    num_env_runners: int | None = None,
    address: str | None = None,
    resume: str | Path | None = None,
    progress: Progress | None = None,
    config: TrainConfig | None = None,
    on_export: OnExport | None = None,
) -> Path:
    """Run PPO; returns the exported ``policy.pt``. ``config``: ``config_path`` already loaded.

    ``on_export`` (e.g. a suite's learning curve) sees ``policy.pt`` after every export: at each
    checkpoint and, for a new run, once before the first iteration (iteration 0, the starting
    weights, e.g. ``--init-from``'s)."""
    import ray
    from ray.rllib.algorithms.algorithm import Algorithm
    from tensorboardX import SummaryWriter

    from deepshare.policies.checkpoint import export_scorer

    config = config or load_train_config(config_path)
    env = config.env_config(Path(config_path).parent)
    total = iterations or config.run.iterations
    runners = config.run.num_env_runners if num_env_runners is None else num_env_runners
    run_dir = resolved_path(resume if resume else out)  # RLlib wants absolute paths
    if not resume:
        check_new_run_folder(out)
    start_from = _latest_checkpoint(run_dir) if resume else None
    metadata = run_metadata(config, config_path, env)
    if start_from is not None:
        check_resumed_config(run_dir, metadata, start_from)
        reached = checkpoint_iteration(start_from)
        if reached is not None and reached >= total:  # nothing to train: it printed "policy written" all the same
            raise DeepShareError(f"--resume {run_dir}: the run's newest checkpoint is at iteration {reached} already; "
                                 f"give --iterations above {reached} to train on")
    made = [p for p in reversed((run_dir, *run_dir.parents)) if not p.exists()]  # outermost first: what this run creates
    run_dir.mkdir(parents=True, exist_ok=True)
    upgrade_metrics_header(run_dir / "metrics.csv")  # an earlier deepshare's file gains this one's columns
    try:
        start_ray(address)
    except BaseException:
        remove_empty_folders(made)  # a new run that never started leaves no empty folder behind (its parents included)
        raise
    cpus = float(ray.cluster_resources().get("CPU", 2))
    if start_from is not None:
        from deepshare.rl.advantages import resume_replay
        from deepshare.rl.curriculum import resume_stage
        from deepshare.rl.seeding import resume_streams

        from ray.exceptions import RayError

        try:
            algo = Algorithm.from_checkpoint(str(start_from))
        except (DeepShareError, RuntimeFailure):  # the env's own errors (a trace gone) and Ray's, as they are
            raise
        except (RayError, MemoryError) as exc:  # the cluster failed, not the checkpoint
            raise RuntimeFailure.could_not(f"restore {start_from.name} on Ray", exc) from None
        except Exception as exc:  # noqa: BLE001 - an unreadable checkpoint: pickle, EOF, OS, key errors
            raise DeepShareError(f"--resume {run_dir}: checkpoint {start_from.name} cannot be restored "
                                 f"({first_line(exc)}); move it away to "
                                 "resume from the one before") from None
        resume_stage(algo)  # the env runners were just created at the curriculum's first length
        resume_replay(algo)  # ...and their replay groups at the run's first sequences
        resume_streams(algo)  # ...and their envs at the start of their streams
    else:
        algo = build_algorithm_config(config, env, runners, cpus).build_algo()
    metadata["run"] = runner_metadata(algo.config)
    metrics_file = run_dir / "metrics.csv"
    purge = None
    if start_from is not None:  # the iterations after the checkpoint are trained (and logged) again
        trim_metrics(metrics_file, int(algo.iteration))
        purge = int(algo.iteration) + 1  # TensorBoard hides the earlier run's events from this step on
    new_file = not metrics_file.exists()
    writer = SummaryWriter(str(run_dir / "tb"), purge_step=purge)
    policy_file = run_dir / "policy.pt"

    def export(iteration: int, row: dict[str, float] | None) -> None:
        export_scorer(algo.get_module().scorer, env.encoding, policy_file, {**metadata, "iterations": iteration})
        if on_export is not None:
            on_export(iteration, policy_file, row)

    def checkpoint(iteration: int, row: dict[str, float]) -> None:
        save_checkpoint(algo, run_dir / "checkpoints" / f"iter_{iteration:04d}", metadata)
        export(iteration, row)

    try:
        if on_export is not None and start_from is None:
            export(algo.iteration, None)
        with open_append(metrics_file, "metrics file") as fh:  # never through a link planted in the run folder
            rows = csv.DictWriter(fh, fieldnames=METRIC_COLUMNS)
            if new_file:
                rows.writeheader()
            while algo.iteration < total:
                began = time.perf_counter()
                row = metrics_row(algo.train(), time.perf_counter() - began)
                rows.writerow(row)
                fh.flush()
                for key, value in tensorboard_scalars(row).items():
                    writer.add_scalar(key, value, algo.iteration)
                if progress is not None:
                    progress(algo.iteration, total, row)
                if algo.iteration % config.run.checkpoint_every == 0 or algo.iteration == total:
                    checkpoint(algo.iteration, row)
    finally:
        writer.close()
        algo.stop()
    return policy_file
