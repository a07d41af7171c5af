"""Jobs that say where they must run (issue 36): the request carried by JobSpec, the canonical
trace's optional columns, the simulator's views and ``from_view``, and the simulator's refusal
of a request the cluster can never meet."""

from __future__ import annotations

import logging

import pytest

from fabric_cases import TINY_CLOS_SPEC

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.simulator import Simulator, topology_refusal
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import load_topology, parse_topology
from deepshare.core.traces import load, write_canonical
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy

SPEC = TINY_CLOS_SPEC
TOPO = parse_topology(SPEC)
HEADER = "job_id,submit_time,model,gpus,duration_s,total_samples"


def job(job_id: str, gpus: int, request: TopologyRequest = NO_TOPOLOGY, submit: float = 0.0) -> JobSpec:
    return JobSpec(job_id, "FSDP", gpus, submit, duration_s=600.0, topology=request)


# -- the request ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, message", [
    (dict(required_level="leaf", preferred_level="spine"), "not both"),
    (dict(slice_size=8), "go together"),
    (dict(slice_level="nvlink"), "go together"),
    (dict(slice_size=0, slice_level="nvlink"), "positive integer"),
    (dict(slice_size=True, slice_level="nvlink"), "positive integer"),
    (dict(slice_size=2.0, slice_level="nvlink"), "positive integer"),
    (dict(required_level=""), "level's name"),
    (dict(preferred_level=3), "level's name"),
])
def test_request_validation(fields: dict, message: str) -> None:
    with pytest.raises(DeepShareError, match=message):
        TopologyRequest(**fields)


def test_request_check_against_a_fabric() -> None:
    fabric = TOPO.fabric
    TopologyRequest(required_level="leaf", slice_size=8, slice_level="nvlink").check(fabric, 16, "j")
    with pytest.raises(DeepShareError, match="j: required_level: unknown fabric level 'rack'"):
        TopologyRequest(required_level="rack").check(fabric, 8, "j")
    with pytest.raises(DeepShareError, match=r"j: the job.s 12 GPUs must be a multiple of slice_size \(8\)"):
        TopologyRequest(slice_size=8, slice_level="nvlink").check(fabric, 12, "j")
    with pytest.raises(DeepShareError, match="above required_level"):
        TopologyRequest(required_level="nvlink", slice_size=4, slice_level="leaf").check(fabric, 8, "j")
    assert NO_TOPOLOGY.empty and TopologyRequest().empty and not TopologyRequest(preferred_level="leaf").empty


def test_job_spec_carries_a_request_positionally_compatible() -> None:
    request = TopologyRequest(required_level="leaf")
    spec = JobSpec("a", "FSDP", 16, 0.0, None, 60.0, "u", "g", "v", 120.0, request)
    assert spec.topology is request and spec.requested_s == 120.0
    assert JobSpec("b", "FSDP", 2, 0.0, duration_s=1.0).topology is NO_TOPOLOGY
    with pytest.raises(DeepShareError, match="job 'c': topology must be a TopologyRequest"):
        JobSpec("c", "FSDP", 2, 0.0, duration_s=1.0, topology={"required_level": "leaf"})  # type: ignore[arg-type]


# -- the canonical trace -------------------------------------------------------------------------
def test_canonical_round_trip_of_the_request_columns(tmp_path) -> None:
    jobs = [
        job("a", 16, TopologyRequest(required_level="leaf", slice_size=8, slice_level="nvlink")),
        job("b", 8, TopologyRequest(preferred_level="spine"), 1.0),
        job("c", 4, submit=2.0),
    ]
    path = write_canonical(jobs, tmp_path / "t.csv")
    lines = path.read_text().splitlines()
    assert lines[0] == f"{HEADER},required_level,preferred_level,slice_size,slice_level"
    assert lines[1].endswith(",leaf,,8,nvlink") and lines[2].endswith(",,spine,,") and lines[3].endswith(",,,,")
    back = load(path)
    assert back.format == "canonical" and back.jobs == tuple(jobs)
    assert back.jobs[2].topology is NO_TOPOLOGY


