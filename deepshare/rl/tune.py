"""``deepshare tune``: a small Ray Tune grid sweep over training configs.

``deepshare tune CONFIG --grid ppo.lr=0.0001,0.0003 --grid env.reward_scale=0.1,0.2`` trains one
PPO run per combination of the grid (``tune.grid_search`` on each axis) with the same trainer as
``deepshare train``: a function trainable that builds the algorithm from the config with the
trial's values and reports :func:`deepshare.rl.train.metrics_row` every iteration. A grid key
is ``SECTION.KEY`` with SECTION one of ``ppo`` (RLlib's ``PPOConfig.training()`` keys), ``env``,
``model``, ``run``; a bare ``KEY`` means ``ppo.KEY``. The ``ppo_extras`` options are one level
deeper, ``ppo_extras.OPTION.FIELD`` (``ppo_extras.average_reward.rate=0.01,0.1``); a trial that
sets a field of an option the base config leaves off turns that option on. Every combination is
validated before Ray starts, so a wrong key or value is one line naming it.

Results use Tune's layout: ``OUT/NAME/`` holds the experiment state and one folder per trial with
``params.json``, ``result.json``, ``progress.csv`` and TensorBoard event files (Tune's logger
callbacks), and the trial's final Tune checkpoint ``checkpoint_NNNNNN/policy.pt`` (what
``rl-base=PATH`` / ``rl-hybrid=PATH`` load; Tune uploads it to ``OUT`` even when that is a URI).
Each trial reserves what RLlib's PPO asks for (``default_resource_request``: the learner in the
trial's own bundle plus one bundle per env runner), so Tune runs as many trials at once as fit.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from deepshare.core.documents import load_yaml
from deepshare.core.errors import DeepShareError
from deepshare.core.files import resolved
from deepshare.core.yamlspec import read_config_text

SECTIONS = ("ppo", "env", "model", "run", "ppo_extras")
NOT_SWEPT = {
    ("run", "iterations"): "every trial trains --iterations (or the config's run.iterations); sweep it as "
                           "separate tune runs with --iterations",
    ("run", "checkpoint_every"): "a trial keeps only its last policy, so it has no periodic checkpoints",
}
"""Config keys a trial does not read: a grid over them showed a column whose values changed nothing."""
NESTED = {"ppo_extras": 2}
"""How many dotted parts a section's keys have (1 unless named here)."""
METRIC = "episode_return_mean"


@dataclass(frozen=True)
class GridAxis:
    section: str
    key: str
    values: tuple[Any, ...]

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"


MAX_TRIALS = 1000
"""Most trials a sweep may ask for: each is a whole training run, and every combination is
checked as a full config before the first starts (a 1,000 x 1,000 grid spent minutes of CPU and a
million configs' memory on that alone)."""


def parse_grid(spec: str) -> GridAxis:
    """``KEY=V1,V2,...`` (``--grid``) as an axis; values are numbers, booleans or strings."""
    key, sep, values = spec.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise DeepShareError(f"--grid {spec!r}: expected KEY=V1,V2,... (e.g. ppo.lr=0.0001,0.0003)")
    section, dot, name = key.partition(".")
    if not dot:
        section, name = "ppo", key
    parts = name.split(".")
    if section not in SECTIONS or not all(parts) or len(parts) != NESTED.get(section, 1):
        raise DeepShareError(f"--grid {spec!r}: the key must be SECTION.KEY with SECTION one of "
                             f"{', '.join(s for s in SECTIONS if s not in NESTED)}, or ppo_extras.OPTION.FIELD; "
                             f"got {key!r}")
    if (section, name) in NOT_SWEPT:
        raise DeepShareError(f"--grid {spec!r}: {key} cannot be swept: {NOT_SWEPT[section, name]}")
    parsed = tuple(_scalar(v.strip()) for v in values.split(","))
    if any(v == "" for v in parsed):
        raise DeepShareError(f"--grid {spec!r}: empty value in the list")
    same = [(type(v) is str, type(v) is bool, v) for v in parsed]  # 1 and 1.0 are one value (two identical trials)
    if len(set(same)) != len(same):
        raise DeepShareError(f"--grid {spec!r}: a value is listed twice")
    return GridAxis(section, name, parsed)


