"""Connect to a Ray cluster and start, find or stop the monitor and its agents.

What the CLI calls and what a live scheduler would call. Failures a user can cause (no cluster
at the address, no monitor running) raise :class:`~deepshare.core.errors.DeepShareError`.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from typing import Any, Callable, Mapping

from deepshare.agents.config import MONITOR_NAME, NAMESPACE, AgentConfig
from deepshare.core.topology import Topology
from deepshare.core.errors import DeepShareError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
GRPC_READY_TIMEOUT_S = 10.0
"""How long a listener at ``--address`` has to answer as a gRPC server (a Ray GCS): the HTTP/2
handshake takes milliseconds, but a GCS on a loaded machine must not be taken for something else."""
START_TIMEOUT_S = 120.0
"""How long :func:`start_monitor` waits for the monitor's first reconcile (it answers in seconds)."""
STOP_TIMEOUT_S = 60.0
"""How long :func:`stop_monitor` waits for the monitor to stop its agents before killing them itself."""
_NODE_ID = re.compile(r"[0-9a-f]+")
"""What follows ``NAME-agent-`` in an agent's name (a Ray node id): ``X-agent-agent-<id>``, an
agent of the monitor ``X-agent``, is not the monitor ``X``'s."""


def check_reachable(address: str) -> None:
    """Fail fast: ``ray.init`` retries an unreachable GCS for minutes before giving up, and one
    that answers but is no gRPC server (a web server's port) for ever. ``auto`` (this machine's
    cluster, or ``$RAY_ADDRESS``) names no host to try: it passes."""
    if address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise DeepShareError(f"--address {address!r}: expected 'auto' or HOST:PORT of a Ray head node")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise DeepShareError(f"--address {address}: no Ray cluster answers there ({exc.strerror or exc}); "
                             "expected 'auto' or HOST:PORT of a running Ray head node") from None
    if not _tls() and not speaks_grpc(host, int(port), GRPC_READY_TIMEOUT_S):
        raise DeepShareError(f"--address {address}: something listens there but it is not a Ray head node's GCS "
                             f"(no gRPC answer within {GRPC_READY_TIMEOUT_S:g} s); expected 'auto' or HOST:PORT of a "
                             "running Ray head node (its GCS port, 6379 by default)")


def _tls() -> bool:
    """Whether Ray is told to speak TLS (``RAY_USE_TLS``): the plain probe of :func:`speaks_grpc`
    would not be answered by such a GCS, so it is not made."""
    return os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true")


def speaks_grpc(host: str, port: int, timeout_s: float) -> bool:
    """Whether a gRPC (HTTP/2) connection to ``host:port`` is ready within ``timeout_s``: what a
    Ray GCS answers, and what a web server or any other listener does not."""
    import grpc  # Ray's own dependency

    bare = host.strip("[]")
    target = f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"
    channel = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
        return True
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()


def connect(address: str = "auto") -> None:
    """Join the Ray cluster at ``address`` ("auto": the one on this machine / ``RAY_ADDRESS``).

    A process that is already connected (tests, a scheduler) keeps its connection.
    """
    import ray

    if ray.is_initialized():
        return
    check_reachable(address)
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DeepShareError(f"--address {address}: cannot connect to a Ray cluster ({first})") from None


def find_monitor(name: str = MONITOR_NAME, namespace: str = NAMESPACE) -> Any:
    """The running monitor's handle, or a DeepShareError saying how to start one (or that the
    actor of that name is something else)."""
    import ray

    try:
        handle = ray.get_actor(name, namespace=namespace)
    except ValueError:
        raise DeepShareError(
            f"no contention monitor {name!r} in Ray namespace {namespace!r}; start one with `deepshare agents start`"
        ) from None
    return checked_monitor(handle, name, namespace)


MONITOR_METHODS = ("reconcile", "shutdown", "view", "agents", "config")


