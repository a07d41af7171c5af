"""The opt-in tenancy encoding columns (:data:`deepshare.policies.extra_features.TENANCY_FEATURES`)
on a hand-made view: without a tenants file (fair part of the cluster) and with one (nominal
quotas, weights), after a launch of this decision, and next to the other extras."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from deepshare.core.contention import make_contention
from deepshare.core.workloads import default_catalog
from deepshare.policies.encoding import FEATURES, EncodingConfig, PartialDecision, encode
from deepshare.policies.extra_features import ALL_EXTRA_FEATURES, EXTRA_FEATURES, FABRIC_FEATURES, TENANCY_FEATURES
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import request_to_view
from deepshare.tenants import parse_tenants

TENANCY = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=None, extra_features=TENANCY_FEATURES)


def view(tenancy=None):  # type: ignore[no-untyped-def]
    """One 8-GPU node: r (queue a, 4 GPUs) runs; a1 (queue a, 2 GPUs) and b1 (queue b, 2 GPUs) wait."""
    doc = {
        "now": 100.0,
        "nodes": [{"name": "n0", "gpus": 8, "free_gpus": 4}],
        "running": [{"job_id": "r", "model": "FSDP", "placement": {"n0": 4}, "remaining_s": 7200.0}],
        "pending": [
            {"job_id": "a1", "model": "MobileNetV3", "gpus": 2, "submitted_at": 10.0, "remaining_s": 600.0},
            {"job_id": "b1", "model": "MobileNetV3", "gpus": 2, "submitted_at": 20.0, "remaining_s": 600.0},
        ],
    }
    v = request_to_view(PlacementRequest.model_validate(doc), default_catalog(), make_contention("profiled"))
    queue = {"r": "a", "a1": "a", "b1": "b"}
    v = replace(v, running=tuple(replace(j, queue=queue[j.job_id]) for j in v.running),
                queued=tuple(replace(j, queue=queue[j.job_id]) for j in v.queued))
    return v if tenancy is None else replace(v, tenancy=tenancy)


def columns(partial: PartialDecision, config: EncodingConfig = TENANCY) -> dict:
    obs, rows = encode(partial, config)
    extra = obs["observations"][: len(rows), len(FEATURES):]
    out: dict = {}
    for row, values in zip(rows, extra):
        out.setdefault(row.job and row.job.job_id, tuple(float(x) for x in np.round(values, 6)))
    return out


def test_without_a_tenants_file_the_quota_is_the_fair_part_of_the_cluster():
    # active queues a and b, weight 1 each: quota 8 x 1/2 = 4 GPUs. a holds 4 (r): usage 4/4 = 1
    # -> 1/4; a1 would take it to 6 > 4: borrows. b holds 0, 0 + 2 <= 4. Weight share 1/2 each.
    got = columns(PartialDecision(view()))
    assert got == {None: (0.0, 0.0, 0.0), "a1": (0.25, 1.0, 0.5), "b1": (0.0, 0.0, 0.5)}


def test_a_tenants_file_gives_nominal_quotas_and_weights():
    # a: nominal 2, weight 1; b: nominal 6, weight 3. a's usage 4/2 = 2 -> 2/4; borrows; 1/4.
    tenants = parse_tenants("queues:\n  - {name: a, cohort: c, nominal_gpus: 2}\n"
                            "  - {name: b, cohort: c, nominal_gpus: 6, weight: 3}\n")
    got = columns(PartialDecision(view(tenants)))
    assert got == {None: (0.0, 0.0, 0.0), "a1": (0.5, 1.0, 0.25), "b1": (0.0, 0.0, 0.75)}


def test_a_launch_in_a_queue_of_nominal_0_borrows():
    # b's quota is 0: its usage counts it as 1 GPU (0 of 1), but any launch of b borrows
    tenants = parse_tenants("queues:\n  - {name: a, cohort: c, nominal_gpus: 8}\n  - {name: b, cohort: c, nominal_gpus: 0}\n")
    v = view(tenants)
    v = replace(v, queued=tuple(replace(j, gpus=1) if j.job_id == "b1" else j for j in v.queued))
    assert columns(PartialDecision(v))["b1"][:2] == (0.0, 1.0)


def test_a_launch_of_the_decision_counts_in_its_queues_usage():
    v = view()
    b2 = replace(v.queued[1], job_id="b2", submit_time=30.0)
    partial = PartialDecision(replace(v, queued=(*v.queued, b2)))
    _, rows = encode(partial, TENANCY)
    b1 = next(r for r in rows if r.job is not None and r.job.job_id == "b1")
    after = columns(partial.with_launch(b1.job, b1.placement))
    # b now holds b1's 2 GPUs of its 4: usage 0.5 -> 0.125, and b2 takes it to 4: not above; a unchanged
    assert after == {None: (0.0, 0.0, 0.0), "a1": (0.25, 1.0, 0.5), "b2": (0.125, 0.0, 0.5)}


def test_the_columns_come_after_the_others_and_leave_them_unchanged():
    assert ALL_EXTRA_FEATURES == EXTRA_FEATURES + FABRIC_FEATURES + TENANCY_FEATURES
    both = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=None,
                          extra_features=("next_finish_h", "fabric_free_top", *TENANCY_FEATURES))
    alone = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=None, extra_features=("next_finish_h", "fabric_free_top"))
    obs_both, _ = encode(PartialDecision(view()), both)
    obs_alone, _ = encode(PartialDecision(view()), alone)
    width = len(FEATURES) + 2
    assert np.array_equal(obs_both["observations"][:, :width], obs_alone["observations"][:, :width])
    assert obs_both["observations"].shape[1] == width + len(TENANCY_FEATURES)
    picked = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=None, extra_features=("tenant_borrows",))
    assert columns(PartialDecision(view()), picked) == {None: (0.0,), "a1": (1.0,), "b1": (0.0,)}
