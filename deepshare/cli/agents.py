"""``deepshare agents ...``: probe this machine, start the monitor and agents, show the view.

Only :func:`register` is public: :func:`deepshare.cli.build_parser` calls it with its subparsers. Every
handler has the main CLI's signature ``(args, out, err) -> exit status`` and raises
:class:`~deepshare.core.errors.DeepShareError` for bad input or an unreachable cluster (the main
CLI prints one line and exits 2). Ray is imported only by the actions that need it.
"""

from __future__ import annotations

import argparse
from typing import Any

from deepshare.agents.config import MIN_INTERVAL_S, MONITOR_NAME, AgentConfig, default_report_interval, report_period
from deepshare.cli.output import add_json_flag, check_outputs, to_stdout, write_json
from deepshare.cli.args import bind_host, host_header_name, number, port_number, print_line
from deepshare.cli.help import command
from deepshare.core.errors import DeepShareError, one_line

MAX_INTERVAL_S = 3600.0
"""Longest sampling period and probe window: an hour (beyond that rates are meaningless, and
timers of 1e10 s overflow the platform's clock types)."""
MAX_REPORT_S = 86400.0
"""Longest report interval and stale timeout: a day."""
EXIT_RUNTIME = 1
"""Exit status of a runtime failure (Ray did not start or answer), as opposed to bad input (2)."""
START_TIMEOUT_S = 120.0
"""How long ``agents start`` waits for each answer of the monitor before giving up."""
STOP_TIMEOUT_S = 60.0
"""How long ``agents stop`` waits for the monitor to stop its agents before killing them by name."""
STATUS_TIMEOUT_S = 60.0
"""How long ``agents status`` waits for the monitor's view (it answers in milliseconds when alive)."""


def seconds(high: float) -> Any:
    """An argparse type for a duration in [:data:`~deepshare.agents.config.MIN_INTERVAL_S`,
    ``high``] seconds that names the accepted range (a 5e-324 s interval would overflow the
    report period's count of samples)."""
    return number(float, lambda v: MIN_INTERVAL_S <= v <= high, f"seconds in [{MIN_INTERVAL_S:g}, {high:g}]")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# -- handlers ------------------------------------------------------------------------------
