"""``deepshare trace generate`` (a synthetic trace) and ``deepshare trace stats`` (summarise one)."""

from __future__ import annotations

import argparse

from rich.console import Console

from deepshare.cli.args import (
    add_cluster_args, arrival_rate, cluster_topology, duration_sigma, flagged, in_range, job_count,
    offered_load, print_line, seed_value,
)
from deepshare.cli.output import add_json_flag, check_outputs, to_stdout, write_json
from deepshare.cli.help import command
from deepshare.core.bounds import MAX_DURATION_S
from deepshare.core.errors import DeepShareError, one_line
from deepshare.core.traces import FORMATS, MIX_PRESETS, generate, load, mix_from_spec, parse_demand, trace_stats, write_canonical
from deepshare.core.traces.feature_stats import describe
from deepshare.core.traces.stats import TopologyStats
from deepshare.core.traces.generator import DEMAND_PRESETS
from deepshare.core.traces.mixes import MAX_FLAG_NAME_CHARS, on_one_line
from deepshare.core.traces.recurrence import RecurrenceModel

_DEFAULTS = RecurrenceModel()
_MEDIAN_SECONDS = in_range(float, 1, MAX_DURATION_S, "seconds (a year at most)")
# flag -> (RecurrenceModel field, type, metavar, help); defaults and sources: deepshare.core.traces.recurrence
_RECURRENCE_FLAGS = {
    "--users": ("users", in_range(int, 1, 1_000_000, "users"), "N", "number of users (1..1,000,000)", "assumption"),
    "--user-skew": ("user_skew", in_range(float, 0, 5), "S", "Zipf exponent of users' job shares, 0 = equal (0..5)",
                    "assumption"),
    "--recurring-share": ("recurring_share", in_range(float, 0, 1), "P",
                          "share of jobs that are runs of a recurring group (0..1)", "assumption"),
    "--runs-per-group": ("runs_per_group", in_range(float, 2, 1_000_000, "runs"), "R",
                         "mean runs of a recurring group (2..1,000,000)", "assumption"),
    "--run-variance-share": ("run_variance_share", in_range(float, 0, 1), "F",
                             "share of log-duration variance between runs of a group, the rest between groups (0..1)",
                             "assumption"),
    "--gpu-duration-corr": ("gpu_duration_corr", in_range(float, -1, 1), "RHO",
                            "correlation of log duration with GPU count, within ±sqrt(1 - run variance share)",
                            "assumption"),
    "--requested-share": ("requested_share", in_range(float, 0, 1), "P", "share of jobs that give a time limit (0..1)",
                          "Slurm gives every job one; 0 mimics Philly and PAI"),
    "--overestimate-median": ("overestimate_median", in_range(float, 1, 1000), "X",
                              "median of time limit / true duration (1..1,000)", "assumption"),
    "--overestimate-sigma": ("overestimate_sigma", in_range(float, 0, 5), "S",
                             "log-sigma of time limit / true duration (0..5)",
                             "assumption: ~2%% of jobs hit their limit, Helios reports TIMEOUT as very rare"),
}


def _recurrence(args: argparse.Namespace) -> RecurrenceModel | None:
    """The model from the flags; tuning flags without ``--recurrence`` are an error."""
    given = {flag: getattr(args, name) for flag, (name, *_) in _RECURRENCE_FLAGS.items() if getattr(args, name) is not None}
    if not args.recurrence:
        if given:
            raise DeepShareError(f"{', '.join(given)}: recurrence model flags need --recurrence")
        return None
    return RecurrenceModel(**{_RECURRENCE_FLAGS[flag][0]: value for flag, value in given.items()})


def _level_name(text: str) -> str:
    """A fabric level's name as a flag gives it (checked against the cluster's levels when one is known)."""
    if not on_one_line(text) or len(text) > MAX_FLAG_NAME_CHARS:
        raise argparse.ArgumentTypeError(f"expected a level's name (1-{MAX_FLAG_NAME_CHARS} characters, no surrounding "
                                         f"spaces), got {text!r}")
    return text


