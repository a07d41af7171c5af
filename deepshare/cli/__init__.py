"""The ``deepshare`` command: parse, call the library, print. Errors in users' input exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console
from rich.markup import escape

from deepshare.cli import args as cli_types
from deepshare.cli.output import add_json_flag, check_outputs, folder_outputs, human, to_stdout, write_json
from deepshare.core.atomic import write_text_atomic
from deepshare.core.contention import CONTENTION_MODELS, ContentionModel, make_contention
from deepshare.core.simulator import SimConfig
from deepshare.core.topology import Topology, load_topology, preset_names, uniform
from deepshare.core.traces import FORMATS, MIX_PRESETS, Trace, generate, load, mix_from_spec, parse_demand
from deepshare.core.traces import trace_stats, write_canonical
from deepshare.core.errors import DeepShareError, RuntimeFailure

EXIT_USAGE = 2
EXIT_RUNTIME = 1
PROGRESS_MIN_JOBS = 500
PROFILE_FILES = ("isolated_thp.csv", "shared_thp_ratio.csv")
TRAIN_FILES = ("policy.pt", "metrics.csv")
"""Files `deepshare train` writes into its run folder that a config could be mistaken for."""


_seed = cli_types.seed_value


def _flagged(flag: str, parse: Callable[[str], object], text: str):  # type: ignore[no-untyped-def]
    """``parse(text)``, with the flag's name put in front of any error."""
    try:
        return parse(text)
    except DeepShareError as exc:
        raise DeepShareError(f"{flag}: {exc}") from None


