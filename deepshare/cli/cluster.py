"""``deepshare cluster ...`` and ``deepshare autoscale ...``: cluster YAMLs and autoscaling runs.

* ``cluster validate FILE...`` — Ray's own schema and ``prepare_config`` plus the project's
  keys, for launcher YAMLs and KubeRay manifests (:mod:`deepshare.raycluster.cluster_yaml`);
* ``cluster spec FILE [--out PATH]`` — a cluster YAML's GPU worker types as an autoscaling
  spec for the simulator;
* ``cluster fake [--workers N]`` — a local multi-node Ray cluster to try the multi-node
  training path against (:mod:`deepshare.raycluster.fakecluster`);
* ``autoscale simulate`` — a trace on an autoscaling cluster model under one or more
  autoscalers side by side (``--autoscaler demand,contention-aware,fixed``);
  ``autoscale compare`` is the same with all three by default;
* ``autoscale live`` — the live scheduler on a local fake autoscaling Ray cluster
  (:mod:`deepshare.experiments.autoscale_live`): scale-up latency and job completion of a small trace.

Handlers have the main CLI's signature ``(args, out, err) -> exit status`` and raise
:class:`~deepshare.core.errors.DeepShareError` for bad input (one line, exit 2).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from deepshare.cli.information_json import information_json
from deepshare.cli.output import add_json, add_json_flag, announce, check_outputs, human, skipped_jobs, write_json
from deepshare.cli.args import (
    add_sim_args, add_trace_args, check_policies, contention_model, in_range, information_model, load_trace, past_history,
    print_line, sim_config, sim_inputs, wait_seconds,
)
from deepshare.cli.help import command
from deepshare.core.errors import DeepShareError, one_line

DIURNAL = "deepshare/data/autoscale/diurnal-150.csv"
AWS_MIXED = "deepshare/data/autoscale/aws-mixed.yaml"


def cmd_cluster_validate(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.raycluster.cluster_yaml import load_cluster_yaml

    check_outputs({"--json": args.json}, {"FILE": args.files})
    failed = 0
    results = []
    for path in args.files:
        try:
            cluster = load_cluster_yaml(path)
        except DeepShareError as exc:
            failed += 1
            results.append({"file": path, "ok": False, "error": str(exc)})
            err.print(f"deepshare: error: {one_line(str(exc))}", markup=False, highlight=False, soft_wrap=True)
            continue
        fill_in = [{"field": field, "value": value} for field, value in cluster.placeholders]
        results.append({"file": path, "ok": True, "description": cluster.describe(), "placeholders": fill_in})
        print_line(human(args.json, out, err), f"OK {one_line(str(path))}: {one_line(cluster.describe())}")
        for field, value in cluster.placeholders:  # valid, but not launchable as it is
            err.print(f"deepshare: warning: {one_line(str(path))}: {one_line(str(field))} is the placeholder {value!r}: replace it before launching",
                      markup=False, highlight=False, soft_wrap=True)
    write_json(args.json, results, out, "validation results")
    return 2 if failed else 0


def cmd_cluster_spec(args: argparse.Namespace, out: Any, err: Any) -> int:
    import yaml

    from deepshare.raycluster.cluster_yaml import load_cluster_yaml, to_autoscale_spec
    from deepshare.core.atomic import write_text_atomic

    check_outputs({"--out": args.out}, {"FILE": args.file})
    spec = to_autoscale_spec(load_cluster_yaml(args.file))
    source = json.dumps(str(args.file))  # escaped: a newline in the name must not end the comment
    text = f"# Autoscaling spec from {source} (deepshare cluster spec)\n" + yaml.safe_dump(
        spec.model_dump(), sort_keys=False
    )
    if args.out:
        write_text_atomic(args.out, text, "autoscaling spec")
        print_line(out, f"wrote {one_line(args.out)}")
    else:
        print_line(out, text.rstrip())
    return 0


def cmd_cluster_fake(args: argparse.Namespace, out: Any, err: Any) -> int:
    import time

    import ray

    from deepshare.raycluster.fakecluster import FakeNode, start_fake_cluster

    fabrics = [f.strip() for f in args.fabrics.split(",") if f.strip()]
    if not fabrics or any(f not in ("pcie", "nvlink") for f in fabrics):
        raise DeepShareError(f"--fabrics {args.fabrics!r}: expected pcie and/or nvlink, comma-separated")
    nodes = [FakeNode(cpus=args.cpus_per_worker, fabric=fabrics[i % len(fabrics)]) for i in range(args.workers)]
    cluster = start_fake_cluster(nodes)
    try:
        print_line(out, f"fake Ray cluster up: head (0 CPUs) + {args.workers} worker node(s); address {cluster.address}")
        print_line(out, f"  deepshare train rllib_configs/rl_hybrid.yaml --address {cluster.address} --num-env-runners {args.workers}")
        if args.for_s is None:
            print_line(out, "Ctrl-C stops it")
            while True:
                time.sleep(3600)
        time.sleep(args.for_s)
    except KeyboardInterrupt:
        pass
    finally:
        ray.shutdown()
        cluster.shutdown()
        print_line(out, "fake cluster stopped")
    return 0


def cmd_autoscale_simulate(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.core.output_set import OutputSet
    from deepshare.experiments.autoscale import load_config, parse_autoscalers, run_autoscalers
    from deepshare.experiments.scenario import Scenario
    from deepshare.experiments.autoscale_tables import autoscale_table

    check_outputs({"--json": args.json, "--plot": args.plot}, sim_inputs(args, [args.policy]))
    if getattr(args, "contention_knowledge", "exact") != "exact":
        raise DeepShareError("--contention-knowledge learned: not supported with an autoscaled cluster yet")
    names = parse_autoscalers(args.autoscaler)
    check_policies([args.policy], "--policy")
    spec = load_config(args.config)
    trace = load_trace(args)
    scenario = Scenario(None, trace.jobs, contention_model(args), sim_config(args), autoscale=spec,
                        information=information_model(args, args.seed, trace.jobs), history=past_history(args, trace.jobs))
    reports = run_autoscalers(scenario, args.policy, names)
    if trace.skipped:
        err.print(skipped_jobs(trace.skipped), markup=False, highlight=False, soft_wrap=True)
    limits = ", ".join(f"{n}: {t.min_nodes}..{t.max_nodes} x {t.gpus} GPUs ${t.price_usd_per_hour:g}/h"
                       for n, t in spec.node_types.items())
    rejected = max(r.metrics.rejected for r in reports)
    if rejected:  # the table's "done" counts them out, but says nothing of why: name the jobs, and who refused them
        which: dict[str, int] = {}
        for r in reports:
            which.update((rec.job_id, rec.gpus) for rec in r.metrics.records if rec.rejected and rec.job_id not in which)
        named = ", ".join(f"{one_line(j)} ({g} GPUs)" for j, g in list(which.items())[:5])
        named += f" and {len(which) - 5} more" if len(which) > 5 else ""
        counts = {r.autoscaler: r.metrics.rejected for r in reports}
        by = "" if len(set(counts.values())) == 1 else " (" + ", ".join(f"{n}: {c}" for n, c in counts.items()) + ")"
        cap = "" if spec.max_workers is None else f", max_workers {spec.max_workers}"
        err.print(f"{rejected} job(s) ask for more GPUs than the most nodes {spec.name} can bring up ({limits}{cap}) and "
                  f"were rejected{by} (the JSON's \"rejected\"): {named}", markup=False, highlight=False, soft_wrap=True)
    shown = human(args.json, out, err)
    shown.print(autoscale_table(reports, f"{one_line(args.policy)} on {one_line(Path(args.trace).name)}, {one_line(spec.name)} "
                                         f"({limits}), durations {scenario.information.describe()}"))
    with OutputSet() as outputs:  # the JSON and the plot are put in place together, or neither is
        if args.json:
            information = information_json(scenario.information, scenario.history, args.history)
            doc: dict[str, object]
            if len(reports) == 1:
                doc = {**reports[0].to_dict(), "information": information}
            else:
                doc = {"autoscalers": names, "results": {r.autoscaler: r.to_dict() for r in reports},
                       "information": information}
            add_json(outputs, args.json, doc, out, "JSON report")
        if args.plot:
            from deepshare.experiments.autoscale_plots import timeline_figure
            from deepshare.experiments.plots import png_bytes

            announce(outputs, shown, outputs.add_bytes(args.plot, png_bytes(timeline_figure(reports)), "figure"))
        outputs.commit()
    return 0


def cmd_autoscale_live(args: argparse.Namespace, out: Any, err: Any) -> int:
    import tempfile

    from deepshare.experiments.autoscale_live import DEFAULT_TRACE, LiveJob, run_live_experiment
    from deepshare.core.autoscaling import load_autoscale_spec

    check_outputs({"--json": args.json}, {"--config": args.config})
    spec = load_autoscale_spec(args.config) if args.config else None
    trace = [LiveJob(j.name, j.gpus, j.at_s, steps=args.steps) for j in DEFAULT_TRACE]
    workdir = args.workdir or tempfile.mkdtemp(prefix="ds-live-")  # short: Ray's socket paths < 108 bytes
    report = run_live_experiment(workdir, spec, trace, policy=args.policy,
                                 log=lambda text: err.print(text, markup=False, highlight=False))
    doc = report.to_dict()
    shown = human(args.json, out, err)
    for j in report.jobs:
        print_line(shown, f"{j.job_id:8s} {j.gpus} GPUs  {j.state:9s} queued {_s(j.queue_s)} s  JCT {_s(j.jct_s)} s"
                    f"  on {', '.join(j.node_names) or '-'}")
    print_line(shown, f"scale-up latency (demand above GPUs alive -> enough GPUs alive): "
                      f"{_latencies(report.scale_up_latencies_s, report.shortages_self_resolved, report.shortages_unresolved)}; "
                f"most GPU nodes {report.max_gpu_nodes}; back to min nodes {_s(report.scale_down_s)} s after the last job")
    write_json(args.json, doc, out, "JSON report")
    return 0


def _latencies(latencies_s: Sequence[float], self_resolved: int, unresolved: int) -> str:
    """The scale-up latencies, each with its unit, then the other shortages' counts in parentheses
    (``12.3 s, 4.0 s (other shortages: 1 ended as jobs ended, no GPU added; 1 still open)``)."""
    text = ", ".join(f"{x:.1f} s" for x in latencies_s) or "none"
    others = [f"{n} {what}" for n, what in ((self_resolved, "ended as jobs ended, no GPU added"),
                                            (unresolved, "still open")) if n]
    return text + (f" (other shortages: {'; '.join(others)})" if others else "")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


AUTOSCALERS = ("demand", "contention-aware", "fixed")
"""The names of :data:`deepshare.core.autoscaling.AUTOSCALERS`, in its order, for the flags' help:
building the parser must not import the autoscaling package (it brings pydantic); tests/test_startup.py
asserts that they are still the same."""


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``cluster {validate,spec}`` and ``autoscale {simulate,compare}`` to the main parser."""
    cluster = command(sub, "cluster", "Ray cluster YAMLs: validate them, turn them into autoscaling specs",
                      "deepshare cluster validate cluster_yamls/aws-gpu-mixed.yaml cluster_yamls/kuberay-autoscaling.yaml",
                      "deepshare cluster spec cluster_yamls/aws-gpu-mixed.yaml --out spec.yaml", "deepshare cluster fake --workers 2")
    csub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    p = command(csub, "validate", "check cluster YAMLs / KubeRay manifests with Ray's schema and the project's keys",
                "deepshare cluster validate cluster_yamls/aws-gpu-mixed.yaml cluster_yamls/kuberay-autoscaling.yaml")
    p.add_argument("files", nargs="+", metavar="FILE")
    add_json_flag(p, "[{file, ok, description | error}]")
    p.set_defaults(func=cmd_cluster_validate)
    p = command(csub, "spec", "print (or --out) a cluster YAML's GPU worker types as an autoscaling spec",
                "deepshare cluster spec cluster_yamls/aws-gpu-mixed.yaml --out spec.yaml")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--out", metavar="PATH", help="write the spec YAML here (an existing file is replaced)")
    p.set_defaults(func=cmd_cluster_spec)
    p = command(csub, "fake", "start a local multi-node Ray cluster (head without CPUs + workers) and wait",
                "deepshare cluster fake --workers 2 --for-s 600")
    p.add_argument("--workers", type=in_range(int, 1, 8, "workers"), default=2, metavar="N", help="worker nodes, 1..8 (default 2)")
    p.add_argument("--cpus-per-worker", type=in_range(int, 1, 64, "CPUs"), default=1, metavar="C", help="CPUs per worker (default 1)")
    p.add_argument("--fabrics", default="pcie,nvlink", help="deepshare_fabric_* resource of the workers, in turn (default pcie,nvlink)")
    p.add_argument("--for-s", type=wait_seconds, default=None, metavar="S", help="stop after S seconds (default: on Ctrl-C)")
    p.set_defaults(func=cmd_cluster_fake)

    autoscale = command(sub, "autoscale", "autoscaling in simulation: cost, GPU-hours and JCT per autoscaler",
                        f"deepshare autoscale compare --trace {DIURNAL} --config {AWS_MIXED} --policy las+spread",
                        "deepshare autoscale live --steps 40 --json live.json")
    asub = autoscale.add_subparsers(dest="autoscale_command", metavar="ACTION", required=True)
    for action, default, text in (
        ("simulate", "demand", "simulate a trace on an autoscaling cluster"),
        ("compare", ",".join(AUTOSCALERS), "the same, every autoscaler side by side by default"),
    ):
        p = command(asub, action, text, f"deepshare autoscale {action} --trace {DIURNAL} --config {AWS_MIXED} "
                    "--policy las+spread --json as.json --plot timeline.png")
        add_trace_args(p)
        p.add_argument("--config", required=True, metavar="FILE",
                       help="autoscaling spec (deepshare/data/autoscale/*.yaml) or a cluster YAML (cluster_yamls/)")
        p.add_argument("--policy", default="las+consolidated", help="scheduling policy (default las+consolidated)")
        p.add_argument("--autoscaler", default=default, metavar="NAME[,NAME...]",
                       help=f"{', '.join(AUTOSCALERS)} (default {default})")
        add_json_flag(p, "the report(s) and \"information\" (what the policy knew)")
        p.add_argument("--plot", metavar="PNG", help="write nodes by type, cost and queue over time (an existing file is "
                       "replaced; put in place with --json, together)")
        add_sim_args(p)
        p.set_defaults(func=cmd_autoscale_simulate)
    p = command(asub, "live", "the live scheduler on a local fake autoscaling Ray cluster: scale-up latency, JCT",
                "deepshare autoscale live --steps 40 --json live.json")
    p.add_argument("--config", metavar="FILE", help="autoscaling spec with one node type (default: 1..3 nodes of 4 fake GPUs)")
    p.add_argument("--policy", default="las+consolidated", help="the scheduler's policy (default las+consolidated)")
    p.add_argument("--steps", type=in_range(int, 1, 100_000, "steps"), default=120, metavar="N", help="training steps per job (default 120)")
    p.add_argument("--workdir", metavar="DIR", help="Ray temp files, journal, logs: a folder of yours no one else can write (default a new /tmp folder)")
    add_json_flag(p, "the measurements")
    p.set_defaults(func=cmd_autoscale_live)
