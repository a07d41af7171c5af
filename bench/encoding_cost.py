"""What a learned decision would cost with a smaller candidate set (issue 37, item 6).

Item 6 asks a learned decision to cost at most 5x ``srsf+packed``'s CPU on the 4,096-node,
10,000-pending request of ``bench/decide_scale.py``. This decides that request with
``rl-hybrid``'s shipped weights under the shipped encoding and under smaller ones (fewer offered
jobs, fewer rows, fewer placement generators), side by side with ``srsf+packed`` in one run, and
prints each one's CPU over the baseline's. The network's inputs do not depend on these knobs, so
the same weights run under each; their decisions differ, so this measures cost only: what a
retrained policy with that encoding would cost at least. Every engine is built and warmed up, and
the heap frozen (as a placement replica does), before anything is timed, so the baseline is timed
in the same process state as the learned policy. Figures only: nothing here asserts a speed.

Usage: python bench/encoding_cost.py [--pending 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from decide_scale import settle

from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import scale_request
from deepshare.serving.schemas import PlacementRequest

VARIANTS: tuple[tuple[str, dict], ...] = (
    ("shipped (5 jobs, 16 rows, 3 generators)", {}),
    ("3 jobs", {"jobs_considered": 3}),
    ("2 generators (consolidated, contention-aware)", {"generators": ("consolidated", "contention-aware")}),
    ("3 jobs, 8 rows, 2 generators", {"jobs_considered": 3, "max_candidates": 8,
                                      "generators": ("consolidated", "contention-aware")}),
    ("2 jobs, 4 rows, 1 generator (consolidated)", {"jobs_considered": 2, "max_candidates": 4,
                                                    "generators": ("consolidated",)}),
)


def cpu_seconds(engine: PlacementEngine, request: PlacementRequest, repeats: int) -> float:
    """Median CPU seconds of this process for one decision of ``request`` (after a warm-up)."""
    engine.place(request)
    spent = []
    for _ in range(repeats):
        start = time.process_time()
        engine.place(request)
        spent.append(time.process_time() - start)
    return statistics.median(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    request = PlacementRequest.model_validate(scale_request(4096, args.pending))
    baseline = PlacementEngine(EngineSettings(policy="srsf+packed"))
    variants = []
    for label, changes in VARIANTS:
        engine = PlacementEngine(EngineSettings(policy="rl-hybrid"))
        policy = engine.policy
        object.__setattr__(policy, "encoding", dataclasses.replace(policy.encoding, **changes))  # frozen dataclass
        variants.append((label, engine))
    settle([baseline, *(engine for _, engine in variants)], 4096)  # one process state for every timing
    base = cpu_seconds(baseline, request, args.repeats)
    print(f"srsf+packed: {base:.3f} s CPU, {args.pending:,} pending on 4,096 nodes (target for a learned decision: <= 5x)")
    for label, engine in variants:
        cpu = cpu_seconds(engine, request, args.repeats)
        print(f"  rl-hybrid, {label:48s} {cpu:6.3f} s CPU  {cpu / base:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
