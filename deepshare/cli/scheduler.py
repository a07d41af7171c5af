"""``deepshare scheduler start|reload|token``, ``deepshare submit``, ``deepshare jobs``,
``deepshare queues``, ``deepshare cancel``, ``deepshare logs``, ``deepshare contention``.

``scheduler start`` parses its flags, builds the policy and calls
:func:`deepshare.runtime.service.run_scheduler`, which owns Ray, the signals and the loop.

Only :func:`register` is public: :func:`deepshare.cli.build_parser` calls it with its subparsers. Every
handler has the main CLI's signature ``(args, out, err) -> exit status`` and raises
:class:`~deepshare.core.errors.DeepShareError` for bad input (a job spec, a flag, an unreachable
scheduler, a missing or wrong token): the main CLI prints one line and exits 2. A Ray that
cannot be started is one line and exit 1. Ray is imported only by ``scheduler start``.

Clients find the scheduler by ``--url``, else the URL the scheduler wrote to
``<state>/scheduler.json``; the token is ``--token``, else ``$DEEPSHARE_SCHEDULER_TOKEN``, else
``<state>/token`` (with ``--url``, only when ``<state>/scheduler.json`` names that URL: the state's
token is its own scheduler's); ``--state`` defaults to the scheduler's default, ``.deepshare/scheduler``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any

from deepshare.cli.output import add_json_flag, check_outputs, to_stdout, write_json
from deepshare.cli.args import (
    bind_host, gpus_per_node, host_header_name, in_range, non_negative_int, number, port_number, positive_float,
    positive_int, print_line,
)
from deepshare.cli.help import command
from deepshare.core.documents import load_json
from deepshare.core.errors import DeepShareError, one_line
from deepshare.core.files import CONFIG_BYTES, read_input_text
from deepshare.runtime.defaults import DAY_S, DEFAULT_DECISION_TIMEOUT_S, DEFAULT_REFIT_S, MAX_KEEP_DAYS, MAX_QUEUED
from deepshare.runtime.logs import MAX_TAIL_LINES

DEFAULT_STATE = ".deepshare/scheduler"
seconds = number(float, lambda v: 0.001 <= v <= 86400, "a number of seconds in [0.001, 86400]")
"""Periods and timeouts: at least a millisecond (``--interval 5e-324`` spun the loop on one core)
and at most a day (larger values overflow the waits)."""
EXIT_RUNTIME = 1
JOB_STATES = ("queued", "running", "finished", "failed", "cancelled")
"""The journal's job states (``deepshare.runtime.journal.JobState``; not imported to keep the parser light)."""
last_jobs = number(int, lambda v: 1 <= v <= 100_000, "an integer in 1..100000")


LOCAL_NODES_MAX = 64
"""Most ``--local`` nodes: each is a Ray node (its own processes) on this machine."""
LOCAL_NODES = in_range(int, 1, LOCAL_NODES_MAX, "nodes")
MAX_GPUS = 65_536 * 1024
"""Most ``--max-gpus``: the largest cluster a spec describes (``simulate --nodes`` x ``--gpus-per-node``)."""


def _t(value: Any) -> str:
    """A server's text for a table cell or a line: every control character escaped
    (``\\x1b``, ``\\n``): a job's name, error or node cannot drive the terminal or forge a line."""
    return one_line(str(value))


