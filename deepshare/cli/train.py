"""``deepshare train`` (RLlib PPO from a YAML config), ``deepshare tune`` (a Ray Tune grid over one) and
``deepshare imitate`` (behaviour cloning of the anchor heuristic on a config's env, no Ray; with
``--teacher planner=K``, expert iteration: the rollout planner labels the states the network
visits, as Ray tasks on a cluster with ``--address``)."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from deepshare.cli.args import estimate_sigma, in_range, iteration_count, number, print_line, runner_count
from deepshare.core.bounds import MAX_TRAIN_SEED
from deepshare.core.information import DURATIONS
from deepshare.cli.output import check_outputs, folder_outputs
from deepshare.cli.help import command
from deepshare.core.errors import DeepShareError, one_line
from deepshare.core.files import check_appendable, remove_empty_folders

TRAIN_FILES = ("policy.pt", "metrics.csv", "suite_curve.csv", "curves.png")
"""Files `deepshare train` writes into its run folder that a config could be mistaken for."""
IMITATE_FILES = ("policy.pt", "imitation.json")
"""Files `deepshare imitate` writes into its run folder."""
EXPERT_FILES = ("policy.pt", "expert.json")
"""Files `deepshare imitate --teacher planner=K` (expert iteration) writes into its run folder."""


NO_EPISODE = "no episode finished yet"
"""What an iteration's return reads when none of its episodes finished (RLlib reports NaN)."""


def episode_return(value: float, digits: int) -> str:
    """A mean episode return for people: its digits, or :data:`NO_EPISODE` for RLlib's NaN."""
    return f"{value:.{digits}f}" if math.isfinite(value) else NO_EPISODE


