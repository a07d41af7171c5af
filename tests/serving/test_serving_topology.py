"""Topology requests through the placement service (issue 36): the four optional job fields
carried into the view and back out of it, bad ones refused naming the field (the API answers
a :class:`RequestError` with 422), and the placed job's ``domains`` in the response."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from serving_cases import assert_feasible, small_request

from deepshare.core.contention import make_contention
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.workloads import default_catalog
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PendingIn, PlacementRequest, RunningIn
from deepshare.serving.translate import RequestError, request_to_view, view_to_request

CATALOG = default_catalog()
CONTENTION = make_contention("profiled")


def racked() -> dict:
    """The small request with its 4 nodes in two racks: n0, n1 in r0; n2, n3 in r1."""
    request = small_request()
    for i, node in enumerate(request["nodes"]):
        node["rack"] = f"r{i // 2}"
    return request


def view_of(body: dict):
    return request_to_view(PlacementRequest.model_validate(body), CATALOG, CONTENTION)


def test_request_fields_reach_the_view_and_come_back() -> None:
    body = racked()
    body["pending"][1].update(slice_size=4, slice_level="rack")
    body["pending"][2]["required_level"] = "rack"
    body["running"][0]["preferred_level"] = "rack"
    view = view_of(body)
    asked = {j.job_id: j.topology for j in (*view.queued, *view.running)}
    assert asked == {
        "p0": NO_TOPOLOGY,
        "p1": TopologyRequest(slice_size=4, slice_level="rack"),
        "p2": TopologyRequest(required_level="rack"),
        "r0": TopologyRequest(preferred_level="rack"),
    }
    assert asked["p0"] is NO_TOPOLOGY
    back = view_to_request(view).model_dump(exclude_none=True)
    fields = ("required_level", "preferred_level", "slice_size", "slice_level")
    assert [{k: v for k, v in p.items() if k in fields} for p in back["pending"]] == [
        {}, {"slice_size": 4, "slice_level": "rack"}, {"required_level": "rack"}]
    assert {k: v for k, v in back["running"][0].items() if k in fields} == {"preferred_level": "rack"}
    again = view_of(back)  # and in again: the same requests
    assert {j.job_id: j.topology for j in (*again.queued, *again.running)} == asked


def test_a_request_without_the_fields_is_unchanged() -> None:
    view = view_of(small_request())
    assert all(j.topology is NO_TOPOLOGY for j in (*view.queued, *view.running))
    dumped = view_to_request(view).model_dump(exclude_none=True)
    assert not any(k in p for p in dumped["pending"] for k in ("required_level", "slice_size"))


@pytest.mark.parametrize("kind, index, fields, loc, message", [
    ("pending", 0, {"required_level": "leaf"}, "body.pending.0.required_level",
     "unknown fabric level 'leaf'; this cluster's levels are rack"),
    ("pending", 2, {"preferred_level": "spine"}, "body.pending.2.preferred_level", "unknown fabric level 'spine'"),
    ("running", 0, {"slice_size": 2, "slice_level": "nvlink"}, "body.running.0.slice_level", "unknown fabric level"),
    ("pending", 0, {"required_level": "rack", "preferred_level": "rack"}, "body.pending.0.preferred_level", "not both"),
    ("pending", 1, {"slice_size": 4}, "body.pending.1.slice_level", "go together"),
    ("pending", 1, {"slice_level": "rack"}, "body.pending.1.slice_size", "go together"),
    ("pending", 1, {"slice_size": 3, "slice_level": "rack"}, "body.pending.1.slice_size",
     "the job's 8 GPUs must be a multiple of slice_size (3)"),
])
def test_bad_requests_name_the_field(kind: str, index: int, fields: dict, loc: str, message: str) -> None:
    body = racked()
    body[kind][index].update(fields)
    with pytest.raises(RequestError) as caught:
        view_of(body)
    errors = {".".join(map(str, e.loc)): e.msg for e in caught.value.errors}
    assert loc in errors and message in errors[loc], errors


@pytest.mark.parametrize("model", [PendingIn, RunningIn])
@pytest.mark.parametrize("field, value", [
    ("required_level", ""), ("preferred_level", "x" * 257), ("slice_level", 3), ("slice_size", 0),
    ("slice_size", 65537), ("slice_size", "8"), ("slice_size", True),
])
def test_field_bounds(model, field: str, value) -> None:
    base = {"job_id": "j", "model": "FSDP", **({"gpus": 8} if model is PendingIn else {"placement": {"n0": 8}})}
    with pytest.raises(ValidationError) as caught:
        model.model_validate({**base, field: value})
    assert caught.value.errors()[0]["loc"] == (field,)
    model.model_validate({**base, field: "rack" if field != "slice_size" else 8})  # in bounds: accepted


def test_the_engine_refuses_an_unknown_level_naming_the_field() -> None:
    body = racked()
    body["pending"][0]["required_level"] = "leaf"
    engine = PlacementEngine(EngineSettings(policy="fifo+consolidated"))
    with pytest.raises(RequestError) as caught:
        engine.place(PlacementRequest.model_validate(body))
    assert [e.loc for e in caught.value.errors] == [("body", "pending", 0, "required_level")]


def test_the_response_names_the_domains_of_a_placed_request() -> None:
    """fifo+consolidated on the small request (n0 has 4 GPUs free, n1-n3 8): p0 (2 GPUs) on n0,
    p1 (8) on n1, p2 (16, required inside one rack) on n2 + n3, rack r1: the same placements as
    without requests (they satisfy them), with ``domains`` for the jobs that asked."""
    body = racked()
    body["pending"][1]["preferred_level"] = "rack"
    body["pending"][2]["required_level"] = "rack"
    engine = PlacementEngine(EngineSettings(policy="fifo+consolidated"))
    answer = engine.place(PlacementRequest.model_validate(body)).model_dump(mode="json", exclude_none=True)
    assert_feasible(body, answer)
    assert answer["decisions"] == [
        {"job_id": "p0", "action": "place", "placement": {"n0": 2}, "predicted_slowdown": 1.0},
        {"job_id": "p1", "action": "place", "placement": {"n1": 8}, "predicted_slowdown": 1.0,
         "domains": {"rack": ["r0"]}},
        {"job_id": "p2", "action": "place", "placement": {"n2": 8, "n3": 8}, "predicted_slowdown": 1.0,
         "domains": {"rack": ["r1"]}},
    ]


@pytest.mark.parametrize("policy", ["fifo+consolidated", "srsf+spread"])
def test_a_required_rack_keeps_a_gang_inside_one_rack(policy: str) -> None:
    """Racks r0 = {n0, n1} with 4 + 1 GPUs free, r1 = {n2, n3} with 3 + 3: a 6-GPU job spans
    both racks when it asks nothing, and lands on r1 alone when it requires one rack."""
    def body(**asked: str) -> dict:
        return {
            "now": 10.0,
            "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": free, "rack": f"r{i // 2}"}
                      for i, free in enumerate([4, 1, 3, 3])],
            "pending": [{"job_id": "g", "model": "FSDP", "gpus": 6, **asked}],
        }

    engine = PlacementEngine(EngineSettings(policy=policy))
    (free,) = engine.place(PlacementRequest.model_validate(body())).model_dump(mode="json", exclude_none=True)["decisions"]
    assert free["action"] == "place" and "domains" not in free
    assert {f"r{int(n[1:]) // 2}" for n in free["placement"]} == {"r0", "r1"}
    (kept,) = engine.place(PlacementRequest.model_validate(body(required_level="rack"))).model_dump(
        mode="json", exclude_none=True)["decisions"]
    assert kept == {"job_id": "g", "action": "place", "placement": {"n2": 3, "n3": 3}, "predicted_slowdown": 1.0,
                    "domains": {"rack": ["r1"]}}
