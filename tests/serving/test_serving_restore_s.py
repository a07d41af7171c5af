"""A request's ``restore_s`` (the restart time of a preempted job on the caller's cluster) reaches
the tenants' quota preemption as the simulator's ``--preempt-overhead-s`` does: the service
costed victims at the default 30 s whatever the cluster's restore time was."""

from __future__ import annotations

import pytest
from test_serving_api import api, post

from deepshare.core.simulator import SimConfig
from deepshare.serving.schemas import DEFAULT_RESTORE_S
from deepshare.tenants.reclaim import RESTORE_S

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
    assert DEFAULT_RESTORE_S == SimConfig.preempt_overhead_s == RESTORE_S


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


def test_without_tenants_it_is_taken_and_read_by_nothing():
    app = api().app
    assert post(app, _request(restore_s=0.0)) == post(app, _request())


def test_the_policies_kept_for_other_restore_times_are_bounded():
    from deepshare.serving.engine import RESTORE_VARIANTS

    served = api(tenants=TENANTS)
    for i in range(RESTORE_VARIANTS + 5):
        assert post(served.app, _request(restore_s=float(i)))[0] == 200
    assert len(served.engine._by_restore._variants) == RESTORE_VARIANTS
