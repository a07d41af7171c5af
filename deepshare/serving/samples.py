"""Example placement requests: the benchmark's small and large cases, used by tests too."""

from __future__ import annotations

from typing import Any

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


def scale_request(nodes: int = 4096, pending: int = 1000, sizes: tuple[int, ...] = (1,), gpus: int = 8) -> dict[str, Any]:
    """``nodes`` ``gpus``-GPU nodes, a quarter of them half busy (4-GPU jobs), ``pending`` queued
    jobs whose demands cycle through ``sizes``: the scale benchmark's request (issue 14)."""
    busy = range(0, nodes, 4)
    return {
        "now": 50000.0,
        "nodes": [
            {"name": f"n{i}", "gpus": gpus, "free_gpus": gpus // 2 if i % 4 == 0 else gpus} for i in range(nodes)
        ],
        "running": [
            {"job_id": f"r{i}", "model": MODELS[i % 4], "placement": {f"n{i}": gpus // 2}, "attained_gpu_s": 10.0 * i}
            for i in busy
        ],
        "pending": [
            {"job_id": f"p{i}", "model": MODELS[i % 5], "gpus": sizes[i % len(sizes)], "submitted_at": float(i),
             "remaining_s": 100.0 + (i * 7919) % 5000}
            for i in range(pending)
        ],
    }
