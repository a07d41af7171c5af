"""Shared helpers of the placement-service tests: request builders, the feasibility invariant,
a canonical form of decisions, and hypothesis strategies for valid requests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from deepshare.core.types import Decision

MODELS = ("FSDP", "MobileNetV3", "Transformer-XL", "VGG16", "ResNet18", "GPT2-ish")


def small_request() -> dict[str, Any]:
    """4 nodes, one running job, 3 pending (the benchmark's small case)."""
    return {
        "now": 100.0,
        "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 4 if i == 0 else 8} for i in range(4)],
        "running": [{"job_id": "r0", "model": "FSDP", "placement": {"n0": 4}, "attained_gpu_s": 400.0}],
        "pending": [
            {"job_id": "p0", "model": "MobileNetV3", "gpus": 2, "submitted_at": 10.0, "remaining_s": 600.0},
            {"job_id": "p1", "model": "FSDP", "gpus": 8, "submitted_at": 20.0, "remaining_s": 3000.0},
            {"job_id": "p2", "model": "Transformer-XL", "gpus": 16, "submitted_at": 30.0},
        ],
    }


def large_request(nodes: int = 64, pending: int = 64) -> dict[str, Any]:
    """``nodes`` 8-GPU nodes, half of them busy with 4-GPU jobs, ``pending`` queued jobs."""
    running = [
        {"job_id": f"r{i}", "model": MODELS[i % 4], "placement": {f"n{i}": 4}, "attained_gpu_s": 100.0 * i}
        for i in range(0, nodes, 2)
    ]
    return {
        "now": 5000.0,
        "nodes": [{"name": f"n{i}", "gpus": 8, "free_gpus": 4 if i % 2 == 0 else 8} for i in range(nodes)],
        "running": running,
        "pending": [
            {"job_id": f"p{i}", "model": MODELS[i % 5], "gpus": (1, 2, 4, 8, 16)[i % 5], "submitted_at": float(i),
             "remaining_s": 100.0 * (i + 1)}
            for i in range(pending)
        ],
    }


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
