"""``deepshare evaluate --suite NAME``: run a benchmark suite and print its tables (the grid
itself is in :mod:`deepshare.experiments.suite`); with ``--address`` its runs are Ray tasks on a
cluster (:mod:`deepshare.cli.ray_address`). A failed run is a row that says why, and exit 1."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterable

from rich.console import Console
from rich.table import Table

from deepshare.cli.output import add_json, announce, human, run_folder
from deepshare.cli.ray_address import joined
from deepshare.core.errors import DeepShareError
from deepshare.core.output_set import OutputSet
from deepshare.experiments.provenance import provenance_at_write, run_provenance
from deepshare.experiments.suite import SuiteResult, cells, load_suite, run_suite
from deepshare.experiments.suite_results import TRADEOFFS

EXIT_FAILED_RUNS = 1


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _worst(ratio: object, cell: object) -> str:
    """A summary's worst ratio and its cell; "-" when no cell was scored."""
    return "-" if ratio is None else f"{ratio:.3f} ({cell})"


def p99_ranks(jobs: int) -> tuple[int, int]:
    """The ranks from the longest (1st) of the two JCTs a p99 of ``jobs`` JCTs interpolates
    between (NumPy's linear percentile): on a suite's traces of tens to a few hundred jobs, the
    p99 is one of the few longest jobs, not a tail of many."""
    low = int(0.99 * (jobs - 1))
    return max(1, jobs - low - 1), jobs - low


def p99_note(jobs: Iterable[int]) -> str:
    """What a suite's p99 figures are made of, for a table's caption: its jobs per trace and the
    longest jobs that set the p99 (ranked 1st to 4th on the bundled suites)."""
    counts = sorted(set(jobs))
    if not counts:
        return ""
    ranks = sorted({rank for n in counts for rank in p99_ranks(n)})
    size = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    longest = f"{_ordinal(ranks[0])}" if len(ranks) == 1 else f"{_ordinal(ranks[0])}-{_ordinal(ranks[-1])}"
    return f"p99 JCT: of {size} jobs per trace, set by the {longest} longest jobs"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _jobs(result: SuiteResult, cell: object) -> int:
    """Jobs in the cell's trace (``jobs_per_node`` x its nodes)."""
    return result.spec.jobs_per_node * cell.nodes  # type: ignore[attr-defined]


def cell_tables(result: SuiteResult) -> list[Table]:
    """One table per cell: every policy's JCTs and utilisations, best average JCT first, the
    learned policies' ratios to the cell's best heuristic, and the cell's average-JCT lower bound
    last with its room (bound / best heuristic's average JCT)."""
    tables = []
    for cell, runs in sorted(result.results.items()):
        best = result.best_heuristic(cell)
        table = Table(title=cell.label, header_style="bold", title_justify="left")
        for col in ("policy", "avg JCT (s)", "p99 JCT (s)", "GPU util", "useful util", "makespan (s)", "vs best avg / p99"):
            table.add_column(col, justify="left" if col == "policy" else "right")
        for policy, m in sorted(runs.items(), key=lambda kv: (kv[1]["avg_jct_s"] or float("inf"), kv[0])):
            vs = ""
            error = result.error(cell, policy)
            if error is not None:
                vs = f"failed: {error}"
            elif policy in result.spec.judged:
                ratios = result.ratios(cell, policy)
                vs = "-" if ratios is None else f"{ratios[0]:.3f} / {ratios[1]:.3f}"
            elif policy == best:
                vs = "best heuristic"
            table.add_row(policy, _s(m["avg_jct_s"]), _s(m["p99_jct_s"]), _f(m["gpu_util"]), _f(m["useful_util"]),
                          _s(m["makespan_s"]), vs)
        over_pooled = result.best_over_pooled(cell)
        if over_pooled is not None:
            table.add_row("pooled ideal (srsf, one GPU pool)", _s(result.pooled[cell]), "", "", "",
                          "", f"best / it {over_pooled:.3f}", style="dim")
        room = result.lowest_reachable_ratio(cell)
        if room is not None:
            table.add_row("lower bound (no wait, no contention)", _s(result.bounds[cell]), "", "", "", "",
                          f"room {room:.3f}", style="dim")
        table.caption = p99_note([_jobs(result, cell)])
        tables.append(table)
    return tables


