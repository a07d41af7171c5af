"""Shared helpers of the placement-service tests: the feasibility invariant,
a canonical form of decisions, and hypothesis strategies for valid requests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from deepshare.core.types import Decision
from deepshare.serving.samples import MODELS, large_request, small_request

__all__ = ["MODELS", "assert_feasible", "canonical", "large_request", "small_request", "valid_requests"]


def assert_feasible(request: dict[str, Any], response: dict[str, Any]) -> None:
    """One decision per pending job in order; placements on known nodes within free GPUs
    (plus what preempted or migrated jobs free), every job's size exact, no GPU twice."""
    pending = request.get("pending", [])
    assert [d["job_id"] for d in response["decisions"]] == [p["job_id"] for p in pending]
    free = {n["name"]: n["free_gpus"] for n in request["nodes"]}
    running = {r["job_id"]: r for r in request.get("running", [])}
    moved = [*response.get("preempt", []), *(m["job_id"] for m in response.get("migrate", []))]
    assert len(set(moved)) == len(moved) and set(moved) <= set(running)
    for job_id in moved:
        for node, gpus in running[job_id]["placement"].items():
            free[node] += gpus
    sizes = {p["job_id"]: p["gpus"] for p in pending}
    sizes.update({r: sum(running[r]["placement"].values()) for r in running})
    placements = [(d["job_id"], d["placement"]) for d in response["decisions"] if d["action"] == "place"]
    placements += [(m["job_id"], m["placement"]) for m in response.get("migrate", [])]
    for job_id, where in placements:
        assert sum(where.values()) == sizes[job_id]
        for node, gpus in where.items():
            assert node in free and gpus > 0
            free[node] -= gpus
    assert all(v >= 0 for v in free.values()), free
    for d in response["decisions"]:
        assert d["action"] in ("place", "wait")
        assert ("placement" in d) == (d["action"] == "place")
        if d["action"] == "place":
            assert d["predicted_slowdown"] >= 1.0


def canonical(decision: Decision) -> tuple:
    """A decision without the order of its launches (applied together, order has no effect)."""
    return (
        sorted((l.job_id, l.placement.alloc) for l in decision.launch),
        sorted(decision.preempt),
        sorted((m.job_id, m.placement.alloc) for m in decision.migrate),
    )


@st.composite
def valid_requests(draw: st.DrawFn) -> dict[str, Any]:
    """Consistent cluster states: random nodes, running jobs that fit, pending jobs of any size."""
    n_nodes = draw(st.integers(1, 6))
    gpus = [draw(st.sampled_from([1, 2, 4, 8])) for _ in range(n_nodes)]
    left = list(gpus)
    running = []
    for j in range(draw(st.integers(0, 4))):
        where = {}
        for node in draw(st.lists(st.integers(0, n_nodes - 1), min_size=1, max_size=3, unique=True)):
            if left[node]:
                take = draw(st.integers(1, left[node]))
                left[node] -= take
                where[f"node-{node}"] = take
        if where:
            running.append({"job_id": f"run-{j}", "model": draw(st.sampled_from(MODELS)), "placement": where,
                            "attained_gpu_s": draw(st.floats(0, 1e6))})
    now = draw(st.floats(0, 1e6))
    pending = [
        {"job_id": f"job-{j}", "model": draw(st.sampled_from(MODELS)), "gpus": draw(st.sampled_from([1, 2, 3, 4, 8, 12, 16, 64])),
         "submitted_at": draw(st.floats(0, now)), "remaining_s": draw(st.floats(0, 1e5))}
        for j in range(draw(st.integers(0, 8)))
    ]
    nodes = [
        {"name": f"node-{i}", "gpus": g, "free_gpus": draw(st.integers(0, left[i])),
         "fabric": draw(st.sampled_from(["pcie", "nvlink"]))}
        for i, g in enumerate(gpus)
    ]
    return {"now": now, "nodes": nodes, "running": running, "pending": pending}
