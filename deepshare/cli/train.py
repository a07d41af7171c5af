"""``deepshare train`` (RLlib PPO from a YAML config) and ``deepshare tune`` (a Ray Tune grid over one)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from deepshare.cli.args import in_range, iteration_count, runner_count, seed_value
from deepshare.cli.output import check_outputs, folder_outputs
from deepshare.core.errors import DeepShareError

TRAIN_FILES = ("policy.pt", "metrics.csv")
"""Files `deepshare train` writes into its run folder that a config could be mistaken for."""


def cmd_train(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from deepshare.rl.train import load_train_config, train

    config = load_train_config(args.config)  # bad YAML fails before Ray starts
    if args.seed is not None:
        if args.resume:
            raise DeepShareError("--seed: a resumed run keeps the seed it started with; drop --seed or --resume")
        config = config.model_copy(update={"run": config.run.model_copy(update={"seed": args.seed})})
    total = args.iterations or config.run.iterations
    run_dir = args.resume or args.out or f"runs/{config.name}"
    check_outputs({"--out": folder_outputs(run_dir, TRAIN_FILES)}, {"CONFIG": args.config}, new_folders=[run_dir])
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} iterations"),
               TextColumn("return {task.fields[ret]}"), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=not err.is_terminal) as bar:
        task = bar.add_task(f"training {config.name}", total=total, ret="-")

        def report(iteration: int, n: int, row: dict[str, float]) -> None:
            bar.update(task, completed=iteration, ret=f"{row['episode_return_mean']:.3f}")
            if not err.is_terminal:
                err.print(f"iteration {iteration}/{n}: episode return {row['episode_return_mean']:.4f}, "
                          f"{row['env_steps_lifetime']:.0f} env steps", markup=False, highlight=False)

        policy = train(args.config, run_dir, iterations=args.iterations, num_env_runners=args.num_env_runners,
                       address=args.address, resume=args.resume, progress=report, config=config)
    out.print(f"policy written to {policy}; use --policy {config.name.replace('_', '-')}={policy}", markup=False, highlight=False)
    return 0


def cmd_tune(args: argparse.Namespace, out: Any, err: Any) -> int:
    from rich.table import Table

    from deepshare.rl.tune import METRIC, parse_grid, run_sweep, validated_variants

    axes = [parse_grid(spec) for spec in args.grid]
    if not axes:
        raise DeepShareError("--grid: give at least one KEY=V1,V2,... to sweep")
    validated_variants(args.config, axes)  # bad keys fail here, before Ray starts
    folder, trials = run_sweep(args.config, axes, args.out, iterations=args.iterations, address=args.address,
                               max_concurrent=args.max_concurrent)
    table = Table(title=f"tune: {len(trials)} trials in {folder}", header_style="bold")
    for column in ("trial", *(a.name for a in axes), "status", "iterations", METRIC):
        table.add_column(column)
    for t in trials:
        table.add_row(t.name, *(str(v) for v in t.values.values()), t.status, str(t.iterations), f"{t.episode_return_mean:.4g}")
    out.print(table)
    for t in trials:
        if t.policy:
            out.print(f"policy of {t.name}: {t.policy}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"TensorBoard: tensorboard --logdir {folder}", markup=False, highlight=False, soft_wrap=True)
    return 1 if any(t.status != "ok" for t in trials) else 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("train", help="train RL-base / RL-hybrid with RLlib PPO from a YAML config")
    p.add_argument("config", metavar="CONFIG", help="a YAML in rllib_configs/, e.g. rllib_configs/rl_hybrid.yaml")
    p.add_argument("--iterations", type=iteration_count, metavar="K", help="PPO iterations (default: the config's)")
    p.add_argument("--num-env-runners", type=runner_count, metavar="N", help="simulator rollout workers (default: the config's)")
    p.add_argument("--seed", type=seed_value, metavar="S", help="training seed, replacing the config's run.seed (recorded in policy.pt)")
    p.add_argument("--address", metavar="auto|ADDR", help="join a running Ray cluster instead of starting one")
    p.add_argument("--out", metavar="DIR", help="run folder (default runs/NAME)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its newest checkpoint")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("tune", help="a Ray Tune grid sweep over a training config (one PPO run per combination)")
    p.add_argument("config", help="training YAML (rllib_configs/*.yaml)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="an axis of the grid: SECTION.KEY (ppo, env, model, run; a bare KEY is ppo.KEY) and its values; repeatable")
    p.add_argument("--iterations", type=iteration_count, default=None, metavar="N", help="training iterations per trial (default: the config's run.iterations)")
    p.add_argument("--out", default="runs/tune", metavar="DIR|URI",
                   help="Tune's storage (a folder, or s3://... / gs://... that every node reaches on a multi-node cluster); "
                        "the experiment is DIR/NAME (default runs/tune)")
    p.add_argument("--address", default=None, metavar="auto|HOST:PORT", help="join this Ray cluster (default: a private local Ray)")
    p.add_argument("--max-concurrent", type=in_range(int, 1, 1024, "trials"), default=None, metavar="N", help="at most N trials at once (default: as many as the cluster fits)")
    p.set_defaults(func=cmd_tune)
