"""The Ray Serve deployment hosting a placement policy, and the application builder that
``serve run serve/config.yaml`` and ``deepshare serve`` both use.

Each replica loads the policy once and serves the FastAPI app of :mod:`deepshare.serving.api`.
Large decisions run in the replica's decision threads (cheap ones on its event loop);
concurrent requests share forward passes:
while several requests are deciding, a learned policy's scorer calls go through a
:class:`~deepshare.serving.batching.Batcher` on the replica's event loop, so N requests deciding
at once cost about one batched pass per choice instead of N.

``max_ongoing_requests`` is high (256) on purpose: a request slot costs an awaiting coroutine,
while the CPU work is bounded by the decision threads, the decision deadline and the body
timeout. With the 64 slots of Serve's default, 64 clients trickling their bodies filled the
replica and health checks queued behind them in Serve's proxy.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
from ray import serve
from ray.serve import Application

import deepshare
from deepshare.core.heap import freeze_long_lived
from deepshare.infra.raycompat import replica_grpc_on_loopback
from deepshare.serving.api import PlacementAPI
from deepshare.serving.batching import Batcher
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.metrics import ServiceMetrics
from deepshare.serving.settings import TOKEN_ENV, ServiceSettings, check_settings
from deepshare.serving.workers import GRACE_S, DecisionWorkers

log = logging.getLogger(__name__)

APP_NAME = "deepshare"
MAX_ONGOING_REQUESTS = 256


@serve.deployment(name="PlacementService", max_ongoing_requests=MAX_ONGOING_REQUESTS, ray_actor_options={"num_cpus": 1})
@serve.ingress()
class PlacementService:
    def __init__(self, settings: dict[str, Any], skip_routing: bool = True) -> None:
        """``skip_routing``: answer placement requests before FastAPI's routing
        (:class:`~deepshare.serving.api.AnswerPlacements`; off only to measure what that saves,
        ``bench/serve_load.py``)."""
        _internal_grpc_on_loopback()
        self.settings = ServiceSettings.model_validate(settings)
        warn_if_open(self.settings)
        self.skip_routing = skip_routing
        self.engine = PlacementEngine(
            EngineSettings(self.settings.policy, self.settings.contention, self.settings.parsed_tenants()))
        self.metrics = ServiceMetrics(self.engine.name, self.engine.load_seconds, deepshare.__version__, self.engine.version)
        self.metrics.report_every()  # hands the totals to Ray once a second, off the request path
        self.workers = DecisionWorkers(self.settings.decision_threads)
        scorer = self.engine.batch_scorer
        self.score: Batcher[dict[str, np.ndarray], np.ndarray] | None = None
        """One observation's scores, batched with other requests' (the app calls this only while
        several requests decide; a lone one scores alone)."""
        if scorer is not None:
            self.score = Batcher(scorer, self.settings.max_batch_size, self.settings.batch_wait_timeout_s)
            self.score.sizes = self.metrics.batch
        # Serve gives each replica a process of its own and this constructor is its start-up: the
        # one place the service may change the interpreter's collector. Ray, Serve, FastAPI, torch
        # and the loaded policy leave the collector's full passes for good (bench/gc_freeze.py).
        freeze_long_lived()

    def __serve_build_asgi_app__(self):  # noqa: ANN204 - Serve's hook: the ASGI app of this replica
        return PlacementAPI(self.engine, self.settings, self.metrics, self.score, self.workers,
                            skip_routing=self.skip_routing).app


def warn_if_open(settings: ServiceSettings) -> bool:
    """Log a warning when ``settings`` has no token (every request is then answered without
    authentication); whether it had none. ``serve deploy`` builds the application on the
    cluster, where the deploying shell's ``$DEEPSHARE_SERVE_TOKEN`` is not set: the service came
    up open without a word."""
    if settings.token is not None:
        return False
    log.warning("placement service: no token (neither %s where the application was built nor `token:` under "
                "its args): every request is answered without authentication", TOKEN_ENV)
    return True


def _internal_grpc_on_loopback() -> None:
    """On a loopback-only Ray instance (``deepshare serve`` without ``--address``), make this
    replica's inter-deployment gRPC server listen on 127.0.0.1 as well
    (:func:`deepshare.infra.raycompat.replica_grpc_on_loopback` says why and how).

    Called in the replica's constructor, which runs before Serve starts that server. On a real
    cluster the node has a routable address, nothing changes, and Ray's ports belong on a
    trusted network.
    """
    import ray

    if ray.util.get_node_ip_address() == "127.0.0.1":
        replica_grpc_on_loopback()


def build_app(args: dict[str, Any]) -> Application:
    """Serve application builder (``import_path: deepshare.serving.deployment:build_app``).

    ``args`` are :class:`ServiceSettings` fields. Without a ``token`` the token comes from
    ``$DEEPSHARE_SERVE_TOKEN`` in the environment of the process that builds the application.
    The policy and the contention model are built once here, as ``deepshare serve`` does: a
    misspelt name or an unreadable checkpoint is one error of the build, not every replica's
    failure to start.
    """
    settings = resolve_settings(ServiceSettings.model_validate(args or {}))
    check_settings(settings)
    return service_app(settings)


def service_app(settings: ServiceSettings, num_replicas: int | None = None) -> Application:
    """The application for ``settings`` (``num_replicas`` None keeps the deployment's default
    or what a Serve config sets, e.g. its autoscaling). A replica being stopped answers the
    requests it holds for at most :func:`drain_s` (checked every :data:`DRAIN_POLL_S`)."""
    replicas = {} if num_replicas is None else {"num_replicas": num_replicas}
    deployment = PlacementService.options(graceful_shutdown_timeout_s=drain_s(settings),
                                          graceful_shutdown_wait_loop_s=DRAIN_POLL_S, **replicas)
    return deployment.bind(settings.model_dump())


DRAIN_POLL_S = 0.5
"""How often a replica being stopped looks whether its requests are answered (Serve's default,
2 s, added up to 2 s to every stop)."""


def drain_s(settings: ServiceSettings) -> float:
    """The longest a request a replica holds can still take: its body, then its decision
    (queueing included) and the decision threads' grace, plus a second to write the answer.
    Serve waits this long for a stopped replica's requests (its default is 20 s whatever the
    service's timeouts), so a stop answers what is in flight and stays bounded."""
    return settings.body_timeout_s + settings.decision_timeout_s + GRACE_S + 1.0


def resolve_settings(settings: ServiceSettings) -> ServiceSettings:
    """Fill the token from the environment when the settings leave it out."""
    if settings.token is not None:
        return settings
    token = os.environ.get(TOKEN_ENV, "")
    return ServiceSettings.model_validate({**settings.model_dump(), "token": token or None})
