"""The service's 422 for a job's topology request comes from the core's one set of rules
(``TopologyRequest.problems_of``): every bad field of a job named at once, each at its path."""

from __future__ import annotations

import pytest
from serving_cases import small_request

from deepshare.core.contention import make_contention
from deepshare.core.workloads import default_catalog
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import RequestError, request_to_view


def test_every_bad_topology_field_of_a_job_is_named() -> None:
    body = small_request()
    for node in body["nodes"]:
        node.setdefault("rack", "r0")
    body["pending"][1].update(required_level="leaf", preferred_level="rack", slice_size=3, slice_level="rack")
    with pytest.raises(RequestError) as caught:
        request_to_view(PlacementRequest.model_validate(body), default_catalog(), make_contention("profiled"))
    gpus = body["pending"][1]["gpus"]
    assert [(".".join(map(str, e.loc)), e.msg) for e in caught.value.errors] == [
        ("body.pending.1.preferred_level", "give required_level or preferred_level, not both"),
        ("body.pending.1.slice_size", f"the job's {gpus} GPUs must be a multiple of slice_size (3)"),
        ("body.pending.1.required_level",
         "required_level: unknown fabric level 'leaf'; this cluster's levels are rack"),
    ]
