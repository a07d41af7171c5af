"""One loaded policy answering placement requests: the service without HTTP.

The Serve deployment wraps an engine; benchmarks call one in-process as the floor the HTTP
path is measured against. Learned policies expose their decision as a sequence of scorer calls
(:meth:`LearnedPolicy.steps`); :meth:`PlacementEngine.place_async` hands those calls to an
awaitable scorer so a server can batch forward passes across concurrent requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np

import deepshare
from deepshare.core.contention import make_contention
from deepshare.core.types import ClusterView, Decision
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy, policy_info
from deepshare.serving.schemas import PlacementRequest, PlacementResponse, PolicyOut
from deepshare.serving.translate import decision_to_response, request_to_view

AsyncScorer = Callable[[dict[str, np.ndarray]], Awaitable[np.ndarray]]


@dataclass(frozen=True)
class EngineSettings:
    policy: str = "rl-hybrid"
    """Registry name, or NAME=CHECKPOINT for a learned policy."""
    contention: str = "profiled"
    """Contention model behind the policy's predictions (the one it was trained with)."""


class PlacementEngine:
    def __init__(self, settings: EngineSettings) -> None:
        start = time.perf_counter()
        self.settings = settings
        self.policy = make_policy(settings.policy)
        self.contention = make_contention(settings.contention)
        self.catalog = default_catalog()
        self.load_seconds = time.perf_counter() - start
        self.metadata: dict[str, Any] = dict(getattr(self.policy, "metadata", {}) or {})
        self.version = _version(self.metadata.get("checkpoint"))
        self.in_flight = 0
        """Requests inside :meth:`place_async` now (a server batches only when there is company)."""

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def batch_scorer(self) -> Callable[[list[dict[str, np.ndarray]]], list[np.ndarray]] | None:
        """The policy's batched scorer, when it has one (learned policies)."""
        return getattr(getattr(self.policy, "scorer", None), "batch", None)

    def view(self, request: PlacementRequest) -> ClusterView:
        return request_to_view(request, self.catalog, self.contention)

    def place(self, request: PlacementRequest) -> PlacementResponse:
        view = self.view(request)
        return self.respond(self.policy.decide(view), view)

    async def place_async(self, request: PlacementRequest, score: AsyncScorer | None) -> PlacementResponse:
        """:meth:`place`, with a learned policy's forward passes going through ``score``."""
        view = self.view(request)
        steps = getattr(self.policy, "steps", None)
        if score is None or steps is None:
            return self.respond(self.policy.decide(view), view)
        run = steps(view)
        self.in_flight += 1
        try:
            await asyncio.sleep(0)  # let requests that arrived together register before scoring
            obs = next(run)
            while True:
                obs = run.send(await score(obs))
        except StopIteration as done:
            return self.respond(done.value, view)
        finally:
            self.in_flight -= 1

    def respond(self, decision: Decision, view: ClusterView) -> PlacementResponse:
        return decision_to_response(decision, view, self.name, self.version)

    def describe(self) -> PolicyOut:
        trained = {k: v for k, v in self.metadata.items() if k != "checkpoint"} or None
        if trained and isinstance(trained.get("env"), dict):
            env = dict(trained["env"])
            env["traces"] = [Path(t).name for t in env.get("traces", ())]
            trained["env"] = env
        return PolicyOut(
            name=self.name,
            version=self.version,
            description=policy_info(self.settings.policy).description,
            checkpoint=self.metadata.get("checkpoint"),
            trained_on=trained,
            contention=self.settings.contention,
            load_seconds=self.load_seconds,
        )


def _version(checkpoint: str | None) -> str:
    """The package version, plus the checkpoint's content hash for a learned policy."""
    if not checkpoint:
        return f"deepshare-{deepshare.__version__}"
    digest = hashlib.sha256(Path(checkpoint).read_bytes()).hexdigest()[:12]
    return f"deepshare-{deepshare.__version__}+{digest}"
