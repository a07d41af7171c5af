"""A :class:`ClusterView` built from a cluster's state as an outside system knows it.

The simulator builds views from its own bookkeeping. The placement service (from an HTTP
request) and the live scheduler (from its job journal and Ray's node list) know the same facts
(nodes, free GPUs, running placements, queued jobs) and build the view here, with a fresh
contention state holding the running jobs, so every policy decides on a view of the same shape
and the same predictions wherever it runs.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

from deepshare.core.contention import ContentionModel
from deepshare.core.contention.base import ContentionState, RunningJob, state_isolated
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.history import JobHistory
from deepshare.core.interrupt import checkpoint
from deepshare.core.topology import Topology
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Placement
from deepshare.core.view import DEFAULT_MOVE_S, DEFAULT_RESTORE_S, ClusterView, JobView, Prediction, Predictor
from deepshare.core.workloads import Catalog


@dataclass(frozen=True, slots=True)
class KnownJob:
    """A job as a scheduler outside the simulator tracks it (``placement`` set while it runs)."""

    job_id: str
    model: str
    gpus: int
    submit_time: float
    remaining_s: float
    """Remaining work in seconds at the job's reference throughput as the scheduler believes it
    (SRTF's key; :func:`~deepshare.core.information.believed_remaining_s` of its estimate)."""
    attained_gpu_s: float = 0.0
    preemptions: int = 0
    placement: Placement | None = None
    last_run_s: float = 0.0
    """Seconds of the current run (running) or of the last run (queued)."""
    queued_since: float | None = None
    """When it last entered the queue; defaults to ``submit_time``."""
    estimate_s: float | None = None
    """Its estimate of its whole isolated run time, if anyone gave one."""
    user: str | None = None
    group: str | None = None
    vc: str | None = None
    topology: TopologyRequest = NO_TOPOLOGY
    """Where it must or should run (:class:`~deepshare.core.fabric.TopologyRequest`); its level
    names are the caller's to check against the cluster's fabric."""
    queue: str | None = None
    """Its tenant queue as submitted (None: not said; a tenants file resolves it)."""
    priority: str | None = None
    """Its priority class as submitted (None: the tenants file's default)."""


def build_view(
    topology: Topology,
    catalog: Catalog,
    contention: ContentionModel,
    now: float,
    free: Sequence[int],
    queued: Sequence[KnownJob],
    running: Sequence[KnownJob],
    *,
    future_events: bool = True,
    link_load: Mapping[str, float] | None = None,
    durations: str = "estimated",
    history: JobHistory | None = None,
    restore_s: float = DEFAULT_RESTORE_S,
    move_s: float = DEFAULT_MOVE_S,
) -> ClusterView:
    """The view a policy sees; raises :class:`DeepShareError` for an inconsistent state.

    ``durations`` names what the jobs' ``remaining_s`` is (an outside scheduler never knows the
    truth: ``estimated`` when it is counted down from estimates, ``unknown`` when from the flat
    prior alone); ``history``: the jobs that finished before now; ``restore_s``: seconds a job
    preempted now takes to restart from its checkpoint (:attr:`ClusterView.restore_s`); ``move_s``:
    seconds a job migrated now takes to restart at its new GPUs (:attr:`ClusterView.move_s`).

    ``free`` is by node index and may be below capacity minus the running jobs' GPUs (GPUs held
    by work this scheduler does not manage), never above it. Running jobs' ratios come from
    ``contention`` with all of them added in the given order.
    """
    _check(topology, now, free, queued, running)
    state = _state_of(contention, topology, catalog, running)
    running_views = tuple(_view(catalog, job, state.ratio(job.job_id)) for job in running)
    resident = frozenset(job.job_id for job in running)

    def without(gone: frozenset[str]) -> _ViewPredictor:
        """A predictor of its own on a state built without the running jobs ``gone`` (a preemptive
        decision's victims): the view's own state is left as it is, its remembered answers included."""
        return _ViewPredictor(_state_of(contention, topology, catalog, running, gone), resident - gone, without, gone)

    predict = _ViewPredictor(state, resident, without)
    return ClusterView(
        now=now,
        topology=topology,
        catalog=catalog,
        free=tuple(free),
        queued=tuple(_view(catalog, job) for job in queued),
        running=running_views,
        predict=predict,
        future_events=future_events,
        link_load=dict(link_load or {}),
        durations=durations,
        history=JobHistory() if history is None else history,
        restore_s=restore_s,
        move_s=move_s,
    )


def _state_of(
    contention: ContentionModel, topology: Topology, catalog: Catalog, running: Sequence[KnownJob],
    gone: frozenset[str] = frozenset(),
) -> ContentionState:
    """A contention state of the ``running`` jobs but those in ``gone``, added in the given order."""
    state = contention.new_state(topology, catalog)
    for job in running:
        checkpoint()  # a caller's deadline (the service's) stops a view whose state costs too much to build
        if job.job_id not in gone:
            assert job.placement is not None
            state.add(RunningJob(job.job_id, job.model, job.gpus, job.placement))
    return state


def _private_predictor(state: ContentionState, resident: frozenset[str] = frozenset()) -> _ViewPredictor:
    """A :class:`_ViewPredictor` of ``state`` that cannot leave jobs out (tests compare it with
    :func:`~deepshare.core.contention.base.predictor`)."""
    return _ViewPredictor(state, resident)


class _ViewPredictor(Predictor):
    """Like :class:`~deepshare.core.contention.base.StatePredictor`, for a state only this view
    reads: the pending launches of one decision (a list that only grows) stay added between
    questions instead of being added and removed at each one, which makes a decision of n launches
    O(n) state updates, not O(n^2). Asking again with the very same sequence object skips the
    prefix check, so a caller must not rewrite a sequence in place after asking with it
    (appending is fine).

    Answers are remembered until the pending launches change: a step of a decision asks the
    same question several times (a placement strategy, the encoding's rows, the safety net). A
    job not in the state (not in ``resident``, the running jobs, nor pending) is predicted from
    its model, GPUs and placement alone, so its answers are shared by every such job of that
    shape; a job in the state (asked about a move) is never remembered. A placement the state calls
    isolated (no contention whatever runs) is answered 1.0 without bringing the state up to date:
    the launches pending meanwhile are added at the next question that needs them.

    ``without(ids)`` builds the predictor of a state without the running jobs ``ids``
    (``leaving_out``; ``left_out``: those this one is already without); without it, leaving
    jobs out is the default (``self``: over-predicted)."""

    __slots__ = ("state", "resident", "without", "left_out", "_isolated", "_applied", "_applied_ids", "_last", "_memo")

    def __init__(
        self, state: ContentionState, resident: frozenset[str] = frozenset(),
        without: Callable[[frozenset[str]], _ViewPredictor] | None = None, left_out: frozenset[str] = frozenset(),
    ) -> None:
        self.state = state
        self.resident = resident
        self.without = without
        self.left_out = left_out
        self._isolated = state_isolated(state)
        self._applied: list[tuple[str, Placement]] = []
        self._applied_ids: set[str] = set()
        self._last: object = None  # the pending sequence of the previous question (often the same object)
        self._memo: dict[tuple, Prediction] = {}

    def _answer(self, job: JobView, placement: Placement) -> Prediction:
        job_id = job.job_id
        if job_id in self.resident or job_id in self._applied_ids:
            return self.state.predict(RunningJob(job_id, job.model, job.gpus, placement))
        key = (job.model, job.gpus, placement.alloc)
        memo = self._memo
        known = memo.get(key)
        if known is None:
            known = memo[key] = self.state.predict(RunningJob(job_id, job.model, job.gpus, placement))
        return known

    def __call__(self, job: JobView, placement: Placement, pending: Sequence[tuple[JobView, Placement]] = ()) -> Prediction:
        isolated = self._isolated
        if isolated is not None and isolated(placement):
            return _ISOLATED  # what the state answers whatever runs: no need to bring it up to date
        if pending is not self._last or len(pending) != len(self._applied):
            self._sync(pending)
        return self._answer(job, placement)

    def many(self, questions: Sequence[tuple[JobView, Placement]], pending: Sequence[tuple[JobView, Placement]] = ()) -> list[Prediction]:
        if pending is not self._last or len(pending) != len(self._applied):
            self._sync(pending)
        answer = self._answer
        return [answer(job, placement) for job, placement in questions]

    def isolated(self, placement: Placement) -> bool:
        isolated = self._isolated
        return isolated is not None and isolated(placement)

    @contextmanager
    def leaving_out(self, gone: Sequence[JobView]) -> Iterator[Predictor]:
        if self.without is None:
            yield self
            return
        yield self.without(self.left_out | frozenset(job.job_id for job in gone))

    def _sync(self, pending: Sequence[tuple[JobView, Placement]]) -> None:
        """Bring the launches added to the state to exactly ``pending``."""
        applied, applied_ids, state = self._applied, self._applied_ids, self.state
        keep = len(applied)
        if pending is not self._last or len(pending) < keep:  # the same list, grown: its prefix is applied
            if len(pending) < keep or not all(a[1] is p[1] and a[0] == p[0].job_id for a, p in zip(applied, pending)):
                keep = 0
                while (
                    keep < len(applied) and keep < len(pending)
                    and applied[keep][0] == pending[keep][0].job_id and applied[keep][1] == pending[keep][1]
                ):
                    keep += 1
        if keep < len(applied) or len(pending) > keep:
            self._memo.clear()
        for job_id, _ in reversed(applied[keep:]):
            state.remove(job_id)
            applied_ids.discard(job_id)
        del applied[keep:]
        for other, where in pending[keep:]:
            state.add(RunningJob(other.job_id, other.model, other.gpus, where))
            applied.append((other.job_id, where))
            applied_ids.add(other.job_id)
        self._last = pending


_ISOLATED = Prediction(1.0)
"""The answer for an isolated placement (one shared object: predictions are frozen and only read;
``uncontended`` asks one for every anchor launch of a decision)."""


def _view(catalog: Catalog, job: KnownJob, ratio: float = 1.0) -> JobView:
    # positional, in JobView's field order: keywords cost measurably on a request of 10,000 jobs
    return JobView(
        job.job_id, job.model, job.gpus, job.submit_time, job.remaining_s, job.attained_gpu_s,
        catalog.class_of(job.model), job.preemptions, job.placement, ratio, job.last_run_s,
        job.submit_time if job.queued_since is None else job.queued_since, job.estimate_s, job.user, job.group, job.vc,
        job.topology, job.queue, job.priority,
    )


def _check(
    topology: Topology, now: float, free: Sequence[int], queued: Sequence[KnownJob], running: Sequence[KnownJob]
) -> None:
    capacity = topology.capacity
    if len(free) != len(capacity):
        raise DeepShareError(f"free GPUs given for {len(free)} nodes, the cluster has {len(capacity)}")
    for node, (f, cap) in enumerate(zip(free, capacity)):
        if not 0 <= f <= cap:
            raise DeepShareError(f"node {topology.nodes[node].name!r}: free GPUs {f} outside 0..{cap}")
    counts = Counter(job.job_id for job in (*queued, *running))
    dupes = sorted(job_id for job_id, n in counts.items() if n > 1)
    if dupes:
        raise DeepShareError(f"duplicate job ids: {', '.join(dupes)}")
    held = [0] * len(capacity)
    for job in running:
        if job.placement is None:
            raise DeepShareError(f"running job {job.job_id!r} has no placement")
        if job.placement.total_gpus != job.gpus:
            raise DeepShareError(
                f"running job {job.job_id!r}: placement holds {job.placement.total_gpus} GPUs, the job has {job.gpus}"
            )
        for node, gpus in job.placement.alloc:
            if not 0 <= node < len(capacity) or gpus <= 0:
                raise DeepShareError(f"running job {job.job_id!r}: invalid placement {job.placement.alloc}")
            held[node] += gpus
    for node, (h, f, cap) in enumerate(zip(held, free, capacity)):
        if h + f > cap:
            raise DeepShareError(
                f"node {topology.nodes[node].name!r}: running jobs hold {h} GPUs and {f} are free, "
                f"more than its {cap}"
            )
    for job in queued:
        if job.placement is not None:
            raise DeepShareError(f"queued job {job.job_id!r} has a placement")
        if job.gpus <= 0:
            raise DeepShareError(f"queued job {job.job_id!r}: gpus must be positive, got {job.gpus}")
