"""What the forward pass costs inside a large decision, and what a NumPy forward would change.

One rl-hybrid decision of :mod:`bench.decide_scale`'s request (4,096 x 8-GPU nodes, N pending
1-GPU jobs, default 10,000) is driven three ways in one process: each way first warmed up on a
100-pending request, then ``--rounds`` rounds (default 3), the ways' order rotated from one round
to the next, and each way's median CPU seconds and its ratio to the shipped scorer's printed:

* with the shipped scorer, timing each call: the forward's share of the decision, against the
  same observations scored back to back afterwards (how much dearer a pass is amid a step's
  other work than in a tight loop);
* with a NumPy forward on the same weights (``matmul`` per observation, OpenBLAS), on all rows
  and on each observation's distinct rows only: the decision's CPU seconds side by side, and how
  many launches differ from the shipped scorer's decision;
* on the shipped decision's observations: how many steps' best rows the NumPy scores change, and
  whether those are ties (rows the shipped scorer scores exactly equal, e.g. identical rows).

Kept because it is why the NumPy forward is not shipped (issue 14): it is faster, but OpenBLAS
rounds identical rows differently by their position, so it breaks ties between equal candidates
that the network scores equally (the first of equals wins). Scoring distinct rows only keeps those
ties, but its scores still differ from the network's in the last bits, so a near-tie between two
different rows could still go the other way. Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from deepshare.policies.learned import drive
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import scale_request
from deepshare.serving.schemas import PlacementRequest


WARM_UP_PENDING = 100
"""Pending jobs of the request each way is first driven on, untimed."""


def numpy_forward(net):  # type: ignore[no-untyped-def]
    """The shipped network's scores through NumPy: (K, F) rows -> K masked logits."""
    layers = (net.trunk[0], net.trunk[2], net.head)
    (w1, b1), (w2, b2), (w3, b3) = [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in layers]
    masked = np.float32(np.finfo(np.float32).min)

    def score(obs: dict[str, np.ndarray]) -> np.ndarray:
        hidden = np.matmul(obs["observations"], w1)
        hidden += b1
        np.maximum(hidden, 0, out=hidden)
        hidden = np.matmul(hidden, w2)
        hidden += b2
        np.maximum(hidden, 0, out=hidden)
        logits = np.matmul(hidden, w3)[:, 0] + b3[0]
        return np.where(obs["action_mask"] > 0, logits, masked)

    return score


def distinct_rows(score):  # type: ignore[no-untyped-def]
    """``score`` run on the observation's distinct rows only, each row's score then read from its
    first copy: identical rows score alike wherever they sit, as the shipped scorer's do."""

    def scored(obs: dict[str, np.ndarray]) -> np.ndarray:
        rows = obs["observations"]
        first: dict[bytes, int] = {}  # a row's bytes -> its place among the distinct rows
        positions: list[int] = []  # each distinct row's first position
        index = []
        for i, row in enumerate(rows):
            j = first.setdefault(row.tobytes(), len(positions))
            if j == len(positions):
                positions.append(i)
            index.append(j)
        unique = rows if len(positions) == len(rows) else rows[positions]
        logits = score({"observations": unique, "action_mask": np.ones(len(unique), dtype=np.float32)})[index]
        return np.where(obs["action_mask"] > 0, logits, np.float32(np.finfo(np.float32).min))

    return scored


def best(scores: np.ndarray, mask: np.ndarray) -> int:
    return int(np.argmax(np.where(mask > 0, scores, -np.inf)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, each way once a round (medians)")
    args = parser.parse_args()
    if args.rounds <= 0:
        parser.error(f"--rounds {args.rounds}: expected a positive count")
    engine = PlacementEngine(EngineSettings(policy="rl-hybrid"))
    request = PlacementRequest.model_validate(scale_request(args.nodes, args.pending))
    shipped = engine.policy.scorer
    alternative = numpy_forward(shipped.net)
    deduped = distinct_rows(alternative)
    spent = [0.0, 0]  # seconds in the shipped scorer, and its passes (fewer than launches: the anchor streak)

    def timed(obs: dict[str, np.ndarray]) -> np.ndarray:
        start = time.perf_counter()
        scores = shipped(obs)
        spent[0] += time.perf_counter() - start
        spent[1] += 1
        return scores

    seen: list[dict[str, np.ndarray]] = []

    def kept(obs: dict[str, np.ndarray]) -> np.ndarray:
        seen.append({key: value.copy() for key, value in obs.items()})
        return shipped(obs)

    ways = (("shipped (torch)", timed), ("numpy forward", alternative), ("numpy, distinct rows", deduped))
    warm_up = PlacementRequest.model_validate(scale_request(args.nodes, min(args.pending, WARM_UP_PENDING)))
    for _, scorer in ways:  # untimed: every way's first-call costs paid before any is timed
        drive(engine.policy.steps(engine.view(warm_up)), scorer)
    decisions = {}
    cpus: dict[str, list[float]] = {name: [] for name, _ in ways}
    print(f"{args.nodes} nodes x {args.pending} pending 1-GPU jobs, rl-hybrid; CPU seconds per decision "
          f"(each way warmed up on {min(args.pending, WARM_UP_PENDING)} pending, the order rotated by round)")
    for round_ in range(args.rounds):
        for name, scorer in ways[round_ % len(ways):] + ways[:round_ % len(ways)]:
            spent[0], spent[1] = 0.0, 0
            view = engine.view(request)
            cpu, wall = time.process_time(), time.perf_counter()
            decisions[name] = decision = drive(engine.policy.steps(view), scorer)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            cpus[name].append(cpu)
            share = (f"; forward {spent[0] / spent[1] * 1e6:.0f} us a pass ({spent[1]} passes for {len(decision.launch)}"
                     f" launches), {spent[0] / wall:.0%} of the wall time") if spent[1] else ""
            print(f"  round {round_ + 1} {name:20s} {cpu:6.2f} s{share}", flush=True)
    medians = {name: statistics.median(values) for name, values in cpus.items()}
    for name, _ in ways:
        print(f"  median of {args.rounds} {name:20s} {medians[name]:6.2f} s CPU, "
              f"{medians[name] / max(medians['shipped (torch)'], 1e-9):.2f}x the shipped scorer's")
    drive(engine.policy.steps(engine.view(request)), kept)
    start = time.perf_counter()
    for obs in seen:
        shipped(obs)
    print(f"the shipped forward on the same {len(seen)} observations back to back: {(time.perf_counter() - start) / len(seen) * 1e6:.0f} us each")
    a = decisions["shipped (torch)"].launch
    for name in ("numpy forward", "numpy, distinct rows"):
        b = decisions[name].launch
        print(f"launches of the {name} decision that differ from the shipped one: {sum(x != y for x, y in zip(a, b))} of {len(a)}")
    flips = ties = same_rows = 0
    for obs in seen:
        mask, rows = obs["action_mask"], obs["observations"]
        ours, theirs = shipped(obs), alternative(obs)
        i, j = best(ours, mask), best(theirs, mask)
        if i != j:
            flips += 1
            ties += bool(ours[i] == ours[j])
            same_rows += bool(np.array_equal(rows[i], rows[j]))
    print(f"steps whose best row the numpy scores change: {flips} of {len(seen)}, of which {ties} between rows the shipped "
          f"scorer scores equally ({same_rows} between identical rows)")


if __name__ == "__main__":
    main()
