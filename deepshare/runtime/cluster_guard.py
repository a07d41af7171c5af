"""Which Ray cluster a journal's runs are on, so that a restart on another one cannot run a job twice.

Recovery re-attaches to a running job's run by its Ray names and requeues the job when the run is
not found. On the same Ray cluster that is right: a run not found is gone. On another cluster
(``--address`` pointing elsewhere, a second KubeRay cluster, a ``--local`` cluster started again
while the scheduler that was killed left the first one running) no run is ever found there, so
every running job was requeued and launched again while its first run went on where it was: two
runs of one job at once, writing the same checkpoint folder.

So the journal records the Ray cluster its runs are launched on (``meta.ray_cluster``: Ray's
session name, which names one cluster from its start to its end and survives a head restart under
GCS fault tolerance, and the address it was joined at), and a start on a cluster of another session
while the journal has open runs is refused in one line that names both clusters and the jobs,
unless ``--requeue-lost-runs`` says that its runs there were stopped. The scheduler cannot see a
cluster's runs from another cluster, so the first cluster's address is asked (:func:`probe`):

- something answers there: the cluster may still have them; refused.
- the connection is refused (the host is up, nothing listens at that port any more) or the address
  is an IP that this start's own cluster now serves (a head restarted at its address without GCS
  fault tolerance): its head is gone, and without it its nodes and their workers stop (within
  Ray's ``gcs_rpc_server_reconnect_timeout_s``, 60 s by default); the start goes on with a warning
  and recovery requeues the jobs.
- nothing answers (a timeout, no route, a name that does not resolve from here), or a host name that
  now leads to this start's own cluster: that cluster may be gone (a KubeRay cluster recreated) or
  only out of reach from here (another network, a firewall, a name repointed) with its runs going
  on; refused, saying so, unless ``--requeue-lost-runs``. A loopback address (a ``--local``
  cluster's) speaks only of this machine: there nothing answering means gone.

A ``--local`` cluster stops with its scheduler, and its runs with it: a clean stop forgets the
record (:func:`forget_local`). A journal written before this record, or a record that does not
read, has no cluster: the start goes on and records the one it joined.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deepshare.core.errors import DeepShareError, first_line
from deepshare.core.hosts import is_ip, is_loopback

if TYPE_CHECKING:
    from deepshare.runtime.journal import Journal

log = logging.getLogger(__name__)

RAY_CLUSTER_KEY = "ray_cluster"
"""``meta`` key: JSON ``{"session", "address", "local"}`` of the Ray cluster the runs are launched on."""
MAX_SHOWN_JOBS = 5
"""Job ids a refusal names (then how many more)."""
MAX_FIELD = 256
"""Longest session name or address kept in the record (Ray's are far shorter)."""


@dataclass(frozen=True)
class RayCluster:
    """One Ray cluster as the scheduler joined it."""

    session: str
    """Ray's session name (``ray.get_runtime_context().get_session_name()``): one per cluster."""
    address: str
    """The address it was joined at (what to give ``--address`` to reach it again)."""
    local: bool = False
    """The scheduler's own ``--local`` cluster (stopped with it)."""

    def describe(self) -> str:
        return f"{'the --local cluster ' if self.local else ''}{self.session} at {self.address}"


def current_session() -> str | None:
    """The session name of the Ray cluster this process is connected to (None: Ray does not say)."""
    try:
        import ray

        name = ray.get_runtime_context().get_session_name()
    except Exception as exc:  # noqa: BLE001 - a Ray client connection, an older Ray: no identity to check
        log.warning("cannot read the Ray cluster's session name (%s): a restart on another cluster is not detected",
                    first_line(exc))
        return None
    return name if isinstance(name, str) and 0 < len(name) <= MAX_FIELD else None


def recorded(journal: "Journal") -> RayCluster | None:
    """The Ray cluster the journal's runs were launched on (None: not recorded, or not readable)."""
    try:
        text = journal.meta(RAY_CLUSTER_KEY)
    except sqlite3.Error as exc:  # a meta table edited by hand
        log.warning("meta.%s cannot be read (%s); taken as not recorded", RAY_CLUSTER_KEY, first_line(exc))
        return None
    if text is None:
        return None
    try:
        data = json.loads(text)
        session, address, local = data["session"], data["address"], data["local"]
        if not (isinstance(session, str) and isinstance(address, str) and isinstance(local, bool)):
            raise TypeError("session and address must be strings, local a boolean")
        if not (0 < len(session) <= MAX_FIELD and len(address) <= MAX_FIELD):
            raise ValueError("a session name or address of the wrong length")
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("meta.%s is not a Ray cluster record (%s); taken as not recorded", RAY_CLUSTER_KEY,
                    first_line(exc))
        return None
    return RayCluster(session, address, local)


def record(journal: "Journal", cluster: RayCluster) -> None:
    """Record ``cluster`` as the one the journal's runs are launched on."""
    journal.set_meta(RAY_CLUSTER_KEY, json.dumps({"session": cluster.session, "address": cluster.address[:MAX_FIELD],
                                                  "local": cluster.local}))


def forget_local(journal: "Journal", cluster: RayCluster) -> None:
    """After ``cluster`` (a ``--local`` one) was stopped: its runs are gone with it, so the record
    that they are there is removed (only if it still names that cluster)."""
    if recorded(journal) == cluster:
        journal.set_meta(RAY_CLUSTER_KEY, None)


def recorded_answers(journal: "Journal") -> str | None:
    """:func:`probe` of the recorded cluster's address (None: no record). Asked before this
    start's own Ray starts: the processes of a new local cluster listen on ports the OS picks,
    and one of them may be the port of the dead one, which then answered for it."""
    before = recorded(journal)
    try:
        idle = before is None or not journal.open_runs()  # nothing to ask about (and a silent address costs seconds)
    except sqlite3.Error:
        idle = False  # check_same_cluster reports it
    return None if idle else probe(before.address)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Moved:
    """A start on another cluster than the recorded one, with runs open there."""

    before: RayCluster
    jobs: list[str]
    """The jobs whose runs are given up (their running jobs are requeued by recovery)."""
    why: str
    """``flag`` (``--requeue-lost-runs``), ``silent`` (its address refuses connections) or ``replaced``
    (this start's own cluster now serves its address)."""

    def describe(self) -> str:
        if self.why == "flag":
            return (f"--requeue-lost-runs: the run(s) of {len(self.jobs)} job(s) on {self.before.describe()} are "
                    "given up for lost; the running ones are requeued")
        there = ("is now served by this start's own cluster" if self.why == "replaced"
                 else "refuses connections (nothing listens there)")
        return (f"the Ray cluster the run(s) of {len(self.jobs)} job(s) were launched on, {self.before.describe()}, "
                f"is gone: its address {there}; they are taken as gone with it (its workers stop within Ray's "
                "GCS reconnect timeout, 60 s by default), and the running ones requeued")


def check_same_cluster(journal: "Journal", here: RayCluster, requeue_lost_runs: bool,
                       answered: str | None = None) -> Moved | None:
    """Refuse (:class:`DeepShareError`) a start on ``here`` when the journal has runs not ended on
    another recorded cluster that may still run them, unless ``requeue_lost_runs``; then record
    ``here``. Returns what was given up (None: nothing). ``answered``: :func:`probe` of the
    recorded cluster's address before ``here`` was started (:func:`recorded_answers`; None:
    probed now).

    Only a sign that its head is gone lets the start go on without the flag (see the module's
    doc): its address refuses connections, or is an IP that ``here`` now serves. An address that
    does not answer at all is no such sign: a cluster out of reach from here runs on."""
    before = recorded(journal)
    try:
        jobs = journal.open_runs() if before is not None and before.session != here.session else []
    except sqlite3.Error as exc:
        raise DeepShareError(f"the journal's open runs cannot be read ({first_line(exc)}); a row edited by hand: "
                             "repair it with sqlite3") from None
    moved = None
    if jobs:
        assert before is not None
        host = _host(before.address)
        same = _same_address(before.address, here.address)
        state = probe(before.address) if answered is None else answered
        if same and is_ip(host):
            moved = Moved(before, jobs, "replaced")  # one endpoint, one listener: its GCS is not there any more
        elif not same and (state == REFUSED or (state == SILENT and is_loopback(host))):
            moved = Moved(before, jobs, "silent")
        elif requeue_lost_runs:
            moved = Moved(before, jobs, "flag")
        else:
            shown = ", ".join(jobs[:MAX_SHOWN_JOBS]) + (f" and {len(jobs) - MAX_SHOWN_JOBS} more"
                                                        if len(jobs) > MAX_SHOWN_JOBS else "")
            if same:
                where = (f"whose address now leads to this start's own cluster, {here.session}: it is gone (a cluster "
                         "recreated or a head restarted under that name) or the name was pointed elsewhere while it "
                         "runs on")
                how = "Restart with --address of that cluster's head to re-attach to them"
            elif state == ANSWERS:
                where = "which still answers there"
                how = ("Its scheduler was killed and it did not stop with it: stop its Ray processes by PID and "
                       "start again" if before.local else f"Restart with --address {before.address} to re-attach to "
                       "them")
            else:
                where = ("which cannot be reached from here (no answer): it may be gone, or only out of reach (another "
                         "network, a firewall) and still running them")
                how = f"Restart where {before.address} is reachable, with --address {before.address}, to re-attach"
            raise DeepShareError(
                f"{len(jobs)} run(s) of this state folder's jobs ({shown}) were launched on another Ray cluster, "
                f"{before.describe()}, {where}; this start joined {here.describe()}, where they "
                "are not, and would requeue them while they may still run there (twice at once, on the same "
                f"checkpoints). {how}, or, once their runs there are stopped, add --requeue-lost-runs")
    record(journal, here)
    return moved


ANSWERS, REFUSED, SILENT = "answers", "refused", "silent"
""":func:`probe`'s answers."""
PROBE_TIMEOUT_S = 3.0
"""One connection attempt's limit: Linux sends a lost SYN again after 1 s, then 2 s more (at 3 s)."""
PROBE_TRIES = 2


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S, tries: int = PROBE_TRIES) -> str:
    """Whether something accepts a TCP connection at ``address`` (``host:port``): :data:`ANSWERS`;
    :data:`REFUSED` when the connection is refused (the host is up and nothing listens at that
    port); else :data:`SILENT` (a timeout, no route, a name that does not resolve, an address that
    does not read), after ``tries`` attempts: one lost packet is not taken for a cluster gone."""
    host, _, port = address.rpartition(":")
    try:
        target = (host.strip("[]"), int(port))
    except ValueError:
        return SILENT
    for attempt in range(tries):
        try:
            with socket.create_connection(target, timeout=timeout_s):
                return ANSWERS
        except ConnectionRefusedError:
            return REFUSED
        except (OSError, ValueError):
            if attempt + 1 < tries:
                time.sleep(min(1.0, timeout_s))
    return SILENT


def _host(address: str) -> str:
    return address.rpartition(":")[0].strip("[]")


def _same_address(a: str, b: str) -> bool:
    """Whether two ``host:port`` addresses name one endpoint as written (an IP compared as an IP)."""
    (ha, _, pa), (hb, _, pb) = a.rpartition(":"), b.rpartition(":")
    ha, hb = ha.strip("[]"), hb.strip("[]")
    if pa != pb:
        return False
    try:
        return ipaddress.ip_address(ha) == ipaddress.ip_address(hb)
    except ValueError:
        return ha.lower().rstrip(".") == hb.lower().rstrip(".")
