"""The JCT / fairness trade-off of a suite with tenants, as one PNG (``evaluate --suite NAME --out DIR``).

Two panels, one per fairness axis of :data:`~deepshare.experiments.suite_results.TRADEOFFS`:
each policy's point is (its geometric-mean average JCT over each cell's fastest policy, its mean
worst rho or its mean share of jobs with rho > 1 over the cells), from
:meth:`~deepshare.experiments.suite_results.SuiteResult.tradeoff`. Lower-left is better on both;
the Pareto front is joined by a line and its policies' labels are bold. Colours are those of
:func:`deepshare.experiments.plots.policy_styles`.
"""

from __future__ import annotations

from pathlib import Path

from deepshare.experiments.plots import _MARKERS, policy_styles, save, short_labels
from deepshare.experiments.suite_results import TRADEOFFS, SuiteResult

PARETO_FILE = "pareto.png"
"""The file :func:`write_pareto_plot` writes into its folder."""


def make_pareto_figure(result: SuiteResult):  # type: ignore[no-untyped-def]
    """The figure (not yet saved); None without tenants or without any cell where every policy ran."""
    tradeoff = result.tradeoff()
    if not tradeoff or not tradeoff["cells"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per: dict = tradeoff["policies"]  # type: ignore[assignment]
    fronts: dict = tradeoff["fronts"]  # type: ignore[assignment]
    policies = list(per)
    styles, labels = policy_styles(policies), short_labels(policies)
    fig, axes = plt.subplots(1, len(TRADEOFFS), figsize=(7 * len(TRADEOFFS), 5.5))
    for ax, (axis, name) in zip(axes, TRADEOFFS):
        for i, policy in enumerate(policies):
            x, y = per[policy]["jct_ratio"], per[policy][axis]
            if x is None or y is None:
                continue
            on = policy in fronts[axis]
            ax.plot(x, y, _MARKERS[i % len(_MARKERS)], markersize=9, mfc=styles[policy]["color"] if on else "none",
                    mew=1.5, color=styles[policy]["color"], label=labels[policy])
            ax.annotate(labels[policy], (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7,
                        fontweight="bold" if on else "normal")
        front = sorted((per[p]["jct_ratio"], per[p][axis]) for p in fronts[axis])
        if front:
            ax.plot(*zip(*front), "-", color="black", linewidth=1, alpha=0.6, zorder=0, label="Pareto front")
        ax.set(xlabel="average JCT / the cell's fastest policy (geometric mean over cells)",
               ylabel=f"{name} (mean over cells)", title=f"average JCT against {name}")
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"suite {result.spec.name}: JCT / fairness trade-off over {tradeoff['cells']} cell(s) "
                 f"(filled, bold: on the Pareto front; lower-left is better)", fontsize=10)
    return fig


def write_pareto_plot(result: SuiteResult, folder: str | Path) -> Path | None:
    """Write :data:`PARETO_FILE` into ``folder`` (created if missing); None when there is nothing to plot."""
    fig = make_pareto_figure(result)
    if fig is None:
        return None
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    return save(fig, out / PARETO_FILE)