def checked_monitor(handle: Any, name: str, namespace: str) -> Any:
    """``handle`` if it is a :class:`~deepshare.agents.monitor.ContentionMonitor`'s (it has the
    monitor's methods), else a DeepShareError naming ``--name``: an actor of another kind under
    that name gave an AttributeError traceback from ``agents start``, ``status`` and ``stop``."""
    if all(hasattr(handle, method) for method in MONITOR_METHODS):
        return handle
    descriptor = getattr(handle, "_ray_actor_creation_function_descriptor", None)  # Ray's, for the message only
    kind = getattr(descriptor, "class_name", None) or "an actor of another class"
    raise DeepShareError(f"--name {name!r}: the actor of that name in Ray namespace {namespace!r} is {kind}, not a"
                         f" contention monitor; give the monitor's name (default {MONITOR_NAME})")


def start_monitor(
    config: AgentConfig = AgentConfig(),
    *,
    probe_factory: Any = None,
    topology: Topology | None = None,
    node_names: Mapping[str, str] | None = None,
    name: str = MONITOR_NAME,
    namespace: str = NAMESPACE,
    detached: bool = True,
    timeout_s: float = START_TIMEOUT_S,
) -> tuple[Any, bool]:
    """Start the monitor (or find the running one) and an agent on every node now.

    Returns ``(handle, created)``. The monitor runs on this process's node (so its metrics
    endpoint is where you ran the command); a running monitor keeps its own settings. Agents
    are named ``NAME-agent-<node id>``, so two monitors never share (or steal) agents. A
    monitor that does not answer its first reconcile within ``timeout_s`` raises Ray's
    ``GetTimeoutError`` (it stays: ``stop_monitor`` removes it).
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from deepshare.agents.monitor import ContentionMonitor
    from deepshare.agents.probes.detect import default_probes

    try:
        handle = checked_monitor(ray.get_actor(name, namespace=namespace), name, namespace)
        created = False
    except ValueError:
        here = ray.get_runtime_context().get_node_id()
        options: dict[str, Any] = dict(
            name=name, namespace=namespace, get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
        )
        if detached:
            options["lifetime"] = "detached"
        handle = ContentionMonitor.options(**options).remote(  # agents named after their monitor
            config, probe_factory or default_probes, topology, node_names, detached, namespace, f"{name}-agent"
        )
        created = True
    ray.get(handle.reconcile.remote(), timeout=timeout_s)
    return handle, created


def stop_monitor(
    name: str = MONITOR_NAME,
    namespace: str = NAMESPACE,
    *,
    timeout_s: float = STOP_TIMEOUT_S,
    warn: Callable[[str], None] = log.warning,
) -> int:
    """Kill the monitor and its agents; returns how many agents were stopped.

    The monitor is asked to stop its agents; one that does not answer within ``timeout_s`` (a
    wedged monitor) or that Ray says is dead is reported to ``warn`` in one line, and its agents
    are killed by their names instead. The monitor itself is killed either way: a stop that
    waited for ever, or ended in a traceback, left both running."""
    import ray
    from ray.exceptions import RayError

    handle = find_monitor(name, namespace)
    try:
        stopped: int | None = ray.get(handle.shutdown.remote(), timeout=timeout_s)
    except (RayError, TimeoutError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        warn(f"the contention monitor {name!r} did not stop its agents ({type(exc).__name__}: {first});"
             " killing it, then its agents by name")
        stopped = None
    ray.kill(handle, no_restart=True)  # first: a live monitor's reconcile would start agents again
    return stopped if stopped is not None else kill_agents(name, namespace)


def kill_agents(name: str = MONITOR_NAME, namespace: str = NAMESPACE) -> int:
    """Kill every agent the monitor ``name`` started, found by name (``NAME-agent-<node id>``
    in ``namespace``, as :func:`start_monitor` names them); returns how many."""
    import ray

    prefix = f"{name}-agent-"
    killed = 0
    for entry in ray.util.list_named_actors(all_namespaces=True):
        rest = entry["name"][len(prefix):]
        if entry["namespace"] != namespace or not entry["name"].startswith(prefix) or not _NODE_ID.fullmatch(rest):
            continue
        try:
            ray.kill(ray.get_actor(entry["name"], namespace=namespace), no_restart=True)
        except ValueError:  # gone meanwhile
            continue
        killed += 1
    return killed
