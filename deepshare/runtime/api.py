"""The scheduler's HTTP API (FastAPI), served on loopback by the scheduler process.

``POST /v1/jobs`` (a job spec as JSON; 201 with the job), ``GET /v1/jobs``, ``GET /v1/jobs/{id}``
(with its runs: measured vs predicted throughput, and its transitions), ``DELETE /v1/jobs/{id}``
(cancel: 200 when it was queued, 202 when a running job is being stopped),
``GET /v1/jobs/{id}/logs?rank=N&offset=K`` (at most 64 KiB of a rank's log), ``GET /v1/contention``
(the learned contention model's latest version and its error, :mod:`deepshare.runtime.learning`),
``GET /metrics`` (Prometheus) and ``GET /healthz``. Bad input is a 4xx with ``{"error": "field.path: what was
expected"}``, never a 5xx.

A job runs any command as the scheduler's user, so every route but ``/healthz`` is closed
(:func:`guard`, from :mod:`deepshare.infra.httpauth`): a ``Host`` that is not this service's is 403
(DNS rebinding), no or a wrong bearer token is 401, a body that is not ``application/json`` is
415 (a browser's cross-origin "simple" request cannot send one without a preflight), a body
over ``max_body_bytes`` is 413.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from deepshare.core.errors import DeepShareError
from deepshare.infra.httpauth import AllowHosts, LimitBody, ObserveRequests, RequireJSON, RequireToken, error_body
from deepshare.runtime.journal import JobState, Journal, TransitionError
from deepshare.runtime.logs import MAX_CHUNK, rank_log_path, read_chunk
from deepshare.runtime.models import JobDetailOut, JobOut, LogOut, job_detail, job_out
from deepshare.runtime.spec import LiveJobSpec, spec_from_json

MAX_BODY_BYTES = 1024 * 1024
"""Largest job spec accepted (a spec is a few hundred bytes; its every string is bounded)."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


def check_submission(spec: LiveJobSpec, cluster_gpus: Callable[[], tuple[int, int]]) -> None:
    """Server-side checks beyond the schema: absolute paths, and a job that can ever fit."""
    if not os.path.isabs(spec.checkpoint_dir):
        raise DeepShareError(f"checkpoint_dir: expected an absolute path, got {spec.checkpoint_dir!r}")
    if spec.working_dir is not None and not os.path.isabs(spec.working_dir):
        raise DeepShareError(f"working_dir: expected an absolute path, got {spec.working_dir!r}")
    total, nodes = cluster_gpus()
    if nodes and spec.gpus > total:
        raise DeepShareError(f"gpus: {spec.gpus} exceeds the cluster's {total} GPUs on {nodes} node(s)")


def _query_int(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise DeepShareError(f"{name}: expected an integer, got {text[:40]!r}") from None


def make_app(journal: Journal, cluster_gpus: Callable[[], tuple[int, int]], *,
             state_dir: str | Path | None = None, metrics: Any = None,
             ready: Callable[[], bool] = lambda: True,
             contention: Callable[[], dict[str, object]] | None = None) -> FastAPI:
    """The app over ``journal`` (unguarded: serve :func:`guard` of it). ``cluster_gpus()`` gives
    (total GPUs, nodes) now; ``state_dir`` holds the rank logs; ``metrics`` is a
    :class:`~deepshare.runtime.metrics.SchedulerMetrics`; ``ready()`` says whether the loop runs;
    ``contention()`` the learned contention model's document (None: the scheduler does not learn)."""
    app = FastAPI(title="DeepShare scheduler", version="1")

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        if ready():
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "starting"}, status_code=503)

    @app.get("/metrics")
    def prometheus() -> Response:
        if metrics is None:
            return _error(404, "metrics are not kept by this scheduler")
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/contention")
    def learned_contention() -> JSONResponse:
        if contention is None:
            return _error(404, "this scheduler does not learn contention (started with --contention-knowledge exact)")
        return JSONResponse(contention())

    @app.post("/v1/jobs", status_code=201, response_model=JobOut)
    async def submit(request: Request) -> JSONResponse | JobOut:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except RecursionError:
            return _error(400, "body: JSON nested too deeply")
        except ValueError as exc:
            return _error(400, f"body: not valid JSON ({exc})")
        if not isinstance(body, dict):
            return _error(422, f"body: expected a JSON object (a job spec), got {type(body).__name__}")
        try:
            spec = spec_from_json(body)
            check_submission(spec, cluster_gpus)
        except DeepShareError as exc:
            return _error(422, str(exc))
        return job_out(journal.submit(spec))

    @app.get("/v1/jobs", response_model=list[JobOut])
    def list_jobs() -> list[JobOut]:
        return [job_out(j) for j in journal.jobs()]

    @app.get("/v1/jobs/{job_id}", response_model=JobDetailOut)
    def get_job(job_id: str) -> JSONResponse | JobDetailOut:
        try:
            job = journal.get(job_id)
        except KeyError:
            return _error(404, f"no job {job_id!r}")
        return job_detail(job, journal.runs(job_id), journal.transitions(job_id))

    @app.delete("/v1/jobs/{job_id}", response_model=JobOut)
    def cancel(job_id: str) -> JSONResponse | JobOut:
        try:
            state = journal.cancel(job_id)  # one transaction: queued -> cancelled, running -> marked
        except KeyError:
            return _error(404, f"no job {job_id!r}")
        except TransitionError as exc:
            return _error(409, str(exc))
        if state is JobState.CANCELLED:
            return job_out(journal.get(job_id))
        return JSONResponse(status_code=202, content=job_out(journal.get(job_id)).model_dump(mode="json"))

    @app.get("/v1/jobs/{job_id}/logs", response_model=LogOut)
    def logs(job_id: str, request: Request) -> JSONResponse | LogOut:
        try:
            job = journal.get(job_id)
        except KeyError:
            return _error(404, f"no job {job_id!r}")
        try:
            rank = _query_int(request, "rank", 0)
            offset = _query_int(request, "offset", 0)
            limit = _query_int(request, "limit", MAX_CHUNK)
        except DeepShareError as exc:
            return _error(422, str(exc))
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
        chunk = read_chunk(path, offset, limit)
        return LogOut(job_id=job.job_id, rank=rank, offset=chunk.offset, next_offset=chunk.next_offset,
                      size=chunk.size, text=chunk.text)

    return app


def guard(app: Any, *, token: str, bound_host: str, allowed_hosts: Iterable[str] = (), metrics: Any = None,
          max_body_bytes: int = MAX_BODY_BYTES) -> Any:
    """``app`` behind the guards, outermost first: request metrics, Host allow-list (403), bearer
    token on every route but ``/healthz`` (401), JSON bodies only (415), body size limit (413)."""
    if not token:
        raise ValueError("the scheduler's API needs a token")
    inner = LimitBody(app, max_body_bytes, error=error_body)
    inner = RequireJSON(inner, error=error_body)
    inner = RequireToken(inner, token, open_paths=("/healthz",), error=error_body)
    inner = AllowHosts(inner, bound_host, allowed_hosts, error=error_body)
    if metrics is not None:
        inner = ObserveRequests(inner, metrics.observe_http)
    return inner
