"""The scheduler's HTTP API (FastAPI), served on loopback by the scheduler process.

``POST /v1/jobs`` (a job spec as JSON; 201 with the job), ``GET /v1/jobs``, ``GET /v1/jobs/{id}``
(with its runs: measured vs predicted throughput, and its transitions), ``DELETE /v1/jobs/{id}``
(cancel: 200 when it was queued, 202 when a running job is being stopped),
``GET /v1/jobs/{id}/logs?rank=N&offset=K`` (at most 64 KiB of a rank's log), ``GET /v1/contention``
(the learned contention model's latest version and its error, :mod:`deepshare.runtime.learning`; admin),
``GET /v1/queues`` (per-queue usage against quotas), ``POST /v1/tenants/reload`` (re-read the tenants
file; admin), ``GET /metrics`` (Prometheus; admin) and ``GET /healthz``. Bad input is a 4xx with
``{"error": "field.path: what was expected"}``, never a 5xx; a submission while Ray cannot say
the cluster's size is 503 with one line in the same shape (nothing journalled), and so is any
request that meets the journal locked by another process for longer than SQLite's busy timeout
(with ``Retry-After``; nothing changed).

Callers (:mod:`deepshare.runtime.tenancy`): the admin token sees everything; a tenant's token
(the tenants file's ``tokens``) submits only into its own queues (403 naming ``queue``) and sees
only its queues' jobs: every route that takes a job id answers a job of another queue exactly
as a job that does not exist (404, ``{"error": "no job 'ID'"}``), so ids do not leak.

A job runs any command as the scheduler's user, so everything but ``GET``/``HEAD /healthz`` is closed
(:func:`guard`, from :mod:`deepshare.infra.httpauth`): a ``Host`` that is not this service's is 403
(DNS rebinding), no or an unknown bearer token is 401, a body that is not ``application/json`` is
415 (a browser's cross-origin "simple" request cannot send one without a preflight), a body
over ``max_body_bytes`` is 413.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from deepshare.core.documents import DuplicateKey, unique_keys
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.fabric import level_problems
from deepshare.core.files import system_tree
from deepshare.core.names import CONTROL_CHARACTERS_SAID, has_control_character
from deepshare.infra.httpauth import CALLER, AllowHosts, LimitBody, ObserveRequests, RequireCaller, RequireJSON, error_body
from deepshare.runtime.defaults import MAX_QUEUED
from deepshare.runtime.journal import JobRecord, JobState, Journal, TransitionError
from deepshare.runtime.logs import MAX_CHUNK, MAX_TAIL_LINES, rank_log_path, read_chunk, tail_offset
from deepshare.runtime.models import JobDetailOut, JobOut, LogOut, QueueOut, Tenancy, job_detail, job_out
from deepshare.runtime.spec import LiveJobSpec, spec_from_json
from deepshare.runtime.tenancy import (ADMIN, Caller, Forbidden, LiveTenants, borrowed_gpus, job_priority, job_queue,
                                       queue_usage)

log = logging.getLogger(__name__)

MAX_SPEC_BYTES = 64 * 1024
"""Largest job spec journalled (its JSON): every queued job's spec is read back from the journal
several times per tick and by ``GET /v1/queues``, so one tenant's share of ``--max-queued`` at the
per-field bounds (about 1 MiB each) made every tick and request read gigabytes."""
MAX_BODY_BYTES = 1024 * 1024
"""Largest job spec accepted (a spec is a few hundred bytes; its every string is bounded)."""
BODY_TIMEOUT_S = 10.0
"""Seconds a request's body may take to arrive whole (then 408 and the connection closes)."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


class ClusterUnavailable(DeepShareError):
    """The cluster's size could not be read now (Ray did not answer): a 503, not the caller's fault."""


NAME_FIELDS = ("model", "user", "group", "vc", "queue", "priority")
"""A spec's names that reach logs, metrics labels and the placement service's requests (which
refuses control characters in them). A journal written before the check may still hold such a
name: it loads as it was (the schema does not refuse them), and with ``--placement-url`` the
request carries it escaped (:func:`deepshare.serving.translate.printable`)."""


