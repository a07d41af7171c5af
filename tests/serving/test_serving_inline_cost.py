"""What the placement service decides on its event loop, and a view's deadline.

Review: a 30 KB request (64 nodes in six levels, 230 running jobs over 8 nodes each, one pending
job) counted as cheap, nodes x (pending + 1), and was decided on the event loop; under ``--contention
link`` building its view (the contention state of every running job) took 14.9 s, with no deadline
check, so a 1 s deadline was ignored and every other request, ``/healthz`` included, waited."""

from __future__ import annotations

import time

import pytest

from deepshare.core.deadline import Deadline, DecisionTimeout
from deepshare.serving.api import INLINE_MAX_WORK, _cheap
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PlacementRequest


def heavy_link_request(nodes: int = 64, levels: int = 6, running: int = 230, span: int = 8) -> PlacementRequest:
    lv = [{"name": f"L{j}", "oversubscription": 2, "port_gbps": 1} for j in range(levels)]
    jobs = [{"job_id": f"{r:x}", "model": "FSDP", "placement": {f"{(r * 7 + s * 13) % nodes:x}": 1 for s in range(span)}}
            for r in range(running)]
    used = [0] * nodes
    for job in jobs:
        for node in job["placement"]:
            used[int(node, 16)] += 1
    return PlacementRequest.model_validate({
        "now": 1, "levels": lv, "running": jobs, "pending": [{"job_id": "p", "model": "FSDP", "gpus": 4}],
        "nodes": [{"name": f"{i:x}", "gpus": 64, "free_gpus": max(0, 64 - used[i]),
                   "domains": {f"L{j}": f"{i >> (j + 1)}" for j in range(levels)}} for i in range(nodes)],
    })


def test_a_view_whose_contention_state_costs_seconds_stops_at_the_deadline():
    engine = PlacementEngine(EngineSettings("srsf+packed", contention="link"))
    request = heavy_link_request()
    start = time.perf_counter()
    with pytest.raises(DecisionTimeout):
        engine.place(request, Deadline(0.5))
    assert time.perf_counter() - start < 5.0  # 14.9 s before: the view was built whole first


def test_only_profiled_requests_small_in_nodes_pending_and_running_decide_on_the_loop():
    request = heavy_link_request()
    assert len(request.nodes) * (len(request.pending) + 1) <= INLINE_MAX_WORK  # small by the old measure
    assert not _cheap(request, "link")  # link's cost follows the running jobs and the levels
    assert _cheap(heavy_link_request(running=10), "profiled")
    many = heavy_link_request(nodes=128, running=600, span=8)  # 4,800 placement entries: past the bound
    assert not _cheap(many, "profiled")


def test_the_benchmarks_large_request_still_decides_on_the_loop():
    from deepshare.serving.samples import large_request, small_request

    # 64 x 65 = INLINE_MAX_WORK exactly, plus 32 one-node running jobs: the bound was set for it
    assert _cheap(PlacementRequest.model_validate(large_request()), "profiled")
    assert _cheap(PlacementRequest.model_validate(small_request()), "none")  # profiled floored at 1: same cost


def test_many_multi_node_jobs_on_the_same_nodes_do_not_decide_on_the_loop():
    # 565 two-node jobs over two 1024-GPU nodes: a 32.6 KB body whose profiled view costs ~5 s (k^3)
    k = 565
    request = PlacementRequest.model_validate({
        "now": 1, "pending": [{"job_id": "p", "model": "FSDP", "gpus": 2}],
        "nodes": [{"name": n, "gpus": 1024, "free_gpus": 1024 - k} for n in "ab"],
        "running": [{"job_id": f"{i:x}", "model": "FSDP", "placement": {"a": 1, "b": 1}} for i in range(k)],
    })
    assert not _cheap(request, "profiled")
