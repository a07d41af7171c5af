"""The placement service's FastAPI application (routes, error bodies, OpenAPI document).

Built around a :class:`PlacementEngine`; Serve hosts it (``deepshare.serving.deployment``), but
it is a plain ASGI app, so anything that runs ASGI can. Every user error is a 4xx whose body
names the offending field's path; 503 (with ``Retry-After``) means no decision within the
deadline, or a replica out of memory while deciding; a 500 saying ``"error": "policy"`` (or
``"infeasible"``) means the policy failed on the request (or decided what the cluster cannot do);
any other 5xx means a bug here, or a replica that died. Cheap requests (small bodies, few nodes x pending
jobs) are decided on the event loop, where a learned policy's steps await a batching scorer;
everything else is parsed, checked against the limits and decided in a decision thread
(:class:`DecisionWorkers`) that is abandoned at the deadline, so a large request never holds
the loop that answers the small ones and ``/healthz``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import time
from typing import Any, Awaitable, Callable

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

import deepshare
from deepshare.infra.httpauth import (
    CLIENT_GONE,
    ASGIApp,
    LimitBody,
    ObserveRequests,
    Receive,
    RequireToken,
    Scope,
    Send,
    detail_body,
)
from deepshare.policies.base import Observation
from deepshare.core.deadline import Deadline, DecisionTimeout
from deepshare.serving.duplicates import DuplicateKeys, duplicate_keys
from deepshare.serving.engine import AsyncScorer, PlacementEngine, Scorer
from deepshare.serving.limits import LimitExceeded, RequestLimits
from deepshare.serving.metrics import ServiceMetrics
from deepshare.serving.middleware import OPEN_PATHS, AnswerHealth
from deepshare.serving.scoring import lone_scorer
from deepshare.serving.schemas import HealthOut, PlacementRequest, PlacementResponse, PolicyOut
from deepshare.serving.settings import ServiceSettings
from deepshare.serving.translate import MAX_REPORTED_ERRORS, RequestError, more_errors
from deepshare.serving.workers import DecisionWorkers

log = logging.getLogger(__name__)

REF_TEMPLATE = "#/components/schemas/{model}"
PLACEMENTS_PATH = "/v1/placements"

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "the body is not JSON"},
    401: {"description": "missing or wrong bearer token"},
    408: {"description": "the body did not arrive within the body timeout (the connection is closed)"},
    413: {"description": "the body is over the size limit, or a list over the node / job limits (`detail[].loc`)"},
    422: {"description": "a field is missing, of the wrong type, inconsistent or named twice in one object; "
                         "`detail[].loc` is its path"},
    500: {"description": "the policy failed on the request (`error`: `policy`) or decided what the cluster cannot do "
                         "(`error`: `infeasible`); a 500 without `error` is not this service's (a replica that died)"},
    503: {"description": "no decision within the decision timeout; retry after `Retry-After` seconds, or send less"},
}


class PlacementAPI:
    """The service's HTTP handlers around one :class:`PlacementEngine`: one method per route,
    one path per placement request (:meth:`answer`), error bodies made in one place
    (:func:`error_response`). :attr:`app` is the FastAPI application.

    A placement request goes: parse the body (on the event loop when it is small, else in the
    decision thread), check it against the limits, decide (on the loop when it is cheap, else in
    a decision thread abandoned at the deadline), answer. Every outcome is a response returned,
    never an exception for a handler to catch: 200, a 4xx naming the field, 503, or a 500 saying
    the policy failed (:func:`policy_error_body`).

    ``score`` batches a learned policy's forward passes on the event loop; ``workers`` run the
    decisions (default: ``settings.decision_threads`` new threads). ``skip_routing`` answers
    ``POST /v1/placements`` before FastAPI's routing (:class:`AnswerPlacements`); the route stays
    registered either way, so the OpenAPI document and the answers are the same.
    """

    def __init__(
        self,
        engine: PlacementEngine,
        settings: ServiceSettings,
        metrics: ServiceMetrics,
        score: AsyncScorer | None = None,
        workers: DecisionWorkers | None = None,
        *,
        skip_routing: bool = True,
    ) -> None:
        self.engine, self.settings, self.metrics, self.score = engine, settings, metrics, score
        self.workers = workers or DecisionWorkers(settings.decision_threads)
        self.limits = RequestLimits(settings.max_nodes, settings.max_pending, settings.max_running)
        self.retry_after = str(max(1, math.ceil(settings.decision_timeout_s)))
        batch = engine.batch_scorer
        self.lone: Scorer | None = lone_scorer(batch) if batch is not None else None
        """Scores one observation of a request deciding alone (the same numbers, faster)."""
        self.deciding = 0
        """Requests deciding now: a learned policy's scores are batched only while there is company."""
        self.app = self._build(skip_routing)

    # -- routes --------------------------------------------------------------------------------
    async def healthz(self) -> HealthOut:
        """Answered by :class:`AnswerHealth` before it gets here; the route documents it."""
        return HealthOut(policy=self.engine.name)

    async def policy(self) -> PolicyOut:
        return self.engine.describe()

    async def placements(self, request: Request) -> Response:
        return await self.answer(await request.body())  # already whole: LimitBody read it under its limits

    # -- the one path of a placement request ----------------------------------------------------
    async def answer(self, raw: bytes) -> Response:
        """The response to one placement request's body: 200, a 4xx naming the field, 503, or a 500
        saying the policy failed on it.
        The decision's time is recorded by outcome: ``ok``, ``timeout``, ``invalid``,
        ``disconnected`` (the client left and Serve cancelled the request) or ``error`` (a bug)."""
        deadline = Deadline(self.settings.decision_timeout_s)
        self.deciding += 1
        self.metrics.deciding(+1)
        start, outcome = time.perf_counter(), "error"
        try:
            if len(raw) <= INLINE_MAX_BYTES:
                body = self._parse(raw)
                decided = (self._on_loop(body, deadline) if self.engine.sized and _cheap(body, self.engine.settings.contention)
                           else self._in_thread(lambda: body, deadline))
            else:  # parsing a large body is work too: off the loop, within the deadline
                decided = self._in_thread(lambda: self._parse(raw), deadline)
            response = await decided
            outcome = "ok"
        except DecisionTimeout:
            outcome = "timeout"
            return JSONResponse(
                {"detail": f"no decision within {self.settings.decision_timeout_s:g} s (the service's decision "
                           "timeout): the request is too large for it, or the service is overloaded"},
                status_code=503, headers={"Retry-After": self.retry_after},
            )
        except RefusedBody as refused:
            outcome = "invalid"
            return refused.response
        except (ValidationError, RequestError) as exc:
            outcome = "invalid"
            return error_response(exc)
        except asyncio.CancelledError:
            # Serve cancels the request when its client goes away: the HTTP metrics count it 499
            # (ObserveRequests), so the decision is "disconnected", not an "error" of the service
            outcome = "disconnected"
            raise
        except MemoryError:
            # the replica ran out of memory: the service's state, not the request's fault, so not
            # the "policy" 500 that makes a live scheduler set the request's jobs aside
            log.error("placement service: out of memory deciding a request of %d bytes", len(raw))
            return JSONResponse(
                {"detail": "the service ran out of memory deciding this request: it is too large for the service, "
                           "or the service is overloaded"},
                status_code=503, headers={"Retry-After": self.retry_after},
            )
        except Exception as exc:  # noqa: BLE001 - the policy failed on this request: say so, in the API's shape
            log.exception("placement service: the policy failed on a request")
            return JSONResponse(policy_error_body(exc), status_code=500)
        finally:
            self.deciding -= 1
            self.metrics.deciding(-1)
            self.metrics.decided(outcome, time.perf_counter() - start)
        placed = sum(d.action == "place" for d in response.decisions)
        self.metrics.count_decisions(
            {"place": placed, "wait": len(response.decisions) - placed, "preempt": len(response.preempt),
             "migrate": len(response.migrate)}
        )
        return Response(response.model_dump_json(exclude_none=True), media_type="application/json")

    def _parse(self, raw: bytes) -> PlacementRequest:
        """The body as a request within the limits; :class:`RefusedBody` with the error answer,
        rendered here (in a decision thread for a large body: a body of hundreds of thousands of
        bad fields costs a second to list). Parsed here rather than by FastAPI: any Content-Type
        is read as JSON (curl -d sends a form type) and pydantic's own JSON parser is faster.
        A key named twice in one object is refused first (:mod:`deepshare.serving.duplicates`):
        pydantic would keep its last value."""
        duplicated = duplicate_keys(raw)
        if duplicated:
            raise RefusedBody(error_response(DuplicateKeys(duplicated)))
        try:
            body = PlacementRequest.model_validate_json(raw)
            self.limits.check(body)
        except ValidationError as exc:  # a list past the schema's cap is past the flag's too: 413
            raise RefusedBody(error_response(self.limits.over_schema(exc) or exc)) from None
        except RequestError as exc:
            raise RefusedBody(error_response(exc)) from None
        return body

    async def _on_loop(self, body: PlacementRequest, deadline: Deadline) -> PlacementResponse:
        """A cheap decision on the event loop; a learned policy's steps await the batching scorer
        while other requests decide, and score alone otherwise."""
        if self.lone is None:
            return await self.engine.place_async(body, deadline)

        async def score(obs: Observation) -> np.ndarray:
            if self.score is not None and self.deciding > 1:
                return await self.score(obs)
            return self.lone(obs)  # type: ignore[misc]

        return await self.engine.place_async(body, deadline, score)

    async def _in_thread(self, body: Callable[[], PlacementRequest], deadline: Deadline) -> PlacementResponse:
        """A decision in a decision thread (``body`` runs there too), abandoned at ``deadline``."""
        loop = asyncio.get_running_loop()
        scorer = None
        if self.score is not None:
            scorer = _threadsafe(self.score, loop, deadline, self.lone, lambda: self.deciding > 1)
        return await self.workers.run(lambda: self.engine.place(body(), deadline, scorer), deadline)

    # -- the application -----------------------------------------------------------------------
    def _build(self, skip_routing: bool) -> FastAPI:
        app = FastAPI(
            title="DeepShare placement service",
            version=deepshare.__version__,
            description="Contention-aware placement decisions for distributed deep-learning jobs. "
            "POST the cluster's state to /v1/placements; every pending job gets `place` or `wait`.",
        )
        app.add_exception_handler(RequestValidationError, _invalid_parameters)  # no route takes any today
        app.add_api_route("/healthz", self.healthz, methods=["GET"], response_model=HealthOut,
                          summary="liveness (no token needed)")
        app.add_api_route("/v1/policy", self.policy, methods=["GET"], response_model=PolicyOut, responses=_only(401),
                          summary="the policy behind this service")
        app.add_api_route(
            PLACEMENTS_PATH, self.placements, methods=["POST"], response_model=PlacementResponse,
            responses=_only(400, 401, 408, 413, 422, 500, 503), summary="where should the pending jobs go now?",
            openapi_extra={
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": _ref(PlacementRequest)}}}}
            },
        )
        app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
        # Added last = outermost: metrics see every answer, including the guards' 401, 408 and 413;
        # health checks are answered before the token check and before any body is read; with
        # skip_routing, placement requests that passed every guard skip FastAPI's routing (the
        # innermost, added first).
        if skip_routing:
            app.add_middleware(AnswerPlacements, answer=self.answer)
        app.add_middleware(LimitBody, max_bytes=self.settings.max_body_bytes, timeout_s=self.settings.body_timeout_s,
                           error=detail_body)
        app.add_middleware(RequireToken, token=self.settings.token, open_paths=OPEN_PATHS, error=detail_body)
        app.add_middleware(AnswerHealth, policy=self.engine.name)
        app.add_middleware(ObserveRequests, observe=self.metrics.observe)
        return app


