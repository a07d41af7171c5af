"""The service under the estimated information model: what a request's estimates, features and
history become in the policy's view, and that a served decision is the simulator's on the same view."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from serving_cases import canonical

from deepshare.core.contention import make_contention
from deepshare.core.information import InformationModel
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology
from deepshare.core.traces import load
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import MAX_HISTORY, PlacementRequest
from deepshare.serving.translate import request_to_view, response_to_decision, view_to_request
from pathlib import Path

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


def featured_jobs(n: int = 80):
    """The bundled trace's first jobs with users, recurring groups and, for every other job, a limit."""
    from dataclasses import replace

    jobs = load(TRACE).jobs[:n]
    return [replace(j, submit_time=400.0 * i, user=f"u{i % 3}", group=f"g{i % 7}",
                    requested_s=(5000.0 + 300 * i) if i % 2 else None) for i, j in enumerate(jobs)]


@pytest.mark.parametrize("durations", ["exact", "estimated", "unknown"])
@pytest.mark.parametrize("policy", ["qssf+uncontended+preempt", "gittins+packed+preempt", "srsf+uncontended", "rl-hybrid"])
def test_a_served_decision_is_the_simulators_on_the_same_view(policy, durations):
    """Decision points of a run under the information model, sent with their estimates, features
    and history, get the policy's own decisions back."""
    served, local = PlacementEngine(EngineSettings(policy=policy)), make_policy(policy)
    sim = Simulator(load_topology("testbed"), featured_jobs(), make_contention("profiled"),
                    information=InformationModel(durations, 1.0, 5))
    points = with_history = 0
    while (view := sim.advance()) is not None and points < 60:
        decision = local.decide(view)
        request = view_to_request(view)
        assert len(request.history) == len(view.history)
        response = served.place(PlacementRequest.model_validate_json(request.model_dump_json()))
        assert canonical(response_to_decision(response, view)) == canonical(decision)
        sim.apply(decision)
        points += 1
        with_history += bool(view.history)
    assert points >= 15 and with_history >= 5


def view_of(body: dict):
    return request_to_view(PlacementRequest.model_validate(body), default_catalog(), make_contention("profiled"))


NODES = [{"name": "a", "gpus": 8, "free_gpus": 4}]


def test_a_remaining_time_not_given_is_counted_down_as_in_the_simulator():
    view = view_of({
        "now": 1000.0, "nodes": NODES,
        "running": [{"job_id": "r", "model": "FSDP", "placement": {"a": 4}, "requested_s": 900.0,
                     "attained_gpu_s": 2000.0, "user": "ann", "group": "nightly", "vc": "vision"}],
        "pending": [{"job_id": "p", "model": "FSDP", "gpus": 2, "requested_s": 300.0, "attained_gpu_s": 100.0},
                    {"job_id": "q", "model": "FSDP", "gpus": 2},
                    {"job_id": "s", "model": "FSDP", "gpus": 2, "remaining_s": 42.0, "requested_s": 300.0}],
        "history": [{"gpus": 2, "run_s": 500.0, "user": "ann", "group": "nightly"}],
    })
    (r,) = view.running
    assert (r.remaining_s, r.estimate_s, r.user, r.group, r.vc) == (400.0, 900.0, "ann", "nightly", "vision")  # 900 - 2000/4
    p, q, s = view.queued
    assert (p.remaining_s, p.estimate_s) == (250.0, 300.0)  # 300 - 100/2
    assert (q.remaining_s, q.estimate_s) == (3600.0, None)  # the flat prior
    assert s.remaining_s == 42.0  # the client's own estimate wins
    assert view.durations == "estimated"
    (h,) = view.history
    assert (h.gpus, h.run_s, h.user, h.group, h.gpu_service_s) == (2, 500.0, "ann", "nightly", 1000.0)
    assert view.history.forecast(2, "ann", "nightly").level == "group"


@pytest.mark.parametrize(
    "body, loc",
    [
        ({"now": 1, "nodes": NODES, "pending": [{"job_id": "x", "model": "FSDP", "gpus": 2, "requested_s": -1.0}]},
         ("pending", 0, "requested_s")),
        ({"now": 1, "nodes": NODES, "pending": [{"job_id": "x", "model": "FSDP", "gpus": 2, "group": "g" * 257}]},
         ("pending", 0, "group")),
        ({"now": 1, "nodes": NODES, "history": [{"gpus": 0, "run_s": 5.0}]}, ("history", 0, "gpus")),
        ({"now": 1, "nodes": NODES, "history": [{"gpus": 1, "run_s": 5.0, "extra": 1}]}, ("history", 0, "extra")),
        ({"now": 1, "nodes": NODES, "history": [{"gpus": 1, "run_s": 5.0}] * (MAX_HISTORY + 1)}, ("history",)),
    ],
)
def test_bad_estimates_features_and_history_are_refused_naming_the_field(body, loc):
    with pytest.raises(ValidationError) as info:
        PlacementRequest.model_validate(body)
    assert loc in [e["loc"] for e in info.value.errors()]


def test_a_request_says_what_its_remaining_times_mean():
    """``durations`` travels with the request: an ``exact`` view's remaining times stay the truth
    (no estimate is implied for a policy to discount), an ``unknown`` one carries no estimates."""
    job = {"job_id": "p", "model": "FSDP", "gpus": 2, "remaining_s": 700.0, "attained_gpu_s": 200.0}
    exact = view_of({"now": 1000.0, "nodes": NODES, "durations": "exact", "pending": [job]})
    unknown = view_of({"now": 1000.0, "nodes": NODES, "durations": "unknown", "pending": [job]})
    estimated = view_of({"now": 1000.0, "nodes": NODES, "pending": [job]})
    assert [(v.durations, v.queued[0].remaining_s, v.queued[0].estimate_s) for v in (exact, estimated, unknown)] == [
        ("exact", 700.0, 800.0), ("estimated", 700.0, 800.0), ("unknown", 700.0, None)]  # 700 + 200/2


@pytest.mark.parametrize(
    "durations, job, field, message",
    [
        ("exact", {"job_id": "p", "model": "FSDP", "gpus": 2}, "remaining_s", "required when durations is 'exact'"),
        ("unknown", {"job_id": "p", "model": "FSDP", "gpus": 2, "requested_s": 60.0}, "requested_s", "must be absent"),
    ],
)
def test_remaining_times_that_contradict_the_declared_durations_are_refused(durations, job, field, message):
    from deepshare.serving.translate import RequestError

    running = {"job_id": "r", "model": "FSDP", "placement": {"a": 4}, **{k: v for k, v in job.items() if k not in ("job_id", "gpus")}}
    with pytest.raises(RequestError) as info:
        view_of({"now": 10.0, "nodes": NODES, "durations": durations, "pending": [job], "running": [running]})
    found = {e.loc: e.msg for e in info.value.errors}
    assert set(found) == {("body", "pending", 0, field), ("body", "running", 0, field)}
    assert all(message in msg for msg in found.values())
    with pytest.raises(ValidationError):
        PlacementRequest.model_validate({"now": 1, "nodes": NODES, "durations": "oracle"})
