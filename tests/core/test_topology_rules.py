"""One set of rules for a job's topology request (issue 36): ``TopologyRequest.problems_of``
names each bad field; the constructor, ``check`` (the simulator, the live scheduler) and the
placement service all use it, so they cannot drift apart."""

from __future__ import annotations

import pytest

from fabric_cases import TINY_CLOS

from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import RequestProblem, TopologyRequest
from deepshare.core.simulator import topology_refusal

FABRIC = TINY_CLOS.fabric  # levels nvlink < leaf < spine
LEVELS = "this cluster's levels are nvlink, leaf, spine"


@pytest.mark.parametrize("fields, expected", [
    (dict(required_level="leaf", preferred_level="spine"),
     [("preferred_level", "give required_level or preferred_level, not both")]),
    (dict(slice_size=8), [("slice_level", "slice_size and slice_level go together: give both or neither")]),
    (dict(slice_level="nvlink"), [("slice_size", "slice_size and slice_level go together: give both or neither")]),
    (dict(slice_size=0, slice_level="nvlink"), [("slice_size", "slice_size must be a positive integer, got 0")]),
    (dict(required_level=""), [("required_level", "required_level must be a level's name, got ''")]),
])
def test_rules_that_need_no_cluster(fields: dict, expected: list) -> None:
    assert TopologyRequest.problems_of(**fields) == [RequestProblem(*p) for p in expected]


def test_rules_against_a_fabric_name_every_problem_at_once() -> None:
    found = TopologyRequest.problems_of("rack", "spine", 3, "leaf", fabric=FABRIC, gpus=8)
    assert found == [
        RequestProblem("preferred_level", "give required_level or preferred_level, not both"),
        RequestProblem("slice_size", "the job's 8 GPUs must be a multiple of slice_size (3)"),
        RequestProblem("required_level", f"required_level: unknown fabric level 'rack'; {LEVELS}"),
    ]
    assert TopologyRequest.problems_of(required_level="nvlink", slice_size=4, slice_level="leaf", fabric=FABRIC) == [
        RequestProblem("slice_level", "slice_level 'leaf' is above required_level 'nvlink'; a slice must fit "
                                      "inside the required domain")]
    assert TopologyRequest(required_level="leaf", slice_size=8, slice_level="nvlink").problems(FABRIC, 16) == []


def test_the_constructor_check_and_the_simulator_say_the_same() -> None:
    with pytest.raises(DeepShareError, match="^give required_level or preferred_level, not both$"):
        TopologyRequest(required_level="leaf", preferred_level="leaf")
    request = TopologyRequest(preferred_level="rack", slice_size=8, slice_level="nvlink")
    with pytest.raises(DeepShareError) as caught:
        request.check(FABRIC, 12, "its topology request")
    assert str(caught.value) == "its topology request: the job's 12 GPUs must be a multiple of slice_size (8); " \
                                f"preferred_level: unknown fabric level 'rack'; {LEVELS}"
    assert topology_refusal(request, TINY_CLOS, 12) == str(caught.value)  # rules without the cluster first
