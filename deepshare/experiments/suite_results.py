"""A suite's results and what is read from them: each cell's best anchor heuristic, the judged
policies' ratios to it, the lowest ratio any policy could reach (the bound), the pooled ideal, the
cost of not knowing durations or contention, and the JSON (see :mod:`deepshare.experiments.suite`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from deepshare.experiments.suite_cells import Cell
from deepshare.experiments.suite_spec import SUITE_SEED_BASE, SuiteSpec


TRADEOFFS = (("worst_rho", "worst rho"), ("share_rho_above_1", "share rho > 1"))
"""The fairness axes each Pareto front is drawn against (lower is fairer), with average JCT."""


def pareto_front(points: Mapping[str, Sequence[float | None]]) -> list[str]:
    """The names of ``points`` no other point dominates (every coordinate lower is better; a
    point dominates another when it is no worse in every coordinate and better in one), in the
    order given; a point with a None coordinate is never on the front. Equal points are both on it."""
    known = {n: tuple(p) for n, p in points.items() if all(v is not None for v in p)}

    def dominates(a: tuple, b: tuple) -> bool:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    return [n for n, p in known.items() if not any(dominates(q, p) for m, q in known.items() if m != n)]


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of positive ``values`` (at least one)."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass(frozen=True)
class SuiteResult:
    spec: SuiteSpec
    results: dict[Cell, dict[str, dict[str, float | None]]]
    """``{cell: {policy: {metric: value}}}``."""
    bounds: dict[Cell, float | None] = field(default_factory=dict)
    """``{cell: average-JCT lower bound}`` (:func:`cell_bound`); filled by :func:`run_suite`."""
    pooled: dict[Cell, float | None] = field(default_factory=dict)
    """``{cell: pooled-ideal average JCT}`` (:func:`pooled_ideals`); filled by :func:`run_suite`."""

    def best_heuristic(self, cell: Cell) -> str:
        """The anchor heuristic with the least average JCT in ``cell`` (every heuristic when the
        suite names no challengers); of anchors tied at it (:meth:`tied_best`), the first by name,
        so the p99 ratio's denominator is the same on every run."""
        runs = self.results[cell]
        return min(self.spec.anchors, key=lambda p: (runs[p]["avg_jct_s"] or math.inf, p))

    def tied_best(self, cell: Cell) -> list[str]:
        """Every anchor whose average JCT in ``cell`` is the least (the best heuristic and those
        tied with it: identical schedules give identical JCTs), in the suite's order; none when no
        anchor has an average JCT (a None is no tie, and no win)."""
        runs = self.results[cell]
        least = runs[self.best_heuristic(cell)]["avg_jct_s"]
        return [] if least is None else [a for a in self.spec.anchors if runs[a]["avg_jct_s"] == least]

    def error(self, cell: Cell, policy: str) -> str | None:
        """Why ``policy``'s run on ``cell`` failed; None when it ran."""
        return self.results[cell][policy].get("error")  # type: ignore[return-value]

    def failures(self) -> list[tuple[Cell, str, str]]:
        """(cell, policy, error) of every failed run, in cell order."""
        return [(cell, p, e) for cell in sorted(self.results) for p in self.results[cell]
                if (e := self.error(cell, p)) is not None]

    def anchors_ran(self, cell: Cell) -> bool:
        """Whether every anchor ran in ``cell``: a cell whose strongest anchor failed would be
        judged against a weaker one, so it is left out of the scores (a failed cell)."""
        return all(self.error(cell, a) is None for a in self.spec.anchors)

    def ratios(self, cell: Cell, policy: str) -> tuple[float, float] | None:
        """(avg JCT ratio, p99 JCT ratio) of ``policy`` to the cell's best heuristic; None when
        its run or any anchor's failed."""
        runs = self.results[cell]
        best_name = self.best_heuristic(cell)
        if self.error(cell, policy) or not self.anchors_ran(cell):
            return None
        best = runs[best_name]
        mine = runs[policy]
        return (mine["avg_jct_s"] / best["avg_jct_s"], mine["p99_jct_s"] / best["p99_jct_s"])  # type: ignore[operator]

    def best_avg_jct(self, cell: Cell) -> float | None:
        """The average JCT of the cell's best heuristic; None when an anchor failed there."""
        return self.results[cell][self.best_heuristic(cell)]["avg_jct_s"] if self.anchors_ran(cell) else None

    def cost_of_not_knowing(self, cell: Cell) -> float | None:
        """The cell's best heuristic's average JCT / the best heuristic's of the same scenario
        under ``exact`` (1 for an ``exact`` cell; None when the suite did not run ``exact``)."""
        exact = cell.with_durations("exact")
        if exact not in self.results:
            return None
        mine, known = self.best_avg_jct(cell), self.best_avg_jct(exact)
        return None if not mine or not known else mine / known

    def cost_summary(self) -> dict[str, dict[str, object]]:
        """Per information model other than ``exact``: the geometric mean, range and worst
        scenario of :meth:`cost_of_not_knowing` over its cells (empty without ``exact`` cells)."""
        out: dict[str, dict[str, object]] = {}
        for durations in self.spec.durations:
            if durations == "exact":
                continue
            costs = [(c, v) for c in sorted(self.results) if c.durations == durations and c.knowledge == "exact"
                     and (v := self.cost_of_not_knowing(c)) is not None]
            if costs:
                worst = max(costs, key=lambda x: x[1])
                out[durations] = {"geomean": geomean([v for _, v in costs]), "min": min(v for _, v in costs),
                                  "max": worst[1], "worst_cell": worst[0].scenario_label, "cells": len(costs)}
        return out

    def learned_over_exact(self, cell: Cell, policy: str) -> float | None:
        """``policy``'s average JCT in ``cell`` / its own under ``exact`` contention knowledge on
        the same scenario and durations (1 for an exact cell; None when the suite did not run it)."""
        exact = cell.with_knowledge("exact")
        if exact not in self.results:
            return None
        mine, known = self.results[cell][policy]["avg_jct_s"], self.results[exact][policy]["avg_jct_s"]
        return None if not mine or not known else mine / known

    def learning_summary(self) -> dict[str, dict[str, object]]:
        """Per policy, over the ``learned`` cells that have an ``exact`` sibling: the geometric
        mean and the worst of :meth:`learned_over_exact`, and the worst cell (empty unless the
        suite runs both)."""
        out: dict[str, dict[str, object]] = {}
        learned = [c for c in sorted(self.results) if c.knowledge != "exact" and c.with_knowledge("exact") in self.results]
        for policy in (*self.spec.heuristics, *self.spec.learned):
            values = [(c, v) for c in learned if (v := self.learned_over_exact(c, policy)) is not None]
            if values:
                worst = max(values, key=lambda x: x[1])
                out[policy] = {"geomean": geomean([v for _, v in values]), "min": min(v for _, v in values),
                               "max": worst[1], "worst_cell": worst[0].label, "cells": len(values)}
        return out

    def lowest_reachable_ratio(self, cell: Cell) -> float | None:
        """Lower bound / the best heuristic's average JCT: a perfect scheduler's ratio (<= 1)."""
        bound, best = self.bounds.get(cell), self.best_avg_jct(cell)
        return None if bound is None or not best else bound / best

    def best_over_pooled(self, cell: Cell) -> float | None:
        """The best heuristic's average JCT / the pooled ideal's: what nodes, contention and
        restores cost it over an ideal SRSF (None when the pooled ideal was not run)."""
        pooled, best = self.pooled.get(cell), self.best_avg_jct(cell)
        return None if not pooled or best is None else best / pooled

    def lowest_reachable_summary(self) -> dict[str, object]:
        """Geometric mean of :meth:`room` over the cells (the lowest geometric-mean ratio any
        policy could reach against the best heuristics) and its tightest cell."""
        rooms = [(cell, r) for cell in sorted(self.results) if (r := self.lowest_reachable_ratio(cell)) is not None]
        if not rooms:
            return {}
        tight = max(rooms, key=lambda x: x[1])
        over_pooled = [v for cell in sorted(self.results) if (v := self.best_over_pooled(cell)) is not None]
        return {
            "geomean_room": geomean([r for _, r in rooms]),
            "min_room": min(r for _, r in rooms),
            "max_room": tight[1],
            "tightest_cell": tight[0].label,
            "cells": len(rooms),
            "geomean_best_over_pooled": geomean(over_pooled) if over_pooled else None,
            "max_best_over_pooled": max(over_pooled, default=None),
        }

    def summary(self, policy: str, durations: str | None = None, knowledge: str | None = None) -> dict[str, object]:
        """Geometric-mean avg-JCT ratio to the best heuristic over the cells (those run under
        ``durations`` and ``knowledge`` when given), worst cells, and the geometric means of the
        policy's average JCT / the cell's lower bound and / its pooled ideal. Cells where the policy
        or the best heuristic failed are left out and counted (``failed_cells``)."""
        considered = [cell for cell in sorted(self.results)
                      if (durations is None or cell.durations == durations)
                      and (knowledge is None or cell.knowledge == knowledge)]
        pairs = [(cell, *r) for cell in considered if (r := self.ratios(cell, policy)) is not None]
        failed = len(considered) - len(pairs)
        if not pairs:  # every cell failed: nothing to summarise
            return {"cells": 0, "failed_cells": failed, "cells_won": 0,
                    **dict.fromkeys(("geomean_avg_jct_ratio", "worst_avg_jct_ratio", "worst_avg_cell", "worst_p99_jct_ratio",
                                     "worst_p99_cell", "geomean_avg_jct_over_bound", "geomean_avg_jct_over_pooled"))}
        avg = [a for _, a, _ in pairs]
        worst_avg = max(pairs, key=lambda x: x[1])
        worst_p99 = max(pairs, key=lambda x: x[2])

        def over(reference: Mapping[Cell, float | None]) -> list[float]:
            """The policy's average JCT / ``reference`` in each of those cells that has one."""
            return [self.results[c][policy]["avg_jct_s"] / r for c, _, _ in pairs  # type: ignore[operator]
                    if (r := reference.get(c))]

        over_bound, over_pooled = over(self.bounds), over(self.pooled)
        return {
            "geomean_avg_jct_ratio": geomean(avg),
            "worst_avg_jct_ratio": worst_avg[1],
            "worst_avg_cell": worst_avg[0].label,
            "worst_p99_jct_ratio": worst_p99[2],
            "worst_p99_cell": worst_p99[0].label,
            "cells_won": sum(a < 1.0 for a in avg),
            "cells": len(avg),
            "failed_cells": failed,
            "geomean_avg_jct_over_bound": geomean(over_bound) if len(over_bound) == len(avg) else None,
            "geomean_avg_jct_over_pooled": geomean(over_pooled) if len(over_pooled) == len(avg) else None,
        }

    def heuristic_wins(self, durations: str | None = None, knowledge: str | None = None) -> dict[str, int]:
        """How many cells (under ``durations`` and ``knowledge`` when given) each heuristic is the
        best of. A cell whose best anchors tie counts for each of them (:meth:`tied_best`), as the
        results page's "cells at or below the best" does, so the wins can add up to more than the
        cells; a tie is never credited to one of them by its name."""
        wins = {h: 0 for h in self.spec.anchors}
        for cell in self.results:
            if (durations is None or cell.durations == durations) and (knowledge is None or cell.knowledge == knowledge) \
                    and self.anchors_ran(cell):  # the best of a cell where one failed is not known
                for best in self.tied_best(cell):
                    wins[best] += 1
        return wins

    def fronts(self, cell: Cell) -> dict[str, list[str]]:
        """Per fairness axis of :data:`TRADEOFFS`, the policies on the cell's Pareto front of
        (average JCT, that axis); failed runs are never on it."""
        runs = self.results[cell]
        return {axis: pareto_front({p: (m.get("avg_jct_s"), m.get(axis)) for p, m in runs.items()})  # type: ignore[misc]
                for axis, _ in TRADEOFFS}

    def tradeoff(self) -> dict[str, object]:
        """The JCT / fairness trade-off over the cells, per policy: the geometric mean of its
        average JCT over each cell's least average JCT of any policy (``jct_ratio``, 1 for a policy
        that is the fastest everywhere), and the means over the cells of its worst rho, its share
        of jobs with rho > 1, its largest share gap and its worst queue's average queueing delay;
        ``fronts``: per axis of :data:`TRADEOFFS`, the policies on the Pareto front of
        (``jct_ratio``, that mean). Cells where any policy failed are left out (``cells``
        counts those used). Empty without tenants."""
        if self.spec.tenants is None:
            return {}
        policies = (*self.spec.heuristics, *self.spec.learned)
        used = [c for c in sorted(self.results) if not any(self.error(c, p) for p in policies)]
        per: dict[str, dict[str, float | None]] = {}
        for policy in policies:
            row: dict[str, float | None] = {"jct_ratio": None}
            if used:
                row["jct_ratio"] = geomean([
                    self.results[c][policy]["avg_jct_s"] / min(self.results[c][p]["avg_jct_s"] for p in policies)  # type: ignore[operator,type-var]
                    for c in used])
            for key in ("worst_rho", "share_rho_above_1", "max_share_gap", "worst_queue_avg_queue_s"):
                values = [v for c in used if (v := self.results[c][policy].get(key)) is not None]
                row[key] = sum(values) / len(values) if values and len(values) == len(used) else None  # type: ignore[arg-type]
            per[policy] = row
        fronts = {axis: pareto_front({p: (r["jct_ratio"], r[axis]) for p, r in per.items()}) for axis, _ in TRADEOFFS}
        return {"cells": len(used), "policies": per, "fronts": fronts}

    def information_models(self) -> list[tuple[str, str]]:
        """Every (durations, contention knowledge) the suite runs, most known first."""
        return [(d, k) for d in self.spec.durations for k in self.spec.contention_knowledge]

    def to_json(self) -> dict[str, object]:
        """The suite's JSON; with ``tenants``, each cell also has ``"pareto"`` (:meth:`fronts`) and
        the document a ``"tradeoff"`` (:meth:`tradeoff`); without, the keys are those of a suite
        that never had tenants."""
        doc = self._json()
        if self.spec.tenants is not None:
            for cell, entry in zip(sorted(self.results), doc["cells"]):  # type: ignore[call-overload]
                entry["pareto"] = self.fronts(cell)
            doc["tradeoff"] = self.tradeoff()
        return doc

    def _json(self) -> dict[str, object]:
        return {
            "suite": self.spec.model_dump(mode="json", exclude={"tenants"} if self.spec.tenants is None else None),
            "seed_base": SUITE_SEED_BASE,
            "cells": [
                {
                    **cell.key(),
                    "best_heuristic": self.best_heuristic(cell),
                    "best_avg_jct_s": self.best_avg_jct(cell),
                    "cost_of_not_knowing": self.cost_of_not_knowing(cell),
                    "learned_over_exact": None if cell.knowledge == "exact" else {
                        p: self.learned_over_exact(cell, p) for p in (*self.spec.heuristics, *self.spec.learned)},
                    "jct_bound_s": self.bounds.get(cell),
                    "best_over_bound": None if (r := self.lowest_reachable_ratio(cell)) is None else 1.0 / r,
                    "room": r,
                    "pooled_ideal_s": self.pooled.get(cell),
                    "best_over_pooled": self.best_over_pooled(cell),
                    "results": self.results[cell],
                    "ratios": {
                        p: None if (q := self.ratios(cell, p)) is None else dict(zip(("avg_jct", "p99_jct"), q))
                        for p in self.spec.judged
                    },
                }
                for cell in sorted(self.results)
            ],
            "failed": [{**cell.key(), "policy": p, "error": e} for cell, p, e in self.failures()],
            "summary": {p: self.summary(p) for p in self.spec.judged},
            "summary_by_durations": {d: {p: self.summary(p, d) for p in self.spec.judged} for d in self.spec.durations},
            "heuristic_wins": self.heuristic_wins(),
            "heuristic_wins_by_durations": {d: self.heuristic_wins(d) for d in self.spec.durations},
            "summary_by_contention_knowledge": {
                k: {d: {p: self.summary(p, d, k) for p in self.spec.judged} for d in self.spec.durations}
                for k in self.spec.contention_knowledge},
            "heuristic_wins_by_contention_knowledge": {
                k: {d: self.heuristic_wins(d, k) for d in self.spec.durations} for k in self.spec.contention_knowledge},
            "cost_of_not_knowing": self.cost_summary(),
            "learned_over_exact": self.learning_summary(),
            "room": self.lowest_reachable_summary(),
        }
