"""bench/decide_scale.py's timing plan (not its timings): with ``--queues`` the engines behind the
tenant queues are built and warmed up with the others before the heap is frozen, and decided in
the same rounds, ``--repeats`` times each (they were built inside the loop, never warmed, and
timed once, a cold sample set beside the others' warm medians)."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def ds(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their helpers from their own folder
    import decide_scale

    return decide_scale


def test_queued_engines_are_warmed_before_the_freeze_and_timed_with_repeats(ds, monkeypatch):
    events: list[tuple[str, object]] = []
    place = ds.PlacementEngine.place

    def recording_place(engine, request):
        queued = any(job.queue for job in request.pending)
        events.append(("place", (id(engine), queued, len(request.pending))))
        return place(engine, request)

    monkeypatch.setattr(ds.PlacementEngine, "place", recording_place)
    monkeypatch.setattr(ds, "freeze_long_lived", lambda: events.append(("freeze", None)))
    engines, queued = ds.loaded(["srsf+packed", "fifo+consolidated"], 8, queues=4)
    assert set(queued) == {"srsf+packed", "fifo+consolidated"}
    freeze = events.index(("freeze", None))
    warmed = {key[0] for kind, key in events[:freeze]}
    assert {id(e) for e in queued.values()} <= warmed and {id(e) for e in engines.values()} <= warmed
    assert all(key[1] for kind, key in events[:freeze] if key[0] in {id(e) for e in queued.values()})

    events.clear()
    timed = ds.interleaved(engines, 8, [20], False, 3, 120.0, queued, 4)
    calls = [key for kind, key in events if kind == "place"]
    for policy in engines:
        assert sum(c[0] == id(queued[policy]) for c in calls) == 3  # --repeats 3
        assert all(c[1] for c in calls if c[0] == id(queued[policy]))  # on the request dealt into the queues
        assert (policy, "queued", 20) in timed and (policy, "flat", 20) in timed


def test_the_fabric_request_is_one_the_service_decides(ds):
    """Its two-node NVLink domains held PCIe nodes, which requests refuse since NVLink domains
    check their nodes: every ``--fabric`` run stopped on a RequestError."""
    engine = ds.PlacementEngine(ds.EngineSettings(policy="las+topo-aware"))
    request = ds.PlacementRequest.model_validate(ds.fabric_request(ds.scale_request(32, 40)))
    assert sum(d.action == "place" for d in engine.place(request).decisions) > 0


def test_flat_and_fabric_requests_alternate_round_by_round(ds, monkeypatch):
    """``--fabric`` took every repeat of the flat request, then every repeat of the fabric one."""
    clusters: list[str] = []
    place = ds.PlacementEngine.place

    def recording_place(engine, request):
        clusters.append("fabric" if request.levels else "flat")
        return place(engine, request)

    engines, _ = ds.loaded(["srsf+packed"], 8)
    monkeypatch.setattr(ds.PlacementEngine, "place", recording_place)
    ds.interleaved(engines, 8, [20], True, 3, 120.0)
    assert clusters == ["flat", "fabric"] * 3


def test_the_mixed_request_is_timed_with_repeats_and_only_for_policies_still_timed(ds, monkeypatch):
    """The 1/2/4/8-GPU line was one cold decision after the others, whatever --repeats said, and
    ran for a policy --max-seconds had stopped."""
    calls: list[tuple[int, bool]] = []
    place = ds.PlacementEngine.place

    def recording_place(engine, request):
        calls.append((id(engine), any(job.gpus > 1 for job in request.pending)))
        return place(engine, request)

    engines, _ = ds.loaded(["srsf+packed", "fifo+consolidated"], 8)
    slow = id(engines["fifo+consolidated"])
    time_one = ds.time_one

    def timing(engine, request, repeats=1):  # fifo+consolidated "takes" too long at the first N
        wall, cpu, placed = time_one(engine, request, repeats)
        return (1e6 if id(engine) == slow else wall), cpu, placed

    monkeypatch.setattr(ds.PlacementEngine, "place", recording_place)
    monkeypatch.setattr(ds, "time_one", timing)
    timed = ds.interleaved(engines, 8, [10, 20], False, 3, 120.0, mixed=True)
    assert sum(mixed for engine, mixed in calls if engine == id(engines["srsf+packed"])) == 3  # --repeats 3
    assert not any(mixed for engine, mixed in calls if engine == slow)  # stopped at N = 10: no mixed case
    assert ("srsf+packed", "mixed", 20) in timed and ("fifo+consolidated", "mixed", 20) not in timed
    assert ("srsf+packed", "mixed", 10) not in timed  # at the largest N only


def test_a_run_without_10000_pending_does_not_judge_the_target():
    """It said "misses the target" of a run whose largest request was far below 10,000 pending."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(BENCH / "decide_scale.py"), "--nodes", "8", "--pending", "10", "20",
                           "--policies", "srsf+packed"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "fitted exponent" in line)
    assert "the target is not measured" in line and "misses" not in line and "meets" not in line
