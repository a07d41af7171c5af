"""``deepshare serve``: host a policy as an HTTP placement service until SIGTERM or SIGINT.

Only :func:`register` is public. The handler checks every flag and loads the policy before
Ray starts (a bad flag costs no cluster start-up), then calls
:func:`deepshare.serving.service.run_service`, which owns Ray, Serve and the signals.
"""

from __future__ import annotations

import argparse
import errno
import os
from typing import Any

from deepshare.cli.args import bind_host, flagged, in_range, listen_port, number
from deepshare.cli.help import command
from deepshare.core.errors import DeepShareError, RuntimeFailure

# The values the flags show and bound, as plain constants: building the parser for any command
# must not import pydantic (deepshare.serving.settings, .schemas) or the HTTP code. They are
# deepshare.serving.settings' own (TOKEN_ENV, DEFAULT_*) and .schemas' (MAX_*);
# tests/test_startup.py asserts that they still are.
TOKEN_ENV = "DEEPSHARE_SERVE_TOKEN"
MAX_NODES = 4096
MAX_JOBS = 10_000
DEFAULT_MAX_NODES = MAX_NODES
DEFAULT_MAX_PENDING = 5000
DEFAULT_MAX_RUNNING = MAX_JOBS
DEFAULT_DECISION_TIMEOUT_S = 5.0
DEFAULT_BODY_TIMEOUT_S = 5.0
MAX_BODY_BYTES = 1024**3
"""Largest ``--max-body-bytes`` (1 GiB), as the service's settings allow."""
MAX_REPLICAS = 256
"""Most ``--replicas``: each is a Ray actor with the policy loaded."""

EXIT_RUNTIME = 1
"""Exit status when Ray or Serve fails to start (bad input exits 2)."""
bounded_seconds = number(float, lambda v: 0.001 <= v <= 3600, "seconds in [0.001, 3600]")
"""Timeouts: at least a millisecond (5e-324 s made every request time out), at most an hour."""


def count(high: int):  # noqa: ANN201 - an argparse type
    """A positive integer up to ``high``, naming the range when it is not."""
    return number(int, lambda v: 0 < v <= high, f"an integer in 1..{high}")

