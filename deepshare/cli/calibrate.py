"""``deepshare calibrate``: fit the link contention model to measured profiles and report the fit."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.markup import escape

from deepshare.cli.args import fold_count, seed_value, start_count, worker_count
from deepshare.cli.output import add_json_flag, check_outputs, folder_outputs, human, write_json
from deepshare.cli.help import command
from deepshare.core.atomic import write_text_atomic
from deepshare.core.errors import DeepShareError

PROFILE_FILES = ("isolated_thp.csv", "shared_thp_ratio.csv")


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


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(sub, "calibrate", "fit the link contention model to measured profiles and report the fit",
                "deepshare calibrate --profiles deepshare/data/profiles --json fit.json --out my_params.json",
                "deepshare calibrate --samples samples.csv --out my_params.json",
                details="Fit the link model (least squares, several seeded starts) on every measured cell, then "
                       "once per cross-validation fold. Progress goes to standard error: a bar on a terminal, a line per "
                       "finished fit otherwise. On the shipped profiles it needs about 330 CPU-seconds (about 3 minutes on 2 idle cores).")
    p.add_argument("--profiles", metavar="DIR", help="folder with isolated_thp.csv and shared_thp_ratio.csv")
    p.add_argument("--samples", metavar="CSV", help="throughput samples recorded on a cluster (format: deepshare/core/contention/link/samples.py)")
    add_json_flag(p, "fit_mae, cv_mae, baseline_*_mae and the parameters")
    p.add_argument("--out", metavar="PATH", help="write the fitted parameters for --contention link --link-params (an existing file is replaced)")
    p.add_argument("--folds", type=fold_count, default=5, help="cross-validation folds, 2..100 (default 5)")
    p.add_argument("--starts", type=start_count, default=3, help="random starts per fit, 1..100 (default 3)")
    p.add_argument("--seed", type=seed_value, default=0, help="random seed (default 0)")
    p.add_argument("--workers", type=worker_count, default=2, help="processes for the fits (default 2)")
    p.set_defaults(func=cmd_calibrate)
