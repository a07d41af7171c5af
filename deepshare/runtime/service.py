"""The scheduler process (journal, Ray, control loop, HTTP API): :func:`run_scheduler`, the
library's entry point, which ``deepshare scheduler start`` only calls after parsing its flags.

The control loop runs in the main thread; uvicorn serves the API from a thread on a socket
bound before anything else starts (so ``--port 0`` works and the URL is known). The URL, pid
and Ray address are written to ``<state>/scheduler.json``. SIGTERM / SIGINT stop the loop and
the API, SIGHUP reloads the tenants file (``--tenants``); runs on the cluster keep going (their actors are detached) and a restart with the same
``--state`` re-attaches to them.

Everything a user can get wrong (the state folder, the journal, the token, the tenants file, the
port) is checked before Ray starts. A Ray that cannot be started or joined is :class:`RuntimeFailure` (exit 1).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import sqlite3
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from deepshare.core.atomic import write_text_atomic
from deepshare.core.errors import DeepShareError, RuntimeFailure, first_line
from deepshare.core.fabric import level_problems
from deepshare.core.files import resolved
from deepshare.infra.httpserver import api_server
from deepshare.policies.base import Policy
from deepshare.runtime.cluster import NO_LEVELS, ClusterState, LabelLevels
from deepshare.runtime.cluster_guard import (RayCluster, check_same_cluster, current_session, forget_local,
                                             recorded_answers)
from deepshare.runtime.defaults import DEFAULT_REFIT_S, MAX_QUEUED
from deepshare.runtime.journal import Journal, JobRecord, JobState
from deepshare.runtime.launcher import RayLauncher
from deepshare.runtime.loop import ControlLoop, LoopConfig
from deepshare.runtime.private import check_not_shared
from deepshare.runtime.statelock import StateLock
from deepshare.runtime.tenancy import LiveTenants, check_tenants_file_private, queue_usage
from deepshare.tenants import load_tenants

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    state_dir: str
    address: str = "auto"
    local_nodes: int | None = None
    """With ``local_gpus_per_node``: start a fake local cluster of this many nodes instead of joining one."""
    local_gpus_per_node: int = 4
    local_labels: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``--local-label``: ``(label key, (value on node 0, ...))``; an empty value: no label on that node."""
    levels: LabelLevels = NO_LEVELS
    """The fabric's levels and the node labels naming their domains (``--level``; empty: one ``rack`` level)."""
    host: str = "127.0.0.1"
    port: int = 8470
    allowed_hosts: tuple[str, ...] = ()
    """Extra names accepted in the ``Host`` header (a DNS name the API is reached by)."""
    loop: LoopConfig = LoopConfig()
    contention: str = "profiled"
    contention_knowledge: str = "learned"
    """``learned``: the policies predict with a model refitted from the journal's measured
    throughputs (:mod:`deepshare.runtime.learning`); ``exact``: with the shipped ``contention``."""
    refit_s: float = DEFAULT_REFIT_S
    """Seconds between two refits of the learned model."""
    max_gpus: int = 0
    """Accept jobs of up to this many GPUs even when fewer are up now (an autoscaling cluster
    grows when they queue); 0: only jobs that fit the GPUs up now."""
    max_queued: int = MAX_QUEUED
    """Queued jobs at most (``--max-queued``): a submission beyond gets 429."""
    tenants_file: str | None = None
    """The tenants file (queues, quotas, priorities, tenants' token hashes; ``docs/tenants.md``):
    every decision runs behind its admission; reloaded on SIGHUP and ``POST /v1/tenants/reload``."""
    requeue_lost_runs: bool = False
    """``--requeue-lost-runs``: the journal's runs on another Ray cluster than this start's are
    gone (or were stopped); requeue their jobs rather than refuse the start
    (:mod:`deepshare.runtime.cluster_guard`)."""


def submission_capacity(cluster: ClusterState, max_gpus: int) -> tuple[int, int]:
    """(largest job accepted, nodes up): the GPUs up now, or ``max_gpus`` if more."""
    return max(cluster.topology.total_gpus, max_gpus), len(cluster.nodes)


def bind(host: str, port: int) -> socket.socket:
    address = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1], as a URL writes it
    if not address.strip():  # bind(("", port)) listens on every interface, as 0.0.0.0 does
        raise DeepShareError(f"--host {host!r}: an empty address binds every interface; give 127.0.0.1 "
                             "(this machine) or the address to serve on (0.0.0.0: every interface)")
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except socket.gaierror as exc:  # the host, not the port: it named --port for a host it cannot look up
        sock.close()
        raise DeepShareError(f"--host {host}: not an address to listen on ({exc.strerror or exc})") from None
    except OSError as exc:
        sock.close()
        raise DeepShareError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.listen(128)
    return sock