def _log_text(text: str) -> str:
    """A rank log's text for the terminal: line breaks and tabs kept (CRLF, and a lone carriage
    return, which a progress bar writes to redraw its line, read as a line break: a lone one could
    overwrite a printed line), every other control character (an escape sequence, a C1 or bidi
    control) escaped: a job's log is the job's own output, and the one reading it may be the admin."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.isprintable():
        return text
    return "".join(ch if ch in "\n\t" else one_line(ch) for ch in text)


def _fmt(value: float | None, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def _alloc(placement: Any) -> str:
    return "-" if not placement else ",".join(f"{_t(p.node)}:{p.gpus}" for p in placement)


# -- handlers ------------------------------------------------------------------------------
def cmd_scheduler_start(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.runtime.launcher import LaunchSettings
    from deepshare.runtime.loop import LoopConfig
    from deepshare.runtime.service import RuntimeFailure, ServiceConfig, run_scheduler

    if args.policy == "":  # an unset variable: it ran the default policy, silently
        raise DeepShareError("--policy '': an empty name; give a policy (default rl-hybrid: leave --policy out)")
    if args.policy is not None and args.placement_url:
        raise DeepShareError("give at most one of --policy and --placement-url")
    if args.placement_token is not None and not args.placement_url:  # it was dropped, silently
        raise DeepShareError("--placement-token goes with --placement-url")
    if args.refit_interval is not None and args.contention_knowledge != "learned":  # nothing is refitted
        raise DeepShareError("--refit-interval goes with --contention-knowledge learned")
    if not args.local and (args.nodes is not None or args.gpus_per_node is not None):
        raise DeepShareError("--nodes and --gpus-per-node need --local")
    if not args.local and args.local_label:
        raise DeepShareError("--local-label needs --local")
    if args.local and args.address != "auto":
        raise DeepShareError("give at most one of --local and --address")
    from deepshare.runtime.cluster import label_levels
    from deepshare.runtime.localcluster import local_labels

    levels = label_levels(args.level or (), nvlink=args.nvlink, uplink_gbps=args.uplink_gbps or (),
                          oversubscription=args.oversubscription or ())
    labels = local_labels(args.local_label or (), args.nodes or 2) if args.local else {}
    policy = scheduling_policy(args.policy, args.placement_url, _placement_token(args))  # a bad name fails before Ray starts
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ServiceConfig(
        state_dir=args.state, address=args.address,
        local_nodes=(args.nodes or 2) if args.local else None, local_gpus_per_node=args.gpus_per_node or 4,
        local_labels=tuple(labels.items()), levels=levels,
        host=args.host, port=args.port, max_gpus=args.max_gpus, max_queued=args.max_queued,
        allowed_hosts=tuple(args.allowed_host or ()),
        contention_knowledge=args.contention_knowledge,
        refit_s=DEFAULT_REFIT_S if args.refit_interval is None else args.refit_interval, tenants_file=args.tenants,
        requeue_lost_runs=args.requeue_lost_runs,
        loop=LoopConfig(interval_s=args.interval, preempt_grace_s=args.preempt_grace,
                        launch=LaunchSettings(pg_timeout_s=args.launch_timeout),
                        max_launch_attempts=args.max_launch_attempts, decision_timeout_s=args.decision_timeout,
                        keep_finished_s=None if args.keep_finished is None else args.keep_finished * DAY_S),
    )
    try:
        return run_scheduler(config, policy, announce=lambda line: (print_line(out, line), out.file.flush()),
                     warn=lambda line: (print_line(err, line), err.file.flush()))
    except RuntimeFailure as exc:
        print_line(err, f"deepshare: error: {exc}")
        return EXIT_RUNTIME


def scheduling_policy(name: str | None, placement_url: str | None, placement_token: str | None) -> Any:
    """The policy the scheduler runs: one from the registry (default rl-hybrid), or the HTTP
    placement service's client at ``placement_url`` (same ``decide``). Built here so the runtime
    never imports the serving layer."""
    if placement_url:
        from deepshare.serving.client import PlacementClient

        return PlacementClient(placement_url, token=placement_token)
    from deepshare.policies import make_policy

    return make_policy("rl-hybrid" if name is None else name)  # '' is refused by name, not run as the default


def _placement_token(args: argparse.Namespace) -> str | None:
    """With ``--placement-url``: ``--placement-token``, else ``$DEEPSHARE_SERVE_TOKEN``, checked
    before Ray starts (a line break in it would fail every tick's request instead)."""
    from deepshare.serving.client import SERVE_TOKEN_ENV
    from deepshare.infra.httpauth import check_token

    if not args.placement_url:
        return None
    if args.placement_token:
        return check_token(args.placement_token, "--placement-token")
    if os.environ.get(SERVE_TOKEN_ENV):
        return check_token(os.environ[SERVE_TOKEN_ENV], f"${SERVE_TOKEN_ENV}")
    return None


def _client(args: argparse.Namespace) -> Any:
    """The scheduler client from ``--url`` / ``--state`` / ``--token`` (see the module docstring)."""
    from deepshare.runtime.httpclient import SchedulerClient
    from deepshare.runtime.private import check_not_shared
    from deepshare.runtime.token import client_token

    url, origin = args.url, None
    if args.token == "":  # an unset variable (--token "$T"): the state folder's token went instead, silently
        raise DeepShareError("--token '': an empty token; give the token, or leave --token out")
    if url is not None:
        # the state folder's token is for the scheduler its scheduler.json names: sent to another
        # --url (a project folder's default state, a typo'd host) it leaked the admin token there
        token_dir = args.state if _state_names(args.state, url) else None
        return SchedulerClient(url, client_token(args.token, token_dir, url_given=token_dir is None))
    check_not_shared(args.state)  # else another user's scheduler.json could take the token elsewhere
    info = Path(args.state) / "scheduler.json"
    try:
        os.stat(info)
    except FileNotFoundError:
        raise DeepShareError(f"no --url, and no scheduler has written {info}; give --url or --state DIR") from None
    except OSError:
        pass  # reading it says why, in one line
    url = _state_url(args.state)
    from deepshare.runtime.statelock import scheduler_running

    if not scheduler_running(args.state):  # the token must not go to whoever took the port since
        raise DeepShareError(f"--state {args.state}: no scheduler is running on this state folder "
                             f"({info} is from one that has stopped); start it, or give --url")
    origin = f"{url} (the URL in {info}, written when the scheduler last started)"
    return SchedulerClient(url, client_token(args.token, args.state), origin=origin)


def _state_url(state: str) -> str:
    """The URL the scheduler of ``state`` wrote to its scheduler.json, else a DeepShareError
    naming the folder and the file."""
    info = Path(state) / "scheduler.json"
    text = read_input_text(info, "scheduler URL file", CONFIG_BYTES, label=f"--state {state}: {info}")
    try:
        url = load_json(text, str(info), "the scheduler's URL")["url"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DeepShareError(f"--state {state}: cannot read the scheduler's URL from {info} ({exc})") from None
    if not isinstance(url, str):
        raise DeepShareError(f"--state {state}: {info} has no URL")
    return url


def _state_names(state: str, url: str) -> bool:
    """Whether ``state``'s scheduler.json names ``url`` (a trailing ``/`` aside): then its token is
    that scheduler's, and may go to ``url``."""
    try:
        return _state_url(state).rstrip("/") == url.rstrip("/")
    except (DeepShareError, OSError):
        return False


STATE_FILES = ("scheduler.json", "token", "journal.sqlite", "journal.sqlite-wal", "journal.sqlite-shm", "scheduler.lock")
"""What a scheduler keeps in its state folder: a client's ``--json`` must never replace one of them."""


def _state_files(args: argparse.Namespace) -> dict[str, list[str]]:
    """The state folder's files, as inputs for :func:`check_outputs` (missing ones are skipped)."""
    return {"--state": [str(Path(args.state) / name) for name in STATE_FILES]}


def cmd_submit(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.runtime.spec import load_spec_file

    check_outputs({"--json": args.json}, {"JOB.yaml": args.spec, **_state_files(args)})
    spec = load_spec_file(args.spec)
    client = _client(args)
    job = client.submit(spec)
    if args.json:
        write_json(args.json, job.model_dump(mode="json"), out, "job")
    if not to_stdout(args.json):
        print_line(out, f"submitted {_t(job.id)} ({job.gpus} GPUs, {_t(job.model)})")
    return 0


def cmd_jobs(args: argparse.Namespace, out: Any, err: Any) -> int:
    check_outputs({"--json": args.json}, _state_files(args))
    client = _client(args)
    if args.id:
        detail = client.job(args.id)
        if args.json:
            write_json(args.json, detail.model_dump(mode="json"), out, "job")
            if to_stdout(args.json):
                return 0
        print_line(out, f"{_t(detail.id)}: {_t(detail.state)}, {detail.gpus} GPUs ({_t(detail.model)}), placement "
                        f"{_alloc(detail.placement)}, step {_fmt(detail.step, 'd')}, {detail.preemptions} preemption(s); "
                        f"queue {_t(detail.queue or '-')}, priority {_t(detail.priority or '-')}, "
                        f"borrowed {_borrowed(detail.borrowed_gpus)}")
        for r in detail.runs:
            print_line(out, f"  run {r.attempt} at {_alloc(r.placement)}: measured {_fmt(r.measured_throughput)} samples/s,"
                        f" predicted {_fmt(r.predicted_throughput)}; from step {_fmt(r.start_step, 'd')};"
                        f" {_t(r.end_reason or 'running')}")
        if detail.error:
            for line in detail.error.splitlines() or [""]:  # a rank's log tail: its lines, each escaped
                print_line(out, f"  error: {line}")
        return 0
    fetched = client.jobs(tuple(args.job_state or ()), min(args.last + 1, 100_000))  # one more: are there more?
    jobs, more = fetched[-args.last:], len(fetched) > args.last
    if args.json:
        write_json(args.json, [j.model_dump(mode="json") for j in jobs], out, "job list")
        if to_stdout(args.json):
            return 0
    from rich.table import Table

    table = Table(header_style="bold")
    for col in ("id", "state", "queue", "priority", "GPUs", "borrowed", "model", "placement", "run", "preempt", "step",
                "measured samples/s", "predicted samples/s"):
        table.add_column(col, justify="left" if col in ("id", "state", "queue", "priority", "model", "placement") else "right")
    for j in jobs:
        table.add_row(_t(j.id), _t(j.state) + (" (cancelling)" if j.cancel_requested and j.state == "running" else ""),
                      _t(j.queue or "-"), _t(j.priority or "-"), str(j.gpus), _borrowed(j.borrowed_gpus), _t(j.model),
                      _alloc(j.placement), str(j.attempt), str(j.preemptions),
                      _fmt(j.step, "d"), _fmt(j.measured_throughput), _fmt(j.predicted_throughput))
    out.print(table)
    if more:
        print_line(out, f"(the {args.last} most recently submitted; older ones: --last N)")
    return 0


def _borrowed(gpus: int | None) -> str:
    """The ``borrowed`` column: ``-`` (not running under a tenants file), ``no``, or ``yes (N)``:
    N of its GPUs above its queue's nominal quota."""
    return "-" if gpus is None else "no" if gpus == 0 else f"yes ({gpus})"


def cmd_queues(args: argparse.Namespace, out: Any, err: Any) -> int:
    """Per-queue usage against quotas: the caller's queues (the admin's: all)."""
    check_outputs({"--json": args.json}, _state_files(args))
    rows = _client(args).queues()
    if args.json:
        write_json(args.json, rows, out, "queue usage")
        if to_stdout(args.json):
            return 0
    from rich.table import Table

    table = Table(header_style="bold")
    for col in ("queue", "GPUs in use", "nominal", "borrowed", "pending jobs", "pending GPUs"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for r in rows:
        table.add_row(_t(r.get("queue")), _t(r.get("gpus_in_use")), _fmt(r.get("nominal_gpus"), "d"),
                      _t(r.get("borrowed_gpus")), _t(r.get("pending_jobs")), _t(r.get("pending_gpus")))
    out.print(table)
    return 0


def cmd_scheduler_reload(args: argparse.Namespace, out: Any, err: Any) -> int:
    """Ask a running scheduler to re-read its tenants file (the admin token); the old one stays on error."""
    done = _client(args).reload_tenants()
    print_line(out, f"tenants file reloaded: {_t(done.get('queues'))} queue(s), {_t(done.get('tenants'))} tenant token(s)")
    return 0


def cmd_scheduler_token(args: argparse.Namespace, out: Any, err: Any) -> int:
    """A new random tenant token, and the tenants file entry holding its hash (never the token)."""
    import json
    import secrets

    from deepshare.runtime.tenancy import token_sha256

    token = secrets.token_urlsafe(32)
    entry = {"name": args.name, "queues": args.queue, "sha256": token_sha256(token)}
    print_line(out, f"token (give it to {args.name}; it is not stored anywhere): {token}")
    print_line(out, "tenants file entry, under tokens:")
    print_line(out, f"  - {json.dumps(entry)}")
    return 0


def cmd_contention(args: argparse.Namespace, out: Any, err: Any) -> int:
    """Show the scheduler's learned contention model: its version, error and per-model fits."""
    check_outputs({"--json": args.json}, _state_files(args))
    doc = _client(args).contention()
    if args.json:
        write_json(args.json, doc, out, "contention fit")
        if to_stdout(args.json):
            return 0
    from rich.table import Table

    fitted = "never" if doc.get("fitted_at") is None else f"at {doc['fitted_at']:.0f}"
    print_line(out, f"contention fit v{doc.get('version', 0)} over the {_t(doc.get('prior'))} model, {fitted}, from "
                    f"{doc.get('runs', 0)} run(s): ratio MAE {_fmt(doc.get('mae_learned'), '.4f')} "
                    f"(the prior's {_fmt(doc.get('mae_prior'), '.4f')}); refit every {doc.get('refit_s', 0):g} s")
    models = doc.get("models") or {}
    if models:
        table = Table(header_style="bold")
        for col in ("model", "isolated x", "contention exponent", "reports", "contended"):
            table.add_column(col, justify="left" if col == "model" else "right")
        for name, fit in models.items():
            table.add_row(_t(name), f"{fit['scale']:.3f}", f"{fit['exponent']:.3f}", f"{fit['observations']:.0f}",
                          f"{fit['contended']:.0f}")
        out.print(table)
    return 0


def cmd_cancel(args: argparse.Namespace, out: Any, err: Any) -> int:
    status, job = _client(args).cancel(args.id)
    print_line(out, f"cancelled {_t(job.id)}" if status == 200 else f"cancelling {_t(job.id)}: asked it to checkpoint and stop")
    return 0


def cmd_logs(args: argparse.Namespace, out: Any, err: Any) -> int:
    """Print a rank's log (what it holds when first read); with ``--follow`` keep printing until
    the job is over, reading a log truncated or replaced meanwhile again from its start, as
    ``tail -F`` does. The log's text is the job's own output: its control characters are escaped."""
    client = _client(args)
    offset = 0
    end: int | None = None  # without --follow: the size at the first read (a log that keeps growing ends there)
    held = ""  # a chunk's last "\r": the "\n" of its CRLF may open the next chunk (64 KiB cuts fall anywhere)

    def write(text: str, last: bool = False) -> None:
        nonlocal held
        text, held = held + text, ""
        if text.endswith("\r") and not last:
            text, held = text[:-1], "\r"
        if text:
            out.file.write(_log_text(text))
    if args.tail is not None:  # the server says where the last lines start; read on from there
        offset = client.logs(args.id, args.rank, 0, tail=args.tail).offset
    while True:
        chunk = client.logs(args.id, args.rank, offset)
        if chunk.size < offset:  # shrunk below what was read: truncated, rotated or removed
            print_line(err, f"deepshare logs: {args.id} rank {args.rank}: the log shrank to {chunk.size:,} bytes "
                            f"(truncated or replaced){'; reading it again from the start' if args.follow else ''}")
            write("", last=True)
            out.file.flush()
            if not args.follow:
                return 0
            offset = 0
            time.sleep(args.poll)  # a server that says so at every read must not make this a busy loop
            continue
        if end is None and not args.follow:
            end = chunk.size
        if chunk.text:
            write(chunk.text)
            out.file.flush()
        offset = chunk.next_offset
        if chunk.next_offset < chunk.size and (end is None or offset < end):
            continue  # more is there now: ask again at once
        if not args.follow or client.job(args.id).state in ("finished", "failed", "cancelled"):
            if args.follow:  # it may have written its last lines after the read above
                while (last := client.logs(args.id, args.rank, offset)).text:
                    write(last.text)
                    offset = last.next_offset
            write("", last=True)
            out.file.flush()
            return 0
        time.sleep(args.poll)


# -- parser --------------------------------------------------------------------------------
def _url(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", metavar="URL",
                   help="the scheduler, e.g. http://127.0.0.1:8470 (default: the URL in --state's scheduler.json)")
    p.add_argument("--state", default=DEFAULT_STATE, metavar="DIR",
                   help=f"the scheduler's state folder, for its URL and token (default {DEFAULT_STATE})")
    p.add_argument("--token", metavar="TOKEN",
                   help="the scheduler's token (default: $DEEPSHARE_SCHEDULER_TOKEN, else DIR/token of --state, which "
                        "goes to a --url only when DIR/scheduler.json names that URL; a flag's value is visible to "
                        "other users in `ps`)")


def register(subparsers: Any) -> None:
    """Add ``scheduler start|reload|token``, ``submit``, ``jobs``, ``queues``, ``contention``, ``cancel`` and
    ``logs`` to the main CLI's subparsers."""
    sched = command(subparsers, "scheduler", "the live scheduler: run jobs on a Ray cluster under a policy",
                    "deepshare scheduler start --local --nodes 2 --gpus-per-node 4 --state runs/sched")
    sub = sched.add_subparsers(dest="scheduler_command", metavar="ACTION", required=True)
    p = command(sub, "start", "run the scheduler (control loop + HTTP API) until interrupted",
                "deepshare scheduler start --local --nodes 2 --gpus-per-node 4 --port 8470 --state runs/sched",
                "deepshare scheduler start --address auto --policy rl-hybrid --state /shared/deepshare/sched",
                "deepshare scheduler start --address auto --level nvlink_domain=nvidia.com/gpu.clique --nvlink "
                "nvlink_domain --level leaf=topology.kubernetes.io/rack --state /shared/deepshare/sched",
                "deepshare scheduler start --local --nodes 4 --local-label example.com/leaf=l0,l0,l1,l1 "
                "--level leaf=example.com/leaf --state runs/sched")
    p.add_argument("--address", default="auto", metavar="auto|HOST:PORT", help="Ray cluster to join (default auto)")
    p.add_argument("--local", action="store_true", help="start a fake multi-node Ray cluster on this machine")
    p.add_argument("--nodes", type=LOCAL_NODES, metavar="N",
                   help=f"--local: nodes, 1..{LOCAL_NODES_MAX} (default 2)")
    p.add_argument("--gpus-per-node", type=gpus_per_node, metavar="G", help="--local: fake GPUs per node, 1..1024 (default 4)")
    p.add_argument("--local-label", action="append", metavar="KEY=V0,V1,...",
                   help="--local, repeatable: label KEY on the fake nodes, one value per node in order (an empty "
                   "value: no label), e.g. example.com/leaf=l0,l0,l1,l1 with --level leaf=example.com/leaf")
    p.add_argument("--level", action="append", metavar="NAME=LABEL_KEY",
                   help="repeatable, lowest level first: a fabric level and the node label naming each node's domain "
                   "(e.g. --level nvlink_domain=nvidia.com/gpu.clique --level leaf=topology.kubernetes.io/rack); "
                   "jobs' required_level / preferred_level / slice_level name these levels. A GPU node without "
                   "the label is a domain of its own. Default: one level, rack (the deepshare.io/rack label)")
    p.add_argument("--nvlink", metavar="LEVEL",
                   help="the lowest --level's domains are NVLink domains spanning nodes (e.g. GB200 NVL72 racks)")
    p.add_argument("--uplink-gbps", action="append", metavar="LEVEL=G",
                   help="repeatable: each LEVEL domain's uplink in Gbit/s (0: non-blocking; the default)")
    p.add_argument("--oversubscription", action="append", metavar="LEVEL=R",
                   help="repeatable: each LEVEL domain's uplink is its nodes' NIC bandwidth over R (2 means 2:1)")
    p.add_argument("--policy", metavar="POLICY",
                   help="a name from `deepshare policies`, NAME=CHECKPOINT for a learned policy, or "
                   "package.module:ClassOrFactory (default rl-hybrid, the shipped learned policy)")
    p.add_argument("--placement-url", metavar="URL", help="ask the placement service at URL instead")
    p.add_argument("--placement-token", metavar="TOKEN",
                   help="bearer token for --placement-url (default: $DEEPSHARE_SERVE_TOKEN, which keeps it out of `ps`)")
    p.add_argument("--max-gpus", type=in_range(int, 0, MAX_GPUS, "GPUs (0: the GPUs up now)"), default=0, metavar="N",
                   help="accept jobs of up to N GPUs even when fewer are up now (autoscaling clusters; default: the GPUs up now)")
    p.add_argument("--host", type=bind_host, default="127.0.0.1",
                   help="address the HTTP API binds (default 127.0.0.1; anything else exposes it to the network)")
    p.add_argument("--allowed-host", action="append", type=host_header_name, metavar="NAME",
                   help="also accept this name in the Host header (repeatable; default: the bound address and localhost)")
    p.add_argument("--port", type=port_number, default=8470, metavar="P", help="HTTP API port (default 8470; 0: any)")
    p.add_argument("--state", default=DEFAULT_STATE, metavar="DIR",
                   help=f"journal, token and rank logs folder (default {DEFAULT_STATE}); reuse it to recover")
    p.add_argument("--interval", type=seconds, default=1.0, metavar="S", help="control loop period (default 1)")
    p.add_argument("--preempt-grace", type=seconds, default=30.0, metavar="S",
                   help="seconds a cancelled, preempted or migrated job gets to checkpoint and exit before it is removed; "
                        "the loop goes on meanwhile (default 30)")
    p.add_argument("--launch-timeout", type=seconds, default=30.0, metavar="S",
                   help="seconds to wait for a placement group's GPUs before requeueing (default 30)")
    p.add_argument("--decision-timeout", type=seconds, default=DEFAULT_DECISION_TIMEOUT_S, metavar="S",
                   help="seconds a tick's decision may take: the planner answers within it; a learned policy or the planner "
                   "still deciding, or a --placement-url request still waiting, is stopped and the tick applies nothing "
                   f"(heuristics are not stopped) (default {DEFAULT_DECISION_TIMEOUT_S:g})")
    p.add_argument("--max-queued", type=positive_int, default=MAX_QUEUED, metavar="N",
                   help=f"queued jobs at most; a submission beyond gets 429 (default {MAX_QUEUED:,}); "
                        "with --tenants, each queue at most its share, N over the file's queues")
    p.add_argument("--max-launch-attempts", type=positive_int, default=3, metavar="N",
                   help="consecutive failed launches (program not found, ...) before a job fails (default 3)")
    p.add_argument("--contention-knowledge", choices=("learned", "exact"), default="learned",
                   help="learned (default): predict with a contention model refitted from the jobs' measured throughputs "
                   "(versions in DIR/contention, shown by `deepshare contention`); exact: with the shipped model only")
    p.add_argument("--refit-interval", type=seconds, metavar="S",
                   help=f"seconds between two refits of the learned contention model (default {DEFAULT_REFIT_S:g}; "
                   "--contention-knowledge learned only)")
    p.add_argument("--keep-finished", type=in_range(float, 0, MAX_KEEP_DAYS, "days", low_open=True), metavar="DAYS",
                   help="delete the jobs that ended (finished, failed, cancelled) more than DAYS ago from the journal, "
                   "with their rank logs, about once a minute (default: keep every job; checkpoints are left)")
    p.add_argument("--tenants", metavar="FILE",
                   help="tenants file (docs/tenants.md): queues with GPU quotas, cohorts, priority classes, and tenants' "
                   "token hashes; every decision runs behind its admission, each tenant sees only its queues' jobs. "
                   "Reloaded on SIGHUP and by `deepshare scheduler reload`")
    p.add_argument("--requeue-lost-runs", action="store_true",
                   help="the runs of the state folder's running jobs on the Ray cluster they were launched on were stopped "
                   "(or that cluster is gone): requeue them on this one (without it such a start is refused while "
                   "that cluster answers or cannot be reached: they may still run there; one whose address refuses "
                   "connections is taken as gone without it)")
    p.set_defaults(func=cmd_scheduler_start)

    p = command(sub, "reload", "re-read a running scheduler's tenants file (admin token; the old one stays on error)",
                "deepshare scheduler reload --state runs/sched")
    _url(p)
    p.set_defaults(func=cmd_scheduler_reload)

    p = command(sub, "token", "make a tenant token and print its tenants file entry (the file keeps only its hash)",
                "deepshare scheduler token --name alice --queue team-a")
    p.add_argument("--name", required=True, metavar="TENANT", help="the tenant's name")
    p.add_argument("--queue", action="append", required=True, metavar="QUEUE",
                   help="a queue it owns (repeatable; the first is where its jobs naming no queue go)")
    p.set_defaults(func=cmd_scheduler_token)

    p = command(subparsers, "submit", "submit a job spec (YAML or JSON) to a running scheduler",
                "deepshare submit --state runs/sched examples/jobs/tiny.yaml")
    _url(p)
    p.add_argument("spec", metavar="JOB.yaml")
    add_json_flag(p, "the job")
    p.set_defaults(func=cmd_submit)

    p = command(subparsers, "jobs", "list a scheduler's jobs (or show one with its runs)",
                "deepshare jobs --state runs/sched", "deepshare jobs --state runs/sched tiny-1 --json -")
    _url(p)
    p.add_argument("id", nargs="?", metavar="ID", help="show this job's runs: measured vs predicted throughput")
    p.add_argument("--job-state", action="append", choices=JOB_STATES, metavar="S",
                   help=f"list only jobs in this state (repeatable; one of {', '.join(JOB_STATES)})")
    p.add_argument("--last", type=last_jobs, default=1000, metavar="N",
                   help="list the N most recently submitted jobs (default 1000, at most 100000)")
    add_json_flag(p, "the job list (or the job)")
    p.set_defaults(func=cmd_jobs)

    p = command(subparsers, "queues", "show a scheduler's per-queue usage against quotas (your queues)",
                "deepshare queues --state runs/sched")
    _url(p)
    add_json_flag(p, "the per-queue usage")
    p.set_defaults(func=cmd_queues)

    p = command(subparsers, "contention", "show the scheduler's learned contention model (version, error, fits)",
                "deepshare contention --state runs/sched")
    _url(p)
    add_json_flag(p, "the fit document")
    p.set_defaults(func=cmd_contention)

    p = command(subparsers, "cancel", "cancel a queued or running job", "deepshare cancel --state runs/sched tiny-1")
    _url(p)
    p.add_argument("id", metavar="ID")
    p.set_defaults(func=cmd_cancel)

    p = command(subparsers, "logs", "print a job's rank log (kept in the scheduler's state folder)",
                "deepshare logs --state runs/sched tiny-1 --rank 0 --follow")
    _url(p)
    p.add_argument("id", metavar="ID")
    p.add_argument("--rank", type=non_negative_int, default=0, metavar="N", help="which rank (default 0)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the job is over")
    p.add_argument("--tail", type=in_range(int, 0, MAX_TAIL_LINES, "lines"), metavar="N",
                   help="start at the last N lines (a carriage return breaks a line, as printed; the scheduler looks "
                   "back over at most the log's last 64 MiB), then, with --follow, go on")
    p.add_argument("--poll", type=positive_float, default=1.0, metavar="S", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_logs)
