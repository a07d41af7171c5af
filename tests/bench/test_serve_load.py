"""bench/serve_load.py's targets, with the HTTP measurements replaced by fixed latencies: they
refer to the floor labelled "Serve floor", wherever it sits among the floors, and without it they
are said not measured (with ``--no-floor-app --routed`` the routed service became the yardstick
and the targets read as met)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def serve_load(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their helpers from their own folder
    import serve_load

    return serve_load


def _run(sl, monkeypatch, floors: dict[str, str], latency: dict[str, float]):
    from record import Record

    monkeypatch.setattr(sl, "floor", lambda policy, body, n, idle_s=0.0: [0.001] * n)

    def side_by_side(urls, body, n, token, rounds=5, warmed=None):
        if warmed is not None:
            warmed()
        return [[latency[u]] * n for u in urls]

    monkeypatch.setattr(sl, "side_by_side", side_by_side)
    monkeypatch.setattr(sl, "concurrent_side_by_side", lambda urls, body, clients, total, token, rounds=4: (
        [(total * latency[u] / clients, [latency[u]] * total, 0) for u in urls], [{} for _ in urls]))
    monkeypatch.setattr(sl, "replica_seconds", lambda metrics_url: (math.nan, math.nan))
    monkeypatch.setattr(sl, "batch_sizes", lambda metrics_url: (math.nan, math.nan))
    args = argparse.Namespace(cases=["small"], policy="srsf+packed", sequential=10, requests=80, clients=[8],
                              token=None, record=Record("serve_load", None))
    sl.run("http://svc", None, floors, args)
    return {m["name"]: m for m in args.record.measures}


def test_without_the_serve_floor_its_targets_are_not_measured(serve_load, monkeypatch, capsys):
    sl = serve_load
    measures = _run(sl, monkeypatch, {sl.ROUTED: "http://svc" + sl.ROUTED_PREFIX},
                    {"http://svc": 0.010, "http://svc" + sl.ROUTED_PREFIX: 0.020})
    assert not [name for name in measures if "Serve floor" in name]
    assert not [m for m in measures.values() if m["target"] is not None]
    out = capsys.readouterr().out
    assert "not measured" in out and "NOT met" not in out and ": met)" not in out
    assert "over the service, routed  0.50x (no target)" in out


def test_the_targets_refer_to_the_serve_floor_wherever_it_is(serve_load, monkeypatch, capsys):
    sl = serve_load
    floors = {sl.ROUTED: "http://svc/routed", sl.FASTAPI_FLOOR: "http://svc/fastapi", sl.SERVE_FLOOR: "http://svc/floor"}
    latency = {"http://svc": 0.010, "http://svc/routed": 0.020, "http://svc/fastapi": 0.008, "http://svc/floor": 0.005}
    measures = _run(sl, monkeypatch, floors, latency)
    p50 = measures["small (4 nodes, 3 pending): sequential p50 over the Serve floor's"]
    assert p50["value"] == pytest.approx(2.0) and p50["met"] is False
    rate = measures["small (4 nodes, 3 pending): 8-client req/s over the Serve floor's"]
    assert rate["value"] == pytest.approx(0.5) and rate["met"] is False
    out = capsys.readouterr().out
    assert "not measured" not in out
    assert "over the FastAPI floor  1.25x (no target)" in out and "over the service, routed  0.50x (no target)" in out


def test_the_in_replica_time_is_the_service_applications_alone(serve_load, monkeypatch):
    """With ``--routed`` the routed service records the same metric under its own application."""
    sl = serve_load
    page = "\n".join([
        '# TYPE ray_deepshare_serve_request_duration_seconds histogram',
        f'ray_deepshare_serve_request_duration_seconds_sum{{application="{sl.APP_NAME}",deployment="PlacementService",'
        'replica="a",route="/v1/placements"} 1.5',
        f'ray_deepshare_serve_request_duration_seconds_count{{application="{sl.APP_NAME}",deployment="PlacementService",'
        'replica="a",route="/v1/placements"} 100',
        f'ray_deepshare_serve_request_duration_seconds_sum{{application="{sl.APP_NAME}",deployment="PlacementService",'
        'replica="a",route="/healthz"} 0.5',
        f'ray_deepshare_serve_request_duration_seconds_sum{{application="{sl.ROUTED_APP}",'
        'deployment="PlacementServiceRouted",replica="b",route="/v1/placements"} 9.0',
        f'ray_deepshare_serve_request_duration_seconds_count{{application="{sl.ROUTED_APP}",'
        'deployment="PlacementServiceRouted",replica="b",route="/v1/placements"} 300',
    ]) + "\n"

    class Reply:
        text = page

    monkeypatch.setattr(sl.requests, "get", lambda url, timeout: Reply())
    monkeypatch.setattr(sl, "REPORT_INTERVAL_MS", 1)
    assert sl.replica_seconds("http://metrics") == (1.5, 100.0)
