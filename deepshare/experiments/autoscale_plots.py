"""Figure of autoscaled runs: nodes up by node type, cumulative cost and queued jobs over time.

Three stacked panels share the time axis (hours). Each autoscaler keeps one colour in all
three; in the top panel each node type has its own line style, so a mixed cluster shows which
pool grew. The series are computed by pure functions (:func:`nodes_by_type`, :func:`cost_curve`)
from the report's instances, so tests check them without drawing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from deepshare.core.autoscaling import AutoscaleReport

_LINE_STYLES = ("-", "--", ":", "-.")


def nodes_by_type(report: AutoscaleReport) -> dict[str, tuple[list[float], list[int]]]:
    """Per node type, the step series (times in seconds, nodes up from that time on).

    A node counts from ``ready_s`` (it takes jobs) until ``terminated_s`` (never, when it was
    terminated before it was ready); the series starts at 0 s and ends at the report's ``end_s``.
    """
    changes: dict[str, dict[float, int]] = {}
    for inst in report.instances:
        per_type = changes.setdefault(inst.node_type, {})
        if inst.terminated_s is not None and inst.terminated_s <= inst.ready_s:
            continue  # cancelled while provisioning: never up
        if inst.ready_s < report.end_s:
            per_type[inst.ready_s] = per_type.get(inst.ready_s, 0) + 1
        if inst.terminated_s is not None and inst.terminated_s < report.end_s:
            per_type[inst.terminated_s] = per_type.get(inst.terminated_s, 0) - 1
    series = {}
    for node_type in sorted(changes):
        times, counts, up = [0.0], [0], 0
        for t in sorted(changes[node_type]):
            up += changes[node_type][t]
            if t == times[-1]:
                counts[-1] = up
            else:
                times.append(t)
                counts.append(up)
        times.append(report.end_s)
        counts.append(counts[-1])
        series[node_type] = (times, counts)
    return series


def cost_curve(report: AutoscaleReport) -> tuple[list[float], list[float]]:
    """Cumulative cost in USD at every request, termination and the end (linear in between).

    Billing runs from a node's request to its termination (or the end), at its hourly price,
    as :meth:`Instance.billed_s` counts it; the last value is the report's ``cost_usd``.
    """
    end = report.end_s
    points = {0.0, end}
    change: dict[float, float] = {}  # time -> change of the billing rate there, USD/s
    for inst in report.instances:
        start = min(inst.requested_s, end)
        stop = end if inst.terminated_s is None else min(inst.terminated_s, end)
        points.update((start, stop))
        if stop > start:
            rate = inst.price_usd_per_hour / 3600
            change[start] = change.get(start, 0.0) + rate
            change[stop] = change.get(stop, 0.0) - rate
    times = sorted(points)
    costs, cost, rate, previous = [], 0.0, 0.0, times[0]  # one sweep: it summed every instance at every point
    for t in times:
        cost += rate * (t - previous)
        costs.append(cost)
        rate += change.get(t, 0.0)
        previous = t
    costs[-1] = sum(inst.price_usd_per_hour / 3600 * inst.billed_s(end) for inst in report.instances)  # exact
    return times, costs


def autoscaler_colours(reports: Sequence[AutoscaleReport]) -> dict[str, object]:
    """One colour per autoscaler, the same in every panel."""
    import matplotlib

    colours = matplotlib.colormaps["tab10"].colors
    return {r.autoscaler: colours[i % len(colours)] for i, r in enumerate(reports)}


def write_timeline_plot(reports: Sequence[AutoscaleReport], path: str | Path) -> Path:
    """Write :func:`timeline_figure` as PNG to ``path`` (atomically)."""
    from deepshare.experiments.plots import save

    return save(timeline_figure(reports), Path(path))


def timeline_figure(reports: Sequence[AutoscaleReport]):  # type: ignore[no-untyped-def]
    """Nodes up by type, cumulative cost and queued jobs over time, one colour per autoscaler
    (a matplotlib figure, not yet saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (nodes, cost, queue) = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True)
    colours = autoscaler_colours(reports)
    types = sorted({inst.node_type for r in reports for inst in r.instances})
    styles = {t: _LINE_STYLES[i % len(_LINE_STYLES)] for i, t in enumerate(types)}
    for r in reports:
        c = colours[r.autoscaler]
        for node_type, (times, counts) in nodes_by_type(r).items():
            nodes.step([t / 3600 for t in times], counts, where="post", color=c, linestyle=styles[node_type],
                       label=f"{r.autoscaler}: {node_type}")
        times, costs = cost_curve(r)
        cost.plot([t / 3600 for t in times], costs, color=c, label=f"{r.autoscaler}: ${r.cost_usd:,.0f}")
        t = [p.time_s / 3600 for p in r.timeline] + [r.end_s / 3600]
        queued = [p.queued_jobs for p in r.timeline]
        queue.step(t, queued + queued[-1:], where="post", color=c, label=r.autoscaler)
    nodes.set(ylabel="nodes up", title="Nodes up by node type (line style) and autoscaler (colour)")
    cost.set(ylabel="cost (USD, cumulative)", title="Cost so far")
    queue.set(xlabel="time (hours)", ylabel="queued jobs", title="Queue")
    for ax in (nodes, cost, queue):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
