"""``ContentionMonitor``: the named Ray actor that aggregates agents' reports cluster-wide.

It keeps a :class:`~deepshare.agents.view.ClusterState` fed by the agents, answers ``view()`` /
``link_load()`` (the latter is ``ClusterView.link_load``), and every ``reconcile_interval_s``
compares ``ray.nodes()`` with its agents and starts one on each alive node that has none (nodes
that joined, or all of them after the monitor itself restarted; existing agents are found by
name). Node names come from ``node_names`` (Ray node id or address -> name, e.g. the topology
spec's ``node3``), else the node's hostname, suffixed with the node id's first 8 hex digits
when several nodes share a hostname; a name another node already has, or that ``node_names``
gives another node, is suffixed the same way (:func:`unique_name`), so two nodes never file
reports under one name. A name suffixed only because another node had it goes back to the
plain one at the reconcile after that node left. A node that left loses its agent handle and
name at the next reconcile, and its view entry once it has been stale for ``stale_retention_s``,
so churn never grows the monitor; a node still alive stays in the view, stale, however long
its agent is silent. The Prometheus endpoint starts in the constructor when the config has a
``metrics_port`` (so a restarted monitor serves it again), or on :meth:`start_metrics`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any, Collection, Mapping

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from deepshare.agents.agent import NodeAgent, ProbeFactory
from deepshare.agents.config import AGENT_PREFIX, AgentConfig
from deepshare.agents.exporter import DEFAULT_METRICS_PORT, MetricsExporter
from deepshare.agents.probes.detect import default_probes
from deepshare.agents.report import NodeReport, is_name
from deepshare.agents.view import ClusterSnapshot, ClusterState
from deepshare.core.topology import Topology

log = logging.getLogger(__name__)


def node_name(info: Mapping[str, Any], all_nodes: list[Mapping[str, Any]], names: Mapping[str, str]) -> str:
    """The name a Ray node (an entry of ``ray.nodes()``) gets in reports and ``link_load``: only
    alive nodes count as sharing its hostname (``ray.nodes()`` keeps dead ones for a while, and a
    raylet restarted on the same host must keep its host's name)."""
    node_id = info["NodeID"]
    for key in (node_id, info.get("NodeManagerAddress", "")):
        if key in names:
            return names[key]
    host = info.get("NodeManagerHostname") or info.get("NodeManagerAddress") or node_id[:8]
    shared = sum(1 for n in all_nodes
                 if n.get("Alive") and (n.get("NodeManagerHostname") or n.get("NodeManagerAddress")) == host)
    return host if shared <= 1 else f"{host}-{node_id[:8]}"


def _suffixed(name: str, node_id: str) -> tuple[str, str]:
    """The names ``name`` turns into when another node has it: the node id's first 8 hex
    digits appended, then the whole id."""
    return f"{name}-{node_id[:8]}", f"{name}-{node_id}"


def taken_names(info: Mapping[str, Any], names: Mapping[str, str], assigned: Mapping[str, str]) -> set[str]:
    """Names the node ``info`` may not have: those ``assigned`` (Ray node id -> name) to other
    nodes, and those the ``names`` mapping gives other nodes (reserved even while that node is
    away, so a host whose hostname is another node's topology name never takes it)."""
    node_id = info["NodeID"]
    own_keys = (node_id, info.get("NodeManagerAddress", ""))
    own = next((names[k] for k in own_keys if k in names), None)
    reserved = {v for k, v in names.items() if k not in own_keys and v != own}
    return reserved | {n for i, n in assigned.items() if i != node_id}


def unique_name(
    info: Mapping[str, Any], all_nodes: list[Mapping[str, Any]], names: Mapping[str, str], assigned: Mapping[str, str]
) -> str | None:
    """:func:`node_name`, or, when that is :func:`taken <taken_names>`, the same suffixed with the
    node id's first 8 hex digits, then the whole id; ``None`` (logged) when even that is taken.
    Two nodes with one name filed their reports under one entry, each overwriting the other's:
    a mapped name equal to another host's hostname, or a hostname equal to another node's
    suffixed name."""
    wanted = node_name(info, all_nodes, names)
    taken = taken_names(info, names, assigned)
    name = next((n for n in (wanted, *_suffixed(wanted, info["NodeID"])) if n not in taken), None)
    if name != wanted:
        log.warning("contention monitor: node %s would be named %r, which another node has or node_names gives"
                    " another node; %s", info["NodeID"], wanted,
                    f"named {name!r} instead" if name else "no agent started for it")
    return name


def forget_departed(agents: dict[str, Any], names: dict[str, str], alive: Collection[str]) -> list[str]:
    """Drop the agent handle and the name of every Ray node id not in ``alive`` (the node left;
    its view entry turns stale, then expires); returns the names dropped, sorted. Without it
    both mappings would keep one entry per node that ever joined."""
    dropped = []
    for node_id in [i for i in names.keys() | agents.keys() if i not in alive]:
        agents.pop(node_id, None)
        if node_id in names:
            dropped.append(names.pop(node_id))
    return sorted(dropped)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=8)
