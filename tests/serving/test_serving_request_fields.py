"""Request fields the schema bounds so that a bad value is a 422 naming it: a running job's GPUs
per node (a huge count made the consistency check's message fail with a 500), a node's rack
(no control characters; a '/' as a cluster spec allows it) and a node's name (no control
characters either)."""

from __future__ import annotations

import pytest
from serving_cases import small_request
from test_serving_api import api, post

from deepshare.core.contention import make_contention
from deepshare.core.workloads import default_catalog
from deepshare.serving.schemas import MAX_GPUS_PER_NODE, PlacementRequest
from deepshare.serving.translate import request_to_view, view_to_request

HUGE = "9" * 4299
"""Under Python's int-to-text digit limit alone; the sum of eleven of them is not."""


def test_eleven_huge_running_placements_are_a_422_naming_each_field_without_the_number():
    running = ",".join(f'{{"job_id": "r{i}", "model": "FSDP", "placement": {{"n0": {HUGE}}}}}' for i in range(11))
    body = ('{"now": 100, "nodes": [{"name": "n0", "gpus": 8, "free_gpus": 0}], "running": [' + running
            + '], "pending": [{"job_id": "p0", "model": "FSDP", "gpus": 1}]}').encode()
    status, answer = post(api().app, body)
    assert status == 422
    assert [e["loc"] for e in answer["detail"]] == [["body", "running", i, "placement", "n0"] for i in range(11)]
    assert str(MAX_GPUS_PER_NODE) in answer["detail"][0]["msg"]
    assert HUGE[:50] not in str(answer)


@pytest.mark.parametrize("gpus", [0, -3, MAX_GPUS_PER_NODE + 1])
def test_a_running_placement_outside_1_to_a_nodes_most_is_a_422_naming_it(gpus):
    request = small_request()
    request["running"][0]["placement"] = {"n0": gpus}
    status, answer = post(api().app, request)
    assert status == 422
    assert [e["loc"] for e in answer["detail"]] == [["body", "running", 0, "placement", "n0"]]


def test_more_pcie_switches_than_gpus_is_a_422_naming_the_node():
    request = small_request()
    request["nodes"][1].update(gpus=4, free_gpus=4, pcie_switches=8)
    status, answer = post(api().app, request)
    assert status == 422
    assert [e["loc"] for e in answer["detail"]] == [["body", "nodes", 1]]
    assert "pcie_switches: at most gpus (4)" in answer["detail"][0]["msg"]


def test_a_one_gpu_node_without_pcie_switches_has_one():
    # the default is the testbed's 2 switches, which a 1-GPU node cannot have: cut, not refused
    request = small_request()
    request["nodes"][1].update(gpus=1, free_gpus=1)
    request["nodes"][1].pop("pcie_switches", None)
    status, _ = post(api().app, request)
    assert status == 200
    assert PlacementRequest.model_validate(request).nodes[1].pcie_switches == 1


@pytest.mark.parametrize("rack, words", [("r\x00\n", "pattern"), ("r\tx", "pattern")])
def test_a_rack_with_control_characters_is_a_422_naming_it(rack, words):
    request = small_request()
    request["nodes"][2]["rack"] = rack
    status, answer = post(api().app, request)
    assert status == 422
    assert [e["loc"] for e in answer["detail"]] == [["body", "nodes", 2, "rack"]]
    assert words in answer["detail"][0]["msg"]


@pytest.mark.parametrize("name", ["n\x00", "n2\n", "n\tx", "\x1b[31mn2", "n\x9b2", "n\u2029", "n\u2066x"])
def test_a_node_name_with_control_characters_is_a_422_naming_it_as_a_rack_would_be(name):
    # a node name took NUL and line breaks while its rack refused them
    request = small_request()
    request["nodes"][2]["name"] = name
    status, answer = post(api().app, request)
    assert status == 422
    assert [e["loc"] for e in answer["detail"]] == [["body", "nodes", 2, "name"]]
    assert "pattern" in answer["detail"][0]["msg"]


def test_without_levels_a_rack_named_with_a_slash_is_what_a_cluster_spec_allows_and_round_trips():
    """A cluster spec takes ``rack: dc1/r0`` (one level: the name is never joined into a path), so
    a policy behind the service must get its view's rack back as sent, not a 422 every decision."""
    request = small_request()
    for node in request["nodes"]:
        node["rack"] = "dc1/r0"
    status, _ = post(api().app, request)
    assert status == 200
    view = request_to_view(PlacementRequest.model_validate(request), default_catalog(), make_contention("profiled"))
    assert {n.rack for n in view.topology.nodes} == {"dc1/r0"}
    assert {n.rack for n in view_to_request(view).nodes} == {"dc1/r0"}


def test_with_levels_a_rack_label_may_be_a_path_and_a_view_round_trips():
    request = small_request()
    request["levels"] = [{"name": "rack"}, {"name": "pod"}]
    for i, node in enumerate(request["nodes"]):
        node["domains"] = {"rack": f"r{i // 2}", "pod": "p0"}
    request["nodes"][3]["rack"] = "row7/left"
    status, _ = post(api().app, request)
    assert status == 200
    view = request_to_view(PlacementRequest.model_validate(request), default_catalog(), make_contention("profiled"))
    assert view.topology.nodes[0].rack == "p0/r0"  # a multi-level rack is a path, and the client sends it back
    assert view_to_request(view).nodes[0].rack == "p0/r0"


@pytest.mark.parametrize("where, field", [
    (("pending", 0), "job_id"), (("pending", 0), "model"), (("pending", 0), "queue"), (("pending", 0), "priority"),
    (("pending", 0), "user"), (("pending", 0), "group"), (("pending", 0), "vc"),
    (("running", 0), "job_id"), (("running", 0), "model"), (("running", 0), "queue"), (("running", 0), "user"),
    (("nodes", 1), "gpu_model"), (("history", 0), "job_id"), (("history", 0), "model"), (("history", 0), "vc"),
])
@pytest.mark.parametrize("bad", ["a\x00b", "a\nb", "\x1b[31ma", "a\x7fb", "a\x85b", "a\u2028b", "\u202eevil"])
def test_job_and_tenant_names_with_control_characters_are_a_422_naming_the_field(where, field, bad):
    """Job ids, models, queues, priorities, users, groups, virtual clusters and GPU models go
    into logs, metrics labels and error messages as node names do: a NUL or a line break in one
    was accepted (200) while a node name's was refused."""
    request = small_request()
    request["history"] = [{"job_id": "h0", "model": "FSDP", "gpus": 1, "run_s": 60.0}]
    part, index = where
    request[part][index][field] = bad
    status, answer = post(api().app, request)
    assert status == 422
    assert [e["loc"] for e in answer["detail"]] == [["body", part, index, field]]
    assert "pattern" in answer["detail"][0]["msg"]


def test_names_without_control_characters_still_pass_unicode_and_all():
    request = small_request()
    request["pending"][0].update(job_id="job/ü 1", user="ü-team", vc="vc #1", model="名前\xa0\u00e9")
    request["nodes"][1]["gpu_model"] = ""
    status, _ = post(api().app, request)
    assert status == 200