def fabric_tables(result: SuiteResult) -> list[Table]:
    """Per cell on a cluster preset: every policy's contention slowdown, fragmentation,
    cross-domain share per fabric level, large gangs' queueing and preemptions (what placement
    on a fabric costs, beside the JCTs of :func:`cell_tables`)."""
    tables = []
    for cell, runs in sorted(result.results.items()):
        if not cell.cluster:
            continue
        levels = list(dict.fromkeys(k for m in runs.values() for k in m if k.startswith("cross_domain_share_")))
        table = Table(title=f"{cell.label}: the fabric", header_style="bold", title_justify="left")
        table.add_column("policy")
        for col in ("avg slowdown", "fragmentation", *(f"cross {k[len('cross_domain_share_'):]}" for k in levels),
                    "gangs >= 64 GPUs: avg queue (s)", "preemptions"):
            table.add_column(col, justify="right")
        for policy, m in sorted(runs.items(), key=lambda kv: (kv[1]["avg_jct_s"] or float("inf"), kv[0])):
            if result.error(cell, policy) is not None:
                continue
            table.add_row(policy, _f(m.get("avg_slowdown")), _f(m.get("fragmentation_share")),  # type: ignore[arg-type]
                          *(_f(m.get(k)) for k in levels), _s(m.get("large_gang_avg_queue_s")),  # type: ignore[arg-type]
                          str(m.get("preemptions", "-")))
        tables.append(table)
    return tables


def fairness_tables(result: SuiteResult) -> list[Table]:
    """Per cell of a suite with tenants: every policy's JCTs beside its fairness (worst rho, share
    of jobs with rho > 1, the largest share gap, the worst queue's average queueing delay) and
    whether it is on the cell's Pareto front of average JCT against worst rho / share rho > 1;
    then each queue's average queueing delay. Empty without tenants."""
    if result.spec.tenants is None:
        return []
    tables = []
    for cell, runs in sorted(result.results.items()):
        fronts = result.fronts(cell)
        queues = list(dict.fromkeys(q for m in runs.values() for q in (m.get("queues") or {})))  # type: ignore[union-attr]
        table = Table(title=f"{cell.label}: fairness under tenants {result.spec.tenants}", header_style="bold",
                      title_justify="left")
        for col in ("policy", "avg JCT (s)", "p99 JCT (s)", "worst rho", "rho > 1", "max share gap",
                    "worst queue avg wait (s)", "Pareto (rho / rho>1)", *(f"{q} avg wait (s)" for q in queues)):
            table.add_column(col, justify="left" if col == "policy" else "right")
        for policy, m in sorted(runs.items(), key=lambda kv: (kv[1]["avg_jct_s"] or float("inf"), kv[0])):
            if result.error(cell, policy) is not None:
                continue
            marks = " / ".join("*" if policy in fronts[axis] else "-" for axis, _ in TRADEOFFS)
            per = m.get("queues") or {}
            table.add_row(policy, _s(m["avg_jct_s"]), _s(m["p99_jct_s"]), _f(m.get("worst_rho")),  # type: ignore[arg-type]
                          _f(m.get("share_rho_above_1")), _f(m.get("max_share_gap")),  # type: ignore[arg-type]
                          _s(m.get("worst_queue_avg_queue_s")), marks,  # type: ignore[arg-type]
                          *(_s(per[q]["avg_queue_s"]) if q in per else "-" for q in queues))  # type: ignore[index,operator]
        tables.append(table)
    return tables