def check_spec_size(spec: LiveJobSpec) -> None:
    """Refuse a spec whose JSON (as journalled) is over :data:`MAX_SPEC_BYTES`: checked before
    admission and again once admission has written its queue in."""
    from deepshare.runtime.spec import spec_json

    size = len(spec_json(spec).encode())
    if size > MAX_SPEC_BYTES:
        raise DeepShareError(f"spec: {size} bytes as journalled (command, args, env and paths), at most "
                             f"{MAX_SPEC_BYTES}; put long argument lists in a file the job reads")


def check_submission(spec: LiveJobSpec, cluster_gpus: Callable[[], tuple[int, int]],
                     fabric_levels: Sequence[str] | None = None) -> None:
    """Server-side checks beyond the schema: absolute paths outside the system folders
    (:func:`~deepshare.core.files.system_tree`), fabric levels this scheduler has
    (``fabric_levels``: its topology's level names; None: not checked), and a job that can ever
    fit. A level it lacks, or a checkpoint folder like ``/dev/zero``, is refused here: the job
    could never run, and accepted it only failed at its first decision or its first run.
    ``cluster_gpus`` asks Ray (it blocks: call this off the event loop); any error from it is
    :class:`ClusterUnavailable` with one line. Names the placement service refuses control
    characters in (:data:`NAME_FIELDS`) are refused here too: with ``--placement-url`` the
    scheduler sends them there."""
    for field in NAME_FIELDS:
        value = getattr(spec, field)
        if isinstance(value, str) and has_control_character(value):
            raise DeepShareError(f"{field}: {CONTROL_CHARACTERS_SAID} are not allowed, got "
                                 f"{value[:64]!r}")
    if fabric_levels is not None:
        found = level_problems(spec.required_level, spec.preferred_level, spec.slice_level, fabric_levels,
                               "this scheduler's")
        if found:  # a level the scheduler lacks may be one its start forgot: say where levels come from
            hint = " (scheduler start --level)"
            raise DeepShareError("; ".join(p.message + (hint if getattr(spec, p.field) not in fabric_levels else "")
                                           for p in found))
    check_spec_size(spec)
    if not os.path.isabs(spec.checkpoint_dir):
        raise DeepShareError(f"checkpoint_dir: expected an absolute path, got {spec.checkpoint_dir!r}")
    if spec.working_dir is not None and not os.path.isabs(spec.working_dir):
        raise DeepShareError(f"working_dir: expected an absolute path, got {spec.working_dir!r}")
    for field in ("checkpoint_dir", "working_dir"):
        folder = getattr(spec, field)
        tree = system_tree(folder) if folder is not None else None
        if tree is not None:
            raise DeepShareError(f"{field}: {folder!r} is in the system folder {tree}, not a place for a "
                                 "job's files; expected a folder on a disk the nodes share (or /dev/shm on one node)")
    try:
        total, nodes = cluster_gpus()
    except Exception as exc:  # noqa: BLE001 - whatever Ray raises (a GCS gone, a timeout): try again later
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ClusterUnavailable(f"cluster: cannot read the cluster's GPUs from Ray now ({type(exc).__name__}"
                                 f"{': ' + first[:200] if first else ''}); submit again later") from None
    if nodes and spec.gpus > total:
        raise DeepShareError(f"gpus: {spec.gpus} exceeds the cluster's {total} GPUs on {nodes} node(s)")


def _query_int(request: Request, name: str, default: int) -> int:
    """Query parameter ``name`` as an integer of at most 18 ASCII digits (``int`` alone also takes
    other scripts' digits and ``1_0``)."""
    text = request.query_params.get(name)
    if text is None:
        return default
    if not _QUERY_INT.fullmatch(text):
        raise DeepShareError(f"{name}: expected an integer, got {text[:40]!r}")
    return int(text)


_QUERY_INT = re.compile(r"-?[0-9]{1,18}")
LIST_LIMIT = 1000
"""Jobs ``GET /v1/jobs`` lists unless asked for more (the most recently submitted): the journal
keeps every finished job, and a list of all of them grew without bound."""
MAX_LIST_LIMIT = 100_000


