"""Figures of an evaluation: JCT CDF, average JCT against GPU utilisation, utilisation over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from deepshare.evaluation import Evaluation

PLOT_FILES = ("jct_cdf.png", "jct_vs_util.png", "util_over_time.png")
"""The files :func:`write_plots` writes (the CLI checks none of them is an input)."""


def write_plots(evaluation: Evaluation, folder: str | Path) -> list[Path]:
    """Write the three figures as PNG files into ``folder``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    styles = _styles(evaluation.policies)

    fig, ax = plt.subplots(figsize=(10, 5))
    for policy in evaluation.policies:
        run = evaluation.of(policy)[0]
        jct = np.sort([r.jct_s / 3600 for r in run.report.records if r.jct_s is not None])
        ax.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=policy, **styles[policy])
    ax.set(xlabel="JCT, submit to finish (hours)", ylabel="fraction of jobs", title="JCT CDF (first seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    written.append(_save(fig, out / "jct_cdf.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    summary = evaluation.summary()
    for policy in evaluation.policies:
        util = summary[policy]["gpu_util"]["mean"]
        jct = summary[policy]["avg_jct_s"]["mean"]
        if util is not None and jct is not None:
            ax.scatter(util, jct / 3600)
            ax.annotate(policy, (util, jct / 3600), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set(xlabel="GPU utilisation", ylabel="average JCT (hours)", title="Average JCT against utilisation")
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / "jct_vs_util.png"))

    fig, ax = plt.subplots(figsize=(10, 5))
    for policy in evaluation.policies:
        run = evaluation.of(policy)[0]
        t = np.array([p[0] for p in run.util_timeline]) / 3600
        busy = np.array([p[1] for p in run.util_timeline]) / run.total_gpus
        ax.step(t, busy, where="post", label=policy, linewidth=0.8, **styles[policy])
    ax.set(xlabel="time (hours)", ylabel="GPU utilisation", title="Utilisation over time (first seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    written.append(_save(fig, out / "util_over_time.png"))
    return written


def _styles(policies: list[str]) -> dict[str, dict[str, object]]:
    """A distinct colour and line style per policy, also beyond the 10 default colours."""
    import matplotlib.pyplot as plt

    colours = plt.get_cmap("tab20").colors
    dashes = ("-", "--", ":", "-.")
    return {p: {"color": colours[i % 20], "linestyle": dashes[(i // 20) % 4]} for i, p in enumerate(policies)}


def _save(fig, path: Path) -> Path:  # type: ignore[no-untyped-def]
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