class LinkLoad:
    """``link_load()`` from the node agents' ContentionMonitor when one runs, else ``{}``."""

    def __init__(self, retry_s: float = 30.0) -> None:
        self.handle: Any = None
        self.checked = -1e9
        self.retry_s = retry_s

    def __call__(self) -> Mapping[str, float]:
        import ray

        if self.handle is None and time.monotonic() - self.checked > self.retry_s:
            self.checked = time.monotonic()
            try:
                from deepshare.agents.deploy import find_monitor

                self.handle = find_monitor()
            except DeepShareError:
                self.handle = None
        if self.handle is None:
            return {}
        try:
            return dict(ray.get(self.handle.link_load.remote(), timeout=2.0))
        except Exception as exc:  # noqa: BLE001 - the monitor went away: work without it
            self.handle = None
            log.warning("link load: the contention monitor did not answer (%s); deciding without link load, "
                        "asking again in %.0f s", first_line(exc), self.retry_s)
            return {}


def exposure_warning(host: str) -> str | None:
    """The one-line warning for a non-loopback ``--host``, or None on loopback."""
    from deepshare.core.hosts import is_loopback

    if is_loopback(host.strip("[]")):
        return None
    return (f"warning: --host {host} exposes the scheduler's API, which runs any command as user "
            f"{_user()} on every node, to the network, token-protected but without TLS (put a TLS proxy in front)")


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def start_ray(config: ServiceConfig, cleanup: ExitStack, local_stopped: Callable[[], None] | None = None) -> str:
    """Start the local fake cluster or join ``config.address``; the Ray address. Failures that are
    not the user's input (a Ray that times out starting) are :class:`RuntimeFailure`. The local
    cluster is stopped at ``cleanup``, and ``local_stopped`` called once it has stopped."""
    try:
        if config.local_nodes is not None:
            from deepshare.runtime.localcluster import LocalCluster

            local = LocalCluster(config.local_nodes, config.local_gpus_per_node, labels=dict(config.local_labels))

            def stop() -> None:
                local.shutdown()
                if local_stopped is not None:
                    local_stopped()

            cleanup.callback(stop)
            return local.start()
        import ray

        from deepshare.agents.deploy import connect

        connect(config.address)
        return str(ray.get_runtime_context().gcs_address)
    except (DeepShareError, RuntimeFailure):
        raise
    except Exception as exc:  # noqa: BLE001 - Ray's start-up raises many types; all mean "no cluster"
        what = "start the local Ray cluster" if config.local_nodes is not None else f"join Ray at {config.address}"
        raise RuntimeFailure.could_not(what, exc) from None


def run_scheduler(config: ServiceConfig, policy: Policy, announce: Callable[[str], None] = print,
                  stop: threading.Event | None = None, warn: Callable[[str], None] | None = None,
                  handle_signals: bool = True) -> int:
    """Run the scheduler under ``policy`` until ``stop`` is set (or, with ``handle_signals`` in the
    main thread, SIGTERM / SIGINT arrives; SIGHUP then reloads the tenants file). The previous
    signal handlers are put back when it returns. Returns 0; bad input is a
    :class:`~deepshare.core.errors.DeepShareError` raised before Ray starts, a Ray that cannot be
    started or joined a :class:`RuntimeFailure`.

    ``policy`` is any :class:`~deepshare.policies.base.Policy`: one from the registry, or the HTTP
    placement service's client (the CLI builds either; the runtime does not know which). With
    ``config.tenants_file`` it runs behind the file's admission (:mod:`deepshare.runtime.tenancy`)."""
    from deepshare.runtime.token import TOKEN_ENV, scheduler_token

    stop = stop or threading.Event()
    warn = warn or announce
    for flag, given in (("--state", config.state_dir), ("--tenants", config.tenants_file)):
        if given is not None and not str(given).strip():  # an unset variable: it named the current folder
            raise DeepShareError(f"{flag} {given!r}: an empty path; give a {'folder' if flag == '--state' else 'file'}")
    config = dataclasses.replace(config, state_dir=str(resolved(config.state_dir)),  # workers' cwd differs
                                 tenants_file=None if config.tenants_file is None else str(Path(config.tenants_file).absolute()))
    check_not_shared(config.state_dir)  # before anything is written there
    if config.tenants_file is not None:  # refused before anything is written (it is read again below, with the
        check_tenants_file_private(Path(config.tenants_file))  # admin token and the journal's jobs to check it by)
        load_tenants(config.tenants_file)
    with ExitStack() as cleanup:
        hangup = _hold_hangups(cleanup) if handle_signals else None
        lock = StateLock(config.state_dir).acquire()  # before the journal: one scheduler per journal
        cleanup.callback(lock.release)
        journal = Journal(config.state_dir)
        cleanup.callback(journal.close)
        try:
            live = journal.jobs(JobState.QUEUED, JobState.RUNNING)
        except sqlite3.Error as exc:  # a table edited by hand (a row is quarantined; a dropped column is not)
            raise DeepShareError(f"--state {config.state_dir}: the journal's queued and running jobs cannot be "
                                 f"read ({first_line(exc)}); a row edited by hand: repair it with sqlite3") from None
        check_job_levels(live, config.levels.names)
        token, token_file = scheduler_token(config.state_dir)
        os.environ.pop(TOKEN_ENV, None)  # not inherited by the local Ray nodes, their workers or the jobs
        tenants = LiveTenants(token, config.tenants_file, lambda: journal.jobs(JobState.QUEUED, JobState.RUNNING))
        sock = bind(config.host, config.port)
        cleanup.callback(sock.close)
        warning = exposure_warning(config.host)
        if warning:
            warn(warning)
        joined: list[RayCluster] = []  # the cluster, once known: a clean stop of a --local one forgets it

        def local_stopped() -> None:
            if joined:
                _forget_local(journal, joined[0])

        probed = recorded_answers(journal)  # before this start's Ray: a new local one may take the dead one's port
        address = start_ray(config, cleanup, local_stopped)
        session = current_session()
        if session is not None:
            joined.append(RayCluster(session, address, local=config.local_nodes is not None))
            moved = check_same_cluster(journal, joined[0], config.requeue_lost_runs, probed)
            if moved is not None:
                warn(f"warning: {moved.describe()}")
        _run(config, journal, policy, sock, address, announce, stop, token_file, tenants, hangup)
    return 0


