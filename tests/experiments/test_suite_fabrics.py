"""Suites on cluster presets (``fabrics``) with gang demand and topology requests."""

from __future__ import annotations

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY
from deepshare.core.topology import load_topology
from deepshare.experiments.suite import (
    FABRIC_METRICS, METRICS, SUITE_SEED_BASE, Cell, cell_bound, cell_topology, cell_trace, cells, load_suite, run_one,
)

GANGS = """
name: gangs
jobs_per_node: 1
loads: [1.0]
mixes: [heavy]
clusters: []
fabrics: [h100-leafspine-2to1]
contention: [link]
seeds: 1
durations: [estimated]
demand: "8:1,16:2,64:1"
required_level: leaf
required_share: 0.5
heuristics: [srsf+topo-bestfit]
"""


@pytest.fixture()
def gangs(tmp_path):
    path = tmp_path / "gangs.yaml"
    path.write_text(GANGS)
    return load_suite(str(path))


@pytest.fixture()
def flat_and_fabric(gangs):
    """The gangs suite on a flat 8x8 cluster beside the preset, without topology requests (a flat
    cluster has no leaves: a suite asking for one there is refused)."""
    return gangs.model_copy(update={"clusters": ((8, 8),), "required_level": None, "required_share": None})


def test_a_preset_is_a_cell_of_its_own_with_its_size_and_name(flat_and_fabric):
    grid = cells(flat_and_fabric)
    assert [(c.cluster, c.nodes, c.gpus_per_node) for c in grid] == [("", 8, 8), ("h100-leafspine-2to1", 64, 8)]
    fabric_cell = grid[1]
    assert "h100-leafspine-2to1" in fabric_cell.label and "64x8" not in fabric_cell.label
    assert cell_topology(fabric_cell) == load_topology("h100-leafspine-2to1")
    assert Cell.from_key(fabric_cell.key()) == fabric_cell
    assert "cluster" not in grid[0].key()  # the testbed cells' JSON keys are as before


def test_a_preset_cells_trace_has_the_suites_demand_and_requests(gangs):
    cell = cells(gangs)[0]
    jobs = cell_trace(gangs, cell)
    assert len(jobs) == 64  # jobs_per_node x the preset's nodes
    assert {j.gpus for j in jobs} <= {8, 16, 64}
    required = [j for j in jobs if j.topology is not NO_TOPOLOGY]
    assert required and all(j.topology.required_level == "leaf" for j in required)
    assert 0.25 < len(required) / len(jobs) < 0.75


def test_a_preset_cell_keeps_the_fabric_metrics(gangs, flat_and_fabric):
    cell = cells(gangs)[0]
    got = run_one(gangs, cell, "srsf+topo-bestfit")
    assert set(got) == {*METRICS, *FABRIC_METRICS, "cross_domain_share_leaf", "cross_domain_share_spine", "rejected"}
    assert got["finished"] == 64 and got["rejected"] == 0
    # a required-leaf job never spans two leaves, so only the others can cross
    assert 0 <= got["cross_domain_share_leaf"] < 1 and got["cross_domain_share_spine"] == 0
    assert cell_bound(gangs, cell) > 0
    plain = run_one(flat_and_fabric, cells(flat_and_fabric)[0], "srsf+topo-bestfit")
    assert set(plain) == set(METRICS)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("heuristics: [fifo+packed]\nfabrics: [nowhere]", "fabrics"),
        ("heuristics: [fifo+packed]\nfabrics: [testbed, testbed]", "fabrics"),
        ("heuristics: [fifo+packed]\nclusters: []", "expected one or more clusters or fabrics"),
        ("heuristics: [fifo+packed]\ndemand: '3:x'", "demand"),
        ("heuristics: [fifo+packed]\nclusters: [[2, 8]]\ndemand: '8:1,64:1'", "demand: GPU demand"),
        ("heuristics: [fifo+packed]\nrequired_level: leaf", "required_level and required_share"),
        ("heuristics: [fifo+packed]\npreferred_share: 0.2", "preferred_level and preferred_share"),
        ("heuristics: [fifo+packed]\nrequired_share: 2\nrequired_level: leaf", "required_share"),
        ("heuristics: [fifo+packed]\nrequired_level: leaf\nrequired_share: 0.7\npreferred_level: leaf\n"
         "preferred_share: 0.4", "required_share plus preferred_share must be at most 1"),
        ("heuristics: [fifo+packed]\nrequired_level: ' leaf'\nrequired_share: 0.3", "required_level must be a level's name"),
        # a flat cluster's one level is its racks: every job asking for a leaf would be rejected there
        ("heuristics: [fifo+packed]\nclusters: [[8, 8]]\nfabrics: [h100-leafspine-2to1]\nrequired_level: leaf\n"
         "required_share: 0.3", "required_level: 'leaf' is not a level of cluster 8x8 (its levels: rack)"),
        ("heuristics: [fifo+packed]\nclusters: []\nfabrics: [h100-leafspine-2to1, clos3-256]\n"
         "preferred_level: spine\npreferred_share: 0.3", "preferred_level: 'spine' is not a level of cluster clos3-256"),
    ],
)
def test_bad_fabric_fields_name_the_field(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DeepShareError) as info:
        load_suite(str(path))
    assert expected in str(info.value)


