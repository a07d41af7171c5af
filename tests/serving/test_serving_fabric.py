"""A fabric described by the request (issue 36): the optional ``levels`` (lowest first) and each
node's ``domains`` build the same multi-level fabric a cluster spec does, so a simulated
multi-level cluster round-trips through the service with the in-process policy's decisions; bad
levels and domains are refused naming the field; a required level keeps a placed job inside one
domain, which the response's ``domains`` names (a domain's name is its path from the top level)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from serving_cases import assert_feasible, canonical

from deepshare.core.contention import make_contention
from deepshare.core.fabric import Level, TopologyRequest
from deepshare.core.information import InformationModel
from deepshare.core.simulator import Simulator
from deepshare.core.topology import parse_topology
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import (
    RequestError, request_to_view, request_topology, response_to_decision, view_to_request,
)

CATALOG = default_catalog()
CONTENTION = make_contention("profiled")

SPEC = """
name: two-leaves
node_types:
  g: {gpus: 4, fabric: nvlink, nvlink_gbps: 7200, nic_gbps: 400}
levels:
  - {name: nvlink, nvlink: true}
  - {name: leaf, oversubscription: 2}
nodes:
""" + "".join(
    f"  - {{type: g, count: 2, prefix: l{l}n{n}-, domains: {{nvlink: n{n}, leaf: l{l}}}}}\n"
    for l in range(2) for n in range(2))
"""2 leaves x 2 NVLink domains x 2 nodes of 4 GPUs (8 nodes, 32 GPUs); the NVLink domains' names
repeat under both leaves (``l0/n0`` and ``l1/n0`` are different domains)."""
TOPO = parse_topology(SPEC)

ASKS = (
    TopologyRequest(required_level="leaf"),
    TopologyRequest(),
    TopologyRequest(required_level="nvlink"),
    TopologyRequest(preferred_level="leaf"),
    TopologyRequest(slice_size=4, slice_level="nvlink"),
)
SIZES = (4, 8, 2, 16, 8, 1, 12, 4)
MODELS = ("FSDP", "GraphSage", "MoE", "Transformer-XL", "MobileNetV3")


def fabric_jobs(count: int = 48) -> list[JobSpec]:
    """Jobs of 1-16 GPUs arriving every 150 s, most with a topology request the cluster can meet."""
    jobs = []
    for i in range(count):
        gpus, ask = SIZES[i % len(SIZES)], ASKS[i % len(ASKS)]
        if ask.required_level == "nvlink" and gpus > 8:  # one NVLink domain has 8 GPUs
            ask = TopologyRequest(required_level="leaf")
        if ask.slice_size is not None and gpus % ask.slice_size:
            ask = TopologyRequest(preferred_level="nvlink")
        jobs.append(JobSpec(f"j{i}", MODELS[i % len(MODELS)], gpus, 150.0 * i,
                            duration_s=300.0 + (i * 7919) % 2400, requested_s=600.0 + (i * 104729) % 3000,
                            topology=ask))
    return jobs


@pytest.mark.parametrize("policy", ["srsf+topo-bestfit", "srsf+consolidated+preempt", "rl-hybrid"])
def test_a_multi_level_cluster_answers_through_the_service_as_in_the_simulator(policy: str) -> None:
    """Decision points of a simulation on a two-level fabric, sent as requests (``levels`` and
    each node's ``domains``), give the policy's own decisions, and the service sees the same fabric."""
    served, local = PlacementEngine(EngineSettings(policy=policy)), make_policy(policy)
    sim = Simulator(TOPO, fabric_jobs(), make_contention("profiled"),
                    information=InformationModel("estimated", 1.0, 3))
    points = asked = 0
    while (view := sim.advance()) is not None and points < 60:
        decision = local.decide(view)
        request = view_to_request(view)
        assert [level.name for level in request.levels or ()] == ["nvlink", "leaf"]
        body = request.model_dump(mode="json")
        there = request_to_view(PlacementRequest.model_validate(body), CATALOG, CONTENTION)
        assert there.topology.levels == TOPO.levels and there.topology.fabric.domains == TOPO.fabric.domains
        assert there.topology.fabric.node_domains == TOPO.fabric.node_domains
        assert [n.rack for n in there.topology.nodes] == [n.rack for n in TOPO.nodes]
        response = served.place(PlacementRequest.model_validate_json(request.model_dump_json()))
        answer = response.model_dump(mode="json", exclude_none=True)
        assert_feasible(body, answer)
        assert canonical(response_to_decision(response, view)) == canonical(decision)
        asks = {j.job_id: j.topology for j in view.queued}
        for d in answer["decisions"]:
            assert ("domains" in d) == (d["action"] == "place" and not asks[d["job_id"]].empty)
            if "domains" in d and asks[d["job_id"]].required_level == "leaf":
                assert len(d["domains"]["leaf"]) == 1, d
            asked += "domains" in d
        sim.apply(decision)
        points += 1
    assert points >= 15 and asked >= 5


# -- a tiny request-described fabric --------------------------------------------------------------
def tiny(*pending: dict, **changes) -> dict:
    """Two leaves, each with NVLink domains x and y of one 4-GPU node: l0 = a0 (x, 4 free) and
    a1 (y, 1 free); l1 = b0 (x, 3 free) and b1 (y, 3 free)."""
    return {
        "now": 10.0,
        "levels": [{"name": "nvlink", "nvlink": True}, {"name": "leaf", "oversubscription": 2}],
        "nodes": [{"name": name, "gpus": 4, "free_gpus": free, "fabric": "nvlink", "nvlink_gbps": 7200, "nic_gbps": 400,
                   "domains": {"nvlink": nvl, "leaf": leaf}}
                  for name, free, nvl, leaf in [("a0", 4, "x", "l0"), ("a1", 1, "y", "l0"),
                                                ("b0", 3, "x", "l1"), ("b1", 3, "y", "l1")]],
        "pending": list(pending),
        **changes,
    }


def topology_of(body: dict):
    request = PlacementRequest.model_validate(body)
    return request_topology(request.nodes, request.levels)


def decide(body: dict, policy: str = "fifo+consolidated") -> list[dict]:
    answer = PlacementEngine(EngineSettings(policy=policy)).place(PlacementRequest.model_validate(body))
    dumped = answer.model_dump(mode="json", exclude_none=True)
    assert_feasible(body, dumped)
    return dumped["decisions"]


def test_the_request_builds_the_fabric_it_describes() -> None:
    body = tiny()
    body["nodes"][3]["rack"] = "row7"  # with levels a rack is a label: given, kept; else the path above NVLink
    topology = topology_of(body)
    assert topology.levels == (Level("nvlink", nvlink=True), Level("leaf", oversubscription=2.0))
    assert [n.domains for n in topology.nodes] == [("x", "l0"), ("y", "l0"), ("x", "l1"), ("y", "l1")]
    assert [n.rack for n in topology.nodes] == ["l0", "l0", "l1", "row7"]
    fabric = topology.fabric
    assert [[fabric.domains[d].name for d in fabric.by_level[i]] for i in range(2)] == [
        ["l0/x", "l0/y", "l1/x", "l1/y"], ["l0", "l1"]]
    assert [fabric.domains[d].uplink_gbps for d in fabric.by_level[1]] == [400.0, 400.0]  # 2 x 400 Gb/s NICs / 2


def test_without_levels_the_fabric_is_the_racks_as_before() -> None:
    body = tiny()
    del body["levels"]
    for node in body["nodes"]:
        del node["domains"]
        node["rack"] = "r" + node["name"][0]
    topology = topology_of(body)
    assert topology.levels == () and [n.domains for n in topology.nodes] == [()] * 4
    assert [[topology.fabric.domains[d].name for d in level] for level in topology.fabric.by_level] == [["ra", "rb"]]
    request = view_to_request(request_to_view(PlacementRequest.model_validate(body), CATALOG, CONTENTION))
    assert request.levels is None and all(n.domains is None for n in request.nodes)


def test_rack_uplinks_and_uplink_ports_reach_the_service() -> None:
    """A flat cluster's rack uplink and a level's ECMP ports are part of the fabric the link model
    sees: the service rebuilt every rack uplink as non-blocking and every uplink as one fat pipe."""
    from deepshare.core.topology import load_topology

    for preset in ("a100-16", "clos3-256", "gb200-nvl72-4"):
        topology = load_topology(preset)
        view = Simulator(topology, [JobSpec("j", "FSDP", 8, 0.0, duration_s=100.0)], CONTENTION).advance()
        there = request_to_view(PlacementRequest.model_validate_json(view_to_request(view).model_dump_json()),
                                CATALOG, CONTENTION).topology
        assert there.levels == topology.levels, preset  # port_gbps included
        assert [d.uplink_gbps for d in there.fabric.domains] == [d.uplink_gbps for d in topology.fabric.domains], preset
    assert load_topology("a100-16").rack_uplink_gbps > 0 and any(lv.port_gbps for lv in load_topology("clos3-256").levels)


@pytest.mark.parametrize("policy", ["las+uncontended", "las+uncontended+migrate"])
def test_a_flat_cluster_with_rack_uplinks_decides_as_the_simulator_under_link_contention(policy: str) -> None:
    """a100-16's racks share an 800 Gb/s uplink: three cross-rack 16-GPU jobs run at 0.971 of
    their speed, which ``uncontended`` waits on; the service, blind to the uplink, launched."""
    from deepshare.core.topology import load_topology

    ends = {n: 100.0 * (n % 8 + 1) if n % 8 < 6 else 50000.0 for n in range(16)}
    jobs = [JobSpec(f"h{n:02d}", "MobileNetV3", 8, 0.0, duration_s=ends[n]) for n in range(16)]
    jobs += [JobSpec(f"c{k}", "FSDP", 16, 50.0 + 100 * k, duration_s=40000.0) for k in range(6)]
    local, engine = make_policy(policy), PlacementEngine(EngineSettings(policy=policy, contention="link"))
    sim = Simulator(load_topology("a100-16"), jobs, make_contention("link"), information=InformationModel("estimated", 1.0, 0))
    points = 0
    while (view := sim.advance()) is not None and view.now <= 700:
        mine = local.decide(view)
        served = engine.place(PlacementRequest.model_validate_json(view_to_request(view).model_dump_json()))
        assert canonical(response_to_decision(served, view)) == canonical(mine), view.now
        sim.apply(mine)
        points += 1
    assert points >= 8


def test_a_required_level_is_placed_inside_one_domain_named_in_the_response() -> None:
    """fifo+consolidated: g (6 GPUs, one leaf) fits only l1 (6 free; l0 has 5) and spans both of
    its NVLink domains; h (4, one NVLink domain) takes l0/x; k (2, one NVLink domain) waits: the
    one GPU left (a1, l0/y) is too few; u (1, no request) takes it, without ``domains``."""
    body = tiny(
        {"job_id": "g", "model": "FSDP", "gpus": 6, "required_level": "leaf"},
        {"job_id": "h", "model": "FSDP", "gpus": 4, "required_level": "nvlink"},
        {"job_id": "k", "model": "FSDP", "gpus": 2, "required_level": "nvlink"},
        {"job_id": "u", "model": "MobileNetV3", "gpus": 1},
    )
    assert decide(body) == [
        {"job_id": "g", "action": "place", "placement": {"b0": 3, "b1": 3}, "predicted_slowdown": 1.0,
         "domains": {"nvlink": ["l1/x", "l1/y"], "leaf": ["l1"]}},
        {"job_id": "h", "action": "place", "placement": {"a0": 4}, "predicted_slowdown": 1.0,
         "domains": {"nvlink": ["l0/x"], "leaf": ["l0"]}},
        {"job_id": "k", "action": "wait"},
        {"job_id": "u", "action": "place", "placement": {"a1": 1}, "predicted_slowdown": 1.0},
    ]


@pytest.mark.parametrize("policy", ["fifo+consolidated", "fifo+spread", "srsf+topo-bestfit"])
def test_a_gang_that_asks_nothing_may_span_leaves_and_one_that_requires_a_leaf_does_not(policy: str) -> None:
    (free,) = decide(tiny({"job_id": "g", "model": "FSDP", "gpus": 7}), policy)
    assert free["action"] == "place" and "domains" not in free and set(free["placement"]) & {"a0", "a1"}
    (kept,) = decide(tiny({"job_id": "g", "model": "FSDP", "gpus": 6, "required_level": "leaf"}), policy)
    assert kept["placement"] == {"b0": 3, "b1": 3} and kept["domains"]["leaf"] == ["l1"]
    (waits,) = decide(tiny({"job_id": "g", "model": "FSDP", "gpus": 6, "required_level": "nvlink"}), policy)
    assert waits == {"job_id": "g", "action": "wait"}  # no NVLink domain has 6 GPUs free


# -- bad levels and domains -------------------------------------------------------------------------
def _levels(body: dict, i: int, **fields) -> None:
    body["levels"][i].update(fields)


def _add_level(body: dict, level: dict, domains: dict[str, str] | None = None) -> None:
    body["levels"].append(level)
    for node in body["nodes"]:
        node["domains"].update(domains or {})


@pytest.mark.parametrize("change, loc, message", [
    (lambda b: _levels(b, 1, name="nvlink"), "body.levels.1.name",
     "each level needs its own name; 'nvlink' is also levels.0's"),
    (lambda b: (_levels(b, 0, nvlink=False), _levels(b, 1, nvlink=True)), "body.levels.1.nvlink",
     "only the lowest level (levels.0) can be an NVLink domain"),
    (lambda b: _levels(b, 1, uplink_gbps=800.0), "body.levels.1.oversubscription",
     "give uplink_gbps or oversubscription, not both"),
    (lambda b: b["nodes"][3]["domains"].pop("leaf"), "body.nodes.3.domains",
     "missing a domain for level 'leaf' (expected one for each of nvlink, leaf)"),
    (lambda b: _add_level(b, {"name": "spine"}, {"spine": "s0"}) or b["nodes"][2]["domains"].pop("spine"),
     "body.nodes.2.domains", "missing a domain for level 'spine'"),
    (lambda b: b["nodes"][1].pop("domains"), "body.nodes.1.domains",
     "expected a domain for each level (nvlink, leaf), got none"),
    (lambda b: b["nodes"][0]["domains"].update(spine="s0"), "body.nodes.0.domains.spine",
     "unknown level 'spine'; the request's levels are nvlink, leaf"),
    (lambda b: b.pop("levels"), "body.nodes.0.domains",
     "the request has no levels; add levels (lowest first) or drop domains"),
    (lambda b: b["pending"][0].update(required_level="rack"), "body.pending.0.required_level",
     "unknown fabric level 'rack'; this cluster's levels are nvlink, leaf"),
    (lambda b: b["pending"][0].update(slice_size=2, slice_level="leaf", required_level="nvlink"),
     "body.pending.0.slice_level", "'leaf' is above required_level 'nvlink'"),
    (lambda b: b.update(rack_uplink_gbps=800.0), "body.rack_uplink_gbps",
     "only in a request without levels; with levels, give each level's uplink_gbps"),
    (lambda b: _levels(b, 1, port_gbps=0.01), "body.levels",
     "levels[1] (leaf): an uplink of 400 Gbit/s over ports of 0.01 Gbit/s is 40,000 ports; at most 4,096"),
    (lambda b: b["nodes"][1].update(fabric="pcie", domains={"nvlink": "x", "leaf": "l0"}), "body.nodes",
     "node 'a1' (type 'pcie-4') has no NVLink (fabric: pcie) but is in NVLink domain 'l0/x' (level 'nvlink') "
     "with 1 other node(s)"),
])
def test_bad_levels_and_domains_name_their_fields(change, loc: str, message: str) -> None:
    body = tiny({"job_id": "g", "model": "FSDP", "gpus": 4})
    change(body)
    request = PlacementRequest.model_validate(body)
    with pytest.raises(RequestError) as caught:
        request_to_view(request, CATALOG, CONTENTION)
    errors = {".".join(map(str, e.loc)): e.msg for e in caught.value.errors}
    assert loc in errors and message in errors[loc], errors
    with pytest.raises(RequestError) as through:  # and the engine (the API answers it with 422)
        PlacementEngine(EngineSettings(policy="fifo+consolidated")).place(request)
    assert loc in {".".join(map(str, e.loc)) for e in through.value.errors}


def test_every_node_missing_a_domain_is_named() -> None:
    body = tiny()
    for i in (0, 2):
        del body["nodes"][i]["domains"]["nvlink"]
    with pytest.raises(RequestError) as caught:
        topology_of(body)
    assert [(e.loc, e.msg.split(" (")[0]) for e in caught.value.errors] == [
        (("body", "nodes", i, "domains"), "missing a domain for level 'nvlink'") for i in (0, 2)]


@pytest.mark.parametrize("change, loc", [
    (lambda b: _levels(b, 0, name="a/b"), ("levels", 0, "name")),
    (lambda b: _levels(b, 0, name=""), ("levels", 0, "name")),
    (lambda b: _levels(b, 0, name="x" * 257), ("levels", 0, "name")),
    (lambda b: _levels(b, 0, nvlink="true"), ("levels", 0, "nvlink")),  # strict: a bool is a bool
    (lambda b: _levels(b, 1, oversubscription=0.5), ("levels", 1, "oversubscription")),
    (lambda b: _levels(b, 1, oversubscription=-1.0), ("levels", 1, "oversubscription")),
    (lambda b: _levels(b, 1, uplink_gbps=2e9), ("levels", 1, "uplink_gbps")),
    (lambda b: _levels(b, 1, speed=1.0), ("levels", 1, "speed")),
    (lambda b: b.update(levels=[]), ("levels",)),
    (lambda b: b.update(levels=[{"name": f"l{i}"} for i in range(17)]), ("levels",)),
    (lambda b: b["nodes"][0]["domains"].update(leaf="s0/l0"), ("nodes", 0, "domains", "leaf")),
    (lambda b: b["nodes"][0]["domains"].update(leaf=""), ("nodes", 0, "domains", "leaf")),
    (lambda b: b["nodes"][0]["domains"].update(leaf=3), ("nodes", 0, "domains", "leaf")),
    (lambda b: b["nodes"][0].update(domains={f"l{i}": "d" for i in range(17)}), ("nodes", 0, "domains")),
])
def test_the_schema_bounds_levels_and_domains(change, loc: tuple) -> None:
    body = tiny()
    change(body)
    with pytest.raises(ValidationError) as caught:
        PlacementRequest.model_validate(body)
    assert caught.value.errors()[0]["loc"][:len(loc)] == loc, caught.value.errors()


def test_sixteen_levels_with_uplinks_are_accepted() -> None:
    body = tiny()
    body["levels"] = [{"name": f"l{i}", "uplink_gbps": 100.0 * i} for i in range(16)]
    for node in body["nodes"]:
        node["domains"] = {f"l{i}": f"{node['name']}-{i}" for i in range(16)}
    topology = topology_of(body)
    assert len(topology.levels) == 16 and len(topology.fabric.domains) == 64