def cmd_train(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from deepshare.cli.ray_address import check_address
    from deepshare.rl.train import check_new_run_folder, load_train_config, train

    check_address(args.address)  # '' (an unset variable) would start a local Ray, silently
    config = load_train_config(args.config)  # bad YAML fails before Ray starts
    if args.seed is not None:
        if args.resume:
            raise DeepShareError("--seed: a resumed run keeps the seed it started with; drop --seed or --resume")
        config = config.model_copy(update={"run": config.run.model_copy(update={"seed": args.seed})})
    if args.durations is not None or args.estimate_error is not None:
        if args.resume:
            raise DeepShareError("--durations/--estimate-error: a resumed run keeps the information model it started with; "
                                 "drop them or --resume")
        from deepshare.rl.env import EnvConfig

        env = dict(config.env)
        if args.durations is not None:
            env["durations"] = [args.durations]
        if args.estimate_error is not None:
            env["estimate_errors"] = [args.estimate_error]
        EnvConfig.from_dict(env)  # checked before Ray starts
        config = config.model_copy(update={"env": env})
    if args.init_from:
        if args.resume:
            raise DeepShareError("--init-from starts a new run; --resume continues one from its own weights: give one")
        from deepshare.rl.train import with_init_from

        config = with_init_from(config, args.init_from)
    if args.address:  # fails fast, before the run folder: Ray retries an unreachable head for minutes
        from deepshare.agents.deploy import check_reachable

        check_reachable(args.address)
    if args.resume and args.out is not None:
        raise DeepShareError("--out: a resumed run goes on in its own folder (--resume's); drop --out or --resume")
    total = args.iterations or config.run.iterations
    flag, run_dir = next(((f, v) for f, v in (("--resume", args.resume), ("--out", args.out)) if v is not None),
                         ("--out", f"runs/{config.name}"))
    check_outputs({flag: folder_outputs(run_dir, TRAIN_FILES, flag)},  # an empty path is refused, not the default
                  {"CONFIG": args.config, "--init-from" if args.init_from else "model.init_from": config.model.init_from}, new_folders=[run_dir])
    for name, what in (("metrics.csv", "metrics file"), ("suite_curve.csv", "learning curve")):
        check_appendable(Path(run_dir) / name, what)  # a planted link is refused now, not once Ray has started
    if not args.resume:
        check_new_run_folder(run_dir, flag)  # before Ray starts: a new run never mixes with an old one
    _warn_unreached_stages(config, total, err)
    trained_as = "rl-hybrid" if config.env.get("hybrid") else "rl-base"  # a registry name that loads the file
    on_export = _learning_curve(args, trained_as, run_dir, err)  # a bad suite fails here, before Ray starts
    columns = (TextColumn("{task.description}", markup=False), BarColumn(),  # the config's name as typed
               TextColumn("{task.completed}/{task.total} iterations"), TextColumn("return {task.fields[ret]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=err, disable=not err.is_terminal) as bar:
        task = bar.add_task(f"training {config.name}", total=total, ret="-")

        def report(iteration: int, n: int, row: dict[str, float]) -> None:
            bar.update(task, completed=iteration, ret=episode_return(row["episode_return_mean"], 3))
            if not err.is_terminal:
                err.print(f"iteration {iteration}/{n}: episode return {episode_return(row['episode_return_mean'], 4)}, "
                          f"{row['env_steps_lifetime']:.0f} env steps", markup=False, highlight=False)

        policy = train(args.config, run_dir, iterations=args.iterations, num_env_runners=args.num_env_runners,
                       address=args.address, resume=args.resume, progress=report, config=config, on_export=on_export)
    named = one_line(str(policy))  # a path with a newline prints as one line
    out.print(f"policy written to {named}; use --policy {trained_as}={named}", markup=False, highlight=False)
    return 0


def _warn_unreached_stages(config: Any, total: int, err: Console) -> None:
    """A line on standard error when the curriculum's later stages begin after the run's last
    iteration: the run trains on the early lengths only (a later ``--resume`` with more
    iterations goes on to them, so this is a warning, not an error)."""
    curriculum = config.ppo_extras.curriculum
    if curriculum is None:
        return
    reached = min(len(curriculum.lengths), 1 + (total - 1) // curriculum.iterations_per_stage)
    if reached < len(curriculum.lengths):
        err.print(f"warning: {total} iterations reach {reached} of the curriculum's {len(curriculum.lengths)} stages "
                  f"(lengths {curriculum.lengths[:reached]}; {curriculum.iterations_per_stage} iterations a stage): "
                  "the later lengths are not trained on", markup=False, highlight=False, soft_wrap=True)


def _learning_curve(args: argparse.Namespace, trained_as: str, run_dir: str, err: Console) -> Any:
    """``--eval-suite``'s scorer of each exported policy.pt (None without the flag)."""
    if args.eval_workers is not None and not args.eval_suite:
        raise DeepShareError("--eval-workers: only with --eval-suite (the processes that score the suite)")
    if not args.eval_suite:
        return None
    from deepshare.experiments.learning_curve import SuiteCurve

    def say(message: str) -> None:
        err.print(message, markup=False, highlight=False, soft_wrap=True)

    if args.eval_workers is not None and args.address:
        raise DeepShareError("--eval-workers: the size of a local pool; with --address the suite's cells are Ray tasks "
                             "on that cluster (drop one)")
    # with --address the cells are Ray tasks on the cluster the run joins (its free CPUs), else local processes
    curve = SuiteCurve(args.eval_suite, trained_as, args.eval_workers or 1, progress=say, on_ray=bool(args.address))
    curve.check_continues(run_dir)  # a resumed run's curve of another suite: refused before Ray starts

    def on_export(iteration: int, policy_file: Any, row: dict[str, float] | None) -> None:
        line = curve.record(run_dir, iteration, row, policy_file)
        if line["geomean_avg_jct_ratio"] in (None, ""):
            say(f"iteration {iteration}: {trained_as} on suite {curve.suite}: no cell scored (every run failed)")
            return
        say(f"iteration {iteration}: {trained_as} on suite {curve.suite}: average JCT "
            f"{line['geomean_avg_jct_ratio']:.3f}x the best heuristic (geometric mean; worst cell "
            f"{line['worst_avg_jct_ratio']:.3f}, worst p99 {line['worst_p99_jct_ratio']:.3f}, "
            f"{line['cells_won']} of {line['cells']} cells won)")

    return on_export


def _make_sweep_folder(folder: str) -> list[str]:
    """``tune --out``'s local folder, made (with its parents) and checked writable before Ray
    starts: a file there, a path through a file or a folder this user cannot write in failed
    inside Ray Tune's storage setup, after Ray had started, with a traceback. Returns the folders
    it made, outermost first: each prefix of the path whose folder, as the system finds it
    (``new/../mine`` is ``mine``), was missing; a folder that was there is never one of them."""
    check_outputs({}, {}, new_folders=[folder])  # a folder another user planted in /tmp is refused
    parts = Path(folder).parts
    made = [p for p in (os.path.join(*parts[:i]) for i in range(1, len(parts) + 1))
            if not os.path.exists(os.path.realpath(p))]
    try:
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeepShareError(f"--out {folder}: cannot make the folder: {exc.strerror or exc}") from None
        check_outputs({"--out": str(Path(folder) / "experiment_state.json")}, {})  # writable: a probe file in it
    except BaseException:
        remove_empty_folders(made)  # a name too long at the end: its new parents are not left behind
        raise
    return made


def cmd_tune(args: argparse.Namespace, out: Any, err: Any) -> int:
    from rich.table import Table

    from deepshare.rl.tune import METRIC, check_new_experiment, check_storage_uri, parse_grid, run_sweep, validated_variants

    from deepshare.cli.ray_address import check_address

    check_address(args.address)  # '' (an unset variable) would start a local Ray, silently
    folder_outputs(args.out, (), "--out")  # an empty path is refused: it would be the current folder, silently
    axes = [parse_grid(spec) for spec in args.grid]
    if not axes:
        raise DeepShareError("--grid: give at least one KEY=V1,V2,... to sweep")
    raw, _ = validated_variants(args.config, axes)  # bad keys fail here, before Ray starts
    if args.address:  # fails fast, before any folder: Ray retries an unreachable head for minutes
        from deepshare.agents.deploy import check_reachable

        check_reachable(args.address)
    # an unknown scheme failed in Ray Tune, with a traceback; a file:// URI is a local folder
    local = check_storage_uri(args.out) if "://" in args.out else args.out
    if local is not None:  # OUT/NAME, where Tune writes the sweep: a second sweep there mixed its trials with the first's
        check_new_experiment(str(Path(local) / raw["name"]), args.out)
    made: list[str] = []
    if "://" not in args.out:  # a local folder: made now, so a bad one is one line, not Ray Tune's traceback
        made = _make_sweep_folder(args.out)
    try:
        folder, trials = run_sweep(args.config, axes, args.out, iterations=args.iterations, address=args.address,
                                   max_concurrent=args.max_concurrent)
    except BaseException:
        remove_empty_folders(made)  # a sweep that never started (Ray could not) leaves no empty folder behind
        raise
    table = Table(title=f"tune: {len(trials)} trials in {folder}", header_style="bold")
    for column in ("trial", *(a.name for a in axes), "status", "iterations", METRIC):
        table.add_column(column)
    for t in trials:
        table.add_row(t.name, *(str(v) for v in t.values.values()), t.status, str(t.iterations),
                      episode_return(t.episode_return_mean, 4))
    out.print(table)
    for t in trials:
        if t.policy:
            out.print(f"policy of {t.name}: {t.policy}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"TensorBoard: tensorboard --logdir {folder}", markup=False, highlight=False, soft_wrap=True)
    return 1 if any(t.status != "ok" for t in trials) else 0


def cmd_imitate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from deepshare.rl.imitate import FitSettings, imitate
    from deepshare.rl.train import load_train_config

    teacher = None
    if args.teacher is not None:
        from deepshare.rl.expert import parse_teacher

        teacher = parse_teacher(args.teacher, args.teacher_candidates)  # a bad teacher fails before any work
    elif args.address is not None or args.label_cpus is not None or args.teacher_candidates is not None:
        flag = next(f for f, v in (("--address", args.address), ("--label-cpus", args.label_cpus),
                                   ("--teacher-candidates", args.teacher_candidates)) if v is not None)
        raise DeepShareError(f"{flag}: only with --teacher planner=K (the planner labels, as Ray tasks with --address); "
                             "behaviour cloning of the anchor runs here")
    if args.label_cpus is not None and args.address is None:
        raise DeepShareError("--label-cpus: the CPUs of each Ray labelling task; give --address too (without it the "
                             "planner labels in this process)")
    config = load_train_config(args.config)
    run_dir = args.out if args.out is not None else f"runs/{config.name}_{'expert' if teacher else 'imitate'}"
    check_outputs({"--out": folder_outputs(run_dir, EXPERT_FILES if teacher else IMITATE_FILES)},  # '' is refused
                  {"CONFIG": args.config}, new_folders=[run_dir])
    _check_imitate_folder(run_dir, expert=teacher is not None)
    settings = FitSettings(hidden=args.hidden or config.model.hidden, epochs=args.epochs, batch_size=args.batch_size,
                           lr=args.lr, held_out=args.held_out, seed=args.seed, label_smoothing=args.label_smoothing)
    if teacher is not None:
        return _expert(args, teacher, settings, run_dir, out, err)
    policy = imitate(args.config, run_dir, episodes=args.episodes, seed_base=args.seed_base, settings=settings,
                     dagger_rounds=args.dagger_rounds,
                     log=lambda msg: print_line(err, msg) if not msg.startswith("episode ") or err.is_terminal else None)
    named = one_line(str(policy))  # a path with a newline prints as one line
    print_line(out, f"policy written to {named}; use --policy rl-base={named} (or rl-hybrid={named})")
    return 0


def _check_imitate_folder(folder: str, expert: bool) -> None:
    """``imitate --out`` replaces an earlier imitate run's ``policy.pt`` and summary there, both; a
    folder holding another run (a ``train`` run's checkpoints and metrics, the other kind of
    imitate's summary, a ``policy.pt`` without this kind's summary) is refused before any work:
    its ``policy.pt`` was replaced and the rest left beside it, describing another network (a
    later ``train --resume`` there resumed checkpoints that are not the policy's)."""
    from deepshare.rl.train import RUN_ENTRIES

    own, other = ("expert.json", "imitation.json") if expert else ("imitation.json", "expert.json")
    base = Path(folder)
    found = [name for name in (*RUN_ENTRIES, other) if name != "policy.pt" and os.path.lexists(base / name)]
    if found:
        raise DeepShareError(f"--out {folder}: holds another run ({', '.join(found)}); imitate would replace its "
                             "policy.pt and leave the rest beside it: give this run its own --out")
    if os.path.lexists(base / "policy.pt") and not os.path.lexists(base / own):
        raise DeepShareError(f"--out {folder}: holds a policy.pt that is no earlier run of this command's (no {own} "
                             "beside it); give this run its own --out, or move that file away")


def _expert(args: argparse.Namespace, teacher: Any, settings: Any, run_dir: str, out: Console, err: Console) -> int:
    from deepshare.cli.ray_address import joined
    from deepshare.rl.expert import ExpertSettings, expert_iteration

    name = args.teacher + (f" (candidates {','.join(teacher.candidates)})" if teacher.candidates else "")
    expert = ExpertSettings(teacher=teacher, teacher_name=name, episodes=args.episodes, rounds=args.dagger_rounds,
                            seed_base=args.seed_base, label_cpus=1.0 if args.label_cpus is None else args.label_cpus)
    with joined(args.address) as on_ray:
        policy = expert_iteration(args.config, run_dir, replace(expert, on_ray=on_ray), settings,
                                  log=lambda msg: print_line(err, msg))
    named = one_line(str(policy))  # a path with a newline prints as one line
    print_line(out, f"policy written to {named}; use --policy rl-base={named} (or rl-hybrid={named})")
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(sub, "train", "train RL-base / RL-hybrid with RLlib PPO from a YAML config",
                "deepshare train rllib_configs/rl_hybrid.yaml --out runs/rl_hybrid --iterations 120 --num-env-runners 2",
                "deepshare train rllib_configs/rl_unc_warm.yaml --init-from runs/bc/policy.pt --out runs/bc_ppo --eval-suite quick")
    p.add_argument("config", metavar="CONFIG", help="a YAML in rllib_configs/, e.g. rllib_configs/rl_hybrid.yaml")
    p.add_argument("--iterations", type=iteration_count, metavar="K", help="PPO iterations (default: the config's)")
    p.add_argument("--num-env-runners", type=runner_count, metavar="N", help="simulator rollout workers (default: the config's)")
    p.add_argument("--seed", type=in_range(int, 0, MAX_TRAIN_SEED), metavar="S",
                   help="training seed, replacing the config's run.seed (recorded in policy.pt)")
    p.add_argument("--address", metavar="auto|ADDR", help="join a running Ray cluster instead of starting one "
                   "(with --eval-suite the suite's runs are Ray tasks there too, on the CPUs training leaves free)")
    p.add_argument("--durations", choices=DURATIONS, default=None,
                   help="train under this information model, replacing the config's env.durations (default: the config's; "
                   "a config that gives none trains under estimated)")
    p.add_argument("--estimate-error", type=estimate_sigma, default=None, metavar="SIGMA",
                   help="lognormal sigma of the drawn estimates, replacing env.estimate_errors")
    p.add_argument("--out", metavar="DIR", help="run folder (default runs/NAME); one that holds a run already is refused "
                   "(continue it with --resume)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its newest checkpoint")
    p.add_argument("--init-from", metavar="POLICY.pt", help="start the scorer from this policy file's weights "
                   "(e.g. `deepshare imitate`'s; overrides the config's model.init_from)")
    p.add_argument("--eval-suite", metavar="NAME|PATH",
                   help="learning curve: score policy.pt on a benchmark suite (a bundled one (curve, fabric, learned, learned-long, loaded, quick, standard, tenants, tenants-learned, tiny) "
                   "or a suite YAML) before the first iteration and at every checkpoint, as `deepshare evaluate --suite` does; "
                   "rows go to suite_curve.csv and curves.png in the run folder")
    p.add_argument("--eval-workers", type=in_range(int, 1, 64, "processes"), default=None, metavar="N",
                   help="with --eval-suite: processes scoring the suite's cells (default 1; with --address the cells "
                   "are Ray tasks on that cluster instead)")
    p.set_defaults(func=cmd_train)

    p = command(sub, "tune", "a Ray Tune grid sweep over a training config (one PPO run per combination)",
                "deepshare tune rllib_configs/rl_hybrid.yaml --grid ppo.lr=0.0001,0.0003 --grid env.reward_scale=0.1,0.2 --iterations 20")
    p.add_argument("config", help="training YAML (rllib_configs/*.yaml)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="an axis of the grid: SECTION.KEY (ppo, env, model, run; a bare KEY is ppo.KEY) or "
                        "ppo_extras.OPTION.FIELD, and its values; repeatable")
    p.add_argument("--iterations", type=iteration_count, default=None, metavar="N", help="training iterations per trial (default: the config's run.iterations)")
    p.add_argument("--out", default="runs/tune", metavar="DIR|URI",
                   help="Tune's storage (a folder, or s3://... / gs://... that every node reaches on a multi-node cluster); "
                        "the experiment is DIR/NAME, after the config's name (default runs/tune); one that holds "
                        "a sweep already is refused")
    p.add_argument("--address", default=None, metavar="auto|HOST:PORT", help="join this Ray cluster (default: a private local Ray)")
    p.add_argument("--max-concurrent", type=in_range(int, 1, 1024, "trials"), default=None, metavar="N", help="at most N trials at once (default: as many as the cluster fits)")
    p.set_defaults(func=cmd_tune)

    p = command(sub, "imitate", "imitation: fit the scorer to a config's anchor heuristic (no Ray), or to the planner "
                "(--teacher, expert iteration), then DAgger",
                "deepshare imitate rllib_configs/rl_unc_imitate.yaml --out runs/bc --episodes 192 --dagger-rounds 1",
                "deepshare imitate rllib_configs/rl_est_imitate.yaml --teacher planner=4 --episodes 8 --dagger-rounds 1 "
                "--address auto --out runs/expert")
    p.add_argument("config", metavar="CONFIG", help="a training YAML (its env, anchor and model.hidden), e.g. rllib_configs/rl_base.yaml")
    p.add_argument("--out", metavar="DIR", help="run folder for policy.pt and imitation.json (expert.json with --teacher; "
                   "default runs/NAME_imitate or runs/NAME_expert); an earlier run of the same kind there is replaced, "
                   "a folder holding another run is refused")
    p.add_argument("--episodes", type=in_range(int, 1, 100_000, "episodes"), default=192, metavar="N",
                   help="demonstration episodes, env seeds SEED_BASE.. (default 192)")
    p.add_argument("--seed-base", type=in_range(int, 0, 2**31 - 1), default=0, metavar="S",
                   help="first episode seed; seeds stay below 2^31, the suite's range (default 0)")
    p.add_argument("--dagger-rounds", type=in_range(int, 0, 100, "rounds"), default=3, metavar="R",
                   help="DAgger: R times, let the fitted scorer drive EPISODES new episodes, label its states with the "
                   "anchor's choice (the planner's with --teacher) and refit on everything (default 3; 0: plain behaviour cloning, which compounds its errors)")
    p.add_argument("--epochs", type=in_range(int, 1, 10_000, "epochs"), default=30, metavar="N", help="passes over the demonstrations (default 30)")
    p.add_argument("--batch-size", type=in_range(int, 1, 1_000_000, "choices"), default=256, metavar="B", help="minibatch size (default 256)")
    p.add_argument("--lr", type=in_range(float, 0, 1, low_open=True), default=2e-3, metavar="LR", help="Adam's learning rate (default 0.002)")
    p.add_argument("--held-out", type=number(float, lambda v: 0 <= v < 1, "a number in [0, 1)"), default=0.2, metavar="F",
                   help="share of each round's episodes (the last ones) kept out of the fit to measure accuracy; a round's "
                   "first episode is always fitted on (default 0.2)")
    p.add_argument("--hidden", type=in_range(int, 1, 4096, "units"), default=None, metavar="H", help="scorer width (default the config's model.hidden)")
    p.add_argument("--seed", type=in_range(int, 0, 2**31 - 1), default=0, metavar="S", help="torch seed of the fit (default 0)")
    p.add_argument("--label-smoothing", type=number(float, lambda v: 0 <= v < 1, "a number in [0, 1)"), default=0.0, metavar="S",
                   help="share of each target spread over the choice's valid rows, so PPO started from the imitation can still "
                   "explore (default 0: an exact imitation's probabilities go to 1 and PPO learns nothing)")
    p.add_argument("--teacher", metavar="planner=K[:BUDGET_S[:CONTENTION[:HORIZON]]]", default=None,
                   help="expert iteration: the rollout planner (K sampled futures per contested decision) labels every "
                   "state instead of the anchor; round 0 plays the anchor's episodes, each DAgger round the scorer's own; "
                   "choices whose planner decision no row expresses (a preemption, a launch not offered) are skipped "
                   "and counted; writes policy.pt and expert.json")
    p.add_argument("--teacher-candidates", metavar="A,B,...", default=None,
                   help="with --teacher: the heuristics whose decisions the planner weighs, replacing its leaders (the "
                   "first is the base its rollouts go on under); non-preemptive ones only make every label one the rows "
                   "can express, e.g. bsrsf+uncontended,srsf+packed")
    p.add_argument("--address", metavar="auto|HOST:PORT", default=None,
                   help="with --teacher: join this running Ray cluster and compute the planner's labels as Ray tasks there "
                   "(the same labels as without it, unless the teacher has a time budget, planner=K:BUDGET_S, whose "
                   "decisions depend on the labelling machine's speed)")
    p.add_argument("--label-cpus", type=in_range(float, 0, 64, "CPUs", low_open=True), default=None, metavar="C",
                   help="with --address: CPUs each labelling task asks for (default 1; fractions allowed)")
    p.set_defaults(func=cmd_imitate)
