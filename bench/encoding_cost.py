"""What a learned decision would cost with a smaller candidate set (issue 37, item 6).

Item 6 asks a learned decision to cost at most 5x ``srsf+packed``'s CPU on the 4,096-node,
10,000-pending request of ``bench/decide_scale.py``. This decides that request with
``rl-hybrid``'s shipped weights, its anchor streak set to 1 (one launch per scored step), under
the shipped encoding and under smaller ones (fewer offered
jobs, fewer rows, fewer placement generators), side by side with ``srsf+packed`` in one run, and
prints each one's CPU over the baseline's. The network's inputs do not depend on these knobs, so
the same weights run under each; their decisions differ, so this measures cost only: what a
retrained policy with that encoding would cost at least. Every engine is built and warmed up, and
the heap frozen (as a placement replica does), before anything is timed, so the baseline is timed
in the same process state as the learned policy; the baseline and every variant are then decided
in turn, ``--repeats`` rounds, each round starting one engine later (as
``decide_scale.interleaved``), and each figure is the median of its rounds. Figures only: nothing
here asserts a speed.

The last rows measure a redesign rather than a smaller encoding: several launches per scored
step (``--launches K``, say 2, 4, 8). After one forward pass the rows are taken best score first,
each launched when its job is not launched yet and its GPUs are still free, until K launches or
no row is left; a step whose best row is wait goes through the policy's own
:func:`~deepshare.policies.learned.take` (the safety net). Rows scored below wait are taken too:
the shipped network imitates one launch a step and ranks only the anchor's launch above wait, so
stopping at wait would take one launch a step, whatever K. These decisions are not the shipped
policy's: this is what a policy trained to launch several rows a step would cost at least.

The ``--streaks`` rows measure what ``rl-hybrid`` ships as a rule instead: its shipped network
and encoding with :attr:`~deepshare.policies.learned.HybridRules.anchor_streak` set to each K (a
chosen anchor row makes up to K of the anchor's launches, scored once). On this request the
network chooses its anchor at every step, so each K decides as K = 1 does (checked, and printed).

Usage: python bench/encoding_cost.py [--pending 10000] [--repeats 3] [--launches 2,4,8] [--streaks 1,2,4,8]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from decide_scale import settle, time_one

from typing import Generator

import numpy as np

from deepshare.core.interrupt import checkpoint
from deepshare.core.types import WAIT, Decision
from deepshare.core.view import ClusterView
from deepshare.policies.base import Observation
from deepshare.policies.encoding import PartialDecision, encode
from deepshare.policies.learned import LearnedPolicy, best_row, drive, take
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import scale_request
from deepshare.serving.schemas import PlacementRequest

VARIANTS: tuple[tuple[str, dict], ...] = (
    ("shipped encoding (5 jobs, 16 rows, 3 generators)", {}),
    ("3 jobs", {"jobs_considered": 3}),
    ("2 generators (consolidated, contention-aware)", {"generators": ("consolidated", "contention-aware")}),
    ("3 jobs, 8 rows, 2 generators", {"jobs_considered": 3, "max_candidates": 8,
                                      "generators": ("consolidated", "contention-aware")}),
    ("2 jobs, 4 rows, 1 generator (consolidated)", {"jobs_considered": 2, "max_candidates": 4,
                                                    "generators": ("consolidated",)}),
)


class MultiLaunch:
    """``policy`` with up to ``k`` launches per scored step (module docstring), as a policy."""

    def __init__(self, policy: LearnedPolicy, k: int) -> None:
        self.policy, self.k = policy, k
        self.name = policy.name

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.policy, name)

    def decide(self, view: ClusterView) -> Decision:
        return drive(self.steps(view), self.policy.scorer, checkpoint)

    def steps(self, view: ClusterView) -> Generator[Observation, np.ndarray, Decision]:
        policy, partial = self.policy, PartialDecision(view)
        while True:
            obs, rows = encode(partial, policy.encoding)
            if len(rows) == 1:
                break
            scores = yield obs
            mask = obs["action_mask"]
            best = best_row(scores, mask)
            if rows[best].job is None:  # wait first: the policy's own rule (the safety net)
                step = take(partial, rows, mask, best, policy.hybrid)
                if step.launched is None:
                    break
                partial = step.partial
                continue
            jobs: set[str] = set()
            for row in sorted((r for r in range(len(rows)) if mask[r] > 0), key=lambda r: -scores[r]):
                job, placement = rows[row]
                if len(jobs) == self.k:
                    break
                if job is None or job.job_id in jobs:
                    continue  # wait (taken only as the best row), or a job launched already
                free = partial.state().free  # advanced in place to the launches made so far
                if any(free[n] < g for n, g in placement.alloc):
                    continue
                jobs.add(job.job_id)
                partial = partial.with_launch(job, placement)
        return partial.decision if partial.count else WAIT


def cpu_in_rounds(engines: list[PlacementEngine], request: PlacementRequest, repeats: int) -> list[float]:
    """Each engine's median CPU seconds (this process) for one decision of ``request``: after a
    warm-up decision each, ``repeats`` rounds in which every engine decides once, each round
    starting one engine later, so that a change of the machine's load hits them alike and no
    engine is always timed right after the same one."""
    for engine in engines:
        engine.place(request)
    spent: list[list[float]] = [[] for _ in engines]
    order = list(range(len(engines)))
    for round_ in range(max(1, repeats)):
        shift = round_ % len(order) if order else 0
        for i in order[shift:] + order[:shift]:
            spent[i].append(time_one(engines[i], request)[1])
    return [statistics.median(cpus) for cpus in spent]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--launches", default="2,4,8", help="launches per scored step to measure, comma-separated")
    parser.add_argument("--streaks", default="1,2,4,8", help="rl-hybrid's anchor_streak values to measure, comma-separated")
    args = parser.parse_args()
    request = PlacementRequest.model_validate(scale_request(4096, args.pending))
    baseline = PlacementEngine(EngineSettings(policy="srsf+packed"))
    variants = []
    for label, changes in VARIANTS:  # one launch a scored step: the streak at 1
        engine = streak_of(PlacementEngine(EngineSettings(policy="rl-hybrid")), 1)
        policy = engine.policy
        object.__setattr__(policy, "encoding", dataclasses.replace(policy.encoding, **changes))  # frozen dataclass
        variants.append((label, engine))
    for k in (int(x) for x in args.launches.split(",") if x.strip()):
        engine = streak_of(PlacementEngine(EngineSettings(policy="rl-hybrid")), 1)
        engine.policy = MultiLaunch(engine.policy, k)
        variants.append((f"shipped encoding, up to {k} launches a step", engine))
    for k in (int(x) for x in args.streaks.split(",") if x.strip()):
        variants.append((f"shipped, anchor_streak {k}", streak_of(PlacementEngine(EngineSettings(policy="rl-hybrid")), k)))
    settle([baseline, *(engine for _, engine in variants)], 4096)  # one process state for every timing
    base, *cpus = cpu_in_rounds([baseline, *(engine for _, engine in variants)], request, args.repeats)
    print(f"srsf+packed: {base:.3f} s CPU, {args.pending:,} pending on 4,096 nodes (target for a learned decision: <= 5x);"
          f" medians of {max(1, args.repeats)} interleaved rounds")
    every_step = None  # rl-hybrid's decisions of the request with the network asked at every launch
    for (label, engine), cpu in zip(variants, cpus):
        note = ""
        if "anchor_streak" in label:
            if every_step is None:
                every_step = streak_of(PlacementEngine(EngineSettings(policy="rl-hybrid")), 1).place(request).decisions
            same = engine.place(request).decisions == every_step
            note = "  (decides as anchor_streak 1)" if same else "  (decides otherwise than anchor_streak 1)"
        print(f"  rl-hybrid, {label:48s} {cpu:6.3f} s CPU  {cpu / base:5.2f}x{note}", flush=True)


def streak_of(engine: PlacementEngine, k: int) -> PlacementEngine:
    """``engine`` with its rl-hybrid's ``anchor_streak`` set to ``k``."""
    object.__setattr__(engine.policy, "hybrid", dataclasses.replace(engine.policy.hybrid, anchor_streak=k))  # frozen
    return engine

if __name__ == "__main__":
    main()