class ContentionMonitor:
    """Cluster-wide contention view; see the module docstring."""

    def __init__(
        self,
        config: AgentConfig = AgentConfig(),
        probe_factory: ProbeFactory = default_probes,
        topology: Topology | None = None,
        node_names: Mapping[str, str] | None = None,
        detached: bool = False,
        namespace: str | None = None,
        agent_prefix: str = AGENT_PREFIX,
    ) -> None:
        self._config = config
        self._factory = probe_factory
        self._topology = topology
        self._names_given = dict(node_names or {})
        self._detached = detached
        self._namespace = namespace
        self._prefix = agent_prefix
        self._state = ClusterState(config.stale_after, stale_retention_s=config.stale_retention_s,
                                   interval_s=config.interval_s)
        self._agents: dict[str, Any] = {}  # Ray node id -> agent handle
        self._names: dict[str, str] = {}  # Ray node id -> node name (also: whose reports are taken)
        self._reconcile_lock = threading.Lock()
        self._exporter = MetricsExporter(self._state.snapshot)
        self._metrics_problem = self._serve_metrics()
        self._self = ray.get_runtime_context().current_actor
        self._stop = threading.Event()
        self._loop = None
        if config.reconcile_interval_s > 0:  # also what re-creates agents after a monitor restart
            self._loop = threading.Thread(target=self._reconcile_loop, name="deepshare-reconcile", daemon=True)
            self._loop.start()

    def _serve_metrics(self) -> str | None:
        """Start the endpoint ``config.metrics_port`` asks for, here in the constructor, so a
        monitor Ray restarts serves it again; returns why it could not (the port is taken), and
        the monitor runs on without it: the view and ``link_load`` matter more than a scrape."""
        cfg = self._config
        if cfg.metrics_port is None:
            return None
        try:
            self._exporter.start(cfg.metrics_port, cfg.metrics_host, cfg.metrics_allowed_hosts)
        except Exception as exc:  # noqa: BLE001 - OSError, gaierror: said by metrics_problem()
            problem = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            log.error("contention monitor: cannot serve metrics on %s:%s: %s", cfg.metrics_host, cfg.metrics_port, problem)
            return problem
        return None

    def _reconcile_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception:  # noqa: BLE001 - a GCS hiccup must not end the loop
                log.exception("contention monitor: reconcile failed")
            self._stop.wait(self._config.reconcile_interval_s)

    # -- agents ------------------------------------------------------------------------------
    def reconcile(self) -> list[str]:
        """Start an agent on every alive node without one; returns the nodes given one. Also
        gives a node suffixed because another had its name the plain name back once that one
        left, and keeps every alive node's view entry (only departed nodes expire). Starts
        nothing once :meth:`shutdown` ran: a reconcile after it (a concurrent ``agents start``,
        or the loop between its check and the lock) started every agent again, and ``agents
        stop``, told the agents were stopped, left those running with nobody to report to."""
        with self._reconcile_lock:
            if self._stop.is_set():  # under the lock: shutdown() sets it before taking the lock
                return []
            nodes = ray.nodes()
            alive = {n["NodeID"]: n for n in nodes if n.get("Alive")}
            forget_departed(self._agents, self._names, alive)  # the view turns them stale, then expires them
            self._restore_names(alive, nodes)
            started = []
            for node_id, info in alive.items():
                if node_id in self._agents:
                    continue
                name = self._names.get(node_id) or unique_name(info, nodes, self._names_given, self._names)
                if name is None:
                    continue
                self._names[node_id] = name
                self._agents[node_id] = self._start_agent(node_id, name)
                self._state.expect(name, node_id)
                started.append(name)
            self._state.keep(self._names.values())  # alive nodes never expire, however long their agent is silent
            self._state.forget_expired()  # also when nobody reads the view or scrapes
            return sorted(started)

    def _restore_names(self, alive: Mapping[str, Mapping[str, Any]], nodes: list[Mapping[str, Any]]) -> None:
        """Rename each alive node whose name is its :func:`node_name` suffixed (it shared its
        hostname, or the name was taken) back to that name once no other node has it: a raylet
        restarted on its host before the old one was declared dead got ``HOST-<id>``, and kept it
        for good. Its agent keeps sending the name it was started with; :meth:`report` files
        those reports under the new name."""
        for node_id, current in list(self._names.items()):
            info = alive.get(node_id)
            if info is None:
                continue
            wanted = node_name(info, nodes, self._names_given)
            if current == wanted or current not in _suffixed(wanted, node_id):
                continue
            if wanted in taken_names(info, self._names_given, self._names):
                continue
            self._names[node_id] = wanted
            self._state.rename(current, wanted, node_id)
            log.info("contention monitor: node %s is %r again (was %r)", node_id, wanted, current)

    def _start_agent(self, node_id: str, name: str) -> Any:
        """Start the agent of ``node_id`` under ``name``, or find the one already running (its
        actor name is the node id's, so a restarted monitor finds its predecessor's): Ray then
        ignores the arguments, and that agent keeps reporting under the name it was started with."""
        cfg = self._config
        spec = None
        if self._topology is not None:
            spec = next((n for n in self._topology.nodes if n.name == name), None)
        options: dict[str, Any] = dict(
            name=f"{self._prefix}-{node_id}",
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            num_cpus=cfg.agent_num_cpus,
            max_restarts=cfg.max_restarts,
            max_task_retries=-1,
        )
        if self._namespace is not None:
            options["namespace"] = self._namespace
        if self._detached:
            options["lifetime"] = "detached"
        return NodeAgent.options(**options).remote(
            name, self._self, self._factory, spec, cfg.interval_s, cfg.buffer_size, cfg.report_interval
        )

    def agents(self) -> dict[str, Any]:
        """Node name -> agent handle, for every node the monitor believes alive."""
        with self._reconcile_lock:
            return dict(sorted((self._names[i], h) for i, h in self._agents.items()))

    # -- reports and views -------------------------------------------------------------------
    @ray.method(enable_task_events=False)  # every agent calls it every report period: keep it out of Ray's task table
    def report(self, report: NodeReport) -> None:
        """An agent's latest sample (one call per agent per report period, not per sample). Only
        a report whose self-declared ``node_id`` is a Ray node this monitor runs an agent for is
        taken, filed under the name the monitor gives that node now, whatever well-formed name
        it carries: anyone can call the actor, and a report under a node id of no agent (200,000
        made-up nodes) stayed in the view and every scrape for an hour. The name a report carries
        is the one its agent was started with, which may be a name this monitor never gave: an
        agent found by name after a monitor restart keeps its first name (see
        :meth:`_start_agent`), and checking it left that node stale for good. The sender is not
        authenticated: a caller that names a real node id is taken (see ``docs/agents.md``)."""
        node_id = getattr(report, "node_id", None)  # dict lookups: no lock needed
        name = self._names.get(node_id) if isinstance(node_id, str) else None
        if not isinstance(report, NodeReport) or name is None:
            self._state.reject(report, "not a node this monitor runs an agent for")
            return
        if report.node != name and is_name(report.node):  # a malformed one is refused by update()
            report = replace(report, node=name)
        self._state.update(report)

    def view(self) -> ClusterSnapshot:
        return self._state.snapshot()

    def link_load(self) -> dict[str, float]:
        """``{"NODE/LINK": utilisation}`` of every fresh node, for ``ClusterView.link_load``."""
        return self._state.link_load()

    def latencies(self) -> list[float]:
        return self._state.latencies()

    def config(self) -> AgentConfig:
        return self._config

    # -- metrics and shutdown ----------------------------------------------------------------
    def start_metrics(self, port: int = DEFAULT_METRICS_PORT, host: str = "127.0.0.1",
                      allowed_hosts: tuple[str, ...] = ()) -> tuple[str, int]:
        """Serve Prometheus metrics on ``host:port`` of this actor's node; returns the ``(host,
        port)`` bound (``ValueError`` when already served elsewhere: see ``MetricsExporter.start``).
        ``allowed_hosts``: as :attr:`AgentConfig.metrics_allowed_hosts`."""
        return self._exporter.start(port, host, tuple(allowed_hosts))

    def metrics_port(self) -> int | None:
        return self._exporter.port

    def metrics_address(self) -> tuple[str, int] | None:
        """The ``(host, port)`` the metrics endpoint is bound to (None: not serving)."""
        return self._exporter.address

    def metrics_problem(self) -> str | None:
        """Why the endpoint ``config().metrics_port`` asks for is not served (None: it is, or none
        was asked for)."""
        return None if self._exporter.address is not None else self._metrics_problem

    def stop_metrics(self) -> None:
        self._exporter.stop()

    def shutdown(self) -> int:
        """Stop reconciling and serving metrics, kill every agent; returns how many."""
        self._stop.set()
        self._exporter.stop()
        with self._reconcile_lock:
            handles = list(self._agents.values())
            self._agents.clear()
        for handle in handles:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        return len(handles)
