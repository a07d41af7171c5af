"""``deepshare scheduler start``, ``deepshare submit``, ``deepshare jobs``, ``deepshare cancel``.

Only :func:`register_cli` is public: ``deepshare/cli.py`` calls it with its subparsers. Every
handler has the main CLI's signature ``(args, out, err) -> exit status`` and raises
:class:`~deepshare.core.types.DeepShareError` for bad input (a job spec, a flag, an unreachable
scheduler): the main CLI prints one line and exits 2. Ray is imported only by ``scheduler start``.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from deepshare.cli_output import add_json_flag, check_outputs, to_stdout, write_json
from deepshare.cli_types import port_number, positive_float, positive_int, print_line
from deepshare.core.types import DeepShareError


def _fmt(value: float | None, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def _alloc(placement: Any) -> str:
    return "-" if not placement else ",".join(f"{p.node}:{p.gpus}" for p in placement)


# -- handlers ------------------------------------------------------------------------------
def cmd_scheduler_start(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.client import SERVE_TOKEN_ENV
    from deepshare.runtime.launcher import LaunchSettings
    from deepshare.runtime.loop import LoopConfig
    from deepshare.runtime.service import ServiceConfig, serve

    if args.policy and args.placement_url:
        raise DeepShareError("give at most one of --policy and --placement-url")
    if not args.local and (args.nodes is not None or args.gpus_per_node is not None):
        raise DeepShareError("--nodes and --gpus-per-node need --local")
    if args.local and args.address != "auto":
        raise DeepShareError("give at most one of --local and --address")
    if not args.placement_url:
        from deepshare.policies import make_policy

        make_policy(args.policy or "rl-hybrid")  # an unknown name fails before Ray starts
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ServiceConfig(
        state_dir=args.state, address=args.address,
        local_nodes=(args.nodes or 2) if args.local else None, local_gpus_per_node=args.gpus_per_node or 4,
        policy=args.policy, placement_url=args.placement_url, host=args.host, port=args.port, max_gpus=args.max_gpus,
        placement_token=args.placement_token or os.environ.get(SERVE_TOKEN_ENV) or None,
        loop=LoopConfig(interval_s=args.interval, preempt_grace_s=args.preempt_grace,
                        launch=LaunchSettings(pg_timeout_s=args.launch_timeout)),
    )
    return serve(config, announce=lambda line: (print_line(out, line), out.file.flush()))


def cmd_submit(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.runtime.httpclient import SchedulerClient
    from deepshare.runtime.spec import load_spec_file

    check_outputs({"--json": args.json}, {"JOB.yaml": args.spec})
    client = SchedulerClient(args.url)
    spec = load_spec_file(args.spec)
    job = client.submit(spec)
    if args.json:
        write_json(args.json, job.model_dump(mode="json"), out, "job")
    if not to_stdout(args.json):
        print_line(out, f"submitted {job.id} ({job.gpus} GPUs, {job.model})")
    return 0


def cmd_jobs(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.runtime.httpclient import SchedulerClient

    client = SchedulerClient(args.url)
    if args.id:
        detail = client.job(args.id)
        if args.json:
            write_json(args.json, detail.model_dump(mode="json"), out, "job")
            if to_stdout(args.json):
                return 0
        print_line(out, f"{detail.id}: {detail.state}, {detail.gpus} GPUs ({detail.model}), placement {_alloc(detail.placement)},"
                    f" step {_fmt(detail.step, 'd')}, {detail.preemptions} preemption(s)")
        for r in detail.runs:
            print_line(out, f"  run {r.attempt} at {_alloc(r.placement)}: measured {_fmt(r.measured_throughput)} samples/s,"
                        f" predicted {_fmt(r.predicted_throughput)}; from step {_fmt(r.start_step, 'd')};"
                        f" {r.end_reason or 'running'}")
        if detail.error:
            print_line(out, f"  error: {detail.error}")
        return 0
    jobs = client.jobs()
    if args.json:
        write_json(args.json, [j.model_dump(mode="json") for j in jobs], out, "job list")
        if to_stdout(args.json):
            return 0
    from rich.table import Table

    table = Table(header_style="bold")
    for col in ("id", "state", "GPUs", "model", "placement", "run", "preempt", "step",
                "measured samples/s", "predicted samples/s"):
        table.add_column(col, justify="left" if col in ("id", "state", "model", "placement") else "right")
    for j in jobs:
        table.add_row(j.id, j.state + (" (cancelling)" if j.cancel_requested and j.state == "running" else ""),
                      str(j.gpus), j.model, _alloc(j.placement), str(j.attempt), str(j.preemptions),
                      _fmt(j.step, "d"), _fmt(j.measured_throughput), _fmt(j.predicted_throughput))
    out.print(table)
    return 0


def cmd_cancel(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.runtime.httpclient import SchedulerClient

    status, job = SchedulerClient(args.url).cancel(args.id)
    print_line(out, f"cancelled {job.id}" if status == 200 else f"cancelling {job.id}: asked it to checkpoint and stop")
    return 0


# -- parser --------------------------------------------------------------------------------
def _url(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, metavar="URL", help="the scheduler, e.g. http://127.0.0.1:8470")


def register_cli(subparsers: Any) -> None:
    """Add ``scheduler start``, ``submit``, ``jobs`` and ``cancel`` to the main CLI's subparsers."""
    sched = subparsers.add_parser("scheduler", help="the live scheduler: run jobs on a Ray cluster under a policy")
    sub = sched.add_subparsers(dest="scheduler_command", metavar="ACTION", required=True)
    p = sub.add_parser("start", help="run the scheduler (control loop + HTTP API) until interrupted")
    p.add_argument("--address", default="auto", metavar="auto|HOST:PORT", help="Ray cluster to join (default auto)")
    p.add_argument("--local", action="store_true", help="start a fake multi-node Ray cluster on this machine")
    p.add_argument("--nodes", type=positive_int, metavar="N", help="--local: nodes (default 2)")
    p.add_argument("--gpus-per-node", type=positive_int, metavar="G", help="--local: fake GPUs per node (default 4)")
    p.add_argument("--policy", metavar="NAME", help="policy from `deepshare policies` (default rl-hybrid, the shipped learned policy)")
    p.add_argument("--placement-url", metavar="URL", help="ask the placement service at URL instead")
    p.add_argument("--placement-token", metavar="TOKEN",
                   help="bearer token for --placement-url (default: $DEEPSHARE_SERVE_TOKEN, which keeps it out of `ps`)")
    p.add_argument("--max-gpus", type=positive_int, default=0, metavar="N",
                   help="accept jobs of up to N GPUs even when fewer are up now (autoscaling clusters; default: the GPUs up now)")
    p.add_argument("--host", default="127.0.0.1", help="address the HTTP API binds (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8470, metavar="P", help="HTTP API port (default 8470; 0: any)")
    p.add_argument("--state", default=".deepshare/scheduler", metavar="DIR",
                   help="journal folder (default .deepshare/scheduler); reuse it to recover")
    p.add_argument("--interval", type=positive_float, default=1.0, metavar="S", help="control loop period (default 1)")
    p.add_argument("--preempt-grace", type=positive_float, default=30.0, metavar="S",
                   help="seconds a preempted job gets to checkpoint and exit (default 30)")
    p.add_argument("--launch-timeout", type=positive_float, default=30.0, metavar="S",
                   help="seconds to wait for a placement group's GPUs before requeueing (default 30)")
    p.set_defaults(func=cmd_scheduler_start)

    p = subparsers.add_parser("submit", help="submit a job spec (YAML or JSON) to a running scheduler")
    _url(p)
    p.add_argument("spec", metavar="JOB.yaml")
    add_json_flag(p, "the job")
    p.set_defaults(func=cmd_submit)

    p = subparsers.add_parser("jobs", help="list a scheduler's jobs (or show one with its runs)")
    _url(p)
    p.add_argument("id", nargs="?", metavar="ID", help="show this job's runs: measured vs predicted throughput")
    add_json_flag(p, "the job list (or the job)")
    p.set_defaults(func=cmd_jobs)

    p = subparsers.add_parser("cancel", help="cancel a queued or running job")
    _url(p)
    p.add_argument("id", metavar="ID")
    p.set_defaults(func=cmd_cancel)
