"""The placement service answers a ``+migrate`` policy's moves in ``migrate``: the hand-checked
case of ``tests/policies/test_migrate.py`` (two FSDP jobs slowing each other on two nodes, a free
third node), asked twice a window apart."""

from __future__ import annotations

from deepshare.policies.migrate import MIGRATE_WINDOW_S
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PlacementRequest


def request(now: float, remaining_s: float = 1e4) -> PlacementRequest:
    running = [dict(job_id=j, model="FSDP", placement={"n0": 4, "n1": 4}, remaining_s=remaining_s,
                    attained_gpu_s=8e3, running_for_s=1000.0) for j in "ab"]
    return PlacementRequest.model_validate(dict(
        now=now, nodes=[dict(name=f"n{i}", gpus=8, free_gpus=8 if i == 2 else 0) for i in range(3)],
        running=running, pending=[dict(job_id="p", model="FSDP", gpus=16)]))


def test_the_service_answers_migrations_once_a_job_has_been_slow_for_a_window():
    engine = PlacementEngine(EngineSettings(policy="srsf+uncontended+migrate"))
    first = engine.place(request(1000.0))
    assert first.migrate == [] and [d.action for d in first.decisions] == ["wait"]
    later = engine.place(request(1000.0 + MIGRATE_WINDOW_S))
    # a moves to the free node; b, then alone on n0 and n1, gains too little there to move (1.4%)
    assert [(m.job_id, m.placement) for m in later.migrate] == [("a", {"n2": 8})]
    # without enough work left to pay for the move (0.6656 x 50 s saved < 2 x 30 s), nothing moves
    short = PlacementEngine(EngineSettings(policy="srsf+uncontended+migrate"))
    assert short.place(request(0.0, 50.0)).migrate == []
    assert short.place(request(MIGRATE_WINDOW_S, 50.0)).migrate == []


def test_a_requests_move_time_is_what_a_move_must_pay_for():
    """0.6656 x 100 s saved pays for twice 30 s (the default), not for twice 40 s."""
    def moves(**extra: float) -> list:
        engine = PlacementEngine(EngineSettings(policy="srsf+uncontended+migrate"))
        engine.place(request(0.0, 100.0).model_copy(update=extra))
        return [(m.job_id, m.placement) for m in engine.place(request(MIGRATE_WINDOW_S, 100.0).model_copy(update=extra)).migrate]

    assert moves() == moves(move_s=30.0) == [("a", {"n2": 8})]
    assert moves(move_s=40.0) == []


def test_a_move_time_out_of_its_domain_is_refused_naming_it():
    import pytest
    from pydantic import ValidationError

    for bad in (-1.0, 1e7, float("nan")):
        with pytest.raises(ValidationError, match="move_s"):
            PlacementRequest.model_validate({**request(0.0).model_dump(mode="json"), "move_s": bad})


def test_a_view_sent_as_a_request_keeps_its_move_time():
    import dataclasses

    from deepshare.serving.translate import view_to_request
    from restore_cases import two_ways_view

    sent = view_to_request(dataclasses.replace(two_ways_view(), move_s=7.0))
    assert sent.move_s == 7.0
