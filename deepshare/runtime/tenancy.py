"""Tenants in the live scheduler: who a bearer token is, which jobs it may touch, admission around
the live policy, per-queue usage, and reloads of the tenants file without a restart.

The tenants model itself is :mod:`deepshare.tenants` (the file, admission, reclaim): nothing of
it is repeated here. This module adds only what a running scheduler needs around it.

* **Callers.** The scheduler's own token (``$DEEPSHARE_SCHEDULER_TOKEN`` or ``<state>/token``)
  is the *admin*: every queue, every job, reloads and metrics. Each entry of the tenants file's
  ``tokens`` is a *tenant*: the SHA-256 of its token and the queues it owns. A request's token is
  compared with the admin token and with every tenant's hash, each in constant time
  (``hmac.compare_digest``) and all of them every time (no early exit), so the time an answer
  takes does not say which comparison matched.
* **Jobs are their queue's.** A job's queue is fixed when it is submitted (written into its spec):
  a tenant sees, cancels and reads the logs of the jobs of its queues only. For any other job
  every route answers exactly what it answers for a job that does not exist (404, the same body),
  so a tenant cannot learn which ids exist.
* **Admission.** :class:`TenantsPolicy` runs the live policy inside
  :class:`deepshare.tenants.Admitted` over the current file at every decision: the same admission
  and quota preemption as the simulator and the service. Usage is recomputed from the view's
  running jobs, so a new file takes effect at the next tick and nothing is carried over. One
  decision uses one file (:class:`OneFilePerDecision`), even when a reload lands during it.
* **Reloads.** :meth:`LiveTenants.reload` reads the file again, validates it (the file's own
  rules, and every queued or running job's queue and priority class still declared), and swaps
  it in whole, or keeps the old one and raises. One log line either way; tokens are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from deepshare.core.errors import DeepShareError
from deepshare.core.types import Decision
from deepshare.core.view import DEFAULT_QUEUE, ClusterView
from deepshare.runtime.journal import JobRecord, JobState
from deepshare.runtime.private import check_file_not_shared
from deepshare.runtime.spec import LiveJobSpec
from deepshare.tenants import Admitted, Tenants, around_policy, load_tenants

log = logging.getLogger(__name__)


class Forbidden(DeepShareError):
    """A request the caller's token does not allow (HTTP 403), naming the field or the route."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a request: the admin (``queues`` None: every queue) or a tenant of the file."""

    name: str
    queues: tuple[str, ...] | None = None

    @property
    def admin(self) -> bool:
        return self.queues is None

    def owns(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues


ADMIN = Caller("admin")


def token_sha256(token: str) -> str:
    """The hex SHA-256 of ``token``: what the tenants file's ``tokens[].sha256`` holds."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class _SpecJob:
    """A job spec as :class:`deepshare.tenants.spec.Tenanted` (what ``queue_of`` reads)."""

    job_id: str
    gpus: int
    user: str | None
    vc: str | None
    queue: str | None
    priority: str | None


def _tenanted(spec: LiveJobSpec, job_id: str = "(new job)") -> _SpecJob:
    return _SpecJob(job_id, spec.gpus, spec.user, spec.vc, spec.queue, spec.priority)


def job_queue(spec: LiveJobSpec, tenants: Tenants | None) -> str:
    """The queue a job counts against: its own (fixed at submission under ``--tenants``), else the
    file's rule (``queue_from``, ``default_queue``), else ``default``."""
    if spec.queue is not None:
        return spec.queue
    return DEFAULT_QUEUE if tenants is None else tenants.queue_of(_tenanted(spec))


def job_priority(spec: LiveJobSpec, tenants: Tenants | None) -> str | None:
    """Its priority class: its own, else the file's default (None: none)."""
    if spec.priority is not None or tenants is None:
        return spec.priority
    return tenants.default_priority


def borrowed_gpus(running: Iterable[JobRecord], tenants: Tenants | None) -> dict[str, int]:
    """Per running job, how many of its GPUs are above its queue's nominal quota: a queue's jobs
    are counted up in the order they started, and those past the quota run on borrowed GPUs
    (the ones reclaim would stop first, the latest). Recomputed from the journal, so a quota
    changed by a reload shows at once. Empty without a tenants file."""
    if tenants is None:
        return {}
    by_queue: dict[str, list[JobRecord]] = {}
    for job in running:
        by_queue.setdefault(job_queue(job.spec, tenants), []).append(job)
    out: dict[str, int] = {}
    for name, jobs in by_queue.items():
        queue = tenants.queues.get(name)
        if queue is None:
            continue
        used = 0
        for job in sorted(jobs, key=lambda j: (j.run_started if j.run_started is not None else 0.0, j.seq)):
            used += job.spec.gpus
            out[job.job_id] = max(0, min(job.spec.gpus, used - queue.nominal_gpus))
    return out


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """One queue's usage now, for the per-queue metrics."""

    queue: str
    gpus_in_use: int
    nominal_gpus: int | None
    """None without a tenants file."""
    borrowed_gpus: int
    pending_jobs: int
    pending_gpus: int


def queue_usage(jobs: Sequence[JobRecord], tenants: Tenants | None) -> list[QueueUsage]:
    """Every declared queue's usage (with a tenants file), else every queue a job names; by name."""
    in_use: dict[str, int] = dict.fromkeys(tenants.queues, 0) if tenants is not None else {}
    pending: dict[str, list[int]] = {}
    for job in jobs:
        if job.state not in (JobState.RUNNING, JobState.QUEUED):
            continue
        name = job_queue(job.spec, tenants)
        if job.state is JobState.RUNNING:
            in_use[name] = in_use.get(name, 0) + job.spec.gpus
        else:
            in_use.setdefault(name, 0)
            pending.setdefault(name, []).append(job.spec.gpus)
    out = []
    for name in sorted(in_use):
        queue = tenants.queues.get(name) if tenants is not None else None
        nominal = None if queue is None else queue.nominal_gpus
        waiting = pending.get(name, [])
        out.append(QueueUsage(name, in_use[name], nominal, max(0, in_use[name] - nominal) if nominal is not None else 0,
                              len(waiting), sum(waiting)))
    return out


def check_tenants_file_private(path: Path) -> None:
    """Refuse a tenants file another user could change, as the state folder is refused
    (:func:`~deepshare.runtime.private.check_file_not_shared`): its token hashes let their holders
    submit jobs, which run as the scheduler's user, so whoever can write the file, or replace it
    through a folder or a link on the way to it (every link of a chain, and the folders each is
    in), could give themselves a token at the next reload. Checked at the start and at every
    reload."""
    check_file_not_shared(path, "--tenants", "the tenants file, whose tokens submit jobs that run as this user",
                          "keep it where only this user can write")


class LiveTenants:
    """The tenants file of a running scheduler (None: started without ``--tenants``) and the
    admin token; swapped whole on :meth:`reload`, never edited in place, so a reader (the loop,
    a request) sees one file or the other, never half of each."""

    def __init__(self, admin_token: str, path: str | Path | None = None,
                 live_jobs: Callable[[], Sequence[JobRecord]] = lambda: ()) -> None:
        self.path = None if path is None else Path(path)
        self._admin = admin_token.encode()
        self._live_jobs = live_jobs
        self._lock = threading.Lock()
        self.reloads = 0
        """Reloads that took effect."""
        self.refused = 0
        """Reloads refused (the file in force stayed)."""
        self.current: Tenants | None = None
        self._callers: tuple[tuple[bytes, Caller], ...] = ()
        if self.path is not None:
            self._swap(self._read())

    # -- the file ------------------------------------------------------------------------------
    def _read(self) -> Tenants:
        """The file at :attr:`path`, checked against the admin token and the live jobs."""
        assert self.path is not None
        check_tenants_file_private(self.path)
        tenants = load_tenants(self.path)
        admin = hashlib.sha256(self._admin).digest()
        for i, t in enumerate(tenants.tokens):
            if hmac.compare_digest(admin, t.sha256):
                raise DeepShareError(f"{self.path}: tokens.{i}.sha256: is the hash of the admin token "
                                     "(give each tenant a token of its own)")
        check_live_jobs(tenants, self._live_jobs(), str(self.path))
        return tenants

    def _swap(self, tenants: Tenants) -> None:
        self._callers = tuple((t.sha256, Caller(t.name, t.queues)) for t in tenants.tokens)
        self.current = tenants

    def reload(self) -> Tenants:
        """Read the file again and swap it in; on any error keep the current one and raise
        :class:`DeepShareError`. Logs one line either way (never a token)."""
        if self.path is None:
            raise DeepShareError("this scheduler was started without --tenants: there is no tenants file to reload")
        with self._lock:
            try:
                tenants = self._read()
            except DeepShareError as exc:
                self.refused += 1
                log.error("tenants file not reloaded, the previous one stays in force: %s", exc)
                raise
            self._swap(tenants)
            self.reloads += 1
        log.info("tenants file %s reloaded: %d queue(s), %d tenant token(s)", self.path, len(tenants.queues),
                 len(tenants.tokens))
        return tenants

    def admitting(self) -> Any:
        """Held while a submission is admitted and journalled, as a reload holds it while it
        reads the file and checks the live jobs: either the reload sees the new job (and refuses a
        file without its queue) or the submission is admitted under the new file. Without it a
        reload between the two accepted a file that no longer declared the new job's queue."""
        return self._lock

    # -- callers -------------------------------------------------------------------------------
    def caller(self, credentials: bytes | None) -> Caller | None:
        """Who ``credentials`` (a bearer token's bytes) are, or None. Every comparison is made,
        each in constant time, whichever matches."""
        if not credentials:
            return None
        found: Caller | None = ADMIN if hmac.compare_digest(credentials, self._admin) else None
        digest = hashlib.sha256(credentials).digest()
        for expected, who in self._callers:
            if hmac.compare_digest(digest, expected) and found is None:
                found = who
        return found

    def visible(self, caller: Caller, spec: LiveJobSpec) -> bool:
        """Whether ``caller`` may see and touch the job of ``spec``."""
        return caller.admin or caller.owns(job_queue(spec, self.current))

    def admit_submission(self, spec: LiveJobSpec, caller: Caller) -> LiveJobSpec:
        """``spec`` with its queue fixed, or :class:`Forbidden` (a queue not the caller's) /
        :class:`DeepShareError` (an undeclared queue or class, a job its queue can never hold),
        naming the field. Without a tenants file, ``spec`` as it is."""
        tenants = self.current
        if tenants is None:
            return spec
        queue = job_queue(spec, tenants)
        if not caller.owns(queue):
            assert caller.queues is not None
            if spec.queue is not None:  # the same answer for a queue that exists and one that does not
                raise Forbidden(f"queue: {spec.queue!r} is not one of your queues ({', '.join(caller.queues)})")
            queue = caller.queues[0]  # named none, and the file's rule gives another's queue: the tenant's first
        if queue not in tenants.queues:
            raise DeepShareError(f"queue: {queue!r} is not declared in the tenants file "
                                 f"(declared: {', '.join(sorted(tenants.queues))})")
        if spec.priority is not None and spec.priority not in tenants.priority_classes:
            declared = ", ".join(sorted(tenants.priority_classes)) or "none"
            raise DeepShareError(f"priority: class {spec.priority!r} is not declared in the tenants file "
                                 f"(declared: {declared})")
        most = tenants.most_gpus(queue)
        if spec.gpus > most:
            raise DeepShareError(f"gpus: {spec.gpus}, but queue {queue!r} can never hold more than {most} "
                                 "(its nominal quota, borrowing limit and cohort)")
        return spec.model_copy(update={"queue": queue})

    def policy(self, inner: Any) -> Any:
        """``inner`` behind this file's admission, read afresh at every decision
        (:class:`TenantsPolicy`, placed by :func:`deepshare.tenants.around_policy`: around each
        candidate for the planner), one file throughout a decision (:class:`OneFilePerDecision`)."""
        return OneFilePerDecision(around_policy(inner, lambda candidate: TenantsPolicy(candidate, self)), self)

    def in_force(self) -> Tenants | None:
        """The file a decision uses: the one :meth:`pinned` in the current decision, else :attr:`current`."""
        pinned = _PINNED.get()
        return pinned[1] if pinned is not None and pinned[0] is self else self.current

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """:meth:`in_force` answers the file current now until the block ends, whatever a reload
        (on the API's thread) swaps in meanwhile; inside a block already pinned, the outer file."""
        token = _PINNED.set((self, self.in_force()))
        try:
            yield
        finally:
            _PINNED.reset(token)


_PINNED: ContextVar[tuple[LiveTenants, Tenants | None] | None] = ContextVar("deepshare_pinned_tenants", default=None)
"""The live tenants and the file a decision in progress uses (:meth:`LiveTenants.pinned`)."""


class _AroundLive:
    """A policy ``inner`` wrapped with the live tenants file ``live``; named as ``inner``."""

    def __init__(self, inner: Any, live: LiveTenants) -> None:
        self.inner = inner
        self.live = live

    @property
    def name(self) -> str:
        return str(getattr(self.inner, "name", type(self.inner).__name__))


class OneFilePerDecision(_AroundLive):
    """``inner`` (a policy with :class:`TenantsPolicy` inside) deciding under one tenants file:
    the one in force when the decision starts. A reload that lands during a decision takes effect
    at the next; without this, the planner's candidates and the hundreds of base decisions of its
    rollouts, each reading the live file, could weigh options under two different files."""

    def decide(self, view: ClusterView) -> Decision:
        with self.live.pinned():
            return self.inner.decide(view)  # type: ignore[no-any-return]


def check_live_jobs(tenants: Tenants, jobs: Iterable[JobRecord], source: str) -> None:
    """Refuse a file under which a queued or running job's queue or priority class is not
    declared (admission could not count it), or its queue can never hold the job's GPUs (a
    queued job would wait forever, a running one could never resume once stopped): those jobs
    must end or be cancelled first, as submission refuses such a job."""
    for job in jobs:
        if job.state not in (JobState.QUEUED, JobState.RUNNING):
            continue
        name = job_queue(job.spec, tenants)
        if name not in tenants.queues:
            raise DeepShareError(f"{source}: queue {name!r} of {job.state.value} job {job.job_id!r} is not declared "
                                 "(let its jobs end, or cancel them, before removing it)")
        if job.spec.priority is not None and job.spec.priority not in tenants.priority_classes:
            raise DeepShareError(f"{source}: priority class {job.spec.priority!r} of {job.state.value} job "
                                 f"{job.job_id!r} is not declared")
        most = tenants.most_gpus(name)
        if job.spec.gpus > most:
            raise DeepShareError(f"{source}: {job.state.value} job {job.job_id!r} asks {job.spec.gpus} GPUs, but queue "
                                 f"{name!r} could then never hold more than {most} (its nominal quota, borrowing limit "
                                 "and cohort; let the job end, or cancel it, first)")


class TenantsPolicy(_AroundLive):
    """``inner`` behind the tenants file in force's admission and quota preemption
    (:class:`deepshare.tenants.Admitted`), read afresh at every decision; ``inner`` alone while
    the scheduler runs without a tenants file. :meth:`LiveTenants.policy` places it (around
    each candidate for the planner)."""

    def decide(self, view: ClusterView) -> Decision:
        tenants = self.live.in_force()
        if tenants is None:
            return self.inner.decide(view)  # type: ignore[no-any-return]
        return Admitted(self.inner, tenants).decide(view)
