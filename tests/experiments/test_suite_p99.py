"""A suite's p99 is taken over tens to a few hundred jobs per trace: one of the few longest jobs
sets it, and the tables say so (jobs per trace and which longest jobs) beside the figures."""

from __future__ import annotations

import numpy as np
from rich.console import Console

from deepshare.cli.suite_tables import cell_tables, p99_note, p99_ranks, summary_table
from deepshare.experiments.suite import SuiteResult, SuiteSpec, cells


def test_the_ranks_are_those_numpy_interpolates_between() -> None:
    for jobs in (2, 32, 80, 101, 216, 1000):
        jcts = np.arange(1, jobs + 1)  # the k-th longest is jobs - k + 1
        first, second = p99_ranks(jobs)
        assert jobs - second + 1 <= np.percentile(jcts, 99) <= jobs - first + 1
    assert p99_ranks(32) == (1, 2) and p99_ranks(216) == (3, 4)
    assert p99_note([32]) == "p99 JCT: of 32 jobs per trace, set by the 1st-2nd longest jobs"
    assert p99_note([80, 216]) == "p99 JCT: of 80-216 jobs per trace, set by the 1st-4th longest jobs"


def test_the_cell_and_summary_tables_say_how_many_jobs_a_p99_is_of() -> None:
    spec = SuiteSpec(name="t", jobs_per_node=4, loads=(0.7,), mixes=("heavy",), clusters=((2, 8), (8, 8)),
                     contention=("profiled",), seeds=1, durations=("exact",), heuristics=("srsf+packed",), learned=("p",))
    figures = {"avg_jct_s": 100.0, "p99_jct_s": 300.0, "gpu_util": 0.5, "useful_util": 0.5, "makespan_s": 900.0}
    result = SuiteResult(spec, {cell: {"srsf+packed": figures, "p": figures} for cell in cells(spec)})

    def text(table) -> str:  # type: ignore[no-untyped-def]
        console = Console(width=300, record=True)
        console.print(table)
        return console.export_text()

    small, large = (text(t) for t in cell_tables(result))
    assert "p99 JCT: of 8 jobs per trace, set by the 1st-2nd longest jobs" in small
    assert "p99 JCT: of 32 jobs per trace" in large
    assert "p99 JCT: of 8-32 jobs per trace, set by the 1st-2nd longest jobs" in text(summary_table(result))
