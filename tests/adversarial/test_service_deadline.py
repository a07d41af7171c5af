"""The work one placement request may cause is bounded, in-process (no HTTP): the engine stops
at its deadline for a learned and a heuristic policy, the planner answers within it, the decision
threads stop code that never checks, and the limits refuse oversized requests naming the flag."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from deepshare.core.deadline import Deadline, DecisionTimeout
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.limits import LimitExceeded, RequestLimits
from deepshare.serving.samples import small_request
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.workers import GRACE_S, DecisionWorkers


def huge(nodes: int = 4096, pending: int = 2000) -> PlacementRequest:
    """The issue's shape: many idle 8-GPU nodes and many 1-GPU jobs (half a second to decide 10,000 with rl-hybrid)."""
    return PlacementRequest.model_validate({
        "now": 100.0,
        "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 8} for i in range(nodes)],
        "pending": [{"job_id": f"p{j}", "model": "FSDP", "gpus": 1} for j in range(pending)],
    })


@pytest.mark.parametrize("policy, pending, deadline_s", [
    # about 0.5 s of CPU to decide in full since the shipped file's anchor streak (2026-12-06; 2.4 s
    # before): a deadline of 0.5 s let a fast moment of CI finish the decision
    ("rl-hybrid", 10000, 0.1),
    ("las+contention-aware", 10000, 0.05),  # about 0.4 s of CPU to decide in full
])
def test_engine_stops_at_the_deadline(policy, pending, deadline_s):
    engine = PlacementEngine(EngineSettings(policy=policy))
    request = huge(pending=pending)
    start = time.monotonic()
    with pytest.raises(DecisionTimeout):
        engine.place(request, Deadline(deadline_s))
    assert time.monotonic() - start < 2.0  # the view plus at most one step past the deadline
    small = PlacementRequest.model_validate(small_request())
    assert engine.place(small, Deadline(5.0)) == engine.place(small)  # nothing left behind


def test_a_deadline_that_never_fires_changes_nothing():
    engine = PlacementEngine(EngineSettings(policy="rl-hybrid"))
    request = huge(64, 64)
    assert engine.place(request, Deadline(60.0)) == engine.place(request)


def test_decision_threads_stop_code_that_never_checks_the_deadline():
    """The backstop: a pure-Python loop with no checks is stopped from outside; the thread then
    serves the next request, and the caller got its answer at the deadline, not at the end."""
    workers = DecisionWorkers(threads=1)
    spins = []

    def forever() -> None:
        while True:
            spins.append(1)
            if len(spins) > 10**9:  # pragma: no cover - never
                return

    async def scenario():
        start = time.monotonic()
        with pytest.raises(DecisionTimeout):
            await workers.run(forever, Deadline(0.3))
        waited = time.monotonic() - start
        after = len(spins)
        await asyncio.sleep(0.2)
        stopped = len(spins) == after  # nothing spins any more
        answer = await workers.run(lambda: threading.current_thread().name, Deadline(2.0))
        return waited, stopped, answer

    waited, stopped, answer = asyncio.run(scenario())
    assert 0.3 <= waited < 0.3 + GRACE_S + 0.5
    assert stopped and answer.startswith("deepshare-decision") and workers.abandoned == 1


def test_a_request_queued_past_its_deadline_never_starts():
    workers = DecisionWorkers(threads=1)
    ran = []

    async def scenario():
        busy = asyncio.ensure_future(workers.run(lambda: time.sleep(0.6), Deadline(5.0)))
        await asyncio.sleep(0.05)
        with pytest.raises(DecisionTimeout):
            await workers.run(lambda: ran.append(1), Deadline(0.1))
        await busy
        await workers.run(lambda: None, Deadline(1.0))  # the queue moved past it

    asyncio.run(scenario())
    assert ran == []


def test_errors_inside_a_decision_reach_the_caller_unchanged():
    workers = DecisionWorkers(threads=1)

    def bad():
        raise ValueError("bad request")

    with pytest.raises(ValueError, match="bad request"):
        asyncio.run(workers.run(bad, Deadline(1.0)))


