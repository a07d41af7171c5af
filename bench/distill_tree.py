"""What the shipped learned policy learned, as a small decision tree.

Plays a learned policy (default ``rl-hybrid-preempt``) on a suite's cells under one information
model (default ``loaded`` under ``estimated``), records every choice its network makes (the
candidate rows' features and the row it took), and fits a depth-limited decision tree
(scikit-learn) that says, from a row's features *without* the ``is_anchor`` column, whether the
network takes it. It prints:

* the tree as rules, and how often its best row is the network's row (fidelity);
* the tree run as the policy's network (the same preemptive heuristic and rules around it) on the
  same cells, beside the policy itself and the best of the field's baselines of each cell (every
  heuristic the suite lists but ``bsrsf``'s, run here on the same cells as the suite runs them):
  the share of the policy's gain over that baseline the tree keeps. Every figure comes from this
  run, at this commit.

``--json PATH`` writes these figures, with the run's date, commit and machine (``provenance``),
whole (a temporary file and a rename).

Usage: python bench/distill_tree.py [--suite loaded] [--policy rl-hybrid-preempt]
       [--durations estimated] [--depth 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

import numpy as np

from record import check_output, write_output

from deepshare.core.errors import DeepShareError
from deepshare.core.simulator import Simulator
from deepshare.experiments.provenance import provenance_at_write, run_provenance
from deepshare.experiments.suite import cell_contention, cell_topology, cell_trace, cells, load_suite
from deepshare.experiments.suite_spec import suite_tenants
from deepshare.policies import make_policy

OWN = "bsrsf"
"""The order that is not a field baseline (this project's)."""


class Recording:
    """A scorer that records what the wrapped one sees and which unmasked row it scores best."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.rows: list[np.ndarray] = []
        self.chosen: list[int] = []

    def __call__(self, obs):  # type: ignore[no-untyped-def]
        scores = np.asarray(self.inner(obs), dtype=np.float64)
        mask = obs["action_mask"] > 0
        masked = np.where(mask, scores, -np.inf)
        self.rows.append(obs["observations"][mask])
        self.chosen.append(int(np.flatnonzero(mask).tolist().index(int(np.argmax(masked)))))
        return scores


class TreeScorer:
    """A fitted tree as a scorer: each row's probability of being the network's choice."""

    def __init__(self, tree, columns: list[int]) -> None:  # type: ignore[no-untyped-def]
        self.tree, self.columns = tree, columns

    def __call__(self, obs):  # type: ignore[no-untyped-def]
        proba = self.tree.predict_proba(obs["observations"][:, self.columns])
        return proba[:, 1] if proba.shape[1] > 1 else np.zeros(len(proba))


def with_scorer(policy, scorer):  # type: ignore[no-untyped-def]
    """``policy`` (a learned policy or a preemptive hybrid) with its network's scorer replaced."""
    learned = getattr(policy, "learned", None)
    if learned is not None:
        return replace(policy, learned=replace(learned, scorer=scorer))
    return replace(policy, scorer=scorer)


def run(spec, cell, policy):  # type: ignore[no-untyped-def]
    """``policy``'s average JCT on ``cell`` as the suite runs it (``run_one``): the cell's own cluster
    (a fabric preset or uniform nodes), its contention (perturbed where the suite says so), its
    information model, and behind the suite's tenants' admission when it names a tenants file."""
    jobs, tenants = cell_trace(spec, cell), suite_tenants(spec)
    if tenants is not None:
        from deepshare.tenants import admitted

        tenants.check_jobs(jobs)
        policy = admitted(policy, tenants)
    sim = Simulator(cell_topology(cell), jobs, cell_contention(spec, cell), information=cell.information(spec))
    return sim.run(policy).avg_jct_s


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    from sklearn.tree import DecisionTreeClassifier, export_text

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="loaded", help="the suite whose cells are played (a name or a YAML path)")
    parser.add_argument("--policy", default="rl-hybrid-preempt")
    parser.add_argument("--durations", default="estimated")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()
    check_output(args.json, "--json")
    provenance = run_provenance(["python", *sys.argv])  # taken at the start: the load the run met
    try:
        spec = load_suite(args.suite, check_learned=False)
    except DeepShareError as exc:
        raise SystemExit(f"error: {exc}") from None
    grid = [c for c in cells(spec) if c.durations == args.durations]
    if not grid:
        raise SystemExit(f"error: --durations {args.durations}: suite {spec.name} has no such cells "
                         f"(its durations: {', '.join(spec.durations)})")
    field = [h for h in spec.heuristics if not h.startswith(OWN + "+")]

    policy = make_policy(args.policy)
    learned = getattr(policy, "learned", policy)
    names = list(learned.encoding.features)
    recorder = Recording(learned.scorer)
    recorded = with_scorer(policy, recorder)
    mine = [run(spec, cell, recorded) for cell in grid]
    columns = [i for i, n in enumerate(names) if n != "is_anchor"]
    x = np.concatenate([rows[:, columns] for rows in recorder.rows])
    y = np.concatenate([np.eye(len(rows))[chosen] for rows, chosen in zip(recorder.rows, recorder.chosen)])
    tree = DecisionTreeClassifier(max_depth=args.depth, class_weight="balanced", random_state=0).fit(x, y)
    tree_scorer = TreeScorer(tree, columns)
    agree = float(np.mean([int(np.argmax(tree.predict_proba(rows[:, columns])[:, 1])) == chosen
                           for rows, chosen in zip(recorder.rows, recorder.chosen)]))
    distilled = with_scorer(policy, tree_scorer)
    theirs = [run(spec, cell, distilled) for cell in grid]
    best_field = [min(run(spec, cell, make_policy(h)) for h in field) for cell in grid]
    policy_ratio = geomean([m / b for m, b in zip(mine, best_field)])
    tree_ratio = geomean([t / b for t, b in zip(theirs, best_field)])
    kept = (1 - tree_ratio) / (1 - policy_ratio) if policy_ratio < 1 else float("nan")
    rules = export_text(tree, feature_names=[names[i] for i in columns], decimals=3)
    print(rules)
    print(f"{len(recorder.chosen):,} choices on {len(grid)} cells ({args.durations}); the tree picks the network's row in "
          f"{agree:.1%} of them")
    print(f"average JCT / best field baseline (geomean): {args.policy} {policy_ratio:.3f}, its tree {tree_ratio:.3f}; "
          f"the tree keeps {kept:.0%} of the gain")
    if args.json:
        doc = {"provenance": provenance_at_write(provenance), "suite": spec.name, "field": field, "policy": args.policy,
               "durations": args.durations, "depth": args.depth, "rules": rules, "choices": len(recorder.chosen), "fidelity": agree,
               "policy_ratio": policy_ratio, "tree_ratio": tree_ratio, "kept": kept, "cells": len(grid)}
        write_output(args.json, json.dumps(doc, indent=2) + "\n", "the distilled tree's figures")


if __name__ == "__main__":
    main()