def tradeoff_table(result: SuiteResult) -> Table | None:
    """The JCT / fairness trade-off over the cells (:meth:`SuiteResult.tradeoff`), fastest first,
    with the Pareto fronts marked; None without tenants."""
    tradeoff = result.tradeoff()
    if not tradeoff:
        return None
    per, fronts = tradeoff["policies"], tradeoff["fronts"]
    table = Table(title=f"suite {result.spec.name}: JCT / fairness trade-off over {tradeoff['cells']} cell(s) "
                        f"(tenants {result.spec.tenants}; * on the Pareto front of avg JCT and that column)",
                  header_style="bold", title_justify="left")
    for col in ("policy", "avg JCT / fastest", "worst rho", "rho > 1", "max share gap", "worst queue avg wait (s)"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for policy, r in sorted(per.items(), key=lambda kv: (kv[1]["jct_ratio"] or float("inf"), kv[0])):  # type: ignore[union-attr]
        def mark(axis: str) -> str:
            return _f(r[axis]) + (" *" if policy in fronts[axis] else "  ")  # type: ignore[index]

        table.add_row(policy, _f(r["jct_ratio"]), mark("worst_rho"), mark("share_rho_above_1"),
                      _f(r["max_share_gap"]), _s(r["worst_queue_avg_queue_s"]))
    table.caption = "; ".join(f"Pareto front, avg JCT vs {name}: {', '.join(fronts[axis]) or '-'}"  # type: ignore[index]
                              for axis, name in TRADEOFFS)
    return table


def summary_table(result: SuiteResult) -> Table:
    """Each learned policy against the best heuristic of each cell, per information model: a
    policy is only ever compared with heuristics that knew what it knew. Cells where a run failed
    are left out and counted beside the cells won."""
    judged = "learned policies" if not result.spec.challengers else (
        "challengers" if not result.spec.learned else "challengers and learned policies")
    best = "best heuristic" if not result.spec.challengers else "best anchor heuristic"
    table = Table(title=f"suite {result.spec.name}: {judged} vs the {best} of each cell "
                        "(same information model)", header_style="bold", title_justify="left")
    for col in ("durations", "policy", "geomean avg-JCT ratio", "worst avg ratio", "worst p99 ratio", "cells won",
                "geomean vs bound", "geomean vs pooled"):
        table.add_column(col, justify="left" if col in ("durations", "policy") else "right")
    knowledge = result.spec.contention_knowledge
    for durations, known in result.information_models():
        for policy in result.spec.judged:
            s = result.summary(policy, durations, known)
            label = durations if len(knowledge) == 1 else f"{durations}, contention {known}"
            failed = f" ({s['failed_cells']} failed)" if s["failed_cells"] else ""
            table.add_row(label, policy, _f(s["geomean_avg_jct_ratio"]),  # type: ignore[arg-type]
                          _worst(s["worst_avg_jct_ratio"], s["worst_avg_cell"]),
                          _worst(s["worst_p99_jct_ratio"], s["worst_p99_cell"]), f"{s['cells_won']}/{s['cells']}{failed}",
                          _f(s["geomean_avg_jct_over_bound"]), _f(s["geomean_avg_jct_over_pooled"]))  # type: ignore[arg-type]
    wins = "; ".join(
        f"{d if len(knowledge) == 1 else f'{d}, contention {k}'}: "
        + ", ".join(f"{h} {n}" for h, n in sorted(result.heuristic_wins(d, k).items(), key=lambda kv: -kv[1]) if n)
        for d, k in result.information_models()
    )
    table.caption = f"best heuristic of a cell (cells; a tie counts for each tied heuristic): {wins}; {p99_note(_jobs(result, c) for c in result.results)}"
    return table


def cost_table(result: SuiteResult) -> Table | None:
    """Per scenario, the best heuristic under each information model the suite lists and its
    average JCT over the best ``exact`` one's: what not knowing job lengths costs the strongest
    rule. None unless the suite runs ``exact`` beside another model."""
    models = result.spec.durations
    if "exact" not in models or len(models) < 2:
        return None
    table = Table(title=f"suite {result.spec.name}: the cost of not knowing job lengths (best heuristic of each "
                        "information model; its avg JCT / the best exact heuristic's)", header_style="bold",
                  title_justify="left")
    table.add_column("scenario")
    for durations in models:
        table.add_column(f"best {durations}")
        if durations != "exact":
            table.add_column(f"{durations} / exact", justify="right")
    for cell in sorted(c for c in result.results if c.durations == "exact" and c.knowledge == "exact"):
        row = [cell.scenario_label]
        for durations in models:
            sibling = cell.with_durations(durations)
            row.append(f"{result.best_heuristic(sibling)} ({_s(result.best_avg_jct(sibling))})")
            if durations != "exact":
                row.append(_f(result.cost_of_not_knowing(sibling)))
        table.add_row(*row)
    costs = result.cost_summary()
    table.caption = "; ".join(f"{d}: geometric mean {c['geomean']:.3f}, range {c['min']:.3f} .. {c['max']:.3f}"
                              for d, c in costs.items())
    return table


def learning_table(result: SuiteResult) -> Table | None:
    """Per scenario (and durations), every policy's average JCT with contention learned over its
    own with contention known exactly, and the best heuristic of each; None unless the suite runs
    both ``exact`` and ``learned`` contention knowledge."""
    if set(result.spec.contention_knowledge) != {"exact", "learned"}:
        return None
    policies = (*result.spec.heuristics, *result.spec.learned)
    table = Table(title=f"suite {result.spec.name}: learning contention instead of knowing it (each policy's avg JCT "
                        "under learned / its own under exact)", header_style="bold", title_justify="left")
    table.add_column("cell")
    table.add_column("best exact")
    table.add_column("best learned")
    for policy in policies:
        table.add_column(policy, justify="right")
    for cell in sorted(c for c in result.results if c.knowledge == "exact"):
        learned = cell.with_knowledge("learned")
        row = [f"{cell.scenario_label} {cell.durations}",
               f"{result.best_heuristic(cell)} ({_s(result.best_avg_jct(cell))})",
               f"{result.best_heuristic(learned)} ({_s(result.best_avg_jct(learned))})"]
        row += [_f(result.learned_over_exact(learned, p)) for p in policies]
        table.add_row(*row)
    summary = result.learning_summary()
    table.caption = "geometric mean (worst): " + "; ".join(
        f"{p} {v['geomean']:.3f} ({v['max']:.3f})" for p, v in summary.items())
    return table


def room_table(result: SuiteResult) -> Table:
    """Per cell: the best heuristic's average JCT, the pooled ideal and best / it, the lower bound,
    best / bound and the room (bound / best: the ratio a perfect scheduler would have); their
    geometric means as caption."""
    table = Table(title=f"suite {result.spec.name}: room left by the best heuristic of each cell",
                  header_style="bold", title_justify="left")
    for col in ("cell", "best heuristic", "best avg JCT (s)", "pooled ideal (s)", "best / pooled", "lower bound (s)",
                "best / bound", "room"):
        table.add_column(col, justify="left" if col in ("cell", "best heuristic") else "right")
    for cell in sorted(result.results):
        room = result.lowest_reachable_ratio(cell)
        best = result.best_heuristic(cell)
        table.add_row(cell.label, best, _s(result.results[cell][best]["avg_jct_s"]), _s(result.pooled.get(cell)),
                      _f(result.best_over_pooled(cell)), _s(result.bounds.get(cell)),
                      "-" if room is None else f"{1 / room:.3f}", _f(room))
    s = result.lowest_reachable_summary()
    if s:
        table.caption = (f"geometric-mean room {s['geomean_room']:.3f} (the lowest geometric-mean avg-JCT ratio any "
                         f"policy could reach); range {s['min_room']:.3f} .. {s['max_room']:.3f}")
        if s["geomean_best_over_pooled"] is not None:
            table.caption += (f"; best heuristic / pooled ideal: geometric mean {s['geomean_best_over_pooled']:.3f},"
                              f" at most {s['max_best_over_pooled']:.3f} (what nodes, contention and restores cost it"
                              " over an ideal SRSF on one pool of GPUs)")
    return table


def cmd_suite(args: argparse.Namespace, out: Console, err: Console) -> int:
    for flag in ("trace", "policies"):
        if getattr(args, flag, None):
            raise DeepShareError(f"--suite runs its own traces and policies; drop --{flag}")
    workers = getattr(args, "workers", None) or 1
    if workers < 1:
        raise DeepShareError(f"--workers must be a positive integer, got {workers}")
    address = getattr(args, "address", None)
    if address and workers > 1:
        raise DeepShareError("--workers: the size of a local pool; with --address the cluster's CPUs run the suite (drop one)")
    spec = load_suite(args.suite, allow_imports=getattr(args, "allow_imports", False))
    if getattr(args, "tenants", None):
        from deepshare.experiments.suite_spec import suite_tenants

        spec = spec.model_copy(update={"tenants": args.tenants})
        suite_tenants(spec)  # a bad file fails here, naming itself and the field
    out_dir = getattr(args, "out", None)
    # made before the run (the Pareto plot goes there, and --json may too), and removed again if the
    # run fails (an --address with no cluster): a failed run leaves no empty folder
    with run_folder("--out", out_dir):
        total = len(cells(spec)) * (len(spec.heuristics) + len(spec.learned))

        def progress(done: int, n: int, what: str) -> None:
            # every run on a terminal; every tenth of the runs otherwise (a log stays short)
            if err.is_terminal or done * 10 // n != (done - 1) * 10 // n:
                err.print(f"[{done}/{n}] {what}", markup=False, highlight=False)

        with joined(address) as on_ray:
            where = f"Ray tasks on {address}" if on_ray else f"{workers} worker(s)"
            err.print(f"suite {spec.name}: {len(cells(spec))} cells, {total} runs, {where}", markup=False, highlight=False)
            command = ["deepshare", "evaluate", "--suite", str(args.suite)]
            command += ["--tenants", str(args.tenants)] if getattr(args, "tenants", None) else []
            command += ["--address", str(address)] if on_ray else ["--workers", str(workers)]
            command += ["--allow-imports"] if getattr(args, "allow_imports", False) else []
            provenance = run_provenance(command)
            result = run_suite(spec, workers=workers, progress=progress, on_ray=on_ray)
        shown = human(args.json, out, err)
        for table in cell_tables(result):
            shown.print(table)
        for table in fabric_tables(result):
            shown.print(table)
        for table in fairness_tables(result):
            shown.print(table)
        tradeoff = tradeoff_table(result)
        if tradeoff is not None:
            shown.print(tradeoff)
        with OutputSet() as outputs:  # the Pareto plot and the JSON are put in place together, or neither is
            if out_dir and spec.tenants is not None:
                from deepshare.experiments.pareto_plot import PARETO_FILE, make_pareto_figure
                from deepshare.experiments.plots import png_bytes

                figure = make_pareto_figure(result)
                if figure is not None:
                    announce(outputs, shown, outputs.add_bytes(Path(out_dir) / PARETO_FILE, png_bytes(figure), "figure"))
            shown.print(room_table(result))
            costs = cost_table(result)
            if costs is not None:
                shown.print(costs)
            learning = learning_table(result)
            if learning is not None:
                shown.print(learning)
            if spec.judged:
                shown.print(summary_table(result))
            add_json(outputs, args.json, {**result.to_json(), "provenance": provenance_at_write(provenance)}, out,
                     "suite results")
            outputs.commit()
        failures = result.failures()
        if failures:
            cell, policy, error = failures[0]
            err.print(f"deepshare: {len(failures)} of {total} runs failed (first: {policy} on {cell.label}: {error}); "
                      "their rows say why, as does the JSON's \"failed\"", markup=False, highlight=False, soft_wrap=True)
            return EXIT_FAILED_RUNS
        return 0
