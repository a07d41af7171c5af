"""The learned policies' targets (issue 37, item 3), read from a suite run with learned policies.

Each learned policy is judged against the best *heuristic* of each cell: the least average JCT
among every heuristic the suite ran (its anchors and its challengers, preemptive ones included),
not only against the anchors the suite's own summary uses. Per learned policy it prints:

* the geometric mean over cells of its average JCT / the best heuristic's (target: at most 0.95,
  or at most 1 - half the clairvoyant ceiling's gain where the ceiling is above 0.95);
* its worst cell (target: no cell above 1.02) and its worst p99 JCT ratio (target: at most 1.05);
* per cell, its ratio and which heuristic was best;
* how many cells it failed (no JCT, or not run), each named on standard error: the ratios above are
  over the cells it finished, so a policy with a failed cell is never shown as meeting the targets;
* whether it meets them (``met``, ``not met``; a geomean between 0.95 and 1 is left to the ceiling).

Figures only: nothing here asserts a target. The room (the planner and the clairvoyant ceiling
on the same cells) is ``bench/room.py``'s.

Usage: python bench/learned_targets.py runs/suite/fabric-learned.json [--cells]
(the run: ``deepshare evaluate --suite PATH --json ...`` with the learned policies under ``learned:``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

from deepshare.experiments.provenance import commit_label


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a suite's --json output with learned policies")
    parser.add_argument("--cells", action="store_true", help="also print each cell's ratios")
    args = parser.parse_args()
    doc = json.loads(args.results.read_text(encoding="utf-8"))
    learned = list(doc["suite"]["learned"])
    if not learned:
        raise SystemExit(f"{args.results}: the suite ran no learned policies (its learned: list is empty)")
    provenance = doc.get("provenance", {})
    print(f"# learned targets: suite {doc['suite']['name']}, run of {provenance.get('date', '?')} at commit "
          f"{commit_label(provenance.get('commit'))}; read {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    rows: dict[str, list[tuple[str, float, float, str]]] = {name: [] for name in learned}
    failures: dict[str, list[str]] = {name: [] for name in learned}
    for cell in doc["cells"]:
        results = cell["results"]
        heuristics = [name for name in results if name not in learned]
        where = cell.get("cluster") or f"{cell['nodes']}x{cell['gpus_per_node']}"
        label = " ".join(str(part) for part in (f"load {cell['load']:g}" if "load" in cell else "", cell["mix"], where,
                                                cell.get("contention", ""), f"seed {cell['seed'] - doc.get('seed_base', 2**31)}",
                                                cell["durations"]) if part)
        failed = [name for name in heuristics if not results[name].get("avg_jct_s")]
        if failed:  # the best heuristic of the cell is not known: it is left out, and said so
            print(f"left out: {label} (failed: {', '.join(failed)})", file=sys.stderr)
            continue
        best = min(heuristics, key=lambda name: results[name]["avg_jct_s"])
        for name in learned:
            if name in results and results[name].get("avg_jct_s"):
                rows[name].append((label, results[name]["avg_jct_s"] / results[best]["avg_jct_s"],
                                   results[name]["p99_jct_s"] / results[best]["p99_jct_s"], best))
            else:  # a failed (or missing) learned run counts against the policy, not out of its figures
                failures[name].append(label)
    for name, labels in failures.items():
        if labels:
            print(f"{name}: failed in {len(labels)} cell(s), its ratios are over the others: {'; '.join(labels)}",
                  file=sys.stderr)
    print("| learned policy | geomean avg JCT / best heuristic | worst cell | worst p99 ratio | cells at or below 1.0 "
          "| failed cells | targets (0.95 / 1.02 / 1.05) |")
    print("|---|---|---|---|---|---|---|")
    for name, cells in rows.items():
        failed_here = len(failures[name])
        if not cells:
            if failed_here:
                print(f"| `{name}` | - | - | - | 0/{failed_here} | {failed_here} | not met: {failed_here} failed |")
            continue
        ratios = [c[1] for c in cells]
        mean, worst, worst_p99 = geomean(ratios), max(ratios), max(c[2] for c in cells)
        if failed_here:
            targets = f"not met: {failed_here} failed"
        elif worst > 1.02 or worst_p99 > 1.05 or mean >= 1.0:
            targets = "not met"
        else:  # the geomean's target is 0.95, or looser where the clairvoyant ceiling is above 0.95
            targets = "met" if mean <= 0.95 else "geomean: against the ceiling (bench/room.py)"
        print(f"| `{name}` | {mean:.3f} | {worst:.3f} | {worst_p99:.3f} | "
              f"{sum(r <= 1.0 for r in ratios)}/{len(ratios) + failed_here} | {failed_here} | {targets} |")
    if args.cells:
        for name, cells in rows.items():
            print(f"\n{name}:")
            for label, ratio, p99, best in cells:
                print(f"  {label}: {ratio:.3f} (p99 {p99:.3f}), best heuristic {best}")


if __name__ == "__main__":
    main()