def _topology_flags(args: argparse.Namespace, total_gpus: int | None) -> dict[str, object]:
    """``generate``'s topology request arguments from the flags; each level and share go together,
    and the levels must be the cluster's when ``--load`` names one."""
    for kind in ("required", "preferred"):
        level, share = getattr(args, f"{kind}_level"), getattr(args, f"{kind}_share")
        if (level is None) != (share is None):
            raise DeepShareError(f"--{kind}-level and --{kind}-share go together: give both or neither")
    if args.required_share is not None and args.preferred_share is not None and args.required_share + args.preferred_share > 1:
        raise DeepShareError("--required-share plus --preferred-share must be at most 1 (a job asks one or the other)")
    if total_gpus is not None:
        fabric = cluster_topology(args).fabric
        for flag, level in (("--required-level", args.required_level), ("--preferred-level", args.preferred_level)):
            if level is not None:
                try:
                    fabric.level_index(level)
                except DeepShareError as exc:
                    raise DeepShareError(f"{flag}: {exc}") from None
    return {name: getattr(args, name) for name in ("required_level", "required_share", "preferred_level", "preferred_share")}


def cmd_trace_generate(args: argparse.Namespace, out: Console, err: Console) -> int:
    check_outputs({"--out": args.out}, {"--cluster": args.cluster or None})  # '': refused below, naming the presets
    if args.rate is not None and args.load is not None:
        raise DeepShareError("give either --rate or --load, not both")
    if args.load is None and (args.cluster is not None or args.nodes or args.gpus_per_node):
        raise DeepShareError("--cluster/--nodes/--gpus-per-node only size an offered --load; give --load too")
    total_gpus = cluster_topology(args).total_gpus if args.load is not None else None
    trace = generate(
        args.jobs,
        rate_per_s=args.rate,
        load=args.load,
        total_gpus=total_gpus,
        demand=flagged("--demand", lambda text: parse_demand(text, total_gpus), args.demand),
        mix=flagged("--mix", mix_from_spec, args.mix),
        median_duration_s=args.median_duration_s,
        duration_sigma=args.duration_sigma,
        seed=args.seed,
        recurrence=_recurrence(args),
        **_topology_flags(args, total_gpus),  # type: ignore[arg-type]
    )
    write_canonical(trace, args.out)
    stats = trace_stats(trace)
    print_line(out, f"wrote {stats.jobs} jobs to {one_line(str(args.out))} (span {stats.span_s:,.0f} s, {stats.gpu_hours:,.1f} GPU-hours)")
    return 0


def _describe_topology(topology: TopologyStats) -> list[tuple[str, str]]:
    """``trace stats`` rows for what the jobs ask of the fabric: jobs per level for each kind of
    request (or that none asks), and the large gangs' shares of the jobs and of the GPUs asked."""
    asked = [(label, counts) for label, counts in (("required", topology.required_level),
                                                   ("preferred", topology.preferred_level),
                                                   ("slices in", topology.slice_level)) if counts]
    requests = "; ".join(f"{label} " + ", ".join(f"{level}: {n}" for level, n in counts.items())
                         for label, counts in asked)
    gangs = "; ".join(f">= {g.at_least} GPUs: {g.jobs} ({g.job_share:.1%} of jobs, {g.gpu_share:.1%} of GPUs)"
                      for g in topology.gangs)
    return [("topology", requests or "no job asks for a level"), ("gangs", gangs)]