def test_the_pooled_ideal_drops_topology_requests(gangs):
    from deepshare.experiments.suite import cell_pooled_ideal

    cell = cells(gangs)[0]
    assert cell_pooled_ideal(gangs, cell) > 0


def test_seeds_stay_above_training(gangs):
    assert all(c.seed >= SUITE_SEED_BASE for c in cells(gangs))


def test_challengers_are_judged_against_the_best_anchor(tmp_path, capsys):
    import json

    from deepshare.cli import main

    path = tmp_path / "challenge.yaml"
    path.write_text(GANGS.replace("clusters: [[8, 8]]", "clusters: []").replace(
        "heuristics: [srsf+topo-bestfit]",
        "heuristics: [srsf+topo-bestfit, srsf+topo-balanced, srsf+topo-bestfit+preempt]\n"
        "challengers: [srsf+topo-bestfit+preempt]"))
    out = tmp_path / "c.json"
    assert main(["evaluate", "--suite", str(path), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    (cell,) = doc["cells"]
    results = cell["results"]
    anchors = ("srsf+topo-bestfit", "srsf+topo-balanced")
    best = min(anchors, key=lambda p: (results[p]["avg_jct_s"], p))
    assert cell["best_heuristic"] == best  # never the challenger, even when it is faster
    mine = results["srsf+topo-bestfit+preempt"]["avg_jct_s"]
    assert cell["ratios"]["srsf+topo-bestfit+preempt"]["avg_jct"] == pytest.approx(mine / results[best]["avg_jct_s"])
    assert doc["summary"]["srsf+topo-bestfit+preempt"]["cells"] == 1
    assert set(doc["heuristic_wins"]) == set(anchors)
    printed = " ".join(capsys.readouterr().out.split())
    assert "challengers vs the best anchor heuristic" in printed and ": the fabric" in printed
    assert "cross leaf" in printed


@pytest.mark.parametrize(
    "text, expected",
    [
        ("heuristics: [fifo+packed]\nchallengers: [srsf+packed]", "challengers: ['srsf+packed'] are not listed"),
        ("heuristics: [fifo+packed]\nchallengers: [fifo+packed]", "at least one heuristic must stay an anchor"),
    ],
)
def test_bad_challengers_name_the_field(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DeepShareError) as info:
        load_suite(str(path))
    assert expected in str(info.value)


def test_the_bundled_fabric_suite_judges_challengers_against_the_anchor_style_heuristics():
    spec = load_suite("fabric")
    grid = cells(spec)
    assert len(grid) == 16 and {c.cluster for c in grid} == {
        "gb200-nvl72-4", "h100-leafspine-1to1", "h100-leafspine-2to1", "clos3-256"}
    assert {c.durations for c in grid} == {"estimated"} and {c.contention for c in grid} == {"link"}
    # the anchors are what Kueue, KAI and Slurm do: no prediction of contention, no preemption
    assert all("topo-aware" not in a and not a.endswith("+preempt") for a in spec.anchors)
    assert {"srsf+topo-bestfit", "srsf+topo-balanced", "srsf+topo-bestfit+backfill"} <= set(spec.anchors)
    assert "srsf+topo-aware+preempt" in spec.challengers and "srsf+topo-bestfit+preempt" in spec.challengers
    for cell in grid[:1]:
        jobs = cell_trace(spec, cell)
        assert len(jobs) == 3 * cell.nodes and max(j.gpus for j in jobs) <= 128
