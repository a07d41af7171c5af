"""One loaded policy answering placement requests: the service without HTTP.

The Serve deployment wraps an engine; benchmarks call one in-process as the floor the HTTP
path is measured against. :meth:`PlacementEngine.place` is synchronous and bounded: it checks a
:class:`~deepshare.core.deadline.Deadline` after building the view, before every step of a
learned policy, before every contention prediction a policy asks for and at every
:func:`~deepshare.core.interrupt.checkpoint` a long policy calls (each step of the planner's
rollouts), so a request too large to decide in time unwinds with :class:`DecisionTimeout`
instead of occupying the replica. It also tells the policy the time left
(:func:`~deepshare.core.interrupt.time_left`): the planner answers on the futures it has played
by then rather than time out. The service runs it in a decision thread (:mod:`deepshare.serving.workers`); a learned policy's
forward passes can go to a scorer the server provides, which batches them across requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

import numpy as np

import deepshare
from deepshare.core.contention import make_contention
from deepshare.core.files import POLICY_BYTES, read_input_bytes
from deepshare.core.deadline import NO_DEADLINE, Deadline, bounded
from deepshare.core.types import Decision, Placement
from deepshare.core.view import ClusterView, ForwardingPredictor, JobView, Prediction, Predictor, Question
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy, policy_info
from deepshare.policies.base import BatchScorer, Observation, Scorer, SteppedPolicy
from deepshare.policies.learned import drive
from deepshare.serving.schemas import PlacementRequest, PlacementResponse, PolicyOut
from deepshare.serving.translate import decision_to_response, request_to_view

if TYPE_CHECKING:
    from deepshare.tenants import Tenants

AsyncScorer = Callable[[Observation], Awaitable[np.ndarray]]


@dataclass(frozen=True)
class EngineSettings:
    policy: str = "rl-hybrid"
    """Registry name, or NAME=CHECKPOINT for a learned policy."""
    contention: str = "profiled"
    """Contention model behind the policy's predictions (the one it was trained with)."""
    tenants: Tenants | None = None
    """Queues and quotas (``--tenants``): the policy then decides behind their admission
    (:func:`~deepshare.tenants.admitted`: :class:`~deepshare.tenants.Admitted` around it, around
    each candidate for the planner), and requests may name only the queues and priority
    classes they declare. Admission counts usage from the request's running jobs, so it needs
    no state between requests."""


def _heuristic(name: str) -> bool:
    """Whether the registry lists ``name`` as a heuristic (False for an unknown or learned name)."""
    try:
        return policy_info(name).heuristic
    except Exception:  # noqa: BLE001 - NAME=CHECKPOINT and plugin specs: not a registry heuristic
        return False


