"""``deepshare calibrate``: fit the link contention model to measured profiles and report the fit,
or (``--from-state DIR``) fit the learned contention model to a live scheduler's journal."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from rich.console import Console

from deepshare.cli.args import fold_count, seed_value, start_count, worker_count
from deepshare.cli.output import add_json, add_json_flag, check_outputs, folder_outputs, human
from deepshare.cli.help import command
from deepshare.core.output_set import OutputSet
from deepshare.core.errors import DeepShareError, one_line

if TYPE_CHECKING:
    from pathlib import Path

    from deepshare.core.contention.link.samples import Samples

PROFILE_FILES = ("isolated_thp.csv", "shared_thp_ratio.csv")


def cmd_calibrate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from rich.table import Table

    from deepshare.cli.progress import CalibrationProgress
    from deepshare.core.contention.link.calibrate import calibrate
    from deepshare.core.workloads import load_profiles

    if sum(x is not None for x in (args.profiles, args.samples, args.from_state)) != 1:
        raise DeepShareError("give exactly one of --profiles DIR, --samples CSV and --from-state DIR")
    if args.cluster is not None and args.samples is None:
        raise DeepShareError("--cluster goes with --samples: it says what hardware the samples were measured on")
    if args.tenants is not None and args.from_state is None:
        raise DeepShareError("--tenants goes with --from-state: the tenants file the scheduler ran under")
    if args.contention is not None and args.from_state is None:
        raise DeepShareError("--contention goes with --from-state: the shipped model the scheduler predicted with "
                             "(--profiles and --samples fit the link model)")
    if args.cluster is not None and not args.cluster.strip():  # an unset variable, not a wish for the testbed
        raise DeepShareError(f"--cluster {args.cluster!r}: expected a preset or a cluster spec file; leave the flag "
                             "out for the testbed's hardware")
    if args.from_state is not None:
        for flag in ("folds", "starts", "seed", "workers"):
            if getattr(args, flag) is not None:  # the journal's fit has none of these: dropped silently
                raise DeepShareError(f"--{flag} goes with --profiles or --samples: --from-state fits the journal "
                                     "as the scheduler's refit does")
        return cmd_calibrate_from_state(args, out, err)
    args.folds, args.starts, args.seed, args.workers = (
        default if value is None else value
        for value, default in ((args.folds, 5), (args.starts, 3), (args.seed, 0), (args.workers, 2)))
    check_outputs({"--json": args.json, "--out": args.out},
                  {"--profiles": folder_outputs(args.profiles, PROFILE_FILES, "--profiles"), "--samples": args.samples,
                   "--cluster": args.cluster if args.cluster and os.path.isfile(args.cluster) else None})  # not a preset's name
    profiles = load_profiles(args.profiles) if args.profiles is not None else _samples(args.samples, args.cluster)
    source = args.profiles if args.profiles is not None else args.samples
    with CalibrationProgress(err) as shown:
        result = calibrate(profiles, folds=args.folds, starts=args.starts, seed=args.seed, workers=args.workers,
                           progress=shown.intro, step=shown.step)
    table = Table(title=f"link model fitted to {one_line(source)} ({result.cells} measured cells)", header_style="bold")
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
    for m in models:  # names escaped: a journal or table may hold a terminal escape
        pairs.add_column(one_line(m), justify="right")
    for v in models:  # "-": the pair was not measured
        pairs.add_row(one_line(v), *(f"{result.per_pair_mae[v][a]:.3f}" if a in result.per_pair_mae[v] else "-" for a in models))
    shown.print(pairs)
    doc = result.to_dict()
    with OutputSet() as outputs:  # the report and the parameters are put in place together, or neither is
        if args.json:
            add_json(outputs, args.json, {**doc, "parameters": json.loads(result.catalog.to_json())}, out,
                     "calibration report")
        if args.out:
            outputs.add_text(args.out, result.catalog.to_json({"fit": doc}), "link parameters")
        outputs.commit()
    return 0


def _samples(path: str, cluster: str | None) -> "Samples":
    """The samples at ``path``, measured on ``cluster``'s hardware (None: the testbed's); rows
    naming a fabric uplink are read against its fabric."""
    from deepshare.core.contention.link.samples import cluster_hardware, load_samples, node_capacity, uplink_shares
    from deepshare.core.topology import load_topology

    if cluster is None:
        return load_samples(path)
    topology = load_topology(cluster)
    return load_samples(path, uplink_shares(topology), cluster_hardware(topology, f"--cluster {cluster}"),
                        node_capacity(topology))


def cmd_calibrate_from_state(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Fit the learned contention model to the journal in ``--from-state`` (read only; a running
    scheduler may keep writing it) exactly as the scheduler's refit does, and report it."""
    import sqlite3
    from pathlib import Path

    from rich.table import Table

    from deepshare.core.contention import make_contention
    from deepshare.core.workloads import default_catalog
    from deepshare.runtime.journal import JOURNAL_FILE, Journal
    from deepshare.runtime.learning import fit_from_journal

    if not args.from_state.strip():  # '' was the current folder
        raise DeepShareError(f"--from-state {args.from_state!r}: an empty path; give the scheduler's state folder")
    folder = Path(args.from_state)
    journal_path = folder / JOURNAL_FILE
    # the journal's -wal and -shm are part of it (the WAL holds its latest transactions), beside the
    # file SQLite opens: the journal itself, or where its symlink leads
    journal_files = [str(journal_path), *(f"{p}{suffix}" for p in {str(journal_path), str(_target(journal_path))}
                                            for suffix in ("-wal", "-shm"))]
    check_outputs({"--json": args.json, "--out": args.out}, {"--from-state": journal_files, "--tenants": args.tenants})
    try:
        found, is_file = journal_path.exists(), journal_path.is_file()
    except OSError as exc:  # a name too long, a folder that cannot be searched
        raise DeepShareError(f"--from-state {folder}: cannot read the journal: {exc.strerror or exc}") from None
    if not found:
        raise DeepShareError(f"--from-state {folder}: no journal ({journal_path} does not exist)")
    if not is_file:
        raise DeepShareError(f"--from-state {folder}: {journal_path} is not a file (a folder, a pipe or a device); "
                             "expected a scheduler's journal")
    tenants = None
    if args.tenants is not None:
        from deepshare.tenants.spec import load_tenants

        tenants = load_tenants(args.tenants)
    journal = Journal.read_only(folder, "--from-state")
    try:
        _, doc = fit_from_journal(journal, default_catalog(), make_contention(args.contention or "profiled").name, tenants=tenants)
    except sqlite3.Error as exc:  # a table edited by hand (a column gone), a disk error, a lock held past the wait
        raise DeepShareError(f"--from-state {folder}: cannot read the journal's runs ({exc})") from None
    finally:
        journal.close()
    shown = human(args.json, out, err)
    shown.print(f"learned contention fitted to {doc['runs']} measured run(s) of {one_line(str(journal_path))}: ratio MAE "
                f"{_mae(doc['mae_learned'])} (the {doc['prior']} prior's {_mae(doc['mae_prior'])})",
                markup=False, highlight=False, soft_wrap=True)
    table = Table(header_style="bold")
    for col in ("model", "isolated x", "contention exponent", "reports", "contended"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, fit in doc["models"].items():  # type: ignore[union-attr]
        table.add_row(one_line(name), f"{fit['scale']:.3f}", f"{fit['exponent']:.3f}", f"{fit['observations']:.0f}",
                      f"{fit['contended']:.0f}")
    shown.print(table)
    with OutputSet() as outputs:  # --json and --out are put in place together, or neither is
        add_json(outputs, args.json, doc, out, "contention fit")
        if args.out:
            outputs.add_text(args.out, json.dumps(doc, indent=2) + "\n", "contention fit")
        outputs.commit()
    return 0


def _target(path: "Path") -> "Path":
    """``path`` with its symlinks resolved (itself when that fails: the error is reported later)."""
    from deepshare.core.files import resolved

    try:
        return resolved(path)
    except OSError:
        return path


def _mae(value: object) -> str:
    return "-" if value is None else f"{value:.4f}"


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(sub, "calibrate", "fit the link contention model to measured profiles and report the fit",
                "deepshare calibrate --profiles deepshare/data/profiles --json fit.json --out my_params.json",
                "deepshare calibrate --samples samples.csv --out my_params.json",
                "deepshare calibrate --samples samples.csv --cluster h100-leafspine-2to1 --out my_params.json",
                details="Fit the link model (least squares, several seeded starts) on every measured cell, then "
                       "once per cross-validation fold. Progress goes to standard error: a bar on a terminal, a line per "
                       "finished fit otherwise. On the shipped profiles it needs about 330 CPU-seconds (about 3 minutes on 2 idle cores).")
    p.add_argument("--profiles", metavar="DIR", help="folder with isolated_thp.csv and shared_thp_ratio.csv")
    p.add_argument("--samples", metavar="CSV", help="throughput samples recorded on a cluster (format: deepshare/core/contention/link/samples.py)")
    p.add_argument("--cluster", metavar="PRESET|YAML",
                   help="with --samples: the cluster the samples were taken on (without it: the testbed's TITAN Xp, 40 Gb/s "
                   "hardware). The fit simulates the samples on its nodes' hardware (all nodes alike), so the parameters, "
                   "simulated on it, give them back; its fabric has the uplinks rows name in their optional link column "
                   "(jobs on other nodes that shared a domain's uplink, e.g. spine0/leaf3/uplink)")
    p.add_argument("--from-state", metavar="DIR",
                   help="instead: fit the learned contention model (deepshare/core/contention/learned.py) to the measured vs "
                   "predicted throughputs in a live scheduler's journal, as its refit does (read only)")
    p.add_argument("--tenants", metavar="FILE",
                   help="with --from-state: the tenants file the scheduler ran under (its refit then fits the runs by "
                   "tenant; without it they are pooled, as without --tenants)")
    p.add_argument("--contention", choices=("profiled", "link"),
                   help="with --from-state: the shipped model the scheduler predicted with (default profiled)")
    add_json_flag(p, "fit_mae, cv_mae, baseline_*_mae and the parameters; with --from-state the contention fit")
    p.add_argument("--out", metavar="PATH", help="write the fitted parameters for --contention link --link-params (an existing "
                   "file is replaced); with --from-state the contention fit, as --json writes it (a record: --link-params "
                   "does not read it)")
    p.add_argument("--folds", type=fold_count, help="cross-validation folds, 2..100 (default 5)")
    p.add_argument("--starts", type=start_count, help="random starts per fit, 1..100 (default 3)")
    p.add_argument("--seed", type=seed_value, help="random seed (default 0)")
    p.add_argument("--workers", type=worker_count, help="processes for the fits (default 2)")
    p.set_defaults(func=cmd_calibrate)
