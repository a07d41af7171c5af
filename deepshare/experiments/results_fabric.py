"""The results page's view of the fabric issue's target: what predicted contention and
topology-aware preemption win over the anchor-style heuristics, cell by cell, for a suite that
runs the four policies it compares (the ``fabric`` suite). Rendered from a suite's JSON by
:mod:`deepshare.experiments.results_page` and printed by ``bench/fabric_target.py``; a suite
without them gets nothing here.

The target (issue 36): on the suite's oversubscribed cells, under ``estimated``, the
contention-aware choice with topology-aware preemption (``srsf+topo-aware+preempt``, *ours*)
beats the best anchor-style heuristic of each cell (the suite's anchors, its challengers left out)
by at least 10% average JCT, geometric mean, with no cell worse. Beside it, per cell:

* ``bestfit+preempt / anchor``: topology-aware preemption alone (BestFit's placement);
* ``aware / bestfit``: what the contention-aware choice alone wins over BestFit, both without
  preemption (1.000: they decided alike), and ``aware+preempt / bestfit+preempt`` with it;
* the best anchor's mean contention slowdown: how much contention there was to avoid.

A cell is *oversubscribed* when some level of its preset declares an oversubscription above 1 (a
flat cluster, ``nodes x GPUs``, never is).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from deepshare.core.topology import load_topology
from deepshare.experiments.suite_results import geomean

OURS = "srsf+topo-aware+preempt"
PREEMPT_ONLY = "srsf+topo-bestfit+preempt"
AWARE, BESTFIT = "srsf+topo-aware", "srsf+topo-bestfit"
COMPARED = (OURS, PREEMPT_ONLY, AWARE, BESTFIT)
TARGET_GEOMEAN = 0.90
"""Ours / best anchor on the oversubscribed cells, geometric mean, at most this (and no cell above 1)."""


@lru_cache(maxsize=64)
def oversubscribed(preset: str) -> bool:
    """Whether a level of ``preset`` is oversubscribed (its uplinks carry less than its nodes' NICs)."""
    return any(level.oversubscription > 1 for level in load_topology(preset).fabric.levels)


def compares(doc: dict[str, Any]) -> bool:
    """Whether the suite runs every policy the target compares (as heuristics of its grid)."""
    return all(p in doc["suite"].get("heuristics", ()) for p in COMPARED)


def fabric_rows(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per cell (see the module doc), and the cells left out: one where an anchor or a
    compared policy has no figure (a failed anchor would leave a weaker one as the yardstick)."""
    anchors = [h for h in doc["suite"]["heuristics"] if h not in doc["suite"].get("challengers", [])]
    out, left_out = [], []
    for cell in doc["cells"]:
        runs = cell["results"]
        cluster = cell.get("cluster") or f"{cell['nodes']}x{cell['gpus_per_node']}"  # a flat cluster has no preset
        name = f"{cluster} {cell['mix']} seed {cell['seed'] - doc['seed_base']}"
        jct = {p: r["avg_jct_s"] for p, r in runs.items() if r.get("avg_jct_s")}
        missing = sorted({p for p in (*anchors, *COMPARED) if p not in jct})
        if missing:
            left_out.append(f"{name} (no run of {', '.join(missing)})")
            continue
        best = cell["best_heuristic"]  # the suite's own (the least average JCT of its anchors, ties by name)
        out.append({
            "cell": name,
            "oversubscribed": "cluster" in cell and oversubscribed(cell["cluster"]),
            "best_anchor": best,
            "anchor_jct": jct[best],
            "ours": jct[OURS] / jct[best],
            "preempt_only": jct[PREEMPT_ONLY] / jct[best],
            "aware_vs_bestfit": jct[AWARE] / jct[BESTFIT],
            "aware_vs_bestfit_preempt": jct[OURS] / jct[PREEMPT_ONLY],
            "anchor_slowdown": runs[best].get("avg_slowdown"),
        })
    return out, left_out


def target_met(rows: list[dict[str, Any]]) -> bool:
    """The target on the oversubscribed cells (none: not met)."""
    over = [r["ours"] for r in rows if r["oversubscribed"]]
    return bool(over) and geomean(over) <= TARGET_GEOMEAN and max(over) <= 1.0


def _slowdown(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def fabric_table(rows: list[dict[str, Any]]) -> list[str]:
    """The per-cell table, then a line per group of cells (oversubscribed, all) and the verdict."""
    lines = ["| cell | oversubscribed | best anchor (avg JCT s) | ours / anchor | bestfit+preempt / anchor | "
             "aware / bestfit | aware+preempt / bestfit+preempt | anchor's slowdown |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['cell']} | {'yes' if r['oversubscribed'] else 'no'} | `{r['best_anchor']}` "
                     f"({r['anchor_jct']:,.0f}) | {r['ours']:.3f} | {r['preempt_only']:.3f} | "
                     f"{r['aware_vs_bestfit']:.3f} | {r['aware_vs_bestfit_preempt']:.3f} | "
                     f"{_slowdown(r['anchor_slowdown'])} |")
    lines.append("")
    for label, chosen in (("Oversubscribed cells", [r for r in rows if r["oversubscribed"]]), ("All cells", rows)):
        if not chosen:
            continue
        ours = [r["ours"] for r in chosen]
        lines.append(f"- {label} ({len(chosen)}): ours / best anchor, geometric mean {geomean(ours):.3f} "
                     f"(worst {max(ours):.3f}); topology-aware preemption alone "
                     f"{geomean([r['preempt_only'] for r in chosen]):.3f}; the contention-aware choice alone "
                     f"{geomean([r['aware_vs_bestfit'] for r in chosen]):.3f}, and "
                     f"{geomean([r['aware_vs_bestfit_preempt'] for r in chosen]):.3f} with preemption.")
    lines.append(f"- Target (oversubscribed cells: geometric mean at most {TARGET_GEOMEAN:.2f}, no cell worse than 1): "
                 f"{'met' if target_met(rows) else 'not met'}.")
    return lines


def fabric_section(doc: dict[str, Any]) -> list[str]:
    """The page's fabric-target table (``[]`` for a suite that does not run the compared policies)."""
    if not compares(doc):
        return []
    rows, left_out = fabric_rows(doc)
    lines = ["", f"Fabric target ([what it compares](fabrics.md#the-fabric-suite)): `{OURS}` (*ours*) and its parts "
             "against each cell's best anchor; the anchor's slowdown is its mean contention slowdown:", ""]
    lines += fabric_table(rows)
    if left_out:
        lines.append(f"- Left out: {'; '.join(left_out)}.")
    return lines