TENANT_PAGE = 1000
"""Rows a tenant's job list reads at a time (more when it asks for more)."""


def _query_states(request: Request) -> tuple[JobState, ...]:
    """The ``state`` query parameters (repeatable) as job states; none: every state."""
    states = []
    for text in request.query_params.getlist("state"):
        try:
            states.append(JobState(text))
        except ValueError:
            raise DeepShareError(f"state: expected one of {', '.join(s.value for s in JobState)}, "
                                 f"got {text[:40]!r}") from None
    return tuple(states)


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own answers (an unknown route 404, a method a route does not take 405) in this
    API's error shape, ``{"error": ...}``, not FastAPI's ``{"detail": ...}``."""
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(status_code=exc.status_code, content={"error": str(exc.detail)}, headers=exc.headers)


JOURNAL_RETRY_AFTER_S = 5
"""``Retry-After`` of a 503 answered while another process holds the journal locked."""


def _journal_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (another connection holds the journal)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc) or "busy" in str(exc)


async def _journal_error(request: Request, exc: Exception) -> JSONResponse:
    """A journal that another process holds locked (an operator's ``sqlite3`` shell, a backup) past
    the busy timeout: 503 with ``Retry-After`` and one line, nothing changed (the transaction was
    rolled back). Any other SQLite operational error (a full disk, a disk I/O error, a read-only
    file): 500 with one line, not a traceback. Both are logged here, the 500 with its traceback
    (an error) and the 503 as a warning: answered by this handler, Starlette logs neither, and
    an operator would otherwise never learn that the disk is failing."""
    assert isinstance(exc, sqlite3.OperationalError)
    lines = str(exc).strip().splitlines()
    first = lines[0][:200] if lines else type(exc).__name__
    where = f"{request.method} {request.url.path}"
    if _journal_busy(exc):
        log.warning("%s: journal held by another process (%s); answered 503", where, first)
        return JSONResponse(status_code=503, headers={"Retry-After": str(JOURNAL_RETRY_AFTER_S)},
                            content={"error": f"journal: held by another process ({first}); nothing was changed, "
                                              f"try again in {JOURNAL_RETRY_AFTER_S} s"})
    log.error("%s: journal error (%s); answered 500", where, first, exc_info=exc)
    return JSONResponse(status_code=500, content={"error": f"journal: {first}"})


def _caller(request: Request) -> Caller:
    """Who sent ``request`` (:func:`guard` puts it in the scope; an app served unguarded, as in
    tests of the routes alone, has no callers but the admin)."""
    return request.scope.get(CALLER, ADMIN)  # type: ignore[no-any-return]


def make_app(journal: Journal, cluster_gpus: Callable[[], tuple[int, int]], *,
             state_dir: str | Path | None = None, metrics: Any = None,
             ready: Callable[[], bool] = lambda: True,
             contention: Callable[[], dict[str, object]] | None = None,
             tenants: LiveTenants | None = None, max_queued: int = MAX_QUEUED,
             fabric_levels: Sequence[str] | None = None) -> FastAPI:
    """The app over ``journal`` (unguarded: serve :func:`guard` of it). ``cluster_gpus()`` gives
    (total GPUs, nodes) now; ``state_dir`` holds the rank logs; ``metrics`` is a
    :class:`~deepshare.runtime.metrics.SchedulerMetrics`; ``ready()`` says whether the loop runs;
    ``contention()`` the learned contention model's document (None: the scheduler does not learn);
    ``tenants`` the tenants file and its tokens (None: no tenants, every caller is the admin);
    ``max_queued`` the most queued jobs (a submission beyond gets 429); ``fabric_levels`` the
    topology's level names (a job naming another gets 422; None: not checked)."""
    app = FastAPI(title="DeepShare scheduler", version="1")
    app.add_exception_handler(StarletteHTTPException, _http_error)  # unknown routes and methods: the same shape
    app.add_exception_handler(sqlite3.OperationalError, _journal_error)  # a journal locked by another process: 503

    def current():  # type: ignore[no-untyped-def]
        return None if tenants is None else tenants.current

    def visible(caller: Caller, job: JobRecord) -> bool:
        return caller.admin or (tenants is not None and tenants.visible(caller, job.spec))

    def find(caller: Caller, job_id: str) -> JobRecord | None:
        """The job, or None when it does not exist *or is not the caller's*: both answer the same 404."""
        try:
            job = journal.get(job_id)
        except KeyError:
            return None
        return job if visible(caller, job) else None

    def no_job(job_id: str) -> JSONResponse:
        return _error(404, f"no job {job_id!r}")

    def tenancy_of(job: JobRecord, borrowed: dict[str, int]) -> Tenancy:
        file = current()
        return Tenancy(job_queue(job.spec, file), job_priority(job.spec, file),
                       borrowed.get(job.job_id) if job.state is JobState.RUNNING and file is not None else None)

    def borrowed_now() -> dict[str, int]:
        file = current()
        return {} if file is None else borrowed_gpus(journal.jobs(JobState.RUNNING), file)

    def admin_only(caller: Caller, what: str) -> JSONResponse | None:
        return None if caller.admin else _error(403, f"{what} needs the admin token")

    @app.api_route("/healthz", methods=["GET", "HEAD"])  # load balancers probe with either
    def healthz() -> JSONResponse:
        if ready():
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "starting"}, status_code=503)

    @app.get("/metrics")
    def prometheus(request: Request) -> Response:
        refused = admin_only(_caller(request), "/metrics")
        if refused is not None:
            return refused
        if metrics is None:
            return _error(404, "metrics are not kept by this scheduler")
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/contention")
    def learned_contention(request: Request) -> JSONResponse:
        # fitted on every tenant's runs: its model names and counts are other tenants' activity
        refused = admin_only(_caller(request), "/v1/contention")
        if refused is not None:
            return refused
        if contention is None:
            return _error(404, "this scheduler does not learn contention (started with --contention-knowledge exact)")
        return JSONResponse(contention())

    @app.get("/v1/queues")
    def queues(request: Request) -> JSONResponse:
        """Per-queue usage now: the caller's queues (the admin: all)."""
        caller = _caller(request)
        rows = [u for u in queue_usage(journal.jobs(JobState.RUNNING, JobState.QUEUED), current()) if caller.owns(u.queue)]
        return JSONResponse([QueueOut.model_validate(u, from_attributes=True).model_dump() for u in rows])

    @app.post("/v1/tenants/reload")
    def reload_tenants(request: Request) -> JSONResponse:
        refused = admin_only(_caller(request), "reloading the tenants file")
        if refused is not None:
            return refused
        if tenants is None or tenants.path is None:
            return _error(409, "this scheduler was started without --tenants: there is no tenants file to reload")
        try:
            file = tenants.reload()
        except DeepShareError as exc:
            return _error(422, f"{exc} (the previous tenants file stays in force)")
        return JSONResponse({"queues": len(file.queues), "tenants": len(file.tokens), "reloads": tenants.reloads})

    @app.post("/v1/jobs", status_code=201, response_model=JobOut)
    async def submit(request: Request) -> JSONResponse | JobOut:
        raw = await request.body()
        try:
            body = json.loads(raw, object_pairs_hook=unique_keys)
        except RecursionError:
            return _error(400, "body: JSON nested too deeply")
        except DuplicateKey as exc:
            return _error(422, f"body: the key {shown(exc.args[0])} is given twice in one object; expected each key once")
        except ValueError as exc:
            return _error(400, f"body: not valid JSON ({exc})")
        if not isinstance(body, dict):
            return _error(422, f"body: expected a JSON object (a job spec), got {type(body).__name__}")
        # In a worker thread: the check asks Ray for the cluster's size (a blocking call, which on
        # the event loop held every other request), and a reload holds the lock while it reads
        # the file and the live jobs.
        return await run_in_threadpool(check_and_admit, body, _caller(request))

    def check_and_admit(body: dict[str, Any], caller: Caller) -> JSONResponse | JobOut:
        """Check the spec (422 naming the field; 503 when Ray cannot say the cluster's size),
        then admit and journal it."""
        try:
            spec = spec_from_json(body)
            check_submission(spec, cluster_gpus, fabric_levels)  # asks Ray for the cluster's size: before the lock
        except ClusterUnavailable as exc:
            return _error(503, str(exc))
        except DeepShareError as exc:
            return _error(422, str(exc))
        return admit_and_journal(spec, caller)

    queueing = threading.Lock()
    """Held from counting the queued jobs to journalling the new one (:func:`admit_and_journal`), so
    concurrent submissions cannot all pass ``max_queued`` on the same count."""

    def queue_full(spec: LiveJobSpec) -> str | None:
        """Why ``spec`` (admitted) cannot be queued now, or None. Without a tenants file the
        scheduler holds at most ``max_queued`` queued jobs; with one, each queue at most its
        share of them (``max_queued`` over the file's queues, at least 1), so that one tenant
        filling the queue locks no other out, and the answer tells nothing of others' jobs."""
        file = tenants.current if tenants is not None else None
        if file is None or spec.queue is None:
            queued = journal.count(JobState.QUEUED)
            if queued < max_queued:
                return None
            return (f"the queue is full: {queued} jobs queued, at most {max_queued} (--max-queued); "
                    "submit again when some have started")
        share = max(1, max_queued // len(file.queues))
        queued = journal.count_in_queue(JobState.QUEUED, spec.queue)
        if queued < share:
            return None
        return (f"queue {spec.queue!r} is full: {queued} jobs queued, at most {share} (its share of --max-queued "
                f"{max_queued} over {len(file.queues)} queues); submit again when some have started")

    def admit_and_journal(spec: LiveJobSpec, caller: Caller) -> JSONResponse | JobOut:
        """Admit ``spec`` under the tenants file and journal it, with no reload in between and no
        other submission between the queue's count and the insert."""
        with tenants.admitting() if tenants is not None else nullcontext(), queueing:
            if tenants is not None:
                try:
                    spec = tenants.admit_submission(spec, caller)
                    check_spec_size(spec)  # the queue admission wrote in counts too
                except Forbidden as exc:
                    return _error(403, str(exc))
                except DeepShareError as exc:
                    return _error(422, str(exc))
            full = queue_full(spec)
            if full is not None:
                return _error(429, full)
            job = journal.submit(spec)
        return job_out(job, tenancy_of(job, {}))

    @app.get("/v1/jobs", response_model=list[JobOut])
    def list_jobs(request: Request) -> JSONResponse | list[JobOut]:
        """The caller's jobs in submission order: the ``limit`` (default :data:`LIST_LIMIT`) most
        recently submitted, of the states ``state`` names (repeatable; default all)."""
        try:
            states = _query_states(request)
            limit = _query_int(request, "limit", LIST_LIMIT)
            if not 1 <= limit <= MAX_LIST_LIMIT:
                raise DeepShareError(f"limit: expected 1..{MAX_LIST_LIMIT}, got {limit}")
        except DeepShareError as exc:
            return _error(422, str(exc))
        caller = _caller(request)
        borrowed = borrowed_now()
        seen = journal.jobs(*states, last=limit) if caller.admin else tenant_jobs(caller, states, limit)
        return [job_out(j, tenancy_of(j, borrowed)) for j in seen]

    def tenant_jobs(caller: Caller, states: tuple[JobState, ...], limit: int) -> list[JobRecord]:
        """The ``limit`` last jobs ``caller`` may see, read back page by page through the queue
        index: the jobs of its queues, and those whose queue the file's rule decides (checked
        here), never the whole journal at once."""
        assert caller.queues is not None
        found: list[JobRecord] = []
        before: int | None = None
        size = max(limit, TENANT_PAGE)
        while len(found) < limit:
            page, before = journal.queue_page(caller.queues, states, before, size)
            found = [j for j in page if visible(caller, j)] + found
            if before is None:
                break
        return found[-limit:]

    @app.get("/v1/jobs/{job_id}", response_model=JobDetailOut)
    def get_job(job_id: str, request: Request) -> JSONResponse | JobDetailOut:
        job = find(_caller(request), job_id)
        if job is None:
            return no_job(job_id)
        return job_detail(job, journal.runs(job_id), journal.transitions(job_id), tenancy_of(job, borrowed_now()),
                          checkpoint_dir=journal.run_names.checkpoint_dir(job.spec, job.job_id))

    @app.delete("/v1/jobs/{job_id}", response_model=JobOut)
    def cancel(job_id: str, request: Request) -> JSONResponse | JobOut:
        if find(_caller(request), job_id) is None:  # a job's queue never changes: checked once
            return no_job(job_id)
        try:
            state = journal.cancel(job_id)  # one transaction: queued -> cancelled, running -> marked
        except KeyError:
            return no_job(job_id)
        except TransitionError as exc:
            return _error(409, str(exc))
        job = journal.get(job_id)
        out = job_out(job, tenancy_of(job, borrowed_now()))
        if state is JobState.CANCELLED:
            return out
        return JSONResponse(status_code=202, content=out.model_dump(mode="json"))

    @app.get("/v1/jobs/{job_id}/logs", response_model=LogOut)
    def logs(job_id: str, request: Request) -> JSONResponse | LogOut:
        job = find(_caller(request), job_id)  # before anything else: a foreign job's ranks are not told
        if job is None:
            return no_job(job_id)
        try:
            rank = _query_int(request, "rank", 0)
            offset = _query_int(request, "offset", 0)
            limit = _query_int(request, "limit", MAX_CHUNK)
            tail = _query_int(request, "tail", -1) if "tail" in request.query_params else None
        except DeepShareError as exc:
            return _error(422, str(exc))
        if tail is not None and not 0 <= tail <= MAX_TAIL_LINES:
            return _error(422, f"tail: expected 0..{MAX_TAIL_LINES} lines, got {tail}")
        if tail is not None and "offset" in request.query_params:
            return _error(422, "give at most one of offset and tail")
        if not 0 <= rank < job.spec.gpus:
            return _error(422, f"rank: expected 0..{job.spec.gpus - 1} (the job has {job.spec.gpus} ranks), got {rank}")
        if not 1 <= limit <= MAX_CHUNK:
            return _error(422, f"limit: expected 1..{MAX_CHUNK} bytes, got {limit}")
        if state_dir is None:
            return _error(404, "this scheduler keeps no rank logs")
        try:
            path = rank_log_path(state_dir, job.job_id, rank)  # from the journal's id, never the request's text
        except ValueError as exc:
            return _error(404, f"no logs for job {job_id!r} ({exc})")
        if tail is not None:  # the last lines: the chunk from where they start (read on from next_offset)
            offset = tail_offset(path, tail)
        chunk = read_chunk(path, offset, limit)
        return LogOut(job_id=job.job_id, rank=rank, offset=chunk.offset, next_offset=chunk.next_offset,
                      size=chunk.size, text=chunk.text, tail=tail)

    return app


def guard(app: Any, *, token: str | None = None, tenants: LiveTenants | None = None, bound_host: str,
          allowed_hosts: Iterable[str] = (), metrics: Any = None, max_body_bytes: int = MAX_BODY_BYTES,
          body_timeout_s: float = BODY_TIMEOUT_S) -> Any:
    """``app`` behind the guards, outermost first: request metrics, Host allow-list (403), a known
    bearer token on everything but ``GET``/``HEAD /healthz`` (401; the admin ``token``, or any of ``tenants``'
    callers), JSON bodies only (415), body size limit (413) and time (408)."""
    if tenants is None:
        if not token:
            raise ValueError("the scheduler's API needs a token")
        tenants = LiveTenants(token)
    # api_server's own protocol closes a refused request's connection if its body does not come
    # whole within the header timeout, so a refusal keeps the connection of a client that sends it
    inner = LimitBody(app, max_body_bytes, body_timeout_s, error=error_body, close_unread=False)
    inner = RequireJSON(inner, error=error_body, close_unread=False)
    inner = RequireCaller(inner, tenants.caller, open_paths=("/healthz",), error=error_body, close_unread=False)
    inner = AllowHosts(inner, bound_host, allowed_hosts, error=error_body, close_unread=False)
    if metrics is not None:
        inner = ObserveRequests(inner, metrics.observe_http)
    return inner
