"""The fabric issue's target, read from a `fabric` suite run: what predicted contention and
topology-aware preemption win over the anchor-style heuristics (the table the results page
shows under the `fabric` suite; :mod:`deepshare.experiments.results_fabric` says what each column
compares).

Usage: python bench/fabric_target.py runs/suite/fabric.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from deepshare.experiments.provenance import commit_label
from deepshare.experiments.results_fabric import compares, fabric_rows, fabric_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite_json", type=Path)
    args = parser.parse_args()
    doc = json.loads(args.suite_json.read_text())
    if not compares(doc):
        sys.exit(f"{args.suite_json}: the suite does not run the four policies the target compares")
    rows, left_out = fabric_rows(doc)
    for cell in left_out:
        print(f"left out: {cell}", file=sys.stderr)
    prov = doc.get("provenance", {})
    print(f"fabric suite run of {prov.get('date', '?')} at commit {commit_label(prov.get('commit'))}: "
          f"{' '.join(prov.get('command', []))}")
    print()
    print("\n".join(fabric_table(rows)))


if __name__ == "__main__":
    main()