def _policy_list(text: str) -> list[str]:
    """``--policies A,B,...`` as checked registry names."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise DeepShareError(f"--policies {text!r}: expected comma-separated policy names")
    _check_policies(names, "--policies")
    return names


def _check_policies(names: Sequence[str], flag: str) -> None:
    """Build each policy once so an unknown name fails before any trace is read."""
    from deepshare.policies import make_policy

    for name in names:
        _flagged(flag, make_policy, name)


# -- shared argument groups ----------------------------------------------------------------
def _add_cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster (a preset or YAML, or a uniform testbed-type cluster)")
    g.add_argument("--cluster", metavar="PRESET|YAML", help=f"preset ({', '.join(preset_names())}) or spec file; default testbed")
    g.add_argument("--nodes", type=cli_types.node_count, metavar="N", help="uniform cluster of N testbed-type nodes")
    g.add_argument("--gpus-per-node", type=cli_types.gpus_per_node, metavar="G", help="GPUs per node with --nodes (default 8)")


def _add_trace_args(p: argparse.ArgumentParser, required: bool = True, seed: bool = True) -> None:
    p.add_argument("--trace", required=required, metavar="PATH", help="trace file (format detected from its content)")
    p.add_argument("--format", choices=FORMATS, help="force the trace format")
    p.add_argument(
        "--mix", default="random", metavar="PRESET|MODEL:W,...",
        help=f"model mix for traces without model names ({', '.join(MIX_PRESETS)} or a custom list); default random",
    )
    if seed:
        p.add_argument("--seed", type=_seed, default=0, help="seed for model assignment (default 0)")


def _add_sim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contention", choices=sorted(CONTENTION_MODELS), default="profiled",
                   help="profiled (measured pairwise table), link (bandwidth sharing on links) or none; default profiled")
    p.add_argument("--link-params", metavar="JSON", help="with --contention link: parameters from `deepshare calibrate --out`")
    p.add_argument("--round-s", type=cli_types.round_seconds, metavar="S", help="extra decision points every S seconds (original: 300)")
    p.add_argument("--preempt-overhead-s", type=cli_types.overhead_seconds, default=SimConfig.preempt_overhead_s, metavar="S",
                   help=f"restore time after a preemption (default {SimConfig.preempt_overhead_s:g})")
    p.add_argument("--migrate-overhead-s", type=cli_types.overhead_seconds, default=SimConfig.migrate_overhead_s, metavar="S",
                   help=f"checkpoint+restore time of a migration (default {SimConfig.migrate_overhead_s:g})")
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")


def _topology(args: argparse.Namespace) -> Topology:
    if args.cluster and args.nodes:
        raise DeepShareError("give either --cluster or --nodes/--gpus-per-node, not both")
    if args.gpus_per_node and not args.nodes:
        raise DeepShareError("--gpus-per-node needs --nodes")
    if args.nodes:
        return uniform(args.nodes, args.gpus_per_node or 8)
    return load_topology(args.cluster or "testbed")


def _load_trace(args: argparse.Namespace) -> Trace:
    return load(args.trace, format=args.format, mix=_flagged("--mix", mix_from_spec, args.mix), seed=args.seed)


def _contention(args: argparse.Namespace) -> ContentionModel:
    if args.link_params is None:
        return make_contention(args.contention)
    if args.contention != "link":
        raise DeepShareError("--link-params needs --contention link")
    from deepshare.core.contention.link import load_link_catalog

    return make_contention("link", link_catalog=load_link_catalog(args.link_params))


def _config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        round_s=args.round_s,
        preempt_overhead_s=args.preempt_overhead_s,
        migrate_overhead_s=args.migrate_overhead_s,
    )


def _policy_files(names: Sequence[str]) -> list[str]:
    """The checkpoint files named by ``NAME=PATH`` policies (inputs no output may overwrite)."""
    return [name.partition("=")[2] for name in names if name.partition("=")[2]]


def _sim_inputs(args: argparse.Namespace, policies: Sequence[str] = ()) -> dict[str, object]:
    """Every input file of a simulating command, by flag (for :func:`check_outputs`)."""
    return {
        "--trace": args.trace,
        "--cluster": getattr(args, "cluster", None),
        "--link-params": getattr(args, "link_params", None),
        "--config": getattr(args, "config", None),
        "--policy": _policy_files(policies),
    }


class _ProgressBar:
    """A rich progress bar on stderr, shown only on a terminal and for long runs."""

    def __init__(self, console: Console, total: int, enabled: bool) -> None:
        self._enabled = enabled and console.is_terminal and total >= PROGRESS_MIN_JOBS
        self._progress = None
        self._task = None
        if self._enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} jobs"),
                TimeElapsedColumn(), console=console, transient=True,
            )

    def __enter__(self) -> "_ProgressBar":
        if self._progress is not None:
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def callback(self, description: str) -> Callable[[int, int], None] | None:
        if self._progress is None:
            return None
        task = self._progress.add_task(description, total=None)
        progress = self._progress

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return update


# -- subcommands ---------------------------------------------------------------------------
def cmd_simulate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from deepshare.experiments.scenario import Scenario, simulate
    from deepshare.experiments.report_format import report_table

    check_outputs({"--json": args.json, "--jobs-csv": args.jobs_csv}, _sim_inputs(args, [args.policy]))
    _check_policies([args.policy], "--policy")
    topology = _topology(args)
    trace = _load_trace(args)
    scenario = Scenario(topology, trace.jobs, _contention(args), _config(args))
    with _ProgressBar(err, len(trace.jobs), not args.no_progress) as bar:
        report, _ = simulate(scenario, args.policy, bar.callback(args.policy), jobs_csv=args.jobs_csv or None,
                             keep_records=False)  # the table and JSON need only the report's numbers
    if trace.skipped:
        err.print(f"{len(trace.skipped)} job(s) in the trace cannot be simulated and were skipped "
                  f"(first: {trace.skipped[0][0]}: {trace.skipped[0][1]})",
                  style="yellow", markup=False, highlight=False, soft_wrap=True)
    human(args.json, out, err).print(report_table(report, escape(f"{args.policy} on {Path(args.trace).name} — {topology.describe()}")))
    write_json(args.json, report.to_dict(), out, "report")  # --jobs-csv was streamed during the run
    return 0


def cmd_compare(args: argparse.Namespace, out: Console, err: Console) -> int:
    from deepshare.experiments.scenario import Scenario, compare
    from deepshare.policies import policy_names
    from deepshare.experiments.report_format import comparison_table

    names = _policy_list(args.policies) if args.policies is not None else policy_names(heuristics_only=True)
    check_outputs({"--json": args.json}, _sim_inputs(args, names))
    topology = _topology(args)
    trace = _load_trace(args)
    scenario = Scenario(topology, trace.jobs, _contention(args), _config(args))
    with _ProgressBar(err, len(trace.jobs) * len(names), not args.no_progress) as bar:
        reports = compare(scenario, names, bar.callback("policies"))
    human(args.json, out, err).print(
        comparison_table(reports, escape(f"{Path(args.trace).name} ({len(trace.jobs)} jobs) — {topology.describe()}")))
    write_json(args.json, {"results": {r.policy: r.to_dict() for r in reports}}, out, "comparison")
    return 0


def cmd_policies(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.table import Table

    from deepshare.policies import PolicyInfo, policy_info, policy_names

    check_outputs({"--json": args.json}, {})
    rows = []
    for name in policy_names():
        try:
            info = policy_info(name)
        except DeepShareError as exc:  # an installed entry point that does not load: listed, not fatal
            info = PolicyInfo(name, f"cannot load: {exc}", lambda: None, heuristic=False)  # type: ignore[arg-type, return-value]
        rows.append((name, info))
    if args.json:
        doc = [{"name": name, "description": info.description, "heuristic": info.heuristic,
                "takes_argument": info.takes_argument} for name, info in rows]
        write_json(args.json, doc, out, "policy list")
        if to_stdout(args.json):
            return 0
    table = Table(title="registered policies", header_style="bold")
    table.add_column("name")
    table.add_column("description")
    for name, info in rows:
        table.add_row(name, info.description)
    out.print(table)
    return 0


def cmd_clusters(args: argparse.Namespace, out: Console, err: Console) -> int:
    check_outputs({"--json": args.json}, {})
    presets = [(name, load_topology(name)) for name in preset_names()]
    if args.json:
        doc = [{"name": name, "nodes": len(t.nodes), "gpus": t.total_gpus, "description": t.describe()} for name, t in presets]
        write_json(args.json, doc, out, "cluster list")
        if to_stdout(args.json):
            return 0
    for name, topology in presets:
        out.print(f"{name:10s} {topology.describe()}", markup=False, highlight=False)
    return 0


def cmd_trace_generate(args: argparse.Namespace, out: Console, err: Console) -> int:
    check_outputs({"--out": args.out}, {"--cluster": args.cluster})
    if args.rate is not None and args.load is not None:
        raise DeepShareError("give either --rate or --load, not both")
    if args.load is None and (args.cluster or args.nodes or args.gpus_per_node):
        raise DeepShareError("--cluster/--nodes/--gpus-per-node only size an offered --load; give --load too")
    total_gpus = _topology(args).total_gpus if args.load is not None else None
    trace = generate(
        args.jobs,
        rate_per_s=args.rate,
        load=args.load,
        total_gpus=total_gpus,
        demand=_flagged("--demand", parse_demand, args.demand),
        mix=_flagged("--mix", mix_from_spec, args.mix),
        median_duration_s=args.median_duration_s,
        duration_sigma=args.duration_sigma,
        seed=args.seed,
    )
    write_canonical(trace, args.out)
    stats = trace_stats(trace)
    out.print(f"wrote {stats.jobs} jobs to {args.out} (span {stats.span_s:,.0f} s, {stats.gpu_hours:,.1f} GPU-hours)", markup=False, highlight=False)
    return 0


def cmd_trace_stats(args: argparse.Namespace, out: Console, err: Console) -> int:
    check_outputs({"--json": args.json}, {"TRACE": args.path})
    trace = load(args.path, format=args.format, mix=_flagged("--mix", mix_from_spec, args.mix), seed=args.seed)
    stats = trace_stats(trace)
    if args.json:
        write_json(args.json, {"format": trace.format, **stats.to_dict()}, out, "trace statistics")
        if to_stdout(args.json):
            return 0
    out.print(f"{args.path}: {trace.format} trace", markup=False, highlight=False)
    rate = "all at t=0" if stats.arrival_rate_per_s is None else f"{stats.arrival_rate_per_s:.4g} jobs/s"
    rows = [
        ("jobs", f"{stats.jobs} ({stats.skipped} skipped)"),
        ("submit span", f"{stats.span_s:,.0f} s ({rate})"),
        ("GPU demand", ", ".join(f"{g} GPUs: {n}" for g, n in sorted(stats.gpu_demand.items()))),
        ("models", ", ".join(f"{m}: {n}" for m, n in stats.models.items())),
        ("communication", ", ".join(f"{c}: {n}" for c, n in stats.comm_classes.items())),
        ("work", f"{stats.gpu_hours:,.1f} GPU-hours; duration mean {stats.mean_duration_s:,.0f} s, median {stats.median_duration_s:,.0f} s"),
    ]
    for name, value in rows:
        out.print(f"  {name:14s} {value}", markup=False, highlight=False)
    return 0


def cmd_calibrate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.table import Table

    from deepshare.cli.progress import CalibrationProgress
    from deepshare.core.contention.link.calibrate import calibrate
    from deepshare.core.contention.link.samples import load_samples
    from deepshare.core.workloads import load_profiles

    if (args.profiles is None) == (args.samples is None):
        raise DeepShareError("give exactly one of --profiles DIR and --samples CSV")
    check_outputs({"--json": args.json, "--out": args.out},
                  {"--profiles": folder_outputs(args.profiles, PROFILE_FILES), "--samples": args.samples})
    profiles = load_profiles(args.profiles) if args.profiles else load_samples(args.samples)
    source = args.profiles or args.samples
    with CalibrationProgress(err) as shown:
        result = calibrate(profiles, folds=args.folds, starts=args.starts, seed=args.seed, workers=args.workers,
                           progress=shown.intro, step=shown.step)
    table = Table(title=f"link model fitted to {escape(source)} ({result.cells} measured cells)", header_style="bold")
    for col in ("ratio MAE", "value", "target"):
        table.add_column(col, justify="left" if col == "ratio MAE" else "right")
    table.add_row("link model, in fit", f"{result.fit_mae:.4f}", "<= 0.08")
    table.add_row(f"link model, {result.folds}-fold cross-validated", f"{result.cv_mae:.4f}", "<= 0.12")
    table.add_row("reference: mean ratio (same folds)", f"{result.baseline_mean_mae:.4f}", "")
    table.add_row("reference: nearest measured cell (same folds)", f"{result.baseline_nearest_mae:.4f}", "")
    table.add_row("isolated throughput, mean |log error|", f"{result.isolated_log_error:.4f}", "")
    shown = human(args.json, out, err)
    shown.print(table)
    pairs = Table(title="in-fit ratio MAE by model pair (rows victim, columns aggressor)", header_style="bold")
    models = list(result.per_pair_mae)
    pairs.add_column("victim \\ aggressor")
    for m in models:
        pairs.add_column(m, justify="right")
    for v in models:
        pairs.add_row(v, *(f"{result.per_pair_mae[v].get(a, float('nan')):.3f}" for a in models))
    shown.print(pairs)
    doc = result.to_dict()
    if args.json:
        write_json(args.json, {**doc, "parameters": json.loads(result.catalog.to_json())}, out, "calibration report")
    if args.out:
        write_text_atomic(args.out, result.catalog.to_json({"fit": doc}), "link parameters")
    return 0


def cmd_train(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from deepshare.rl.train import load_train_config, train

    config = load_train_config(args.config)  # bad YAML fails before Ray starts
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


def cmd_evaluate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.table import Table

    from deepshare.experiments.evaluation import evaluate
    from deepshare.experiments.plots import PLOT_FILES, write_plots

    if args.suite:
        from deepshare.cli.suite_tables import cmd_suite

        check_outputs({"--json": args.json}, {"--suite": args.suite})

        return cmd_suite(args, out, err)
    if not args.trace or not args.policies:
        raise DeepShareError("evaluate: --trace and --policies are required (or --suite NAME)")
    names = _policy_list(args.policies)
    check_outputs({"--json": args.json, "--out": folder_outputs(args.out, PLOT_FILES)}, _sim_inputs(args, names),
                  new_folders=[args.out])
    if args.out:  # made first: the README puts --json inside it
        try:
            Path(args.out).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeepShareError(f"--out {args.out}: cannot create the folder ({exc.strerror or exc})") from None
    topology = _topology(args)
    mix = _flagged("--mix", mix_from_spec, args.mix)
    result = evaluate(
        lambda seed: load(args.trace, format=args.format, mix=mix, seed=seed),
        topology, names, list(range(args.seeds)), _contention(args), _config(args),
        progress=None if not err.is_terminal else (lambda msg: err.print(f"running {msg}", markup=False)),
    )
    summary = result.summary()
    table = Table(title=escape(f"{Path(args.trace).name} on {topology.describe()} — mean [min-max] over {args.seeds} seed(s)"),
                  header_style="bold")
    metrics = (("avg_jct_s", "avg JCT (s)", 0), ("p99_jct_s", "p99 JCT (s)", 0), ("avg_queue_s", "avg queue (s)", 0),
               ("gpu_util", "GPU util", 3), ("useful_util", "useful util", 3), ("avg_slowdown", "slowdown", 3),
               ("preemptions", "preempt", 0))
    table.add_column("policy")
    for _, label, _ in metrics:
        table.add_column(label, justify="right")
    ranked = sorted(names, key=lambda n: summary[n]["avg_jct_s"]["mean"] or float("inf"))
    for name in ranked:
        cells = []
        for key, _, digits in metrics:
            v = summary[name][key]
            if v["mean"] is None:
                cells.append("-")
            elif v["min"] == v["max"]:
                cells.append(f"{v['mean']:,.{digits}f}")
            else:
                cells.append(f"{v['mean']:,.{digits}f} [{v['min']:,.{digits}f}-{v['max']:,.{digits}f}]")
        table.add_row(name, *cells)
    shown = human(args.json, out, err)
    shown.print(table)
    if args.out:
        for path in write_plots(result, args.out):
            shown.print(f"wrote {path}", markup=False, highlight=False)
    write_json(args.json, result.to_json(), out, "evaluation")
    return 0


# -- parser --------------------------------------------------------------------------------
class _VersionAction(argparse.Action):
    """``--version``: the installed version, read (importlib.metadata) only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from deepshare import __version__

        sys.stdout.write(f"deepshare {__version__}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deepshare",
        description="Network-contention-aware scheduling of distributed deep-learning jobs: simulate "
        "and compare scheduling policies on GPU-cluster traces with measured or link-level contention, "
        "train and evaluate learned policies, serve a policy over HTTP, run real jobs on a Ray cluster "
        "under it, measure link load, and study autoscaling.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("simulate", help="run one policy on a trace and print its report")
    _add_trace_args(p)
    p.add_argument("--policy", required=True, metavar="POLICY",
                   help="policy name, e.g. las+consolidated (see `deepshare policies`), or package.module:ClassOrFactory")
    _add_cluster_args(p)
    _add_sim_args(p)
    add_json_flag(p, "the report's metrics")
    p.add_argument("--jobs-csv", metavar="PATH", help="write the per-job table as CSV (an existing file is replaced)")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("compare", help="run several policies on one trace and print a table")
    _add_trace_args(p)
    p.add_argument("--policies", metavar="A,B,...", help="comma-separated names or module:Class specs (default: every heuristic)")
    _add_cluster_args(p)
    _add_sim_args(p)
    add_json_flag(p, '{"results": {POLICY: {METRIC: value}}}')
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("train", help="train RL-base / RL-hybrid with RLlib PPO from a YAML config")
    p.add_argument("config", metavar="CONFIG", help="a YAML in rllib_configs/, e.g. rllib_configs/rl_hybrid.yaml")
    p.add_argument("--iterations", type=cli_types.iteration_count, metavar="K", help="PPO iterations (default: the config's)")
    p.add_argument("--num-env-runners", type=cli_types.runner_count, metavar="N", help="simulator rollout workers (default: the config's)")
    p.add_argument("--address", metavar="auto|ADDR", help="join a running Ray cluster instead of starting one")
    p.add_argument("--out", metavar="DIR", help="run folder (default runs/NAME)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its newest checkpoint")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="compare policies over seeds, or run a benchmark suite (--suite): table, plots and JSON")
    _add_trace_args(p, required=False, seed=False)
    p.add_argument("--suite", metavar="NAME|PATH",
                   help="run a benchmark suite instead of one trace: tiny, standard or a suite YAML (deepshare/experiments/suite.py); "
                   "prints every cell and the learned policies' ratios to each cell's best heuristic")
    p.add_argument("--workers", type=cli_types.in_range(int, 1, 64, "processes"), default=1,
                   help="with --suite: processes running cells in parallel (same results for any count; default 1)")
    p.add_argument("--policies", metavar="A,B,...",
                   help="comma-separated names or module:Class specs, e.g. las+spread,rl-hybrid")
    p.add_argument("--seeds", type=cli_types.seed_count, default=3, help="seeds 0..N-1 (default 3)")
    _add_cluster_args(p)
    _add_sim_args(p)
    p.add_argument("--out", metavar="DIR", help="write jct_cdf.png, jct_vs_util.png and util_over_time.png here (created if missing; existing figures are replaced)")
    add_json_flag(p, '{"results": {POLICY: {METRIC: mean}}, "spread": ...}')
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("calibrate", help="fit the link contention model to measured profiles and report the fit",
                       description="Fit the link model (least squares, several seeded starts) on every measured cell, then "
                       "once per cross-validation fold. Progress goes to standard error: a bar on a terminal, a line per "
                       "finished fit otherwise. On the shipped profiles it needs about 330 CPU-seconds (about 3 minutes on 2 idle cores).")
    p.add_argument("--profiles", metavar="DIR", help="folder with isolated_thp.csv and shared_thp_ratio.csv")
    p.add_argument("--samples", metavar="CSV", help="throughput samples recorded on a cluster (format: deepshare/core/contention/link/samples.py)")
    add_json_flag(p, "fit_mae, cv_mae, baseline_*_mae and the parameters")
    p.add_argument("--out", metavar="PATH", help="write the fitted parameters for --contention link --link-params (an existing file is replaced)")
    p.add_argument("--folds", type=cli_types.fold_count, default=5, help="cross-validation folds, 2..100 (default 5)")
    p.add_argument("--starts", type=cli_types.start_count, default=3, help="random starts per fit, 1..100 (default 3)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    p.add_argument("--workers", type=cli_types.worker_count, default=2, help="processes for the fits (default 2)")
    p.set_defaults(func=cmd_calibrate)

    from deepshare.cli.agents import register_cli as register_agents

    register_agents(sub)

    from deepshare.cli.cluster import register_cli as register_autoscale
    from deepshare.cli.scheduler import register_cli as register_runtime
    from deepshare.cli.serve import register_cli as register_serving

    register_serving(sub)
    register_runtime(sub)
    register_autoscale(sub)

    from deepshare.rl.tune import register_cli as register_tune

    register_tune(sub)

    p = sub.add_parser("policies", help="list the registered policies")
    add_json_flag(p, "[{name, description, heuristic, takes_argument}]")
    p.set_defaults(func=cmd_policies)

    p = sub.add_parser("clusters", help="list the cluster presets")
    add_json_flag(p, "[{name, nodes, gpus, description}]")
    p.set_defaults(func=cmd_clusters)

    trace = sub.add_parser("trace", help="generate or summarise traces")
    tsub = trace.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    p = tsub.add_parser("generate", help="write a synthetic trace (canonical CSV)")
    p.add_argument("--jobs", type=cli_types.job_count, required=True, metavar="N", help="number of jobs")
    arrivals = p.add_argument_group("arrivals (Poisson; neither = all jobs at t=0)")
    arrivals.add_argument("--rate", type=cli_types.arrival_rate, metavar="JOBS_PER_S", help="arrival rate")
    arrivals.add_argument("--load", type=cli_types.offered_load, metavar="RHO", help="offered load: GPU-seconds asked / GPU-seconds available")
    p.add_argument("--demand", default="2:1,4:1,8:1", metavar="G:W,...", help="GPU demand distribution (default 2:1,4:1,8:1)")
    p.add_argument("--mix", default="random", metavar="PRESET|MODEL:W,...",
                   help=f"model mix: {', '.join(MIX_PRESETS)} or a custom list (default random)")
    p.add_argument("--median-duration-s", type=cli_types.duration_seconds, default=3600.0, metavar="S", help="median ideal run time (default 3600)")
    p.add_argument("--duration-sigma", type=cli_types.duration_sigma, default=0.0, metavar="SIGMA", help="log-normal sigma of run times (default 0)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    _add_cluster_args(p)
    p.add_argument("--out", required=True, metavar="PATH", help="output CSV path (an existing file is replaced)")
    p.set_defaults(func=cmd_trace_generate)

    p = tsub.add_parser("stats", help="summarise a trace")
    p.add_argument("path", metavar="TRACE")
    p.add_argument("--format", choices=FORMATS, help="force the trace format")
    p.add_argument("--mix", default="random", metavar="PRESET|MODEL:W,...", help="model mix for traces without model names")
    p.add_argument("--seed", type=_seed, default=0, help="seed for model assignment (default 0)")
    add_json_flag(p, "the statistics")
    p.set_defaults(func=cmd_trace_stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Console(highlight=False)
    if not out.is_terminal:  # piped output: wide enough that tables never wrap
        out = Console(highlight=False, width=140)
    err = Console(stderr=True, highlight=False)
    try:
        return args.func(args, out, err)
    except DeepShareError as exc:
        err.print(f"deepshare: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except RuntimeFailure as exc:
        err.print(f"deepshare: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        err.print("deepshare: interrupted", markup=False)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