class PlacementEngine:
    def __init__(self, settings: EngineSettings) -> None:
        start = time.perf_counter()
        self.settings = settings
        self.inner = make_policy(settings.policy)
        """The registry's policy (behind the tenants' admission in :attr:`policy` when there are tenants)."""
        self.policy = self.inner if settings.tenants is None else _admitted(self.inner, settings.tenants)
        self.contention = make_contention(settings.contention)
        self.catalog = default_catalog()
        self.load_seconds = time.perf_counter() - start
        self.metadata: dict[str, Any] = dict(getattr(self.inner, "metadata", {}) or {})
        self.version = _version(self.metadata.get("checkpoint"))
        self._stepped = isinstance(self.policy, SteppedPolicy)
        """Asked once: a runtime-checkable Protocol's isinstance costs tens of us per request."""
        self.sized = settings.tenants is None and (self._stepped or _heuristic(settings.policy))
        """Whether a decision's cost follows the request's size (a heuristic; a learned policy,
        whose steps each cost about the same): only then may a small request decide on the
        service's event loop. The planner's rollouts cost what its time left allows, whatever
        the request's size; a policy behind ``--tenants`` (:class:`~deepshare.tenants.Admitted`,
        whose admission and quota preemption come on top of the policy's work) is never sized,
        so it always decides in a decision thread, as the service's documentation says."""

    @property
    def name(self) -> str:
        return self.policy.name

    @property
    def batch_scorer(self) -> Callable[[list[Observation]], list[np.ndarray]] | None:
        """The policy's batched scorer, when it has one (learned policies). None behind
        ``--tenants``: :class:`~deepshare.tenants.Admitted` calls the learned policy's own
        ``decide``, so each request's forward passes are scored alone, not batched across
        concurrent requests."""
        if self._stepped and isinstance(self.policy.scorer, BatchScorer):
            return self.policy.scorer.batch
        return None

    def view(self, request: PlacementRequest) -> ClusterView:
        return request_to_view(request, self.catalog, self.contention, self.settings.tenants)

    def place(
        self, request: PlacementRequest, deadline: Deadline = NO_DEADLINE, score: Scorer | None = None
    ) -> PlacementResponse:
        """The decision for ``request``; :class:`DecisionTimeout` once ``deadline`` passes.

        ``score`` (a learned policy only) replaces the policy's own scorer, e.g. with one that
        batches forward passes across concurrent requests; the decision is the same.
        """
        view = self._bounded_view(request, deadline)
        if not self._stepped:
            with bounded(deadline):
                return self.respond(self.policy.decide(view), view)
        decision = drive(self.policy.steps(view), score or self.policy.scorer, deadline.check)  # type: ignore[attr-defined]
        return self.respond(decision, view)

    async def place_async(
        self, request: PlacementRequest, deadline: Deadline = NO_DEADLINE, score: AsyncScorer | None = None
    ) -> PlacementResponse:
        """:meth:`place` on an event loop, a learned policy awaiting ``score`` at each step (where
        a server batches concurrent requests' forward passes). For cheap requests only: the
        steps between two awaits run on the loop."""
        view = self._bounded_view(request, deadline)
        if score is None or not self._stepped:
            with bounded(deadline):
                return self.respond(self.policy.decide(view), view)
        run = self.policy.steps(view)
        try:
            await asyncio.sleep(0)  # let requests that arrived together register before scoring
            obs = next(run)
            while True:
                deadline.check()
                obs = run.send(await score(obs))
        except StopIteration as done:
            return self.respond(done.value, view)

    def _bounded_view(self, request: PlacementRequest, deadline: Deadline) -> ClusterView:
        """The request's view, its predictions checking ``deadline`` first."""
        with bounded(deadline):  # the view's contention state checks it per running job (checkpoint)
            view = self.view(request)
        deadline.check()
        if deadline.at is None:
            return view
        return replace(view, predict=_Checked(view.predict, deadline))

    def respond(self, decision: Decision, view: ClusterView) -> PlacementResponse:
        return decision_to_response(decision, view, self.name, self.version)

    def describe(self) -> PolicyOut:
        trained = {k: v for k, v in self.metadata.items() if k != "checkpoint"} or None
        if trained and isinstance(trained.get("env"), dict):
            env = dict(trained["env"])
            traces = env.get("traces", ())  # names only; a file's odd value is not shown
            env["traces"] = [Path(t).name for t in traces if isinstance(t, str)] if isinstance(traces, (list, tuple)) else []
            trained["env"] = env
        if trained and isinstance(trained.get("model"), dict) and isinstance(trained["model"].get("init_from"), str):
            trained["model"] = {**trained["model"], "init_from": _not_local(trained["model"]["init_from"])}
        if trained and isinstance(trained.get("config"), str):
            trained["config"] = _not_local(trained["config"])
        return PolicyOut(
            name=self.name,
            version=self.version,
            description=policy_info(self.settings.policy).description,
            checkpoint=self.metadata.get("checkpoint"),
            trained_on=trained,
            contention=self.settings.contention,
            load_seconds=self.load_seconds,
            queues=None if self.settings.tenants is None else list(self.settings.tenants.queues),
        )


def _admitted(policy: Any, tenants: Tenants) -> Any:
    from deepshare.tenants import admitted

    return admitted(policy, tenants)


def _not_local(path: str) -> str:
    """A path as /v1/policy shows it: relative paths as recorded, absolute ones by file name only
    (the trainer's directories say nothing about the policy and are not the callers' business)."""
    return Path(path).name if Path(path).is_absolute() else path


def _version(checkpoint: str | None) -> str:
    """The package version, plus the checkpoint's content hash for a learned policy."""
    if not checkpoint:
        return f"deepshare-{deepshare.__version__}"
    digest = hashlib.sha256(read_input_bytes(checkpoint, "policy file", POLICY_BYTES)).hexdigest()[:12]
    return f"deepshare-{deepshare.__version__}+{digest}"


class _Checked(ForwardingPredictor):
    """A view's predictor that first checks ``deadline`` (policies ask it once per candidate; a
    batch is checked once). Its isolated placements and its ``leaving_out`` are the inner
    predictor's, the one without a preemptive decision's victims checked alike."""

    __slots__ = ("deadline",)

    def __init__(self, inner: Predictor, deadline: Deadline) -> None:
        super().__init__(inner)
        self.deadline = deadline

    def __call__(self, job: JobView, placement: Placement, pending: Sequence[Question] = ()) -> Prediction:
        self.deadline.check()
        return self.inner(job, placement, pending)

    def many(self, questions: Sequence[Question], pending: Sequence[Question] = ()) -> list[Prediction]:
        self.deadline.check()
        return self.inner.many(questions, pending)