def _forget_local(journal: Journal, cluster: RayCluster) -> None:
    """After a clean stop of the scheduler's ``--local`` cluster: its runs are gone with it."""
    try:
        forget_local(journal, cluster)
    except (sqlite3.Error, DeepShareError) as exc:  # the journal went away or is held: a restart asks again
        log.warning("cannot record that the --local cluster stopped (%s)", first_line(exc))


def _hold_hangups(cleanup: ExitStack) -> threading.Event | None:
    """Until the scheduler's own handlers are in (after Ray has started, which takes a while), a
    SIGHUP is only noted, and the returned event set: its default action ended the process
    without any clean-up (a ``--local`` Ray cluster left running, the state lock's folder
    held), and a reload asked for meanwhile was lost. The handler is put back at ``cleanup``.
    None outside the main thread (where no handler can be set: the scheduler installs none)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    asked = threading.Event()
    if hasattr(signal, "SIGHUP"):
        cleanup.callback(signal.signal, signal.SIGHUP, signal.signal(signal.SIGHUP, lambda *_: asked.set()))
    return asked


def check_job_levels(jobs: Iterable[JobRecord], levels: Sequence[str]) -> None:
    """Refuse a start whose fabric levels (``--level``; ``rack`` without it) lack one that a queued
    or running job names (``required_level``, ``preferred_level``, ``slice_level``): submission
    checked it against the levels of the start that took the job, and a restart without them
    (a forgotten ``--level``, a renamed level) failed every such job at its first tick, a
    running one's run removed from the cluster."""
    for job in jobs:
        spec = job.spec
        found = level_problems(spec.required_level, spec.preferred_level, spec.slice_level, levels, "this start's")
        if found:
            raise DeepShareError(f"--level: {job.state.value} job {job.job_id!r}: {found[0].message}; start with "
                                 "the --level flags it was submitted under (and cancel it there if it must go)")


def _reload_in_background(tenants: LiveTenants) -> None:
    """SIGHUP: reload the tenants file in a thread (not inside the signal handler, which may have
    interrupted the loop anywhere); a refused file is logged by :meth:`LiveTenants.reload`."""

    def reload() -> None:
        try:
            tenants.reload()
        except DeepShareError:
            pass

    threading.Thread(target=reload, name="deepshare-tenants-reload", daemon=True).start()


