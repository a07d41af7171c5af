"""The results page's view of a suite by information model: how each learned policy fares when
durations are exact, estimated or unknown, and what not knowing costs the best heuristic in
every scenario (issue 27's results table). Rendered from a suite's JSON by
:mod:`deepshare.experiments.results_page`; a suite with one information model gets nothing here.
"""

from __future__ import annotations

from typing import Any

from deepshare.experiments.suite import Cell


def models(doc: dict[str, Any]) -> list[str]:
    """The information models the suite's cells ran under, in the suite's order."""
    return list(dict.fromkeys(cell.get("durations", "exact") for cell in doc["cells"]))


def by_model_table(doc: dict[str, Any]) -> list[str]:
    """One row per learned policy: its geometric-mean average-JCT ratio to the best heuristic of
    the same information model, worst cell in brackets; a last row for the cost of not knowing."""
    names = models(doc)
    summary = doc.get("summary_by_durations") or {}
    lines = ["| policy | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for policy in doc["suite"].get("learned", []):
        cells = []
        for model in names:
            row = summary.get(model, {}).get(policy)
            ok = row and row.get("geomean_avg_jct_ratio") is not None
            cells.append(f"{row['geomean_avg_jct_ratio']:.3f} ({row['worst_avg_jct_ratio']:.3f})" if ok else "-")
        lines.append(f"| `{policy}` | " + " | ".join(cells) + " |")
    cost = doc.get("cost_of_not_knowing") or {}
    lines.append("| cost of not knowing (best heuristic / best `exact` one) | " + " | ".join(
        "1" if model == "exact" else (f"{cost[model]['geomean']:.3f} ({cost[model]['max']:.3f})" if model in cost else "-")
        for model in names) + " |")
    return lines


def scenario_label(cell: Cell) -> str:
    """The cell's scenario, and its contention knowledge when that is not exact (rows apart)."""
    return cell.scenario_label + ("" if cell.knowledge == "exact" else f", {cell.knowledge} contention")


def cost_table(doc: dict[str, Any]) -> list[str]:
    """Per scenario, the best heuristic under each information model with its average JCT, and
    the cost of not knowing (that JCT over the best ``exact`` heuristic's)."""
    names = models(doc)
    scenarios: dict[Cell, dict[str, dict[str, Any]]] = {}
    for cell in doc["cells"]:
        scenarios.setdefault(Cell.from_key(cell).with_durations("exact"), {})[cell.get("durations", "exact")] = cell
    lines = ["| scenario | " + " | ".join(f"best under `{m}`" for m in names) + " |", "|---|" + "---|" * len(names)]
    for scenario, by_model in scenarios.items():
        entries = []
        for model in names:
            cell = by_model.get(model)
            if cell is None:
                entries.append("-")
                continue
            cost = cell.get("cost_of_not_knowing")
            times = f" (x{cost:.3f})" if cost is not None and model != "exact" else ""
            jct = cell.get("best_avg_jct_s")
            entries.append("- (a heuristic failed)" if jct is None else f"`{cell['best_heuristic']}` {jct:,.0f} s{times}")
        lines.append(f"| {scenario_label(scenario)} | " + " | ".join(entries) + " |")
    return lines


def information_section(doc: dict[str, Any]) -> list[str]:
    """The page's lines for a suite with several information models, else none."""
    if len(models(doc)) < 2:
        return []
    return ["", "By information model ([what a policy knows](information-model.md)): each learned policy's average "
            "JCT over the best heuristic that knew what it knew (geometric mean, worst cell in brackets), and the "
            "cost of not knowing:", "", *by_model_table(doc), "",
            "Per scenario, the best heuristic under each model, its average JCT, and its cost of not knowing:", "",
            *cost_table(doc)]


def knowledge_section(doc: dict[str, Any]) -> list[str]:
    """The page's lines for a suite whose cells run with contention known exactly and learned
    online (the ``learned`` suites, :doc:`closed-loop`): per scenario, the best heuristic under
    each, the ratio of their average JCTs, and the exact cell's best policy run under learned
    contention over its own exact JCT; else none."""
    if all(cell.get("contention_knowledge", "exact") == "exact" for cell in doc["cells"]):
        return []
    pairs: dict[Cell, dict[str, dict[str, Any]]] = {}
    for cell in doc["cells"]:
        pairs.setdefault(Cell.from_key(cell).with_knowledge("exact"), {})[cell.get("contention_knowledge", "exact")] = cell
    learned = [(by["exact"], by["learned"]) for by in pairs.values() if "exact" in by and "learned" in by]
    if not learned:
        return []
    lines = ["", "Contention learned online against known exactly ([closed loop](closed-loop.md)): per scenario, the "
             "best heuristic and its average JCT under each, their ratio, and the exact cell's best policy run with "
             "learned contention over its exact JCT:", "",
             "| scenario | best, contention exact | best, contention learned | learned / exact "
             "| exact's best under learned |", "|---|---|---|---|---|"]
    for exact, learnt in learned:
        best_exact, best_learned = exact["best_heuristic"], learnt["best_heuristic"]
        jct_exact, jct_learned = exact["best_avg_jct_s"], learnt["best_avg_jct_s"]
        if not jct_exact or not jct_learned:
            lines.append(f"| {scenario_label(Cell.from_key(exact))} | - | - | - (a heuristic failed) | - |")
            continue
        same = (learnt.get("learned_over_exact") or {}).get(best_exact)
        lines.append(
            f"| {scenario_label(Cell.from_key(exact))} | `{best_exact}` {jct_exact:,.0f} s | "
            + (f"same, {jct_learned:,.0f} s" if best_learned == best_exact else f"`{best_learned}` {jct_learned:,.0f} s")
            + f" | {jct_learned / jct_exact:.3f} | " + ("-" if same is None else f"{same:.3f}") + " |")
    return lines


def information_headline(doc: dict[str, Any]) -> list[str]:
    """The README's lines: the by-model table alone."""
    if len(models(doc)) < 2:
        return []
    return ["", "By information model (the policy against the best heuristic that knew what it knew; worst cell in "
            "brackets):", "", *by_model_table(doc)]
