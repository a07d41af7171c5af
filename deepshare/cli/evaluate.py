"""``deepshare evaluate``: policies side by side over seeds (table, plots, JSON), or a benchmark suite."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console

from deepshare.cli.args import (
    add_cluster_args, add_sim_args, add_trace_args, cluster_topology, contention_model, flagged, in_range,
    information_model, past_history, policy_files, policy_list, seed_count, sim_config, sim_inputs, tenants_of,
    add_tenants_arg,
)
from deepshare.cli.information_json import information_json
from deepshare.cli.output import add_json, add_json_flag, announce, check_outputs, folder_outputs, human, run_folder
from deepshare.cli.ray_address import add_address_flag, joined
from deepshare.cli.help import command
from deepshare.core.errors import DeepShareError, one_line
from deepshare.core.traces import load, mix_from_spec


def _suite_inputs(args: argparse.Namespace) -> dict[str, object]:
    """The files a suite run reads, which no output may overwrite: the suite's YAML (not a bundled
    suite's name: ``--json tiny`` writes no suite), ``--tenants``, and the suite's own tenants
    file and learned policy files (``NAME=PATH``). A bundled tenants name is no file either (the
    loader takes the name first)."""
    from deepshare.experiments.suite_spec import load_suite, suite_names, tenants_names

    spec = load_suite(args.suite, allow_imports=getattr(args, "allow_imports", False))  # a bad suite is one line here, before any output
    bundled = args.suite in suite_names() and not os.path.isfile(args.suite)
    return {
        "--suite": None if bundled else args.suite,
        "--tenants": None if args.tenants in tenants_names() else args.tenants,  # a bundled name is read, not a file
        "the suite's tenants": None if spec.tenants is None or spec.tenants in tenants_names() else spec.tenants,
        "the suite's learned policies": policy_files(spec.learned),
    }


SUITE_USES = {"command", "func", "suite", "workers", "address", "tenants", "out", "json", "no_progress", "allow_imports"}
"""``evaluate``'s flags that a suite run uses (``--no-progress``: a suite shows no bar either); it
refuses every other flag given, each of which sets what a suite file sets itself."""

SUITE_SETS = {
    "trace": "a suite file sets its traces", "format": "a suite file sets its traces", "mix": "a suite file sets its mixes",
    "policies": "a suite file sets its heuristics and learned policies", "seeds": "a suite file sets its seeds",
    "cluster": "a suite file sets its clusters and fabrics", "nodes": "a suite file sets its clusters and fabrics",
    "gpus_per_node": "a suite file sets its clusters and fabrics",
    "contention": "a suite file sets its contention models", "link_params": "a suite file sets its contention models",
    "true_params": "a suite file sets its contention models and perturb_contention",
    "perturb_contention": "a suite file sets perturb_contention", "perturb_seed": "a suite file sets perturb_seed",
    "durations": "a suite file sets its durations", "estimate_error": "a suite file sets its estimate_error",
    "contention_knowledge": "a suite file sets its contention_knowledge",
    "history": "a suite's runs start with no job history",
    "round_s": "a suite runs with the simulator's default round and overheads",
    "preempt_overhead_s": "a suite runs with the simulator's default round and overheads",
    "migrate_overhead_s": "a suite runs with the simulator's default round and overheads",
}
"""Why a suite run refuses each flag (a flag missing here is refused all the same)."""


def refuse_simulation_flags(args: argparse.Namespace) -> None:
    """With ``--suite``: one error naming the first flag given (its value differs from the default)
    that a suite run would ignore."""
    from deepshare.cli import build_parser

    defaults = vars(build_parser().parse_args(["evaluate"]))
    for dest, default in defaults.items():
        if dest not in SUITE_USES and getattr(args, dest, default) != default:
            why = SUITE_SETS.get(dest, "a suite file sets its runs' settings")
            raise DeepShareError(f"--suite: drop --{dest.replace('_', '-')} ({why})")


def cmd_evaluate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from deepshare.experiments.plots import PLOT_FILES

    if args.suite:
        from deepshare.cli.suite_tables import cmd_suite

        refuse_simulation_flags(args)
        from deepshare.experiments.pareto_plot import PARETO_FILE

        check_outputs({"--json": args.json, "--out": folder_outputs(args.out, (PARETO_FILE,))}, _suite_inputs(args),
                      new_folders=[args.out])

        return cmd_suite(args, out, err)
    if not args.trace or not args.policies:
        raise DeepShareError("evaluate: --trace and --policies are required (or --suite NAME)")
    if args.workers is not None:
        raise DeepShareError("--workers: only with --suite (a --trace run's seeds and policies run in this process, "
                             "or as Ray tasks with --address)")
    if args.allow_imports:
        raise DeepShareError("--allow-imports: only with --suite (--policies on the command line takes module:Class "
                             "names as they are)")
    names = policy_list(args.policies)
    check_outputs({"--json": args.json, "--out": folder_outputs(args.out, PLOT_FILES)}, sim_inputs(args, names),
                  new_folders=[args.out])
    # Every input is read and checked before --out is made: a bad one leaves no empty folder.
    topology = cluster_topology(args)
    mix = flagged("--mix", mix_from_spec, args.mix)
    first = load(args.trace, format=args.format, mix=mix, seed=0)
    contention, history, tenants = contention_model(args), past_history(args, first.jobs), tenants_of(args)
    information_model(args, jobs=first.jobs)  # its flags checked before --out is made
    # made before the run (the README puts --json inside it), and removed again if the run fails
    # (a job the simulator refuses, an --address with no cluster): a failed run leaves no empty folder
    with run_folder("--out", args.out):
        return _evaluate_trace(args, out, err, names, topology, mix, first, contention, history, tenants)


def _evaluate_trace(  # type: ignore[no-untyped-def]
    args: argparse.Namespace, out: Console, err: Console, names: list[str], topology, mix, first, contention, history, tenants,
) -> int:
    """The ``--trace`` run of :func:`cmd_evaluate`, its inputs checked and ``--out`` made."""
    from rich.table import Table

    from deepshare.experiments.evaluation import evaluate
    from deepshare.core.output_set import OutputSet
    from deepshare.experiments.plots import make_figures, png_bytes

    def trace_of(seed: int):  # type: ignore[no-untyped-def]
        return first if seed == 0 else load(args.trace, format=args.format, mix=mix, seed=seed)

    with joined(args.address) as on_ray:
        verb = "done" if on_ray else "running"
        result = evaluate(
            trace_of, topology, names, list(range(args.seeds)), contention, sim_config(args),
            progress=None if not err.is_terminal else (lambda msg: err.print(f"{verb} {msg}", markup=False)),
            information=information_model(args), history=history, on_ray=on_ray, tenants=tenants,
        )
    summary = result.summary()
    table = Table(title=f"{one_line(Path(args.trace).name)} on {topology.describe()}, durations "
                        f"{information_model(args).describe()} — mean [min-max] over {args.seeds} seed(s)",
                  header_style="bold")
    metrics = (("avg_jct_s", "avg JCT (s)", 0), ("p99_jct_s", "p99 JCT (s)", 0), ("avg_queue_s", "avg queue (s)", 0),
               ("gpu_util", "GPU util", 3), ("useful_util", "useful util", 3), ("avg_slowdown", "slowdown", 3),
               ("preemptions", "preempt", 0))
    if args.tenants:  # fairness under the tenants file (deepshare/tenants/fairness.py)
        metrics += (("worst_rho", "worst rho", 2), ("share_rho_above_1", "rho > 1", 3),
                    ("max_share_gap", "max share gap", 3), ("worst_queue_avg_queue_s", "worst queue wait (s)", 0))
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
    with OutputSet() as outputs:  # the figures and the JSON are put in place together, or none is
        if args.out:
            for name, figure in make_figures(result).items():
                announce(outputs, shown, outputs.add_bytes(Path(args.out) / name, png_bytes(figure), "figure"))
        doc = {**result.to_json(), "information": information_json(information_model(args), history, args.history,
                                                                    seeded=False)}
        add_json(outputs, args.json, doc, out, "evaluation")
        outputs.commit()
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(sub, "evaluate", "compare policies over seeds, or run a benchmark suite (--suite): table, plots and JSON",
                "deepshare evaluate --trace deepshare/data/traces/deepshare-simulate-trace0.json --policies srsf+packed,rl-hybrid --seeds 3 --out runs/eval",
                "deepshare evaluate --suite quick --workers 2 --json runs/suite/quick.json")
    add_trace_args(p, required=False, seed=False)
    p.add_argument("--suite", metavar="NAME|PATH",
                   help="run a benchmark suite instead of one trace: a bundled one (curve, fabric, learned, learned-long, loaded, quick, standard, tenants, tenants-learned, tiny) or a suite YAML "
                   "(deepshare/experiments/suite.py), which sets the traces, clusters, contention and seeds (only --workers, "
                   "--address, --tenants, --out, --json, --no-progress and --allow-imports go with it); "
                   "prints every cell and the learned policies' ratios to each cell's best heuristic; a run that fails is a row "
                   "saying why (and in the JSON's \"failed\"), and the command exits 1")
    p.add_argument("--allow-imports", action="store_true",
                   help="only with --suite: let the suite file name module:Class policies, which import and run its "
                        "Python code (refused otherwise: a suite file is data)")
    p.add_argument("--workers", type=in_range(int, 1, 64, "processes"),
                   help="only with --suite: processes running cells in parallel on this machine (same results for any count; "
                   "default 1; not with --address)")
    add_address_flag(p, "the suite's (cell, policy) runs, or the (seed, policy) runs,")
    p.add_argument("--policies", metavar="A,B,...",
                   help="comma-separated names or module:Class specs, e.g. las+spread,rl-hybrid; quote an item holding a comma: "
                        "'fifo+packed,\"rl-base=a,b.pt\"'")
    p.add_argument("--seeds", type=seed_count, default=3, help="seeds 0..N-1 (default 3)")
    add_cluster_args(p)
    add_sim_args(p)
    add_tenants_arg(p)
    p.add_argument("--out", metavar="DIR", help="write jct_cdf.png, jct_vs_util.png and util_over_time.png here; with --suite and tenants, pareto.png "
                   "(the JCT / fairness trade-off) (created if missing; existing figures are replaced)")
    add_json_flag(p, '{"results": {POLICY: {METRIC: mean}}, "spread": ..., "information": {...}} (written with the '
                     'figures of --out, together)')
    p.set_defaults(func=cmd_evaluate)