def cmd_probe(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.agents.probes import local_probes
    from deepshare.agents.sampler import measure

    check_outputs({"--json": args.json}, {})  # before the probe window, not after it
    probes = local_probes()
    try:
        results = measure(probes, args.window)
    finally:
        for probe in probes:
            probe.close()
    if args.json is not None:
        doc = {"probes": [
            {"name": status.name, "available": status.available, "reason": status.reason,
             "links": [{"link": r.link, "rx_bytes_per_s": r.rx_bytes_per_s, "tx_bytes_per_s": r.tx_bytes_per_s,
                        "utilization": r.utilization} for r in rates]}
            for status, rates in results
        ]}
        write_json(args.json, doc, out, "probe results")
        if to_stdout(args.json):
            return 0
    for status, rates in results:
        if not status.available:
            print_line(out, f"{status.name}: unavailable ({status.reason})")
            continue
        print_line(out, f"{status.name}: available, {len(rates)} link(s) over {args.window:g} s")
        for r in rates:
            util = "capacity unknown" if r.utilization is None else f"utilisation {r.utilization:.4f}"
            print_line(out, f"  {r.link:24s} rx {r.rx_bytes_per_s:14,.0f} B/s  tx {r.tx_bytes_per_s:14,.0f} B/s  {util}")
    return 0


def cmd_start(args: argparse.Namespace, out: Any, err: Any) -> int:
    import ray

    from deepshare.agents.deploy import start_monitor

    if args.report_interval is not None and args.report_interval < args.interval:
        raise DeepShareError(
            f"--report-interval {args.report_interval:g} must be at least --interval {args.interval:g}"
            " (an agent reports at most once per sample)"
        )
    period = report_period(args.interval, args.report_interval or default_report_interval(args.interval))
    if args.stale_after is not None and args.stale_after <= period:
        given = "--report-interval" if args.report_interval is not None else "default report interval"
        raise DeepShareError(
            f"--stale-after {args.stale_after:g} must exceed the report period {period:g} s ({given} rounded up to"
            f" whole --interval {args.interval:g} samples), or nodes turn stale between reports"
        )
    config = AgentConfig(interval_s=args.interval, report_interval_s=args.report_interval, stale_after_s=args.stale_after,
                         metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                         metrics_allowed_hosts=tuple(args.metrics_allowed_host or ()))
    warning = metrics_exposure_warning(args.metrics_host) if args.metrics_port is not None else None
    if warning:
        print_line(err, warning)
    if not _joined(args.address, err):
        return EXIT_RUNTIME
    try:
        monitor, created = start_monitor(config, name=args.name, timeout_s=START_TIMEOUT_S)
        agents, running, address, problem = ray.get(
            [monitor.agents.remote(), monitor.config.remote(), monitor.metrics_address.remote(),
             monitor.metrics_problem.remote()], timeout=START_TIMEOUT_S)
    except DeepShareError:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray's timeouts and actor deaths: one line, exit 1
        print_line(err, f"deepshare: error: the contention monitor did not start ({type(exc).__name__}: {_cause(exc)})")
        return EXIT_RUNTIME
    verb = "started" if created else "already running (its settings kept)"
    print_line(out, f"contention monitor {args.name!r} {verb}; agents on {len(agents)} node(s): {', '.join(one_line(str(a)) for a in agents)}")
    print_line(out, f"sampling every {running.interval_s:g} s, reporting every {running.report_period:g} s,"
                f" stale after {running.stale_after:g} s")
    return _print_metrics(args, address, problem, running, err, out)


def _print_metrics(args: argparse.Namespace, address: Any, problem: str | None, running: AgentConfig,
                  err: Any, out: Any) -> int:
    """Print where the monitor serves metrics, the address it bound (not the one asked for: a
    running monitor keeps its own). An endpoint that could not be bound (the port is taken on
    the monitor's node) is an error that says the monitor and its agents run on without it, and
    how to stop them; ``--metrics-port`` given to a running monitor that serves none is a warning."""
    from deepshare.agents.exporter import url_host

    if address is not None:
        host, port = address
        print_line(out, f"Prometheus metrics at http://{url_host(host)}:{port}/metrics on the monitor's node")
        return 0
    stop = f"`deepshare agents stop --address {args.address} --name {args.name}`"
    if problem is not None:
        where = f"{url_host(running.metrics_host)}:{running.metrics_port}"
        if args.metrics_port is None:
            print_line(err, f"deepshare: warning: the running monitor cannot serve its metrics on {where} ({problem})")
            return 0
        raise DeepShareError(
            f"--metrics-port {args.metrics_port}: the monitor cannot serve metrics on {where} ({problem});"
            f" the monitor {args.name!r} and its agents keep running without them: {stop} stops them")
    if args.metrics_port is not None:
        print_line(err, f"deepshare: warning: --metrics-port {args.metrics_port}: the running monitor serves no"
                        f" metrics (its settings kept); {stop} first to start one that does")
    return 0


def metrics_exposure_warning(host: str) -> str | None:
    """The one-line warning for a non-loopback ``--metrics-host`` (what is exposed), or None on
    loopback; like ``serve`` and ``scheduler start`` say for their ``--host``."""
    from deepshare.core.hosts import is_loopback

    if is_loopback(host.strip("[]")):
        return None
    return (f"warning: --metrics-host {host} serves every node's link and GPU metrics (node names, link and GPU "
            "load) to the network, without a token or TLS: keep the port behind a firewall or a trusted network")


def _joined(address: str, err: Any) -> bool:
    """Join the cluster (:func:`~deepshare.agents.deploy.connect`); a failure Ray raises that
    ``connect`` does not translate (a GCS that accepts the connection, then times out) is one
    line on ``err`` and ``False`` (exit 1), never a traceback."""
    from deepshare.agents import deploy

    try:
        deploy.connect(address)
    except DeepShareError:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray's start-up and timeout errors
        print_line(err, f"deepshare: error: --address {address}: Ray did not answer ({type(exc).__name__}: {_cause(exc)})")
        return False
    return True


def _cause(exc: BaseException) -> str:
    """The last line of a Ray error's cause (or of ``exc``): what went wrong, without the
    traceback Ray puts before it; the exception's type name when it has no message."""
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    return lines[-1] if lines else type(cause).__name__


def cmd_status(args: argparse.Namespace, out: Any, err: Any) -> int:
    import ray

    from deepshare.agents.deploy import find_monitor

    check_outputs({"--json": args.json}, {})  # before joining the cluster
    if not _joined(args.address, err):
        return EXIT_RUNTIME
    monitor = find_monitor(args.name)
    try:
        snapshot = ray.get(monitor.view.remote(), timeout=STATUS_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - Ray's timeouts and actor deaths: one line, exit 1
        print_line(err, f"deepshare: error: the contention monitor did not answer ({type(exc).__name__}: {_cause(exc)})")
        return EXIT_RUNTIME
    if args.json is not None:
        write_json(args.json, snapshot.to_dict(), out, "link view")
        if to_stdout(args.json):
            return 0
    from rich.table import Table

    table = Table(title=f"link contention (stale after {snapshot.stale_after_s:g} s without a report)", header_style="bold")
    for col in ("node", "link", "utilisation", "contention", "report age s", "stale"):
        table.add_column(col, justify="left" if col in ("node", "link") else "right")
    for n in snapshot.nodes:
        links = n.report.links if n.report is not None else ()
        age, stale = f"{n.age_s:.1f}", "STALE" if n.stale else ""
        node = one_line(n.node)  # names come from hosts and probes: never a terminal escape
        if not links:
            table.add_row(node, "(no report yet)" if n.report is None else "(no links)", "-", "-", age, stale)
        for s in links:
            table.add_row(node, one_line(s.link), _fmt(s.utilization, ".4f"), _fmt(s.contention, ".3f"), age, stale)
    out.print(table)
    return 0


def cmd_stop(args: argparse.Namespace, out: Any, err: Any) -> int:
    from deepshare.agents.deploy import stop_monitor

    if not _joined(args.address, err):
        return EXIT_RUNTIME
    try:
        stopped = stop_monitor(args.name, timeout_s=STOP_TIMEOUT_S,
                               warn=lambda line: print_line(err, f"deepshare: warning: {line}"))
    except DeepShareError:
        raise
    except Exception as exc:  # noqa: BLE001 - Ray's errors while killing: one line, exit 1
        print_line(err, f"deepshare: error: the contention monitor did not stop ({type(exc).__name__}: {_cause(exc)})")
        return EXIT_RUNTIME
    print_line(out, f"stopped contention monitor {args.name!r} and {stopped} agent(s)")
    return 0


# -- parser --------------------------------------------------------------------------------
def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default="auto", metavar="auto|HOST:PORT",
                   help="Ray cluster to join (default auto: the one this machine belongs to)")
    p.add_argument("--name", default=MONITOR_NAME, help=f"monitor actor name (default {MONITOR_NAME})")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``agents {probe,start,status,stop}`` to the main CLI's subparsers."""
    agents = command(subparsers, "agents", "node agents: measure link contention on a Ray cluster",
                     "deepshare agents probe", "deepshare agents start --address auto --metrics-port 9479",
                     "deepshare agents status --address auto", "deepshare agents stop --address auto")
    sub = agents.add_subparsers(dest="agents_command", metavar="ACTION", required=True)

    p = command(sub, "probe", "sample this machine's probes (no Ray) and print the rates", "deepshare agents probe --json -")
    add_json_flag(p, "the results")
    p.add_argument("--window", type=seconds(MAX_INTERVAL_S), default=0.5, metavar="S", help="seconds between the two samples (default 0.5)")
    p.set_defaults(func=cmd_probe)

    p = command(sub, "start", "start the contention monitor and one agent per node, then return",
                "deepshare agents start --address auto --interval 1 --metrics-port 9479")
    _cluster_args(p)
    p.add_argument("--interval", type=seconds(MAX_INTERVAL_S), default=1.0, metavar="S", help="sampling period (default 1)")
    p.add_argument("--report-interval", type=seconds(MAX_REPORT_S), default=None, metavar="S",
                   help="seconds between two reports to the monitor, each the latest sample (default max(2, interval);"
                        " rounded up to whole samples)")
    p.add_argument("--stale-after", type=seconds(MAX_REPORT_S), default=None, metavar="S",
                   help="mark a node stale after S seconds without a report (default max(5, 3 x report period))")
    p.add_argument("--metrics-port", type=port_number, default=None, metavar="P", help="serve Prometheus metrics on port P (0: any free port)")
    p.add_argument("--metrics-host", type=bind_host, default="127.0.0.1", metavar="HOST",
                   help="address the metrics endpoint binds (default 127.0.0.1)")
    p.add_argument("--metrics-allowed-host", action="append", type=host_header_name, metavar="NAME",
                   help="also accept this name in a scrape's Host header (repeatable; default: the bound address, "
                        "localhost and loopback IPs; bound elsewhere, also any IP and the node's host names)")
    p.set_defaults(func=cmd_start)

    p = command(sub, "status", "print the cluster-wide link utilisation and contention", "deepshare agents status --address auto --json -")
    _cluster_args(p)
    add_json_flag(p, "the results")
    p.set_defaults(func=cmd_status)

    p = command(sub, "stop", "stop the monitor and every agent", "deepshare agents stop --address auto")
    _cluster_args(p)
    p.set_defaults(func=cmd_stop)
    return agents
