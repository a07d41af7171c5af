"""Anchors tied at a cell's least average JCT (identical schedules give identical JCTs): the win is
each tied heuristic's, in the JSON, the CLI's caption and the results page alike; the p99 ratio's
denominator is still one anchor, the first by name, whatever the suite's order."""

from __future__ import annotations

import pytest
from rich.console import Console

from deepshare.cli.suite_tables import summary_table
from deepshare.experiments.results_page import policy_rows
from deepshare.experiments.suite import SuiteResult, SuiteSpec, cells

RUNS = [  # (las+consolidated, srsf+packed, p): (avg JCT, p99 JCT) per cell
    {"las+consolidated": (100.0, 280.0), "srsf+packed": (100.0, 320.0), "p": (90.0, 350.0)},  # a tie at 100 s
    {"las+consolidated": (200.0, 400.0), "srsf+packed": (150.0, 330.0), "p": (165.0, 330.0)},
]


def _result(heuristics: tuple[str, ...]) -> SuiteResult:
    spec = SuiteSpec(name="t", jobs_per_node=4, loads=(0.7, 1.3), mixes=("heavy",), clusters=((2, 8),),
                     contention=("profiled",), seeds=1, durations=("exact",), heuristics=heuristics, learned=("p",))
    grid = cells(spec)
    assert len(grid) == 2
    return SuiteResult(spec, {cell: {p: {"avg_jct_s": a, "p99_jct_s": q, "gpu_util": 0.5, "useful_util": 0.5,
                                         "makespan_s": 900.0} for p, (a, q) in runs.items()}
                              for cell, runs in zip(grid, RUNS)})


@pytest.mark.parametrize("heuristics", [("srsf+packed", "las+consolidated"), ("las+consolidated", "srsf+packed")])
def test_a_tie_is_a_win_for_each_tied_heuristic_and_the_p99_denominator_is_the_first_by_name(heuristics) -> None:
    result = _result(heuristics)
    tied, alone = sorted(result.results)
    assert result.best_heuristic(tied) == "las+consolidated"  # whatever the suite's order
    assert result.ratios(tied, "p") == (0.9, 1.25)  # 90 / 100 and 350 / las+consolidated's 280
    doc = result.to_json()
    assert doc["heuristic_wins"] == {"srsf+packed": 2, "las+consolidated": 1}  # was 1 and 1: the tie went to las
    assert doc["heuristic_wins_by_durations"] == {"exact": {"srsf+packed": 2, "las+consolidated": 1}}
    page = {r["policy"]: r["won"] for r in policy_rows(doc)}  # "cells at or below the best"
    assert page == {"srsf+packed": 2, "las+consolidated": 1, "p": 1}
    console = Console(width=400, record=True)
    console.print(summary_table(result))
    assert "best heuristic of a cell (cells; a tie counts for each tied heuristic): exact: srsf+packed 2, " \
           "las+consolidated 1;" in console.export_text()
    assert result.tied_best(tied) == list(heuristics) and result.tied_best(alone) == ["srsf+packed"]


def test_anchors_with_no_average_jct_are_not_tied_and_win_nothing() -> None:
    """Every anchor's average JCT None (no job finished) matched None == None: each was counted a win."""
    result = _result(("srsf+packed", "las+consolidated"))
    tied, alone = sorted(result.results)
    for anchor in ("srsf+packed", "las+consolidated"):
        result.results[tied][anchor]["avg_jct_s"] = None
    assert result.tied_best(tied) == []
    assert result.heuristic_wins() == {"srsf+packed": 1, "las+consolidated": 0}