def cmd_trace_stats(args: argparse.Namespace, out: Console, err: Console) -> int:
    check_outputs({"--json": args.json}, {"TRACE": args.path})
    trace = load(args.path, format=args.format, mix=flagged("--mix", mix_from_spec, args.mix), seed=args.seed,
                 allow_empty=True)  # what was skipped, and why, is what such a file's user wants to see
    stats = trace_stats(trace)
    if args.json:
        write_json(args.json, {"format": trace.format, **stats.to_dict()}, out, "trace statistics")
        if to_stdout(args.json):
            return 0
    # a trace's names (models, users, paths) are printed as one line each: never a terminal escape,
    # and never wrapped at the console's width (print_line), so a piped line stays one line
    print_line(out, one_line(f"{args.path}: {trace.format} trace"))
    rate = "all at t=0" if stats.arrival_rate_per_s is None else f"{stats.arrival_rate_per_s:.4g} jobs/s"
    rows = [
        ("jobs", f"{stats.jobs} ({stats.skipped} skipped)"),
        ("submit span", f"{stats.span_s:,.0f} s ({rate})"),
        ("GPU demand", ", ".join(f"{g} GPUs: {n}" for g, n in sorted(stats.gpu_demand.items()))),
        ("models", ", ".join(f"{m}: {n}" for m, n in stats.models.items())),
        ("communication", ", ".join(f"{c}: {n}" for c, n in stats.comm_classes.items())),
        ("work", f"{stats.gpu_hours:,.1f} GPU-hours; duration mean {stats.mean_duration_s:,.0f} s, median {stats.median_duration_s:,.0f} s"),
        *describe(stats.features),
        *_describe_topology(stats.topology),
    ]
    for name, value in rows:
        print_line(out, one_line(f"  {name:14s} {value}"))
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    trace = command(sub, "trace", "generate or summarise traces",
                    "deepshare trace generate --jobs 200 --load 0.9 --nodes 4 --seed 1 --out t.csv", "deepshare trace stats t.csv")
    tsub = trace.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    p = command(tsub, "generate", "write a synthetic trace (canonical CSV)",
                "deepshare trace generate --jobs 1000 --load 0.9 --nodes 16 --mix heavy --seed 1 --out t.csv")
    p.add_argument("--jobs", type=job_count, required=True, metavar="N", help="number of jobs")
    arrivals = p.add_argument_group("arrivals (Poisson; neither = all jobs at t=0)")
    arrivals.add_argument("--rate", type=arrival_rate, metavar="JOBS_PER_S", help="arrival rate")
    arrivals.add_argument("--load", type=offered_load, metavar="RHO", help="offered load: GPU-seconds asked / GPU-seconds available")
    p.add_argument("--demand", default="2:1,4:1,8:1", metavar="G:W,...|PRESET",
                   help="GPU demand distribution, GPU counts 1..65,536 and, with --load, at most the cluster's "
                   f"(default 2:1,4:1,8:1), or a preset: {', '.join(DEMAND_PRESETS)} "
                   "(16-256 GPU gangs, weights 16:4,32:3,64:2,128:1,256:0.5; an assumption, see "
                   "deepshare/core/traces/generator.py)")
    p.add_argument("--mix", default="random", metavar="PRESET|MODEL:W,...",
                   help=f"model mix: {', '.join(MIX_PRESETS)} or a custom list (default random)")
    p.add_argument("--median-duration-s", type=_MEDIAN_SECONDS, default=3600.0, metavar="S",
                   help="median ideal run time, at most a year (default 3600)")
    p.add_argument("--duration-sigma", type=duration_sigma, default=0.0, metavar="SIGMA", help="log-normal sigma of run times (default 0)")
    p.add_argument("--seed", type=seed_value, default=0, help="random seed (default 0)")
    rec = p.add_argument_group(
        "recurrence model",
        "users, recurring groups (one user, model and GPU count each), time limits (requested_s) and larger jobs "
        "running longer, keeping the GPU demand and duration distributions exact. Each default says where it comes "
        "from; 'assumption' means no published figure backs it (details: deepshare/core/traces/recurrence.py).",
    )
    rec.add_argument("--recurrence", action="store_true", help="turn the model on (the flags below tune it)")
    for flag, (name, kind, metavar, text, source) in _RECURRENCE_FLAGS.items():
        rec.add_argument(
            flag, dest=name, type=kind, metavar=metavar, help=f"{text}; default {getattr(_DEFAULTS, name):g} ({source})"
        )
    topo = p.add_argument_group(
        "topology requests",
        "a share of the jobs asks for all of its GPUs inside one domain of a fabric level (required: it waits "
        "for one) or prefers one (preferred: else anywhere); written as the trace's required_level and "
        "preferred_level columns. Each level goes with its share; the shares add up to at most 1; with --load "
        "the levels must be the cluster's (a spec without levels has one, rack). Default: no job asks.",
    )
    topo.add_argument("--required-level", type=_level_name, metavar="NAME", help="the level a required share asks for")
    topo.add_argument("--required-share", type=in_range(float, 0, 1), metavar="F",
                      help="share of jobs that require one domain of --required-level (0..1)")
    topo.add_argument("--preferred-level", type=_level_name, metavar="NAME", help="the level a preferred share asks for")
    topo.add_argument("--preferred-share", type=in_range(float, 0, 1), metavar="F",
                      help="share of jobs that prefer one domain of --preferred-level (0..1)")
    add_cluster_args(p)
    p.add_argument("--out", required=True, metavar="PATH", help="output CSV path (an existing file is replaced)")
    p.set_defaults(func=cmd_trace_generate)

    p = command(tsub, "stats", "summarise a trace", "deepshare trace stats t.csv --json -")
    p.add_argument("path", metavar="TRACE")
    p.add_argument("--format", choices=FORMATS, help="force the trace format")
    p.add_argument("--mix", default="random", metavar="PRESET|MODEL:W,...", help="model mix for traces without model names")
    p.add_argument("--seed", type=seed_value, default=0, help="seed for model assignment (default 0)")
    add_json_flag(p, "the statistics")
    p.set_defaults(func=cmd_trace_stats)
