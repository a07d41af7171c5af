"""The placement service's FastAPI application (routes, error bodies, OpenAPI document).

Built around a :class:`PlacementEngine`; Serve hosts it (``deepshare.serving.deployment``), but
it is a plain ASGI app, so anything that runs ASGI can. Every user error is a 4xx whose body
names the offending field's path; 503 (with ``Retry-After``) means no decision within the
deadline; any other 5xx means a bug here. Cheap requests (small bodies, few nodes x pending
jobs) are decided on the event loop, where a learned policy's steps await a batching scorer;
everything else is parsed, checked against the limits and decided in a decision thread
(:class:`DecisionWorkers`) that is abandoned at the deadline, so a large request never holds
the loop that answers the small ones and ``/healthz``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
from typing import Any, Awaitable, Callable

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
from deepshare.serving.deadline import Deadline, DecisionTimeout
from deepshare.serving.engine import AsyncScorer, PlacementEngine, Scorer
from deepshare.serving.limits import LimitExceeded, RequestLimits
from deepshare.serving.metrics import ServiceMetrics
from deepshare.serving.middleware import OPEN_PATHS, AnswerHealth
from deepshare.serving.scoring import lone_scorer
from deepshare.serving.schemas import HealthOut, PlacementRequest, PlacementResponse, PolicyOut
from deepshare.serving.settings import ServiceSettings
from deepshare.serving.translate import RequestError
from deepshare.serving.workers import DecisionWorkers

REF_TEMPLATE = "#/components/schemas/{model}"
PLACEMENTS_PATH = "/v1/placements"

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "the body is not JSON"},
    401: {"description": "missing or wrong bearer token"},
    408: {"description": "the body did not arrive within the body timeout (the connection is closed)"},
    413: {"description": "the body is over the size limit, or a list over the node / job limits (`detail[].loc`)"},
    422: {"description": "a field is missing, of the wrong type or inconsistent; `detail[].loc` is its path"},
    503: {"description": "no decision within the decision timeout; retry after `Retry-After` seconds, or send less"},
}


def build_api(
    engine: PlacementEngine,
    settings: ServiceSettings,
    metrics: ServiceMetrics,
    score: AsyncScorer | None = None,
    workers: DecisionWorkers | None = None,
) -> FastAPI:
    """The app; ``score`` batches a learned policy's forward passes on the event loop,
    ``workers`` run decisions (default: ``settings.decision_threads`` new threads)."""
    workers = workers or DecisionWorkers(settings.decision_threads)
    limits = RequestLimits(settings.max_nodes, settings.max_pending, settings.max_running)
    retry_after = str(max(1, math.ceil(settings.decision_timeout_s)))
    batch_scorer = engine.batch_scorer
    lone = lone_scorer(batch_scorer) if batch_scorer is not None else None
    """Scores one observation of a request deciding alone (the same numbers, faster)."""
    app = FastAPI(
        title="DeepShare placement service",
        version=deepshare.__version__,
        description="Contention-aware placement decisions for distributed deep-learning jobs. "
        "POST the cluster's state to /v1/placements; every pending job gets `place` or `wait`.",
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
        status = 400 if any(e["type"] == "json_invalid" for e in errors) else 422
        return JSONResponse({"detail": errors}, status_code=status)

    @app.exception_handler(RequestError)
    async def inconsistent_body(_: Request, exc: RequestError) -> JSONResponse:
        kind, status = ("too_large", 413) if isinstance(exc, LimitExceeded) else ("value_error", 422)
        errors = [{"loc": list(e.loc), "msg": e.msg, "type": kind} for e in exc.errors]
        return JSONResponse({"detail": errors}, status_code=status)

    @app.get("/healthz", response_model=HealthOut, summary="liveness (no token needed)")
    async def healthz() -> HealthOut:  # answered by AnswerHealth first; here for the OpenAPI document
        return HealthOut(policy=engine.name)

    @app.get("/v1/policy", response_model=PolicyOut, responses=_only(401), summary="the policy behind this service")
    async def policy() -> PolicyOut:
        return engine.describe()

    @app.post(
        PLACEMENTS_PATH, response_model=PlacementResponse, responses=_only(400, 401, 408, 413, 422, 503),
        summary="where should the pending jobs go now?",
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": _ref(PlacementRequest)}}}}
        },
    )
    async def placements(request: Request) -> Response:
        return await answer(await request.body())  # already whole: LimitBody read it under its limits

    async def answer(raw: bytes) -> Response:
        """The answer to one placement request's body: 200, 503, or the body's error raised as
        :class:`RequestValidationError` / :class:`RequestError` (the handlers above answer those)."""
        deadline = Deadline(settings.decision_timeout_s)
        loop = asyncio.get_running_loop()

        def parse() -> PlacementRequest:
            # Parsed here rather than by FastAPI: any Content-Type is read as JSON (curl -d sends
            # a form type) and pydantic's own JSON parser is faster.
            try:
                body = PlacementRequest.model_validate_json(raw)
            except ValidationError as exc:
                raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None
            limits.check(body)
            return body

        def decide(body: PlacementRequest | None) -> PlacementResponse:
            scorer = None
            if score is not None:
                scorer = _threadsafe(score, loop, deadline, lone, lambda: engine.in_flight > 1)
            return engine.place(body or parse(), deadline, scorer)

        async def score_inline(obs: dict[str, Any]) -> Any:
            if score is not None and engine.in_flight > 1:
                return await score(obs)
            return lone(obs)  # type: ignore[misc]

        engine.in_flight += 1
        metrics.deciding(+1)
        start, outcome = time.perf_counter(), "error"
        try:
            body = parse() if len(raw) <= INLINE_MAX_BYTES else None
            if body is not None and _cheap(body):
                response = await engine.place_async(body, deadline, score_inline if lone is not None else None)
            else:
                response = await workers.run(lambda: decide(body), deadline)
            outcome = "ok"
        except DecisionTimeout:
            outcome = "timeout"
            return JSONResponse(
                {"detail": f"no decision within {settings.decision_timeout_s:g} s (the service's decision timeout): "
                           "the request is too large for it, or the service is overloaded"},
                status_code=503, headers={"Retry-After": retry_after},
            )
        except (RequestValidationError, RequestError):
            outcome = "invalid"
            raise
        finally:
            engine.in_flight -= 1
            metrics.deciding(-1)
            metrics.decided(outcome, time.perf_counter() - start)
        placed = sum(d.action == "place" for d in response.decisions)
        metrics.count_decisions(
            {"place": placed, "wait": len(response.decisions) - placed, "preempt": len(response.preempt),
             "migrate": len(response.migrate)}
        )
        return Response(response.model_dump_json(exclude_none=True), media_type="application/json")

    async def answer_errors(raw: bytes) -> Response:
        """:func:`answer` with the body's errors answered as the exception handlers answer them."""
        try:
            return await answer(raw)
        except RequestValidationError as exc:
            return await invalid_body(None, exc)  # type: ignore[arg-type]
        except RequestError as exc:
            return await inconsistent_body(None, exc)  # type: ignore[arg-type]

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            request_schema = PlacementRequest.model_json_schema(ref_template=REF_TEMPLATE)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(request_schema.pop("$defs", {}))
            components[PlacementRequest.__name__] = request_schema
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    # Added last = outermost: metrics see every answer, including the guards' 401, 408 and 413;
    # health checks are answered before the token check and before any body is read; placement
    # requests that passed every guard skip FastAPI's routing (the innermost, added first).
    app.add_middleware(AnswerPlacements, answer=answer_errors)
    app.add_middleware(LimitBody, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s,
                       error=detail_body)
    app.add_middleware(RequireToken, token=settings.token, open_paths=OPEN_PATHS, error=detail_body)
    app.add_middleware(AnswerHealth, policy=engine.name)
    app.add_middleware(ObserveRequests, observe=metrics.observe)
    return app


INLINE_MAX_BYTES = 32 * 1024
"""Bodies up to this size are parsed on the event loop (well under a millisecond)."""
INLINE_MAX_WORK = 64 * 65
"""Requests with at most this many nodes x (pending jobs + 1) decide on the event loop (the
benchmark's large request, 64 x 64, costs about 30 ms there, in steps that each yield to the
loop for scoring). Larger ones go to a decision thread, which costs a few thread hops per
request but can be abandoned at the deadline and leaves the loop free."""


class AnswerPlacements:
    """``POST /v1/placements`` answered by ``answer(body)`` without FastAPI's routing, exception
    middleware and endpoint machinery in between (some 50-100 us of a small request's ~1.3 ms in
    the replica, measured in-process). Sits inside the guards, so the body arrives whole; the route stays registered for
    the OpenAPI document, and every other request goes on to FastAPI. An unexpected exception
    propagates to Starlette's outermost ``ServerErrorMiddleware``, which answers 500 as before."""

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


def _cheap(request: PlacementRequest) -> bool:
    return len(request.nodes) * (len(request.pending) + 1) <= INLINE_MAX_WORK


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
