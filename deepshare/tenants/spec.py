"""The tenants file: queues with GPU quotas, cohorts that lend and borrow, weights, priority classes.

Kueue's model, GPUs only (``docs/tenants.md``)::

    queues:
      - {name: team-a, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 0, weight: 1}
      - {name: team-b, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 4, weight: 2, queueing: strict}
    cohorts: [{name: main}]            # optional: a cohort a queue names exists anyway
    priority_classes: {low: 0, high: 100}
    default_priority: low              # optional: a job naming no class has this one (else 0)
    default_queue: default             # optional: where a job naming no queue goes
    queue_from: user                   # optional: a job naming no queue goes to its user's (or vc's) queue, if declared
    tokens:                            # optional, the live scheduler's tenants: who may use which queues
      - {name: alice, queues: [team-a], sha256: <hex SHA-256 of alice's bearer token>}

The file is parsed with pydantic (imported only then) into the plain, frozen :class:`Tenants`
that admission, reclaim, the orders and the metrics read, so a decision never touches pydantic.
Errors name the file and the field (``queues.1.nominal_gpus: ...``), never a traceback.

Not yet: quotas per GPU type or per fabric domain (the cluster model has one GPU type).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

from deepshare.core.errors import DeepShareError
from deepshare.core.view import DEFAULT_QUEUE
from deepshare.core.yamlspec import parse_yaml_model, read_config_text

if TYPE_CHECKING:
    from deepshare.tenants.model import TenantsModel

UNLIMITED = None
"""A borrowing or lending limit that is not set: no limit."""

BEST_EFFORT = "best-effort"
"""A queue's default ``queueing``: a job its quota holds is passed over, and younger jobs of the
queue that fit are admitted ahead of it (Kueue's BestEffortFIFO)."""
STRICT = "strict"
"""``queueing: strict``: a job admission holds keeps every job after it in its queue's order
(priority class, then submission) from being admitted in that decision (Kueue's StrictFIFO), so
a large job is not starved by a stream of smaller ones; they wait for it instead."""


class Tenanted(Protocol):
    """What tenancy reads of a job: a :class:`~deepshare.core.types.JobSpec` or a
    :class:`~deepshare.core.view.JobView` alike."""

    job_id: str
    gpus: int
    user: str | None
    vc: str | None
    queue: str | None
    priority: str | None


@dataclass(frozen=True, slots=True)
class Queue:
    """One queue's quota. ``cohort``: its cohort's name, None for a queue on its own."""

    name: str
    nominal_gpus: int
    cohort: str | None = None
    borrowing_limit_gpus: int | None = UNLIMITED
    lending_limit_gpus: int | None = UNLIMITED
    weight: float = 1.0
    queueing: str = BEST_EFFORT
    """:data:`BEST_EFFORT` or :data:`STRICT`."""

    @property
    def strict(self) -> bool:
        """Whether a held job holds back the jobs after it in the queue (:data:`STRICT`)."""
        return self.queueing == STRICT

    @property
    def reserved_gpus(self) -> int:
        """Its nominal GPUs it never lends (nominal - lending limit; 0 without a limit)."""
        return 0 if self.lending_limit_gpus is None else self.nominal_gpus - self.lending_limit_gpus

    @property
    def limit_gpus(self) -> float:
        """The most it may ever use: nominal + borrowing limit (infinite without a limit)."""
        return float("inf") if self.borrowing_limit_gpus is None else self.nominal_gpus + self.borrowing_limit_gpus

    @property
    def pool_key(self) -> tuple[str, str]:
        """The key of the pool it lends to and borrows from: its cohort's, or its own alone."""
        return ("cohort", self.cohort) if self.cohort is not None else ("queue", self.name)


@dataclass(frozen=True, slots=True)
class TenantToken:
    """A tenant of the live scheduler (the file's ``tokens``): the SHA-256 of its bearer token and
    the queues it owns. Only the hash is kept: the file, often in version control or a
    ConfigMap, holds no secret (tokens are random, so a fast hash cannot be brute-forced)."""

    name: str
    queues: tuple[str, ...]
    sha256: bytes = field(repr=False)
    """The digest (32 bytes) of the token."""


@dataclass(frozen=True)
class Tenants:
    """A parsed tenants file (module doc): implements :class:`~deepshare.core.view.Tenancy`."""

    queues: Mapping[str, Queue]
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    default_queue: str = DEFAULT_QUEUE
    default_priority: str | None = None
    queue_from: str | None = None
    """``user`` or ``vc``: a job naming no queue goes to the queue of that name, if declared."""
    tokens: tuple[TenantToken, ...] = ()
    """The live scheduler's tenants (the file's ``tokens``); the simulator ignores them."""
    pools: Mapping[tuple[str, str], int] = field(init=False, repr=False, compare=False)
    """Each pool's lendable GPUs: the sum of its queues' nominal GPUs minus their reserved ones."""
    members: Mapping[tuple[str, str], tuple[str, ...]] = field(init=False, repr=False, compare=False)
    """Each pool's queues, in file order."""

    def __post_init__(self) -> None:
        pools: dict[tuple[str, str], int] = {}
        members: dict[tuple[str, str], list[str]] = {}
        for queue in self.queues.values():
            pools[queue.pool_key] = pools.get(queue.pool_key, 0) + queue.nominal_gpus - queue.reserved_gpus
            members.setdefault(queue.pool_key, []).append(queue.name)
        object.__setattr__(self, "pools", pools)
        object.__setattr__(self, "members", {k: tuple(v) for k, v in members.items()})

    def queue_of(self, job: Tenanted) -> str:
        """The queue ``job`` counts against: its own, else its user's or vc's (``queue_from``) when
        declared, else the default queue. A name the file does not declare is an error when used."""
        if job.queue is not None:
            return job.queue
        if self.queue_from is not None:
            owner = job.user if self.queue_from == "user" else job.vc
            if owner is not None and owner in self.queues:
                return owner
        return self.default_queue

    def queue(self, name: str, job: Tenanted | None = None) -> Queue:
        """The queue ``name``; an error (naming ``job``) when the file does not declare it."""
        found = self.queues.get(name)
        if found is None:
            who = f"job {job.job_id!r}: " if job is not None else ""
            raise DeepShareError(f"{who}queue {name!r} is not declared in the tenants file "
                                 f"(declared: {', '.join(sorted(self.queues))})")
        return found

    def weight_of(self, queue: str) -> float:
        found = self.queues.get(queue)
        return 1.0 if found is None else found.weight

    def priority_of(self, job: Tenanted) -> int:
        """The value of ``job``'s priority class (the default class's, else 0)."""
        name = job.priority if job.priority is not None else self.default_priority
        if name is None:
            return 0
        value = self.priority_classes.get(name)
        if value is None:
            raise DeepShareError(f"job {job.job_id!r}: priority class {name!r} is not declared in the tenants file")
        return value

    def most_gpus(self, name: str) -> int:
        """The most GPUs queue ``name`` can ever hold: its limit, and its reserved GPUs plus its
        whole pool."""
        queue = self.queue(name)
        return int(min(queue.limit_gpus, queue.reserved_gpus + self.pools[queue.pool_key]))

    def check_jobs(self, jobs: Sequence[Tenanted]) -> None:
        """Refuse jobs that name an undeclared queue or priority class, or ask more GPUs than
        their queue can ever hold (they would wait forever: a simulation would stall)."""
        for job in jobs:
            name = self.queue_of(job)
            self.queue(name, job)
            self.priority_of(job)
            most = self.most_gpus(name)
            if job.gpus > most:
                raise DeepShareError(f"job {job.job_id!r} asks {job.gpus} GPUs, but its queue {name!r} can never "
                                     f"hold more than {most} (nominal quota, borrowing limit and cohort)")


def parse_tenants(text: str, source: str = "tenants file") -> Tenants:
    """A tenants file's text as :class:`Tenants`; errors name ``source`` and the field."""
    from deepshare.tenants.model import TenantsModel

    model = parse_yaml_model(text, TenantsModel, source, "queues (and optionally cohorts, priority_classes)")
    return _build(model, source)


def load_tenants(path: str | Path) -> Tenants:
    """The tenants file at ``path`` (``--tenants``)."""
    return parse_tenants(read_config_text(path, "tenants file"), str(path))


def _build(model: "TenantsModel", source: str) -> Tenants:
    """Cross-field checks pydantic's per-field validation cannot make, each naming its field."""
    queues: dict[str, Queue] = {}
    cohorts = [c.name for c in model.cohorts]
    for i, c in enumerate(model.cohorts):
        if cohorts.index(c.name) != i:
            raise DeepShareError(f"{source}: cohorts.{i}.name: cohort {c.name!r} is declared twice")
    for i, q in enumerate(model.queues):
        if q.name in queues:
            raise DeepShareError(f"{source}: queues.{i}.name: queue {q.name!r} is declared twice")
        if model.cohorts and q.cohort is not None and q.cohort not in cohorts:
            raise DeepShareError(f"{source}: queues.{i}.cohort: cohort {q.cohort!r} is not in cohorts "
                                 f"({', '.join(cohorts)})")
        if q.lending_limit_gpus is not None and q.lending_limit_gpus > q.nominal_gpus:
            raise DeepShareError(f"{source}: queues.{i}.lending_limit_gpus: at most nominal_gpus "
                                 f"({q.nominal_gpus}), got {q.lending_limit_gpus}")
        for limit in ("borrowing_limit_gpus", "lending_limit_gpus"):
            if q.cohort is None and getattr(q, limit) is not None:  # Kueue refuses them too
                raise DeepShareError(f"{source}: queues.{i}.{limit}: needs a cohort (a queue on its own "
                                     "neither borrows nor lends)")
        queues[q.name] = Queue(q.name, q.nominal_gpus, q.cohort, q.borrowing_limit_gpus, q.lending_limit_gpus, q.weight,
                               q.queueing)
    if model.default_queue is not None and model.default_queue not in queues:
        raise DeepShareError(f"{source}: default_queue: queue {model.default_queue!r} is not declared in queues")
    classes = _priority_classes(model, source)
    if model.default_priority is not None and model.default_priority not in classes:
        raise DeepShareError(f"{source}: default_priority: class {model.default_priority!r} is not in priority_classes")
    return Tenants(queues, classes, model.default_queue or DEFAULT_QUEUE,
                   model.default_priority, model.queue_from, _tokens(model, queues, source))


def _priority_classes(model: "TenantsModel", source: str) -> dict[str, int]:
    """The file's ``priority_classes`` by their stripped names, as every other name in the file;
    two keys that are one name once stripped (``low`` and ``' low'``) are refused, where a
    mapping would keep only the last one's value."""
    classes: dict[str, int] = {}
    written: dict[str, str] = {}
    for key, value in model.priority_classes.items():
        name = key.strip()
        if not name:
            raise DeepShareError(f"{source}: priority_classes: a class name must not be blank, got {key!r}")
        if name in classes:
            raise DeepShareError(f"{source}: priority_classes.{name}: declared twice "
                                 f"(as {written[name]!r} and {key!r})")
        classes[name] = value
        written[name] = key
    return classes


def _tokens(model: "TenantsModel", queues: Mapping[str, Queue], source: str) -> tuple[TenantToken, ...]:
    """The file's ``tokens``: unique names, unique hashes, declared queues (errors name the field)."""
    out: list[TenantToken] = []
    names: set[str] = set()
    digests: set[bytes] = set()
    for i, t in enumerate(model.tokens):
        if t.name in names:
            raise DeepShareError(f"{source}: tokens.{i}.name: tenant {t.name!r} is declared twice")
        for k, q in enumerate(t.queues):
            if q not in queues:
                raise DeepShareError(f"{source}: tokens.{i}.queues.{k}: queue {q!r} is not declared in queues")
        digest = bytes.fromhex(t.sha256)
        if digest in digests:  # one token, two tenants: whose jobs would it see?
            raise DeepShareError(f"{source}: tokens.{i}.sha256: the same token hash as an earlier tenant's")
        names.add(t.name)
        digests.add(digest)
        out.append(TenantToken(t.name, tuple(dict.fromkeys(t.queues)), digest))
    return tuple(out)