def test_canonical_writes_only_the_columns_some_job_asks(tmp_path) -> None:
    path = write_canonical([job("a", 8, TopologyRequest(preferred_level="leaf")), job("b", 4)], tmp_path / "t.csv")
    assert path.read_text().splitlines()[0] == f"{HEADER},preferred_level"
    plain = write_canonical([job("a", 8)], tmp_path / "plain.csv")
    assert plain.read_text().splitlines()[0] == HEADER  # a trace without requests is what it was


@pytest.mark.parametrize("columns, cells, message", [
    ("slice_size,slice_level", "x,nvlink", "line 3: field 'slice_size': expected a positive integer up to 65,536, got 'x'"),
    ("slice_size,slice_level", "0,nvlink", "line 3: field 'slice_size': expected a positive integer up to 65,536, got '0'"),
    ("slice_size,slice_level", "2.5,nvlink", "line 3: field 'slice_size'"),
    ("slice_size,slice_level", "65537,nvlink", "line 3: field 'slice_size'"),
    ("slice_size", "8", "line 3: slice_size and slice_level go together"),
    ("required_level,preferred_level", "leaf,spine", "line 3: give required_level or preferred_level, not both"),
])
def test_bad_request_cells_are_named_with_line_and_field(tmp_path, columns: str, cells: str, message: str) -> None:
    blanks = "," * columns.count(",")
    path = tmp_path / "bad.csv"
    path.write_text(f"{HEADER},{columns}\na,0,FSDP,8,60,,{blanks}\nb,0,FSDP,8,60,,{cells}\n")
    with pytest.raises(DeepShareError) as caught:
        load(path)
    assert str(caught.value).startswith(str(path)) and message in str(caught.value)


def test_writer_refuses_a_level_name_it_could_not_read_back(tmp_path) -> None:
    with pytest.raises(DeepShareError, match="required_level ' leaf' must be non-empty, on one line"):
        write_canonical([job("a", 8, TopologyRequest(required_level=" leaf"))], tmp_path / "t.csv")


# -- the simulator -------------------------------------------------------------------------------
def test_a_request_naming_an_unknown_level_is_rejected_with_the_reason(caplog) -> None:
    jobs = [
        job("ok", 16, TopologyRequest(required_level="leaf")),
        job("typo", 8, TopologyRequest(required_level="rack")),
        job("odd", 12, TopologyRequest(slice_size=8, slice_level="nvlink")),
        job("huge", 4096),
    ]
    with caplog.at_level(logging.WARNING, logger="deepshare.core.simulator"):
        sim = Simulator(TOPO, jobs, make_contention("profiled"))
    assert "2 job(s) ask for a topology cluster 'tiny-clos' can never give" in caplog.text
    assert "job 'typo'" in caplog.text
    report = sim.run(make_policy("fifo+consolidated"))
    assert (report.jobs, report.finished, report.rejected) == (4, 1, 3)
    assert sim.rejections == {
        "typo": "its topology request: required_level: unknown fabric level 'rack'; this cluster's levels are "
                "nvlink, leaf, spine",
        "odd": "its topology request: the job's 12 GPUs must be a multiple of slice_size (8)",
        "huge": "it asks for 4096 GPUs and the cluster has 64",
    }
    assert {r.job_id for r in report.records if r.rejected} == {"typo", "odd", "huge"}


@pytest.mark.parametrize("request_, gpus, reason", [
    (TopologyRequest(required_level="leaf"), 16, None),
    (TopologyRequest(required_level="leaf"), 17, "17 GPUs inside one leaf domain, and the largest has 16"),
    (TopologyRequest(preferred_level="leaf"), 64, None),  # a preference never refuses
    (TopologyRequest(slice_size=8, slice_level="nvlink"), 64, None),
    (TopologyRequest(slice_size=3, slice_level="nvlink"), 48, None),  # 6 of each NVLink domain's 8, 8 domains
    (TopologyRequest(slice_size=3, slice_level="nvlink"), 51, "the cluster holds at most 48 GPUs so"),
    (TopologyRequest(required_level="leaf", slice_size=3, slice_level="nvlink"), 15,
     "15 GPUs in slices of 3, each inside one nvlink domain, and one leaf domain holds at most 12 GPUs so"),
])
def test_a_request_no_domain_could_ever_hold_is_refused(request_: TopologyRequest, gpus: int, reason: str | None) -> None:
    got = topology_refusal(request_, TOPO, gpus)
    assert (got is None) if reason is None else (reason in got)  # type: ignore[operator]