def _scalar(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    try:
        value = load_yaml(text, "--grid") if text else ""
    except DeepShareError:  # not YAML (or absurdly nested): the text itself, checked as the field's value
        return text
    return value if isinstance(value, (bool, str)) else text


STORAGE_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
"""The URI schemes Ray Tune's storage (pyarrow's ``FileSystem.from_uri``) knows: any other failed in
Ray Tune, after Ray had started, with pyarrow's traceback."""


def check_storage_uri(out: str) -> str | None:
    """``--out``'s URI names a storage Ray Tune can write to (the scheme only: reaching it is
    Ray's, with the credentials of the cluster); returns a ``file://`` URI's local folder, read as
    pyarrow (Ray Tune's storage) reads it, so that it is checked as a local ``--out`` is, and None
    for a remote one."""
    scheme = out.partition("://")[0]
    if scheme not in STORAGE_SCHEMES:
        raise DeepShareError(f"--out {out}: Ray Tune stores a sweep in a folder or a {', '.join(s + '://' for s in STORAGE_SCHEMES)} "
                             f"URI (lower case); not {scheme + '://'!r}")
    if scheme != "file":
        return None
    try:
        import pyarrow.fs
    except ImportError:  # no Ray Tune here either: run_sweep says so
        return None
    try:
        return str(pyarrow.fs.FileSystem.from_uri(out)[1])
    except (ValueError, OSError) as exc:  # a host (file://runs/x), a relative path: pyarrow's traceback in Ray Tune
        raise DeepShareError(f"--out {out}: not a local file URI ({exc}); write file:///ABSOLUTE/PATH, "
                             "or the folder itself") from None


def check_new_experiment(folder: str | Path, out: str) -> None:
    """The experiment folder ``OUT/NAME`` is missing or empty: a second sweep there added its
    trials beside the first's (Tune names each trial folder anew, and keeps both experiment
    states), so the folder, its TensorBoard logs and ``Tuner.restore`` mixed two sweeps."""
    base = Path(folder)
    try:
        if os.path.lexists(base) and not base.is_dir():
            raise DeepShareError(f"--out {out}: {folder}, the sweep's experiment folder, is not a folder; give "
                                 "another --out, or remove it")
        found = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
    except OSError:  # unreadable or a name too long: making the folder says so
        return
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise DeepShareError(f"--out {out}: the experiment folder {folder} holds a sweep already ({shown}); give this "
                             "one its own --out (or the config another name), or remove that folder")


def apply(raw: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The raw config with ``{"section.key": value}`` (or ``section.option.field``) set (a copy);
    a missing or empty mapping on the way is created."""
    out = copy.deepcopy(raw)
    for dotted, value in values.items():
        *path, key = dotted.split(".")
        node = out
        for part in path:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[key] = value
    return out


def validated_variants(config_path: str | Path, axes: Sequence[GridAxis]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The raw YAML mapping and every grid combination, each checked as a full training config."""
    from deepshare.rl.train import parse_train_config

    source = Path(config_path)
    text = read_config_text(source, "training config")
    parse_train_config(text, source)  # the base config alone first: its own errors name no grid
    raw = load_yaml(text, str(source))
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise DeepShareError(f"--grid: a key is given twice ({', '.join(sorted({n for n in names if names.count(n) > 1}))})")
    trials = math.prod(len(a.values) for a in axes)
    if trials > MAX_TRIALS:
        sizes = " x ".join(str(len(a.values)) for a in axes)
        raise DeepShareError(f"--grid: {sizes} = {trials:,} trials; a sweep runs at most {MAX_TRIALS:,} (each a full "
                             "PPO training run): narrow the grid")
    combos = [dict(zip(names, values)) for values in itertools.product(*(a.values for a in axes))]
    for combo in combos:
        shown = ", ".join(f"{k}={v}" for k, v in combo.items())
        try:
            parse_train_config(yaml.safe_dump(apply(raw, combo)), source)
        except DeepShareError as exc:
            raise DeepShareError(f"--grid {shown}: {exc}") from None
    return raw, combos


def deepshare_ppo(params: dict[str, Any]) -> None:
    """One Tune trial: the training loop of ``deepshare train`` with the trial's values."""
    from ray import tune

    from deepshare.policies.checkpoint import export_scorer
    from deepshare.rl.train import build_algorithm_config, metrics_row, parse_train_config, run_metadata

    setup = params["deepshare"]
    source = Path(setup["source"])
    values = {k: v for k, v in params.items() if k != "deepshare"}
    config = parse_train_config(yaml.safe_dump(apply(setup["raw"], values)), source)
    env = config.env_config(source.parent)
    algo = build_algorithm_config(config, env, config.run.num_env_runners, setup["cpus"]).build_algo()
    try:
        for iteration in range(1, setup["iterations"] + 1):
            began = time.perf_counter()
            row = metrics_row(algo.train(), time.perf_counter() - began)
            metrics = {k: v for k, v in row.items() if k != "iteration"}
            if iteration < setup["iterations"]:
                tune.report(metrics)
                continue
            with tempfile.TemporaryDirectory() as folder:  # the last report carries the policy as a checkpoint
                metadata = {**run_metadata(config, source, env), "iterations": iteration, "tune": values}
                export_scorer(algo.get_module().scorer, env.encoding, Path(folder) / "policy.pt", metadata)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
    finally:
        algo.stop()


@dataclass(frozen=True)
class TrialSummary:
    name: str
    values: dict[str, Any]
    status: str
    iterations: int
    episode_return_mean: float
    path: str
    policy: str | None
    """The trial's ``policy.pt`` (in its Tune checkpoint), None when the trial failed before it."""


def run_sweep(
    config_path: str | Path, axes: Sequence[GridAxis], out: str | Path, *, iterations: int | None = None,
    address: str | None = None, max_concurrent: int | None = None,
) -> tuple[str, list[TrialSummary]]:
    """Run the grid; returns the experiment folder (a path or URI) and one summary per trial (grid order)."""
    from ray import tune
    from ray.rllib.algorithms.ppo import PPO

    from deepshare.rl.train import build_algorithm_config, parse_train_config, start_ray

    raw, combos = validated_variants(config_path, axes)
    source = resolved(config_path)
    base = parse_train_config(read_config_text(source, "training config"), source)
    total = iterations or base.run.iterations
    start_ray(address)
    import ray

    cpus = float(ray.cluster_resources().get("CPU", 2))

    def resources(params: dict[str, Any]) -> Any:
        values = {k: v for k, v in params.items() if k != "deepshare"}
        config = parse_train_config(yaml.safe_dump(apply(raw, values)), source)
        algo_config = build_algorithm_config(config, config.env_config(source.parent), config.run.num_env_runners, cpus)
        return PPO.default_resource_request(algo_config)

    space: dict[str, Any] = {a.name: tune.grid_search(list(a.values)) for a in axes}
    space["deepshare"] = {"source": str(source), "raw": raw, "iterations": total, "cpus": cpus}
    # a multi-node sweep needs storage every node reaches: a shared folder or a URI (s3://, gs://)
    remote = "://" in str(out)
    storage = str(out).rstrip("/") if remote else str(resolved(out))
    tuner = tune.Tuner(
        tune.with_resources(deepshare_ppo, resources),
        param_space=space,
        tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent),
        run_config=tune.RunConfig(name=base.name, storage_path=storage, verbose=0),
    )
    grid = tuner.fit()
    summaries = []
    for result in grid:
        values = {a.name: result.config[a.name] for a in axes}
        metrics = result.metrics or {}
        summaries.append(TrialSummary(
            name=Path(result.path).name, values=values, status="error" if result.error else "ok",
            iterations=int(metrics.get("training_iteration", 0)),
            episode_return_mean=float(metrics.get(METRIC, math.nan)), path=result.path,
            policy=f"{result.checkpoint.path}/policy.pt" if result.checkpoint else None,
        ))
    order = [tuple(c.values()) for c in combos]
    summaries.sort(key=lambda s: order.index(tuple(s.values.values())))
    return f"{storage}/{base.name}", summaries
