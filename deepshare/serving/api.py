"""The placement service's FastAPI application (routes, error bodies, OpenAPI document).

Built around a :class:`PlacementEngine`; Serve hosts it (``deepshare.serving.deployment``), but
it is a plain ASGI app, so anything that runs ASGI can. Every user error is a 4xx whose body
names the offending field's path; a 5xx means a bug here.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

import deepshare
from deepshare.serving.engine import AsyncScorer, PlacementEngine
from deepshare.serving.metrics import ServiceMetrics
from deepshare.serving.middleware import LimitBody, ObserveRequests, RequireToken
from deepshare.serving.schemas import HealthOut, PlacementRequest, PlacementResponse, PolicyOut
from deepshare.serving.settings import ServiceSettings
from deepshare.serving.translate import RequestError

REF_TEMPLATE = "#/components/schemas/{model}"

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "the body is not JSON"},
    401: {"description": "missing or wrong bearer token"},
    413: {"description": "the body is over the size limit"},
    422: {"description": "a field is missing, of the wrong type or inconsistent; `detail[].loc` is its path"},
}


def build_api(
    engine: PlacementEngine, settings: ServiceSettings, metrics: ServiceMetrics, score: AsyncScorer | None = None
) -> FastAPI:
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
        errors = [{"loc": list(e.loc), "msg": e.msg, "type": "value_error"} for e in exc.errors]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.get("/healthz", response_model=HealthOut, summary="liveness (no token needed)")
    async def healthz() -> HealthOut:
        return HealthOut(policy=engine.name)

    @app.get("/v1/policy", response_model=PolicyOut, responses=_only(401), summary="the policy behind this service")
    async def policy() -> PolicyOut:
        return engine.describe()

    @app.post(
        "/v1/placements", response_model=PlacementResponse, responses=_only(400, 401, 413, 422),
        summary="where should the pending jobs go now?",
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": _ref(PlacementRequest)}}}}
        },
    )
    async def placements(request: Request) -> Response:
        # Parsed here rather than by FastAPI: any Content-Type is read as JSON (curl -d sends a
        # form type) and pydantic's own JSON parser is faster.
        try:
            body = PlacementRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None
        response = await engine.place_async(body, score)
        placed = sum(d.action == "place" for d in response.decisions)
        metrics.count_decisions(
            {"place": placed, "wait": len(response.decisions) - placed, "preempt": len(response.preempt),
             "migrate": len(response.migrate)}
        )
        return Response(response.model_dump_json(exclude_none=True), media_type="application/json")

    @app.get("/metrics", responses=_only(401), summary="Prometheus metrics of this replica")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

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

    # Added last = outermost: metrics see every answer, including the guards' 401 and 413.
    app.add_middleware(LimitBody, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequireToken, token=settings.token)
    app.add_middleware(ObserveRequests, metrics=metrics)
    return app


def _ref(model: type) -> str:
    return REF_TEMPLATE.format(model=model.__name__)


def _only(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: ERRORS[code] for code in codes}
