"""The results page's view of migration: each ``+migrate`` heuristic's average JCT over its base
policy's (the same policy without migration), cell by cell, for a suite that runs both. Rendered
from a suite's JSON by :mod:`deepshare.experiments.results_page`; a suite without such pairs gets
nothing here.
"""

from __future__ import annotations

from typing import Any

from deepshare.experiments.suite_results import geomean

SUFFIX = "+migrate"


def migration_pairs(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(base, base+migrate) for every ``+migrate`` policy whose base the suite also runs."""
    policies = list(dict.fromkeys(p for cell in doc["cells"] for p in cell["results"]))
    return [(p[: -len(SUFFIX)], p) for p in policies if p.endswith(SUFFIX) and p[: -len(SUFFIX)] in policies]


def migration_section(doc: dict[str, Any]) -> list[str]:
    """One row per pair: the geometric mean of ``+migrate`` / base average JCT over the cells
    where both have a figure, and its range; cells where either run failed are left out and
    counted ("2 (1 failed)"), as the suite's summaries count them; none without pairs."""
    pairs = migration_pairs(doc)
    if not pairs:
        return []
    lines = ["", "Migration: each `+migrate` policy's average JCT over its base policy's, per cell "
             "([when a job moves](closed-loop.md#contention-triggered-migration-migrate)):", "",
             "| policy | over its base, geometric mean | range | cells |", "|---|---|---|---|"]
    for base, migrating in pairs:
        both = [(cell["results"][migrating].get("avg_jct_s"), cell["results"][base].get("avg_jct_s"))
                for cell in doc["cells"] if base in cell["results"] and migrating in cell["results"]]
        ratios = [mine / theirs for mine, theirs in both if mine is not None and theirs]
        failed = len(both) - len(ratios)
        if not both:
            continue
        cells = f"{len(ratios)}" + (f" ({failed} failed)" if failed else "")
        if not ratios:
            lines.append(f"| `{migrating}` | - | - | {cells} |")
            continue
        lines.append(f"| `{migrating}` | {geomean(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f} | {cells} |")
    return lines