READY_LINE = "placement service ready"
"""Printed once the HTTP endpoint answers (scripts and tests wait for it)."""
METRICS_LINE = "metrics"
"""Starts the line after :data:`READY_LINE` that says where Prometheus scrapes the metrics."""


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = command(
        sub, "serve", "host a policy as an HTTP placement service (Ray Serve) until SIGTERM/SIGINT",
        "deepshare serve --policy rl-hybrid --port 8000",
        "deepshare serve --policy srsf+packed --host 0.0.0.0 --replicas 2",
        details="Serve POST /v1/placements, GET /v1/policy, /healthz and /docs. "
        f"A bearer token is required on everything but GET/HEAD /healthz when ${TOKEN_ENV} is set. "
        "Metrics (ray_deepshare_serve_*, summed over replicas) come from Ray's metrics agent: the line after "
        "the ready line names its URL.",
    )
    p.add_argument("--policy", default="rl-hybrid", metavar="POLICY",
                   help="a name from `deepshare policies`, NAME=CHECKPOINT for a learned policy, "
                   "or package.module:ClassOrFactory (default rl-hybrid)")
    p.add_argument("--host", type=bind_host, default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=listen_port, default=8000, help="HTTP port (default 8000)")
    p.add_argument("--replicas", type=in_range(int, 1, MAX_REPLICAS, "replicas"), default=1,
                   help=f"Serve replicas, each with the policy loaded, 1..{MAX_REPLICAS} (default 1)")
    p.add_argument("--contention", default="profiled", help="contention model behind predictions (default profiled)")
    p.add_argument("--max-body-bytes", type=in_range(int, 1, MAX_BODY_BYTES, "bytes"), default=4 * 1024 * 1024, metavar="N",
                   help="413 above this, 1 byte to 1 GiB (default 4 MiB)")
    p.add_argument("--body-timeout-s", type=bounded_seconds, default=DEFAULT_BODY_TIMEOUT_S, metavar="S",
                   help=f"408 and the connection closed when a body takes longer (default {DEFAULT_BODY_TIMEOUT_S:g})")
    p.add_argument("--max-nodes", type=count(MAX_NODES), default=DEFAULT_MAX_NODES, metavar="N",
                   help=f"413 for requests with more nodes (default {DEFAULT_MAX_NODES})")
    p.add_argument("--max-pending", type=count(MAX_JOBS), default=DEFAULT_MAX_PENDING, metavar="N",
                   help=f"413 for requests with more pending jobs (default {DEFAULT_MAX_PENDING})")
    p.add_argument("--max-running", type=count(MAX_JOBS), default=DEFAULT_MAX_RUNNING, metavar="N",
                   help=f"413 for requests with more running jobs (default {DEFAULT_MAX_RUNNING})")
    p.add_argument("--decision-timeout-s", type=bounded_seconds, default=DEFAULT_DECISION_TIMEOUT_S, metavar="S",
                   help=f"503 with Retry-After when a decision takes longer; the work is stopped (default {DEFAULT_DECISION_TIMEOUT_S:g})")
    p.add_argument("--decision-threads", type=count(64), default=4, metavar="N",
                   help="decisions one replica runs at once; more wait their turn within their deadline (default 4)")
    p.add_argument("--tenants", metavar="FILE",
                   help="tenants file (YAML: queues with GPU quotas, cohorts, weights, priority classes; docs/tenants.md): "
                   "the policy decides behind its queues' admission and quota preemption; requests may name a job's "
                   "queue and priority")
    p.add_argument("--address", metavar="auto|ADDR", help="join a running Ray cluster instead of starting one")
    p.add_argument("--metrics-port", type=listen_port, default=None, metavar="P",
                   help="Prometheus port of the private Ray instance's metrics agent, on 127.0.0.1 (default: a free "
                   "port, printed at start; not with --address, where each node exports on its own "
                   "--metrics-export-port)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace, out: Any, err: Any) -> int:
    """Check the flags, then :func:`deepshare.serving.service.run_service` until SIGTERM/SIGINT."""
    from pydantic import ValidationError

    from deepshare.infra.httpauth import check_token
    from deepshare.serving.service import Endpoint, check_settings, run_service
    from deepshare.serving.settings import ServiceSettings

    token = os.environ.get(TOKEN_ENV, "")
    if token:
        check_token(token, f"${TOKEN_ENV}")
    tenants = None
    if args.tenants is not None:
        from deepshare.core.yamlspec import read_config_text
        from deepshare.tenants import parse_tenants

        tenants = read_config_text(args.tenants, "tenants file")
        parse_tenants(tenants, args.tenants)  # errors name the file and the field
    try:
        settings = ServiceSettings(
            policy=args.policy, contention=args.contention, token=token or None, max_body_bytes=args.max_body_bytes,
            body_timeout_s=args.body_timeout_s, max_nodes=args.max_nodes, max_pending=args.max_pending,
            max_running=args.max_running, decision_timeout_s=args.decision_timeout_s,
            decision_threads=args.decision_threads, tenants=tenants,
        )
    except ValidationError as exc:  # pragma: no cover - argparse and the checks above came first
        raise DeepShareError(f"invalid settings: {exc}") from None
    # unknown names and unreadable checkpoints fail here, before the ports and Ray (--contention is one of its choices)
    flagged("--policy", check_settings, settings)
    from deepshare.cli.ray_address import check_address

    check_address(args.address)  # '' (an unset variable) started a private Ray, silently
    warning = exposure_warning(args.host, bool(token))
    if warning:
        err.print(warning, markup=False, highlight=False, soft_wrap=True)
    _check_port_free(args.host, args.port)
    if args.metrics_port is not None:
        if args.address:
            raise DeepShareError("--metrics-port: only for the private Ray instance; with --address each node "
                                 "exports metrics on its own `ray start --metrics-export-port`")
        _check_port_free("127.0.0.1", args.metrics_port, "--metrics-port")
    if args.address:
        from deepshare.agents.deploy import check_reachable

        check_reachable(args.address)

    def ready(endpoint: Endpoint) -> None:
        out.print(
            f"{READY_LINE}: policy {settings.policy} on {endpoint.url} ({args.replicas} replica(s); API docs at /docs)"
            f"{' with a bearer token' if token else ''}{f' behind the tenants of {args.tenants}' if tenants else ''}",
            markup=False, highlight=False,
        )
        out.print(metrics_line(endpoint.metrics_url), markup=False, highlight=False)

    try:
        run_service(settings, host=args.host, port=args.port, replicas=args.replicas, address=args.address,
                    metrics_port=args.metrics_port, on_ready=ready)
    except RuntimeFailure as exc:  # Ray or Serve did not start: one line, exit 1
        err.print(f"deepshare: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_RUNTIME
    out.print("stopping the placement service", markup=False, highlight=False)
    return 0


def exposure_warning(host: str, has_token: bool) -> str | None:
    """The one-line warning for a non-loopback ``--host`` (what is exposed, and whether a token
    guards it), or None on loopback; like ``scheduler start``'s."""
    from deepshare.core.hosts import is_loopback

    if is_loopback(host.strip("[]")):
        return None
    guard = ("token-protected but without TLS (put a TLS proxy in front)" if has_token
             else f"WITHOUT a token (set ${TOKEN_ENV}): anyone who can reach it asks for decisions and reads /v1/policy")
    return f"warning: --host {host} serves placement decisions to the network, {guard}"


def metrics_line(url: str | None) -> str:
    """Where Prometheus scrapes the service's metrics: the private instance's metrics agent at
    ``url``, or (``None``, a cluster) every node's agent."""
    where = url if url is not None else "each Ray node's metrics agent (its `ray start --metrics-export-port`)"
    return (f"{METRICS_LINE}: {where} (the service's ray_deepshare_serve_* beside Ray Serve's ray_serve_*, "
            "per replica; Ray sends them there every 10 s)")


def _check_port_free(host: str, port: int, flags: str | None = None) -> None:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise DeepShareError(f"{flags or f'--host {host} --port'} {port}: cannot bind ({reason})") from None
