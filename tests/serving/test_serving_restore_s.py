"""A request's ``restore_s`` (the restart time of a preempted job on the caller's cluster) is the
view's, which every preemptive policy costs a stop at, as the simulator's
``--preempt-overhead-s``: the tenants' quota preemption and the ``+preempt`` heuristics' domain
plans. The service costed victims at the default 30 s whatever the cluster's restore time was."""

from __future__ import annotations

import pytest
from restore_cases import EXPECTED, two_ways_view
from test_serving_api import api, post

from deepshare.core.simulator import SimConfig
from deepshare.core.view import DEFAULT_RESTORE_S as VIEW_DEFAULT
from deepshare.serving.schemas import DEFAULT_RESTORE_S
from deepshare.serving.translate import view_to_request

TENANTS = """
queues:
  - {name: a, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 0}
  - {name: b, cohort: main, nominal_gpus: 0, borrowing_limit_gpus: 8}
default_queue: a
"""


def _request(**extra: object) -> dict:
    """One full node of queue b's borrowed jobs; queue a's job of 2 GPUs waits for its quota.
    Victims go by GPUs x restore_s, then least attained service: at 30 s the 2-GPU job of less
    service (b3); at 0 s the job of least service (b2, 4 GPUs)."""
    running = [{"job_id": job, "model": "FSDP", "placement": {"n0": gpus}, "attained_gpu_s": attained, "queue": "b"}
               for job, gpus, attained in (("b1", 2, 1e6), ("b2", 4, 10.0), ("b3", 2, 5e5))]
    return {"now": 100.0, "nodes": [{"name": "n0", "gpus": 8, "free_gpus": 0}], "running": running,
            "pending": [{"job_id": "a1", "model": "FSDP", "gpus": 2, "queue": "a"}], **extra}


def test_the_default_is_the_simulators():
    assert DEFAULT_RESTORE_S == SimConfig.preempt_overhead_s == VIEW_DEFAULT


@pytest.mark.parametrize("restore_s, victim", [(None, "b3"), (30.0, "b3"), (600.0, "b3"), (0.0, "b2")])
def test_quota_preemption_costs_victims_at_the_requests_restore_time(restore_s, victim):
    app = api(tenants=TENANTS).app
    status, answer = post(app, _request(**({} if restore_s is None else {"restore_s": restore_s})))
    assert status == 200, answer
    assert answer["preempt"] == [victim]
    assert answer["decisions"][0]["action"] == "place"


@pytest.mark.parametrize("value", [-1.0, 1e7, "30"])
def test_a_restore_time_out_of_its_domain_is_a_422_naming_it(value):
    status, answer = post(api(tenants=TENANTS).app, _request(restore_s=value))
    assert status == 422 and answer["detail"][0]["loc"] == ["body", "restore_s"]


def test_a_policy_that_never_preempts_reads_nothing_of_it():
    app = api().app
    assert post(app, _request(restore_s=0.0)) == post(app, _request())


@pytest.mark.parametrize("restore_s", sorted(EXPECTED))
def test_a_preemptive_heuristics_domain_plan_costs_a_stop_at_the_requests_restore_time(restore_s):
    """The hand case of ``restore_cases``, sent as a request: the gang's plan stops v1
    (4 GPUs, no contention after) at 0 s, v2 (2 GPUs, contention after) from 30 s."""
    view = two_ways_view()
    request = view_to_request(view).model_dump(mode="json")
    status, answer = post(api("srsf+topo-aware+preempt").app, {**request, "restore_s": restore_s})
    assert status == 200, answer
    victim, alloc = EXPECTED[restore_s]
    assert answer["preempt"] == [victim]
    (placed,) = [d for d in answer["decisions"] if d["job_id"] == "gang"]
    assert placed["placement"] == {view.topology.nodes[node].name: gpus for node, gpus in alloc}


def test_a_view_sent_as_a_request_keeps_its_restore_time():
    import dataclasses

    assert view_to_request(dataclasses.replace(two_ways_view(), restore_s=7.0)).restore_s == 7.0


def test_one_policy_answers_every_restore_time():
    """The restore time is on the view, so the engine keeps no policy per value."""
    served = api(tenants=TENANTS)
    policy = served.engine.policy
    for restore_s in (0.0, 1.0, 30.0):
        assert post(served.app, _request(restore_s=restore_s))[0] == 200
    assert served.engine.policy is policy and not hasattr(served.engine, "_by_restore")
