"""``deepshare simulate`` (one policy on a trace) and ``deepshare compare`` (several, one table)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from deepshare.cli.args import (
    add_cluster_args, add_sim_args, add_tenants_arg, add_trace_args, check_policies, cluster_topology, contention_model,
    information_model, load_trace, past_history, policy_list, result_labels, sim_config, sim_inputs, tenants_of,
)
from deepshare.cli.output import add_json, add_json_flag, check_outputs, human, skipped_jobs, write_json
from deepshare.cli.information_json import information_json
from deepshare.cli.progress import ProgressBar
from deepshare.cli.ray_address import add_address_flag, joined
from deepshare.cli.help import command
from deepshare.core.errors import one_line


def cmd_simulate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from deepshare.core.jobs_csv import JobsCsvStream
    from deepshare.core.output_set import OutputSet
    from deepshare.experiments.scenario import Scenario, fabric_levels, simulate
    from deepshare.experiments.report_format import report_table

    check_outputs({"--json": args.json, "--jobs-csv": args.jobs_csv}, sim_inputs(args, [args.policy]))
    check_policies([args.policy], "--policy")
    topology = cluster_topology(args)
    trace = load_trace(args)
    tenants = tenants_of(args)
    scenario = Scenario(topology, trace.jobs, contention_model(args), sim_config(args),
                        information=information_model(args, args.seed, trace.jobs), history=past_history(args, trace.jobs), tenants=tenants)
    with OutputSet() as outputs:  # --jobs-csv streams during the run; both files are put in place at the end
        stream = None if not args.jobs_csv else outputs.add_stream(
            JobsCsvStream(args.jobs_csv, levels=fabric_levels(scenario)), "per-job table")
        with ProgressBar(err, len(trace.jobs), not args.no_progress) as bar:
            report, sim = simulate(scenario, args.policy, bar.callback(args.policy), jobs_stream=stream,
                                   keep_records=tenants is not None)  # fairness needs the records; the rest only numbers
        if trace.skipped:
            err.print(skipped_jobs(trace.skipped), style="yellow", markup=False, highlight=False, soft_wrap=True)
        title = f"{one_line(report.policy)} on {one_line(Path(args.trace).name)} — {topology.describe()}, durations {scenario.information.describe()}"
        human(args.json, out, err).print(report_table(report, title))
        result = {**report.to_dict(), "information": information_json(scenario.information, scenario.history, args.history)}
        if tenants is not None and report.records:
            from deepshare.tenants.fairness import fairness_report

            fairness = fairness_report(report.records, trace.jobs, tenants, topology.total_gpus, sim.catalog)
            human(args.json, out, err).print(fairness_table(fairness, f"fairness per queue ({one_line(args.tenants)})"))
            result["fairness"] = fairness.to_dict()
        elif tenants is not None:
            err.print("fairness per queue is not computed with --jobs-csv (the run keeps no records); it is in the CSV's rows",
                      style="yellow", markup=False, highlight=False)
        add_json(outputs, args.json, result, out, "report")
        outputs.commit()
    return 0


def fairness_table(fairness, title: str):  # type: ignore[no-untyped-def]
    """The per-queue fairness of a run (:mod:`deepshare.tenants.fairness`) as a table."""
    from rich.table import Table

    def num(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    table = Table(title=title, header_style="bold")
    for head in ("queue", "jobs", "finished", "GPU share", "deserved", "avg rho", "worst rho", "rho > 1", "avg queue (s)"):
        table.add_column(head, justify="left" if head == "queue" else "right")
    for t in fairness.tenants:
        table.add_row(t.queue, str(t.jobs), str(t.finished), num(t.avg_share, 3), num(t.avg_deserved, 3),
                      num(t.avg_rho, 2), num(t.worst_rho, 2), num(t.share_rho_above_1, 3), num(t.avg_queue_s, 0))
    table.add_row("all", "", "", "", "", "", num(fairness.worst_rho, 2), num(fairness.share_rho_above_1, 3), "")
    return table


def cmd_compare(args: argparse.Namespace, out: Console, err: Console) -> int:
    from deepshare.experiments.scenario import Scenario, compare
    from deepshare.policies import policy_names
    from deepshare.experiments.report_format import comparison_table

    names = policy_list(args.policies) if args.policies is not None else policy_names(heuristics_only=True)
    check_outputs({"--json": args.json}, sim_inputs(args, names))
    topology = cluster_topology(args)
    trace = load_trace(args)
    scenario = Scenario(topology, trace.jobs, contention_model(args), sim_config(args),
                        information=information_model(args, args.seed, trace.jobs), history=past_history(args, trace.jobs),
                        tenants=tenants_of(args))
    with joined(args.address) as on_ray, ProgressBar(err, len(trace.jobs) * len(names), not args.no_progress) as bar:
        reports = compare(scenario, names, bar.callback("policies"), on_ray=on_ray,
                          waiting=lambda message: err.print(message, markup=False, highlight=False, soft_wrap=True))
    # keyed by the name each reports, or, when two report as one (planner=2,planner=4), as typed
    labels = result_labels(names, [r.policy for r in reports])
    rows = [replace(r, policy=one_line(label)) for r, label in zip(reports, labels)]
    shown = human(args.json, out, err)
    shown.print(
        comparison_table(rows, f"{one_line(Path(args.trace).name)} ({len(trace.jobs)} jobs) — {topology.describe()}, "
                               f"durations {scenario.information.describe()}"))
    doc: dict[str, object] = {"results": {label: r.to_dict() for r, label in zip(reports, labels)},
                              "information": information_json(scenario.information, scenario.history, args.history)}
    if scenario.tenants is not None:
        from deepshare.core.workloads import default_catalog
        from deepshare.tenants.fairness import fairness_report

        fairness = {label: fairness_report(r.records, trace.jobs, scenario.tenants, topology.total_gpus,
                                           scenario.catalog or default_catalog()).metrics()
                    for r, label in zip(reports, labels)}
        shown.print(compare_fairness_table({one_line(k): v for k, v in fairness.items()},
                                           f"fairness under {one_line(args.tenants)}"))
        doc["fairness"] = fairness
    write_json(args.json, doc, out, "comparison")  # its one output
    return 0


def compare_fairness_table(fairness, title: str):  # type: ignore[no-untyped-def]
    """Per policy (in the given order): worst rho, share of jobs with rho > 1, the largest share
    gap, and each queue's average queueing delay (``{policy: FairnessReport.metrics()}``)."""
    from rich.table import Table

    def num(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    queues = list(dict.fromkeys(q for m in fairness.values() for q in m["queues"]))
    table = Table(title=title, header_style="bold")
    for head in ("policy", "worst rho", "rho > 1", "max share gap", "worst queue wait (s)",
                 *(f"{q} wait (s)" for q in queues)):
        table.add_column(head, justify="left" if head == "policy" else "right")
    for policy, m in fairness.items():
        table.add_row(policy, num(m["worst_rho"], 2), num(m["share_rho_above_1"], 3), num(m["max_share_gap"], 3),
                      num(m["worst_queue_avg_queue_s"], 0),
                      *(num(m["queues"][q]["avg_queue_s"], 0) if q in m["queues"] else "-" for q in queues))
    return table


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(sub, "simulate", "run one policy on a trace and print its report",
                "deepshare simulate --trace deepshare/data/traces/deepshare-simulate-trace0.json --policy las+consolidated --json report.json",
                "deepshare simulate --trace t.csv --policy srsf+packed --contention link --cluster a100-16")
    add_trace_args(p)
    p.add_argument("--policy", required=True, metavar="POLICY",
                   help="policy name, e.g. las+consolidated (see `deepshare policies`), or package.module:ClassOrFactory")
    add_cluster_args(p)
    add_sim_args(p)
    add_tenants_arg(p)
    add_json_flag(p, "the report's metrics, \"information\" (what the policy knew) and, with --tenants, \"fairness\" "
                     "(per queue and over time)")
    p.add_argument("--jobs-csv", metavar="PATH", help="write the per-job table as CSV, streamed during the run and put in "
                   "place with --json at its end (an existing file is replaced)")
    p.set_defaults(func=cmd_simulate)

    p = command(sub, "compare", "run several policies on one trace and print a table",
                "deepshare compare --trace deepshare/data/traces/deepshare-simulate-trace0.json --policies las+spread,srsf+packed,rl-hybrid")
    add_trace_args(p)
    p.add_argument("--policies", metavar="A,B,...", help="comma-separated names or module:Class specs (default: every heuristic); quote an item holding a comma: 'fifo+packed,\"rl-base=a,b.pt\"'")
    add_address_flag(p, "the policies' runs")
    add_cluster_args(p)
    add_sim_args(p)
    add_tenants_arg(p)
    add_json_flag(p, '{"results": {POLICY: {METRIC: value}}, "information": {...}} (with --tenants also '
                     '"fairness": {POLICY: ...})')
    p.set_defaults(func=cmd_compare)