def _install_signals(stop: threading.Event, tenants: LiveTenants, cleanup: ExitStack,
                     hangup: threading.Event | None = None) -> None:
    """SIGTERM / SIGINT set ``stop``, SIGHUP reloads the tenants file; the old handlers come back
    at ``cleanup``. Only from the main thread (Python's rule for signal handlers). ``hangup``: set
    when a SIGHUP came during the start-up (:func:`_hold_hangups`): the reload it asked for is
    made now."""
    if threading.current_thread() is not threading.main_thread():
        return
    handlers: dict[int, Any] = {signal.SIGTERM: lambda *_: stop.set(), signal.SIGINT: lambda *_: stop.set()}
    if hasattr(signal, "SIGHUP"):
        handlers[signal.SIGHUP] = (lambda *_: _reload_in_background(tenants)) if tenants.path is not None else (
            lambda *_: log.warning("SIGHUP ignored: this scheduler was started without --tenants"))
    for sig, handler in handlers.items():
        cleanup.callback(signal.signal, sig, signal.signal(sig, handler))
    if hangup is not None and hangup.is_set():
        handlers.get(signal.SIGHUP, lambda *_: None)(signal.SIGHUP, None)


def _run(config: ServiceConfig, journal: Journal, policy: Policy, sock: socket.socket, address: str,
         announce: Callable[[str], None], stop: threading.Event, token_file: Path | None, tenants: LiveTenants,
         hangup: threading.Event | None) -> None:
    """Recover, serve the API from a thread, and run the loop in this one until ``stop``."""
    from deepshare import __version__
    from deepshare.core.contention import make_contention
    from deepshare.core.workloads import default_catalog
    from deepshare.runtime.api import guard, make_app
    from deepshare.runtime.metrics import SchedulerMetrics

    policy_name = str(getattr(policy, "name", type(policy).__name__))  # the HTTP client asks its service once
    metrics = SchedulerMetrics(__version__, policy_name, journal.counts,
                               queues=lambda: queue_usage(journal.jobs(JobState.RUNNING, JobState.QUEUED), tenants.current),
                               reloads=lambda: (tenants.reloads, tenants.refused))
    loop_config = dataclasses.replace(config.loop, launch=dataclasses.replace(config.loop.launch,
                                                                              log_dir=config.state_dir))
    ray_launcher = RayLauncher(journal.run_names, config.levels)  # runs named after this journal's instance id
    catalog, contention = default_catalog(), make_contention(config.contention)
    learning = None
    if config.contention_knowledge == "learned":
        from deepshare.runtime.learning import LiveLearning

        learning = LiveLearning(Path(config.state_dir), contention, catalog, config.refit_s,
                                tenants=lambda: tenants.current)  # fitted by tenant under a tenants file
    loop = ControlLoop(journal, tenants.policy(policy), catalog, contention, loop_config,
                       launcher=ray_launcher, link_load_fn=LinkLoad(), working_dir=os.getcwd(),
                       policy_name=policy_name, metrics=metrics, learning=learning,
                       scope_history=tenants.path is not None)
    with ExitStack() as cleanup:
        if hangup is not None:  # handle_signals, in the main thread
            _install_signals(stop, tenants, cleanup, hangup)
        reattached, requeued = loop.recover()

        def capacity() -> tuple[int, int]:
            return submission_capacity(ray_launcher.cluster(), config.max_gpus)

        app = make_app(journal, capacity, state_dir=config.state_dir, metrics=metrics, ready=lambda: loop.ticks > 0,
                       max_queued=config.max_queued, fabric_levels=config.levels.names,
                       contention=None if learning is None else (lambda: learning.document()), tenants=tenants)
        guarded = guard(app, tenants=tenants, bound_host=config.host, allowed_hosts=config.allowed_hosts,
                        metrics=metrics)
        server = api_server(guarded)
        web = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="deepshare-api", daemon=True)
        web.start()
        host, port = sock.getsockname()[:2]
        url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
        cluster = ray_launcher.cluster()
        file = tenants.current
        announce(f"scheduler on {url} (policy {policy_name}, Ray {address}, "
                 f"{len(cluster.nodes)} GPU node(s), {cluster.topology.total_gpus} GPUs; "
                 f"{'fabric levels ' + config.levels.describe() + '; ' if config.levels.levels else ''}"
                 f"{f'tenants {tenants.path} ({len(file.queues)} queue(s), {len(file.tokens)} tenant token(s)); ' if file else ''}"
                 f"state {config.state_dir}; "
                 f"{'admin ' if file else ''}token {'in ' + str(token_file) if token_file else 'from $DEEPSHARE_SCHEDULER_TOKEN'})")
        if reattached or requeued:
            announce(f"recovered: re-attached {reattached or 'none'}, requeued {requeued or 'none'}")
        # Written last: whoever waits for this file (a test, a supervisor) finds the lines above printed.
        info = Path(config.state_dir) / "scheduler.json"
        write_text_atomic(info, json.dumps({"url": url, "pid": os.getpid(), "ray_address": address}) + "\n",
                          "scheduler info")
        cleanup.callback(info.unlink, missing_ok=True)  # its URL is no one's once the port is closed
        try:
            loop.run(stop)
        finally:
            server.should_exit = True
            web.join(timeout=5)