def test_limits_name_every_list_over_its_limit_and_the_flag():
    limits = RequestLimits(max_nodes=100, max_pending=10, max_running=5)
    limits.check(PlacementRequest.model_validate(small_request()))
    with pytest.raises(LimitExceeded) as caught:
        limits.check(huge(101, 11))
    assert [(e.loc, e.msg) for e in caught.value.errors] == [
        (("body", "nodes"), "101 nodes exceed this service's limit of 100 (--max-nodes)"),
        (("body", "pending"), "11 pending jobs exceed this service's limit of 10 (--max-pending)"),
    ]


def test_the_event_loop_path_checks_the_deadline_between_steps():
    """Cheap requests decide on the event loop; a passed deadline stops them there too."""
    engine = PlacementEngine(EngineSettings(policy="rl-hybrid"))
    request = PlacementRequest.model_validate(small_request())
    calls = []

    async def score(obs):
        calls.append(1)
        return engine.batch_scorer([obs])[0]

    assert asyncio.run(engine.place_async(request, Deadline(5.0), score)) == engine.place(request)
    assert calls
    with pytest.raises(DecisionTimeout):
        asyncio.run(engine.place_async(request, Deadline(0.0), score))


def contested(pending: int = 600) -> PlacementRequest:
    """Half-busy nodes and a mixed queue: the planner's candidates disagree, and each of its
    rollouts plays hundreds of jobs to the end (about 3 s of CPU for ``planner=4:::end``)."""
    models = ("FSDP", "MobileNetV3", "Transformer-XL")
    return PlacementRequest.model_validate({
        "now": 400.0,
        "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 8 if i % 2 else 4} for i in range(16)],
        "running": [{"job_id": f"r{i}", "model": "FSDP", "placement": {f"n{i}": 4}, "attained_gpu_s": 400.0,
                     "remaining_s": 3000.0 + 100 * i} for i in range(0, 16, 2)],
        "pending": [{"job_id": f"p{j}", "model": models[j % 3], "gpus": (1, 2, 4, 8)[j % 4],
                     "submitted_at": float(j % 400), "remaining_s": (300.0, 1000.0, 5000.0, 20000.0)[j % 7 % 4]}
                    for j in range(pending)],
    })


def test_the_planner_answers_within_the_deadline():
    # The rollouts simulate copies of the cluster with their own contention model, so the view's
    # checked predictor never sees them. Without a budget, a planner decision ran to its end
    # (seconds for this request), then only the checkpoints inside its rollouts stopped it, and
    # the request got 503. Told the time left, it now answers on the futures it has played.
    from deepshare.core.interrupt import checkpoint, time_left

    # 16 futures take 15-20 s here: cut short on any machine. The 3 s deadline leaves 0.6 s (the
    # 20% the planner keeps back) for the last rollout step and the answer, however busy the box.
    engine = PlacementEngine(EngineSettings(policy="planner=16:::end"))
    answer = engine.place(contested(), Deadline(3.0))  # answered: no DecisionTimeout
    stats = engine.policy.stats  # cut short: the budget (a share of the deadline) ended its rollouts
    assert stats.contested == 1 and stats.budget_hits == 1 and stats.last_futures < 16
    assert any(d.action == "place" for d in answer.decisions)
    checkpoint()  # the deadline went with the request
    assert time_left() is None
    small = PlacementRequest.model_validate(small_request())
    assert engine.place(small, Deadline(30.0)) == engine.place(small)


def test_a_learned_policy_stops_at_the_deadline_outside_the_engine_too():
    # The live scheduler calls ``decide`` (not the engine's stepping): each step checks the
    # caller's deadline there as well.
    from deepshare.core.contention import make_contention
    from deepshare.core.deadline import bounded
    from deepshare.core.workloads import default_catalog
    from deepshare.policies import make_policy
    from deepshare.serving.translate import request_to_view

    view = request_to_view(huge(pending=2000), default_catalog(), make_contention("profiled"))
    for name in ("rl-hybrid", "rl-hybrid-preempt"):
        policy = make_policy(name)
        start = time.monotonic()
        with pytest.raises(DecisionTimeout), bounded(Deadline(0.05)):
            policy.decide(view)
        assert time.monotonic() - start < 1.0, name
