"""The scheduler's HTTP API (FastAPI), served on loopback by the scheduler process.

``POST /v1/jobs`` (a job spec as JSON; 201 with the job), ``GET /v1/jobs``, ``GET /v1/jobs/{id}``
(with its runs: measured vs predicted throughput, and its transitions), ``DELETE /v1/jobs/{id}``
(cancel: 200 when it was queued, 202 when a running job is being stopped). Bad input is a 4xx
with ``{"error": "field.path: what was expected"}``, never a 5xx.
"""

from __future__ import annotations

import json
import os
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from deepshare.core.types import DeepShareError
from deepshare.runtime.journal import TERMINAL, JobState, Journal, TransitionError
from deepshare.runtime.models import JobDetailOut, JobOut, job_detail, job_out
from deepshare.runtime.spec import LiveJobSpec, spec_from_json


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


def make_app(journal: Journal, cluster_gpus: Callable[[], tuple[int, int]]) -> FastAPI:
    """The app over ``journal``; ``cluster_gpus()`` gives (total GPUs, nodes) now."""
    app = FastAPI(title="DeepShare scheduler", version="1")

    @app.post("/v1/jobs", status_code=201, response_model=JobOut)
    async def submit(request: Request) -> JSONResponse | JobOut:
        raw = await request.body()
        try:
            body = json.loads(raw)
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
            job = journal.get(job_id)
        except KeyError:
            return _error(404, f"no job {job_id!r}")
        if job.state in TERMINAL:
            return _error(409, f"job {job_id!r} is already {job.state.value}")
        if job.state is JobState.QUEUED:
            try:
                journal.cancel_queued(job_id)
                return job_out(journal.get(job_id))
            except TransitionError:  # launched meanwhile: cancel it as a running job
                pass
        journal.request_cancel(job_id)
        return JSONResponse(status_code=202, content=job_out(journal.get(job_id)).model_dump(mode="json"))

    return app