class RefusedBody(Exception):
    """A body refused before any decision, with its error answer (:func:`error_response`)."""

    def __init__(self, response: JSONResponse) -> None:
        super().__init__("refused body")
        self.response = response


def error_response(exc: ValidationError | RequestError) -> JSONResponse:
    """The answer to a body's errors, each naming its field's path (``detail[].loc``): 400 for a
    body that is not JSON, 413 for one over the limits, 422 otherwise. At most
    :data:`~deepshare.serving.translate.MAX_REPORTED_ERRORS` are listed, then a count of the rest."""
    if isinstance(exc, RequestError):  # capped when raised: the entry past the cap counts the rest
        kind, status = ("too_large", 413) if isinstance(exc, LimitExceeded) else (exc.kind, 422)
        return JSONResponse({"detail": [{"loc": list(e.loc), "msg": e.msg,
                                         "type": kind if i < MAX_REPORTED_ERRORS else "too_many_errors"}
                                        for i, e in enumerate(exc.errors)]}, status_code=status)
    found = exc.errors(include_url=False, include_context=False, include_input=False)
    errors = [{"loc": ["body", *e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type", "")}
              for e in found[:MAX_REPORTED_ERRORS]]
    status = 400 if any(e["type"] == "json_invalid" for e in errors) else 422
    if len(found) > MAX_REPORTED_ERRORS:
        errors.append({"loc": ["body"], "msg": more_errors(len(found) - MAX_REPORTED_ERRORS), "type": "too_many_errors"})
    return JSONResponse({"detail": errors}, status_code=status)


async def _invalid_parameters(_: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own validation errors in this service's error shape."""
    assert isinstance(exc, RequestValidationError)
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
    status = 400 if any(e["type"] == "json_invalid" for e in errors) else 422
    return JSONResponse({"detail": errors}, status_code=status)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the request body's schema (the route reads the raw body, so
    FastAPI does not see it) under ``components``."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        request_schema = PlacementRequest.model_json_schema(ref_template=REF_TEMPLATE)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(request_schema.pop("$defs", {}))
        components[PlacementRequest.__name__] = request_schema
        app.openapi_schema = schema
    return app.openapi_schema


INLINE_MAX_BYTES = 32 * 1024
"""Bodies up to this size are parsed on the event loop (well under a millisecond)."""

INLINE_MAX_WORK = 64 * 65
"""Requests with at most this many nodes x (pending jobs + 1) decide on the event loop (the
benchmark's large request, 64 x 64, costs about 30 ms there, in steps that each yield to the
loop for scoring). Larger ones go to a decision thread, which costs a few thread hops per
request but can be abandoned at the deadline and leaves the loop free."""


POLICY_ERROR = "policy"
"""A 500's ``error`` when the policy failed on the request (:func:`policy_error_body`; a batch of
requests that fails is asked again request by request, so this is the request's own failure):
what a client may blame the request for. Any other 500 (a Serve
replica that died mid-request, a proxy's) says nothing about the request."""
INFEASIBLE = "infeasible"
"""A 500's ``error`` when the policy's decision asked what the cluster cannot do: the policy's
fault, not the request's (:class:`~deepshare.core.errors.InfeasibleDecision`)."""


def policy_error_body(exc: BaseException) -> dict[str, str]:
    """The 500 body for a policy that failed on a request: the error's type only (its message may
    hold the service's internals; the log has the traceback)."""
    from deepshare.core.errors import InfeasibleDecision

    kind = INFEASIBLE if isinstance(exc, InfeasibleDecision) else POLICY_ERROR
    what = "decided what the cluster cannot do" if kind == INFEASIBLE else "failed on this request"
    return {"detail": f"the policy {what} ({type(exc).__name__}); the service's log has the traceback", "error": kind}


class AnswerPlacements:
    """``POST /v1/placements`` answered by ``answer(body)`` (:meth:`PlacementAPI.answer`, which
    the route calls too) without FastAPI's routing, exception middleware and endpoint machinery
    in between. Sits inside the guards, so the body arrives whole; every other request goes on
    to FastAPI. An exception after the decision (answering it) propagates to Starlette's outermost
    ``ServerErrorMiddleware``, which answers a bare 500 as the route would."""

    def __init__(self, app: ASGIApp, answer: Callable[[bytes], Awaitable[Response]]) -> None:
        self.app, self.answer = app, answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != PLACEMENTS_PATH or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        raw = await _whole_body(receive)
        if raw is None:  # the client went away (LimitBody has normally seen that first)
            scope[CLIENT_GONE] = True
            return
        response = await self.answer(raw)
        await response(scope, receive, send)


async def _whole_body(receive: Receive) -> bytes | None:
    """The request body (:class:`LimitBody` hands it on in one message), or ``None`` after an
    ``http.disconnect``."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


INLINE_CONTENTION = frozenset({"profiled", "none"})
"""Contention models whose predictions cost about the same whatever the fabric (``none`` is the
profiled model floored at 1); under any other (``link``: a fixed point over every running flow
and uplink port, per running job and per candidate) a request's cost follows its running jobs
and levels, not nodes x pending."""

INLINE_MAX_HELD = INLINE_MAX_WORK
"""Running jobs' placement entries a request decided on the loop may hold (each is translated
and added to the view's contention state)."""

INLINE_MAX_CONTENDING = 1 << 21
"""Bound on the profiled state's build cost, estimated as the sum over multi-node running jobs of
(the multi-node jobs on its nodes)^2: each one added re-rates every neighbour, each re-rate reads
that neighbour's neighbours, so k jobs sharing the same nodes cost about k^3 (565 jobs over two
1024-GPU nodes, 32.6 KB: 5 s). 2^21 is about 15 ms."""


def _cheap(request: PlacementRequest, contention: str = "profiled") -> bool:
    """Whether ``request`` may decide on the event loop: nodes x (pending + 1) within
    :data:`INLINE_MAX_WORK`, its running jobs' placement entries within :data:`INLINE_MAX_HELD`,
    their contention bookkeeping within :data:`INLINE_MAX_CONTENDING`, under a contention model
    whose cost does not follow the fabric (:data:`INLINE_CONTENTION`)."""
    if contention not in INLINE_CONTENTION or len(request.nodes) * (len(request.pending) + 1) > INLINE_MAX_WORK:
        return False
    held = 0
    spanning: list[dict[str, Any]] = []
    on_node: dict[str, int] = {}
    for job in request.running:
        held += len(job.placement)
        if len(job.placement) > 1:  # single-node jobs neither suffer nor cause profiled contention
            spanning.append(job.placement)
            for node in job.placement:
                on_node[node] = on_node.get(node, 0) + 1
    if held > INLINE_MAX_HELD:
        return False
    return sum(sum(on_node[n] for n in p) ** 2 for p in spanning) <= INLINE_MAX_CONTENDING


def _threadsafe(
    score: AsyncScorer,
    loop: asyncio.AbstractEventLoop,
    deadline: Deadline,
    direct: Scorer | None,
    company: Callable[[], bool],
) -> Scorer:
    """``score`` callable from a decision thread: while other requests decide too (``company()``)
    each call runs on ``loop``, where concurrent requests' calls batch, waiting at most until
    ``deadline``; a lone request scores in its own thread (``direct``), saving two thread hops."""

    def call(obs):  # type: ignore[no-untyped-def]
        if direct is not None and not company():
            return direct(obs)
        future = asyncio.run_coroutine_threadsafe(score(obs), loop)
        try:
            return future.result(deadline.remaining())
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise DecisionTimeout(f"no decision within {deadline.seconds:g} s") from None

    return call


def _ref(model: type) -> str:
    return REF_TEMPLATE.format(model=model.__name__)


def _only(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: ERRORS[code] for code in codes}