def test_a_cluster_without_levels_has_rack() -> None:
    testbed = load_topology("testbed")
    assert topology_refusal(TopologyRequest(required_level="rack"), testbed, 8) is None
    assert "unknown fabric level 'leaf'" in topology_refusal(TopologyRequest(required_level="leaf"), testbed, 8)


def test_the_views_carry_the_request() -> None:
    request = TopologyRequest(required_level="leaf")
    jobs = [job("a", 16, request), job("b", 4)]
    sim = Simulator(TOPO, jobs, make_contention("profiled"))
    view = sim.advance()
    assert view is not None
    assert {j.job_id: j.topology for j in view.queued} == {"a": request, "b": NO_TOPOLOGY}
    decision = make_policy("fifo+consolidated").decide(view)
    sim.apply(decision)
    running = {j.job_id: j.topology for j in sim.view().running}
    assert running == {"a": request, "b": NO_TOPOLOGY}
    again = Simulator.from_view(sim.view(), make_contention("profiled"))  # round trip
    assert {j.job_id: j.topology for j in again.view().running} == running


def test_from_view_keeps_a_queued_jobs_request() -> None:
    request = TopologyRequest(slice_size=4, slice_level="nvlink")
    view = build_view(TOPO, default_catalog(), make_contention("profiled"), 0.0, list(TOPO.capacity),
                      [KnownJob("q", "FSDP", 8, 0.0, 600.0, topology=request)], [])
    assert view.queued[0].topology is request
    sim = Simulator.from_view(view, make_contention("profiled"))
    advanced = sim.advance()
    assert advanced is not None and advanced.queued[0].topology == request


# -- the live job spec ---------------------------------------------------------------------------
def test_live_job_spec_fields_build_the_request() -> None:
    from deepshare.runtime.spec import spec_from_json

    base = {"name": "j", "gpus": 16, "model": "FSDP", "entrypoint": "m:f", "checkpoint_dir": "/tmp/c"}
    assert spec_from_json(base).topology is NO_TOPOLOGY
    spec = spec_from_json({**base, "required_level": "leaf", "slice_size": 8, "slice_level": "nvlink"})
    assert spec.topology == TopologyRequest(required_level="leaf", slice_size=8, slice_level="nvlink")
    for bad, where in [({"slice_size": 3, "slice_level": "nvlink"}, "multiple of slice_size"),
                       ({"slice_size": 8}, "go together"),
                       ({"required_level": "leaf", "preferred_level": "leaf"}, "not both"),
                       ({"slice_size": "8", "slice_level": "nvlink"}, "slice_size"),
                       ({"slice_size": 65537, "slice_level": "nvlink"}, "slice_size"),
                       ({"required_level": ""}, "required_level"),
                       ({"preferred_level": "a\x00b"}, "NUL")]:
        with pytest.raises(DeepShareError, match=where):
            spec_from_json({**base, **bad})


def test_a_job_the_simulator_rejects_for_its_topology_has_no_jct_bound():
    from deepshare.core.jct_bound import job_jct_bounds
    from deepshare.core.topology import uniform
    from deepshare.core.types import JobSpec

    jobs = [JobSpec("a", "GraphSage", 2, duration_s=100.0),
            JobSpec("b", "GraphSage", 2, duration_s=100.0, topology=TopologyRequest(required_level="leaf"))]
    bounds = job_jct_bounds(jobs, uniform(2, 4))  # one level, rack: 'leaf' can never be met
    assert bounds[0] is not None and bounds[1] is None
