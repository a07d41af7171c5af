"""What the anchor streak changes in the shipped learned policies' decisions (issue 37, item 6).

``rl-hybrid`` and ``rl-hybrid-preempt`` ship with ``hybrid_rules.anchor_streak`` above 1 (a chosen
anchor row makes several of the anchor's launches, scored once), which is what keeps a decision
of thousands of launches within 5x ``srsf+packed``'s CPU (``bench/decide_scale.py``). This runs
each suite's cells for both policies as shipped and with their streak set to 1 (the same files
with that one rule changed, written to a temporary folder), and prints per suite and policy: the
cells, those where the average JCT is identical, and the geometric mean, best and worst cell of
shipped / streak-1 average JCT and the worst cell's p99 ratio (each also in ``--json``).
Heuristics are not run: this compares a policy with itself, and the suites' own runs
(``deepshare evaluate --suite``) compare it with the heuristics. Figures only: nothing here
asserts anything.

Usage: python bench/anchor_streak.py [--suites loaded,quick,fabric,tenants-learned] [--workers 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import torch
from record import Record, add_json_flag

from deepshare.experiments.suite_cells import cells
from deepshare.experiments.suite_runs import run_policies
from deepshare.experiments.suite_spec import load_suite
from deepshare.policies import make_policy
from deepshare.policies.checkpoint import SHIPPED, SHIPPED_PREEMPT, shipped

POLICIES = {"rl-hybrid": SHIPPED, "rl-hybrid-preempt": SHIPPED_PREEMPT}


def streak_one(name: str, file: str, folder: Path) -> str:
    """``NAME=PATH`` of a copy of the shipped ``file`` whose ``anchor_streak`` is 1."""
    data = torch.load(shipped(file), map_location="cpu", weights_only=True)
    data["metadata"] = {**data["metadata"], "hybrid_rules": {**data["metadata"].get("hybrid_rules", {}), "anchor_streak": 1}}
    path = folder / file
    torch.save(data, path)
    spec = f"{name}={path}"
    assert streak_of(spec) == 1
    return spec


def streak_of(name: str) -> int:
    """The ``anchor_streak`` the learned policy ``name`` decides with (rl-hybrid-preempt's network's)."""
    policy = make_policy(name)
    return getattr(policy, "learned", policy).hybrid.anchor_streak  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default="loaded,quick,fabric,tenants-learned")
    parser.add_argument("--workers", type=int, default=2)
    add_json_flag(parser)
    args = parser.parse_args()
    record = Record("anchor_streak", args.json)
    for name in POLICIES:
        print(f"{name} ships anchor_streak {streak_of(name)}")
    with tempfile.TemporaryDirectory(prefix="deepshare-streak-") as tmp:
        variants = {name: streak_one(name, file, Path(tmp)) for name, file in POLICIES.items()}
        for suite in (s.strip() for s in args.suites.split(",") if s.strip()):
            spec = load_suite(suite)
            grid = cells(spec)
            results = run_policies(spec, grid, [*POLICIES, *variants.values()], args.workers)
            for name, variant in variants.items():
                ratios, p99s, failed = [], [], 0
                for cell in grid:
                    shipped_run, one = results[cell][name], results[cell][variant]
                    if shipped_run["avg_jct_s"] is None or one["avg_jct_s"] is None:
                        failed += 1
                        print(f"  {name} on {cell.label}: a run failed: {shipped_run.get('error') or one.get('error')}")
                        continue
                    ratios.append(shipped_run["avg_jct_s"] / one["avg_jct_s"])  # type: ignore[operator]
                    p99s.append(shipped_run["p99_jct_s"] / one["p99_jct_s"])  # type: ignore[operator]
                if not ratios:
                    continue
                same = sum(r == 1.0 for r in ratios)
                geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
                print(f"{suite:16s} {name:18s} cells {len(ratios):3d} ({failed} failed), identical avg JCT {same:3d}; shipped / streak 1: "
                      f"geomean {geo:.4f}, best {min(ratios):.4f}, worst {max(ratios):.4f}, worst p99 {max(p99s):.4f}",
                      flush=True)
                record.add(f"{name} on {suite}: cells with the same average JCT as streak 1 (of {len(ratios)} run)", same, "cells")
                record.add(f"{name} on {suite}: average JCT, shipped over streak 1 (geometric mean)", geo, "x")
                record.add(f"{name} on {suite}: best cell, shipped over streak 1", min(ratios), "x")
                record.add(f"{name} on {suite}: worst cell, shipped over streak 1", max(ratios), "x")
                record.add(f"{name} on {suite}: worst cell by p99 JCT, shipped over streak 1", max(p99s), "x")
                record.write(quiet=True)
    record.write()


if __name__ == "__main__":
    main()
