"""The fabric target's table, generated with the results page (it was pasted into docs/fabrics.md
by hand from ``bench/fabric_target.py``'s output)."""

from __future__ import annotations

import pytest

from deepshare.experiments.results_fabric import AWARE, BESTFIT, OURS, PREEMPT_ONLY, fabric_rows, fabric_section
from deepshare.experiments.results_page import suite_section

ANCHORS = ("srsf+topo-bestfit+backfill", "srsf+consolidated")


def _cell(cluster: str, seed: int, jct: dict[str, float | None]) -> dict:
    return {"cluster": cluster, "mix": "llm", "seed": 100 + seed, "best_heuristic": min(
        (a for a in ANCHORS if jct.get(a)), key=lambda a: jct[a]),
            "results": {p: {"avg_jct_s": v, "avg_slowdown": 1.01 if v else None} for p, v in jct.items()}}


def _doc(cells: list[dict]) -> dict:
    return {"suite": {"heuristics": [*ANCHORS, BESTFIT, AWARE, PREEMPT_ONLY, OURS],
                      "challengers": [BESTFIT, AWARE, PREEMPT_ONLY, OURS]},
            "seed_base": 100, "cells": cells}


def test_each_cell_is_ours_and_its_parts_over_the_cells_best_anchor_with_the_verdict() -> None:
    """Two cells by hand: clos3-256 (oversubscribed 4:1) and gb200-nvl72-4 (not). In the first the
    best anchor is srsf+consolidated at 100 s: ours 80 / 100 = 0.800, preemption alone 90 / 100,
    aware / bestfit 120 / 150 = 0.800, with preemption 80 / 90 = 0.889. Over the one oversubscribed
    cell the geometric mean is 0.800: the target (at most 0.90, no cell above 1) is met."""
    doc = _doc([
        _cell("clos3-256", 0, {ANCHORS[0]: 110.0, ANCHORS[1]: 100.0, BESTFIT: 150.0, AWARE: 120.0,
                               PREEMPT_ONLY: 90.0, OURS: 80.0}),
        _cell("gb200-nvl72-4", 1, {ANCHORS[0]: 200.0, ANCHORS[1]: 250.0, BESTFIT: 200.0, AWARE: 200.0,
                                   PREEMPT_ONLY: 250.0, OURS: 250.0}),
    ])
    rows, left_out = fabric_rows(doc)
    assert left_out == []
    assert [(r["cell"], r["oversubscribed"], r["best_anchor"]) for r in rows] == [
        ("clos3-256 llm seed 0", True, "srsf+consolidated"), ("gb200-nvl72-4 llm seed 1", False, ANCHORS[0])]
    assert [round(rows[0][k], 3) for k in ("ours", "preempt_only", "aware_vs_bestfit", "aware_vs_bestfit_preempt")] \
        == [0.8, 0.9, 0.8, 0.889]
    lines = fabric_section(doc)
    assert "| clos3-256 llm seed 0 | yes | `srsf+consolidated` (100) | 0.800 | 0.900 | 0.800 | 0.889 | 1.0100 |" in lines
    assert "| gb200-nvl72-4 llm seed 1 | no | `srsf+topo-bestfit+backfill` (200) | 1.250 | 1.250 | 1.000 | 1.000 | 1.0100 |" \
        in lines
    assert any(line.startswith("- Oversubscribed cells (1): ours / best anchor, geometric mean 0.800 (worst 0.800)")
               for line in lines)
    assert any(line.startswith("- All cells (2): ours / best anchor, geometric mean 1.000 (worst 1.250)") for line in lines)
    assert lines[-1] == "- Target (oversubscribed cells: geometric mean at most 0.90, no cell worse than 1): met."


@pytest.mark.parametrize("ours, verdict", [(95.0, "not met"), (101.0, "not met"), (90.0, "met")])
def test_the_verdict_needs_the_geomean_and_no_oversubscribed_cell_worse(ours: float, verdict: str) -> None:
    doc = _doc([_cell("h100-leafspine-2to1", 0, {ANCHORS[0]: 100.0, ANCHORS[1]: 120.0, BESTFIT: 100.0, AWARE: 100.0,
                                                 PREEMPT_ONLY: 100.0, OURS: ours})])
    assert fabric_section(doc)[-1].endswith(f"no cell worse than 1): {verdict}.")


def test_a_cell_with_a_failed_anchor_is_left_out_and_named() -> None:
    doc = _doc([_cell("clos3-256", 0, {ANCHORS[0]: None, ANCHORS[1]: 100.0, BESTFIT: 150.0, AWARE: 120.0,
                                       PREEMPT_ONLY: 90.0, OURS: 80.0})])
    rows, left_out = fabric_rows(doc)
    assert rows == [] and left_out == ["clos3-256 llm seed 0 (no run of srsf+topo-bestfit+backfill)"]
    assert fabric_section(doc)[-1] == "- Left out: clos3-256 llm seed 0 (no run of srsf+topo-bestfit+backfill)."


def test_a_suite_without_the_compared_policies_gets_no_fabric_table() -> None:
    doc = _doc([])
    doc["suite"]["heuristics"] = list(ANCHORS)
    assert fabric_section(doc) == []
    assert "Fabric target" not in suite_section("x", {**doc, "cells": []})


def test_a_flat_cluster_cell_is_named_by_its_size_and_never_oversubscribed() -> None:
    cell = _cell("x", 0, {ANCHORS[0]: 100.0, ANCHORS[1]: 120.0, BESTFIT: 100.0, AWARE: 100.0,
                          PREEMPT_ONLY: 100.0, OURS: 90.0})
    del cell["cluster"]
    cell.update(nodes=16, gpus_per_node=8)
    rows, _ = fabric_rows(_doc([cell]))
    assert [(r["cell"], r["oversubscribed"], round(r["ours"], 3)) for r in rows] == [("16x8 llm seed 0", False, 0.9)]
    assert fabric_section(_doc([cell]))[-1].endswith("no cell worse than 1): not met.")  # no oversubscribed cell
